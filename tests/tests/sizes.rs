//! Every size class between two processes, at every reliability level,
//! over both large-message paths (CMA and the bounce path through the
//! ring), with misaligned gather and scatter lists.

use openvia_tests::harness::{args, base_env, run_pair, unique_disc};
use openvia_tests::SIZE_CLASSES;

const EXE: &str = env!("CARGO_BIN_EXE_via_peer");

fn every_size(rel: &str, cma: bool) {
    every_size_env(rel, &base_env(cma));
}

fn every_size_env(rel: &str, env: &[(String, String)]) {
    let disc = unique_disc("sizes");
    let common = |side: &str| {
        vec![
            ("disc", disc.clone()),
            ("rel", rel.to_string()),
            ("side", side.to_string()),
        ]
    };
    let (server, client) = run_pair(
        EXE,
        args("sizes-server", &common("server")),
        args("sizes-client", &common("client")),
        env,
    );
    let total: usize = SIZE_CLASSES.iter().sum();
    assert_eq!(server.expect_u64("echoed") as usize, SIZE_CLASSES.len());
    assert_eq!(client.expect_u64("messages") as usize, SIZE_CLASSES.len());
    assert_eq!(client.expect_u64("bytes") as usize, total);
}

#[test]
fn every_size_reliable_delivery_cma() {
    every_size("rd", true);
}

#[test]
fn every_size_reliable_delivery_bounce() {
    every_size("rd", false);
}

#[test]
fn every_size_reliable_reception_cma() {
    every_size("rr", true);
}

#[test]
fn every_size_reliable_reception_bounce() {
    every_size("rr", false);
}

#[test]
fn every_size_unreliable_cma() {
    every_size("ur", true);
}

#[test]
fn every_size_unreliable_bounce() {
    every_size("ur", false);
}

/// Both ends sleep at once (spin budget 0) and a Wait sleeps for up to ten
/// minutes: any lost wake-up on the way (a chunked message streaming
/// through the ring, ring space freed, a delivered count) hangs the pair
/// past its deadline instead of hiding behind the default 50 ms cap or the
/// progress thread's rounds.
#[test]
fn every_size_blocking_without_lost_wakeups() {
    for cma in [true, false] {
        let mut env = base_env(cma);
        env.retain(|(k, _)| k != "OPENVIA_SPIN_NS");
        env.push(("OPENVIA_SPIN_NS".into(), "0".into()));
        env.push(("OPENVIA_BLOCK_CAP_MS".into(), "600000".into()));
        // Nor may the progress thread paper over one: it looks in only
        // every ten minutes while the program is busy.
        env.push(("OPENVIA_PROGRESS_US".into(), "600000000".into()));
        every_size_env("rr", &env);
    }
}
