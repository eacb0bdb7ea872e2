//! A peer SIGKILLed mid-stream: the survivor's VI must go to the error
//! state, its outstanding receives come back flushed, its error handler
//! report the lost connection, and none of its Waits hang. Both roles die
//! in turn (the client, then the server), with small messages and with
//! large ones over both large-message paths.

use std::time::Duration;

use openvia_tests::harness::{args, base_env, unique_disc, Finished, Peer};

const EXE: &str = env!("CARGO_BIN_EXE_via_peer");
/// How soon after the kill the survivor must have finished. Its own
/// Waits allow 20 s, so a hang shows as a miss here.
const NOTICE: Duration = Duration::from_secs(5);

struct Case {
    kill_server: bool,
    /// The receiving survivor stops taking completions after this many
    /// messages until the break (0: never).
    pause: u64,
    cma: bool,
    /// Stream options shared by both sides.
    shape: Vec<(&'static str, String)>,
    /// Kill after the victim printed this PROGRESS count.
    after: u64,
}

fn small(kill_server: bool) -> Case {
    Case {
        kill_server,
        pause: 0,
        cma: true,
        shape: vec![("min", "0".into()), ("max", "1500".into())],
        after: 2000,
    }
}

fn large(kill_server: bool, cma: bool) -> Case {
    Case {
        kill_server,
        pause: 0,
        cma,
        shape: vec![
            ("min", "0".into()),
            ("max", "3000".into()),
            ("large", ((1 << 20) + 13).to_string()),
            ("large_every", "2".into()),
        ],
        after: 20,
    }
}

/// Runs the case; returns the survivor's output.
fn run(case: Case) -> Finished {
    let disc = unique_disc("crash");
    let env = base_env(case.cma);
    let side = |server: bool| {
        let mut kv = vec![
            ("disc", disc.clone()),
            ("rel", "rd".to_string()),
            ("side", if server { "server" } else { "client" }.to_string()),
            ("count", "0".to_string()),
            ("window", "32".to_string()),
        ];
        kv.extend(case.shape.iter().cloned());
        let victim = server == case.kill_server;
        if victim {
            let every = if case.after % 500 == 0 { 500 } else { 10 };
            kv.push(("report", every.to_string()));
        } else {
            kv.push(("expect_break", "1".to_string()));
            kv.push(("extra", "4".to_string()));
            kv.push(("pause", case.pause.to_string()));
        }
        // The server receives, the client sends.
        args(if server { "stream-recv" } else { "stream-send" }, &kv)
    };
    let mut server = Peer::spawn(EXE, "server", &side(true), &env);
    server.wait_ready();
    let client = Peer::spawn(EXE, "client", &side(false), &env);
    let (mut victim, survivor) = if case.kill_server {
        (server, client)
    } else {
        (client, server)
    };
    victim.wait_line(&format!("PROGRESS {}", case.after), Duration::from_secs(20));
    let killed_at = victim.kill();
    let out = survivor.finish();
    out.assert_ok();
    let took = out.ended.saturating_duration_since(killed_at);
    assert!(took < NOTICE, "the survivor took {took:?} to notice: {out}");
    println!("survivor: {}", out.lines.join(" / "));
    assert_eq!(out.expect("broken"), "1");
    assert_eq!(out.expect("state"), "Error", "{out}");
    out
}

/// 0x20: DESC_FLUSHED_ERROR.
fn flushed(status: &str) -> bool {
    u64::from_str_radix(status.trim_start_matches("0x"), 16).expect("hex status") & 0x20 != 0
}

/// The receiving survivor: its stream stops at the break without a gap,
/// the receives it had posted come back flushed, the handler said
/// ConnLost.
fn survivor_received(out: &Finished) {
    assert_eq!(out.expect("code"), "ConnLost", "{out}");
    assert!(flushed(out.expect("first_error")), "{out}");
    assert!(out.expect_u64("flushed_recvs") >= 1, "{out}");
    assert_eq!(out.expect_u64("transport_errors"), 0, "{out}");
    assert_eq!(out.expect_u64("holes"), 0, "{out}");
    assert!(out.expect_u64("received") > 0, "{out}");
}

/// Over CMA the receiver may find the dead sender's memory gone while it
/// pulls a message: that receive fails with a transport error. Everything
/// else as above, except for the known bug below.
fn survivor_received_cma(out: &Finished) {
    let code = out.expect("code");
    assert!(code == "ConnLost" || code == "RdmaTransport", "{out}");
    assert!(
        out.expect_u64("flushed_recvs") + out.expect_u64("transport_errors") >= 1,
        "{out}"
    );
    assert!(out.expect_u64("received") > 0, "{out}");
}

fn survivor_sent(out: &Finished) {
    assert_eq!(out.expect("code"), "ConnLost", "{out}");
    assert!(flushed(out.expect("first_error")), "{out}");
    // The notice receive and the four extra ones.
    assert_eq!(out.expect_u64("flushed_recvs"), 5, "{out}");
}

#[test]
fn killed_client_small_messages() {
    survivor_received(&run(small(false)));
}

#[test]
fn killed_server_small_messages() {
    survivor_sent(&run(small(true)));
}

#[test]
fn killed_client_large_messages_bounce() {
    survivor_received(&run(large(false, false)));
}

#[test]
fn killed_server_large_messages_bounce() {
    survivor_sent(&run(large(true, false)));
}

#[test]
fn killed_client_large_messages_cma() {
    survivor_received_cma(&run(large(false, true)));
}

/// The strict form of the test above, repeated because the failure
/// depends on timing: the sender must die while the receiver is about to
/// pull one of its messages (about one run in five here).
#[test]
// Was a bug: a failed CMA pull from a dead sender was followed by later
// records being placed (a hole in a reliable stream). The channel now stops
// at lost data and the VI breaks without delivering anything behind it.
fn killed_client_mid_cma_transfer_leaves_no_hole() {
    for _ in 0..20 {
        let out = run(large(false, true));
        assert_eq!(
            out.expect_u64("holes"),
            0,
            "a message completed after a lost one: {out}"
        );
        assert_eq!(out.expect("code"), "ConnLost", "{out}");
    }
}

#[test]
fn killed_server_large_messages_cma() {
    survivor_sent(&run(large(true, true)));
}

/// Data the dead peer handed over before it died is not lost: a receiver
/// that was not looking when it happened still finds it in the receives
/// it had posted (32 of them, filled behind its back), and only receives
/// posted after the break come back flushed.
#[test]
fn killed_client_data_sent_before_death_still_arrives() {
    let mut case = small(false);
    case.pause = 100;
    case.after = 1000;
    let out = run(case);
    survivor_received(&out);
    assert_eq!(out.expect_u64("received"), 100 + 32, "{out}");
}
