//! Flow between two processes: a receiver that posts its receives late
//! (back-pressure: nothing lost, order kept), and a long stream of small
//! messages of random sizes through a small ring (many wrap-arounds),
//! every message verified.

use openvia_tests::harness::{args, base_env, run_pair, unique_disc};

const EXE: &str = env!("CARGO_BIN_EXE_via_peer");

fn stream(
    sender: &[(&str, &str)],
    receiver: &[(&str, &str)],
    shared: &[(&str, &str)],
    env: Vec<(String, String)>,
) -> (u64, u64) {
    let disc = unique_disc("flow");
    let side = |name: &str, role: &[(&str, &str)], side: &str| {
        let mut kv: Vec<(&str, String)> = vec![("disc", disc.clone()), ("side", side.to_string())];
        kv.extend(shared.iter().chain(role).map(|&(k, v)| (k, v.to_string())));
        args(name, &kv)
    };
    let (server, client) = run_pair(
        EXE,
        side("stream-recv", receiver, "server"),
        side("stream-send", sender, "client"),
        &env,
    );
    (server.expect_u64("received"), client.expect_u64("sent"))
}

/// 1000 messages posted at once against three receives; the receiver
/// adds two receives per arrival. Every 50th message is 20 000 bytes
/// (beyond the inline limit).
fn back_pressure(rel: &str, cma: bool) {
    let shared = [
        ("rel", rel),
        ("count", "1000"),
        ("min", "0"),
        ("max", "2000"),
        ("large", "20000"),
        ("large_every", "50"),
        ("seed", "6"),
    ];
    let (received, sent) = stream(
        &[("window", "1000")],
        &[("window", "64"), ("late", "3")],
        &shared,
        base_env(cma),
    );
    assert_eq!((received, sent), (1000, 1000));
}

#[test]
fn back_pressure_reliable_delivery_cma() {
    back_pressure("rd", true);
}

#[test]
fn back_pressure_reliable_reception_bounce() {
    back_pressure("rr", false);
}

#[test]
fn back_pressure_unreliable_bounce() {
    back_pressure("ur", false);
}

/// 100 000 messages of 0..=1024 random bytes through 64 KiB rings, a
/// window of 64, and every 997th message 40 000 bytes chunked through the
/// ring (bounce path).
#[test]
fn ring_wrap_stress_100k_messages() {
    let mut env = base_env(false);
    env.push(("OPENVIA_RING_BYTES".into(), "64K".into()));
    let shared = [
        ("rel", "rd"),
        ("count", "100000"),
        ("window", "64"),
        ("min", "0"),
        ("max", "1024"),
        ("large", "40000"),
        ("large_every", "997"),
        ("seed", "20240607"),
    ];
    let (received, sent) = stream(&[], &[], &shared, env);
    assert_eq!((received, sent), (100_000, 100_000));
}
