//! Nothing is left behind: after clean runs, a killed client and a killed
//! server, /dev/shm holds no new openvia entries, no socket of ours is
//! still bound, and every child was reaped.
//!
//! One test in its own file, so no other test of this binary runs beside
//! it and the before/after comparison is about these runs only.

use std::time::Duration;

use openvia_tests::harness::{
    args, base_env, child_pids, hex, run_pair, shm_entries, unique_disc, unix_sockets_containing,
    Peer,
};

const EXE: &str = env!("CARGO_BIN_EXE_via_peer");

fn stream_args(role: &str, disc: &str, side: &str, extra: &[(&str, &str)]) -> Vec<String> {
    let mut kv = vec![
        ("disc", disc.to_string()),
        ("side", side.to_string()),
        ("large", "200000".to_string()),
        ("large_every", "5".to_string()),
    ];
    kv.extend(extra.iter().map(|&(k, v)| (k, v.to_string())));
    args(role, &kv)
}

/// Streams until the victim reports progress, then SIGKILLs it.
fn kill_mid_stream(disc: &str, kill_server: bool, cma: bool) {
    let env = base_env(cma);
    let victim_opts = [("count", "0"), ("report", "20")];
    let survivor_opts = [("count", "0"), ("expect_break", "1")];
    let (s_opts, c_opts) = if kill_server {
        (&victim_opts, &survivor_opts)
    } else {
        (&survivor_opts, &victim_opts)
    };
    let mut server = Peer::spawn(
        EXE,
        "server",
        &stream_args("stream-recv", disc, "server", s_opts),
        &env,
    );
    server.wait_ready();
    let client = Peer::spawn(
        EXE,
        "client",
        &stream_args("stream-send", disc, "client", c_opts),
        &env,
    );
    let (mut victim, survivor) = if kill_server {
        (server, client)
    } else {
        (client, server)
    };
    victim.wait_line("PROGRESS 40", Duration::from_secs(20));
    victim.kill();
    let out = survivor.finish();
    out.assert_ok();
    assert_eq!(out.expect("state"), "Error");
}

#[test]
fn no_shared_memory_sockets_or_processes_left_behind() {
    let before = shm_entries();
    let mut discs = Vec::new();
    for cma in [true, false] {
        let disc = unique_disc("clean");
        let (s, c) = run_pair(
            EXE,
            stream_args("stream-recv", &disc, "server", &[("count", "200")]),
            stream_args("stream-send", &disc, "client", &[("count", "200")]),
            &base_env(cma),
        );
        assert_eq!((s.expect_u64("received"), c.expect_u64("sent")), (200, 200));
        discs.push(disc);
        for kill_server in [false, true] {
            let disc = unique_disc("killed");
            kill_mid_stream(&disc, kill_server, cma);
            discs.push(disc);
        }
    }
    let after = shm_entries();
    let new: Vec<_> = after.difference(&before).collect();
    assert!(new.is_empty(), "left in /dev/shm: {new:?}");
    for d in &discs {
        let bound = unix_sockets_containing(&hex(d));
        assert!(bound.is_empty(), "sockets of {d} still bound: {bound:?}");
    }
    assert_eq!(child_pids(), Vec::<u32>::new(), "children not reaped");
}
