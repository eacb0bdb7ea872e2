//! Every size class between two processes, at every reliability level,
//! over both large-message paths (CMA and the bounce path through the
//! ring), with misaligned gather and scatter lists.

use openvia_tests::harness::{args, base_env, run_pair, unique_disc};
use openvia_tests::SIZE_CLASSES;

const EXE: &str = env!("CARGO_BIN_EXE_via_peer");

fn every_size(rel: &str, cma: bool) {
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
        &base_env(cma),
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
