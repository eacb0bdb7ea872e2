//! Sixteen connections between two processes at once, all streaming
//! concurrently; the server takes receive completions from two CQs.

use openvia_tests::harness::{args, base_env, run_pair, unique_disc};

const EXE: &str = env!("CARGO_BIN_EXE_via_peer");

fn many(rel: &str, cma: bool) {
    let disc = unique_disc("many");
    let common = |side: &str| {
        vec![
            ("disc", disc.clone()),
            ("rel", rel.to_string()),
            ("side", side.to_string()),
            ("vis", "16".to_string()),
            ("cqs", "2".to_string()),
            ("msgs", "200".to_string()),
        ]
    };
    let (server, client) = run_pair(
        EXE,
        args("many-server", &common("server")),
        args("many-client", &common("client")),
        &base_env(cma),
    );
    assert_eq!(server.expect_u64("vis"), 16);
    assert_eq!(server.expect_u64("received"), 16 * 200);
    assert_eq!(client.expect_u64("sent"), 16 * 200);
}

#[test]
fn sixteen_vis_two_cqs_reliable_delivery_cma() {
    many("rd", true);
}

#[test]
fn sixteen_vis_two_cqs_reliable_reception_bounce() {
    many("rr", false);
}

#[test]
fn sixteen_vis_two_cqs_unreliable_cma() {
    many("ur", true);
}
