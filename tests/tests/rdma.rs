//! RDMA write (with and without immediate data) and RDMA read across
//! processes over both large-message paths, and protection violations:
//! the initiator gets an error status and, on the reliable levels, the
//! connection breaks on both sides.

use openvia_tests::harness::{args, base_env, run_pair, unique_disc, Finished};

const EXE: &str = env!("CARGO_BIN_EXE_via_peer");
/// How many transfers the helper's RDMA_SIZES holds.
const TRANSFERS: u64 = 8;

fn rdma(rel: &str, cma: bool) -> (Finished, Finished) {
    let disc = unique_disc("rdma");
    let common = |side: &str| {
        vec![
            ("disc", disc.clone()),
            ("rel", rel.to_string()),
            ("side", side.to_string()),
        ]
    };
    run_pair(
        EXE,
        args("rdma-server", &common("server")),
        args("rdma-client", &common("client")),
        &base_env(cma),
    )
}

fn rdma_write_and_read(rel: &str, cma: bool) {
    let (server, client) = rdma(rel, cma);
    assert_eq!(server.expect_u64("writes"), TRANSFERS);
    assert_eq!(server.expect_u64("reads"), TRANSFERS);
    assert_eq!(client.expect_u64("reads"), TRANSFERS);
}

#[test]
fn rdma_reliable_delivery_cma() {
    rdma_write_and_read("rd", true);
}

#[test]
fn rdma_reliable_delivery_bounce() {
    rdma_write_and_read("rd", false);
}

#[test]
fn rdma_reliable_reception_cma() {
    rdma_write_and_read("rr", true);
}

#[test]
fn rdma_reliable_reception_bounce() {
    rdma_write_and_read("rr", false);
}

#[test]
fn rdma_write_unreliable_both_paths() {
    for cma in [true, false] {
        let (server, client) = rdma("ur", cma);
        assert_eq!(server.expect_u64("writes"), TRANSFERS);
        assert_eq!(server.expect_u64("reads"), 0);
        assert_eq!(client.expect_u64("reads"), 0);
    }
}

const CASES: &[(&str, &str)] = &[
    ("write_bad_handle", "RdmawProt"),
    ("write_bad_handle_large", "RdmawProt"),
    ("write_no_rights", "RdmawProt"),
    ("write_no_rights_large", "RdmawProt"),
    ("write_past_end", "RdmawProt"),
    ("read_no_rights", "RdmarProt"),
];

/// RDMA_PROT_ERROR: what the target refuses a protection violation with.
const RDMA_PROT_ERROR: u64 = 0x80;

fn violations(rel: &str, cma: bool) {
    let disc = unique_disc("prot");
    let common = |side: &str| {
        vec![
            ("disc", disc.clone()),
            ("rel", rel.to_string()),
            ("side", side.to_string()),
        ]
    };
    let (server, client) = run_pair(
        EXE,
        args("prot-server", &common("server")),
        args("prot-client", &common("client")),
        &base_env(cma),
    );
    for &(case, target_code) in CASES {
        let st = client.expect(&format!("{case}_status"));
        let st = u64::from_str_radix(st.trim_start_matches("0x"), 16).expect("status in hex");
        assert_ne!(st & 1, 0, "{case}: initiator descriptor not done ({st:#x})");
        // Reliable Delivery completes an inline RDMA write once it is
        // handed over, before the target's refusal can come back (the
        // spec's "delivered" point); the connection still breaks. Every
        // other case must carry the refusal in its status.
        // (Large writes over CMA complete only once the target pulled them.)
        let on_handover =
            rel == "rd" && !case.starts_with("read") && (!cma || !case.ends_with("large"));
        let errors = st & 0x1fe;
        if on_handover {
            assert!(
                errors == 0 || errors == RDMA_PROT_ERROR,
                "{case}: initiator status {st:#x}\n{client}"
            );
        } else {
            assert_eq!(
                errors, RDMA_PROT_ERROR,
                "{case}: initiator status {st:#x} is not RDMA_PROT_ERROR\n{client}"
            );
        }
        for (who, f) in [("client", &client), ("server", &server)] {
            let key = |k: &str| {
                if who == "client" {
                    format!("{case}_{k}")
                } else {
                    format!("{case}_server_{k}")
                }
            };
            assert_eq!(f.expect(&key("state")), "Error", "{case}: {who} VI state");
            assert_eq!(
                f.expect(&key("flushed")),
                "1",
                "{case}: {who} receive not flushed"
            );
        }
        assert_eq!(
            server.expect(&format!("{case}_server_code")),
            target_code,
            "{case}: target's error"
        );
        assert_ne!(
            client.expect(&format!("{case}_code")),
            "none",
            "{case}: initiator got no error"
        );
    }
}

#[test]
fn protection_violations_break_reliable_delivery() {
    violations("rd", true);
}

#[test]
fn protection_violations_break_reliable_delivery_bounce() {
    violations("rd", false);
}

#[test]
fn protection_violations_break_reliable_reception() {
    violations("rr", true);
}

#[test]
fn protection_violations_break_reliable_reception_bounce() {
    violations("rr", false);
}
