//! Running the helper (`netns_peer`) as a server in namespace b and a
//! client in namespace a, shared by the namespace tests of every network
//! device: one test at a time (`serial`), skipped where namespaces cannot
//! be made, the helpers' environment and arguments.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::harness::{spawn_in, Finished, Peer};
use crate::namespaces::{unavailable, NetnsPair};

/// How long a helper may run.
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(60);

pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Prints the reason and returns true when namespaces cannot be used.
pub fn skip(test: &str) -> bool {
    match unavailable() {
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            true
        }
        None => false,
    }
}

pub fn env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = [
        ("OPENVIA_SPIN_NS", "20000"),
        ("OPENVIA_UDP_KEEPALIVE_MS", "200"),
        ("OPENVIA_UDP_DEAD_MS", "3000"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, val) in extra {
        v.retain(|(key, _)| key != k);
        v.push((k.to_string(), val.to_string()));
    }
    v
}

pub fn args(list: &[(&str, &str)]) -> Vec<String> {
    list.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// Server in namespace b, client in namespace a (the helper `exe`, with
/// environment `env`); both must succeed.
pub fn run_pair(
    exe: &str,
    ns: &NetnsPair,
    common: &[(&str, &str)],
    env: &[(String, String)],
) -> (Finished, Finished) {
    let disc = format!("t{}", std::process::id());
    let dev_b = format!("/dev/via_{}", ns.if_b);
    let dev_a = format!("/dev/via_{}", ns.if_a);
    let mut sargs = args(common);
    sargs.extend(args(&[
        ("role", "server"),
        ("dev", &dev_b),
        ("disc", &disc),
    ]));
    let mut cargs = args(common);
    cargs.extend(args(&[
        ("role", "client"),
        ("dev", &dev_a),
        ("disc", &disc),
        ("peer", &ns.ip_b),
    ]));
    let mut server = spawn_in(&ns.b, "server", exe, &sargs, env, HELPER_TIMEOUT);
    server.wait_line("READY", HELPER_TIMEOUT);
    let client = spawn_in(&ns.a, "client", exe, &cargs, env, HELPER_TIMEOUT);
    let c = client.finish();
    let s = server.finish();
    // Both ends' output on failure: the one that failed first may be
    // either.
    assert!(
        s.status.success() && c.status.success(),
        "server: {s}\nclient: {c}"
    );
    (s, c)
}

/// Arguments of a server in namespace b and a client in a, on the veth.
pub fn server_client_args(ns: &NetnsPair, common: &[(&str, &str)]) -> (Vec<String>, Vec<String>) {
    let mut sargs = args(common);
    sargs.extend(args(&[
        ("role", "server"),
        ("dev", &format!("/dev/via_{}", ns.if_b)),
    ]));
    let mut cargs = args(common);
    cargs.extend(args(&[
        ("role", "client"),
        ("dev", &format!("/dev/via_{}", ns.if_a)),
        ("peer", &ns.ip_b),
    ]));
    (sargs, cargs)
}

/// A server in namespace b receiving an endless stream of 64 KiB
/// messages (8 in flight, reliable delivery, discriminator `disc`) from a
/// client in a that reports how the connection broke (`survive=1`), both
/// started and the client past its 10th completion (its own count: with 8
/// sends in flight the server has its 10th message first).
pub fn endless_stream(
    exe: &str,
    ns: &NetnsPair,
    env: &[(String, String)],
    disc: &str,
) -> (Peer, Peer) {
    let common = [
        ("mode", "stream"),
        ("rel", "rd"),
        ("size", "65536"),
        ("window", "8"),
        ("count", "100000000"),
        ("disc", disc),
    ];
    let (sargs, mut cargs) = server_client_args(ns, &common);
    cargs.extend(args(&[("survive", "1")]));
    let mut server = spawn_in(&ns.b, "server", exe, &sargs, env, HELPER_TIMEOUT);
    server.wait_line("READY", HELPER_TIMEOUT);
    let mut client = spawn_in(&ns.a, "client", exe, &cargs, env, HELPER_TIMEOUT);
    client.wait_line("PROGRESS", HELPER_TIMEOUT);
    (server, client)
}

/// SIGKILLs the server of an [`endless_stream`] and checks that the
/// client broke cleanly within `bound` of the kill: its VI in the error
/// state, its posted receive flushed. Returns the time and the client.
pub fn kill_server_and_check_break(
    server: Peer,
    client: Peer,
    bound: Duration,
) -> (Duration, Finished) {
    let killed = Instant::now();
    let s = server.abort();
    assert!(!s.status.success(), "server survived SIGKILL: {s}");
    let c = client.finish();
    c.assert_ok();
    let took = c.ended.duration_since(killed);
    eprintln!("survivor broke {took:?} after the kill: {c}");
    assert!(
        took < bound,
        "survivor took {took:?} (bound {bound:?}): {c}"
    );
    assert_eq!(c.expect_u64("error_state"), 1, "{c}");
    assert_eq!(c.expect_u64("recv_flushed"), 1, "{c}");
    assert!(c.expect_u64("completed") >= 10);
    (took, c)
}

/// Peer-to-peer (`VipConnectPeerRequest`, reliable delivery) across the
/// namespaces, one helper in each (`role=peer`): each sends the other
/// one message and checks the one it gets; both must end clean, their
/// last send done.
pub fn peer_to_peer(exe: &str, ns: &NetnsPair, env: &[(String, String)]) -> [Finished; 2] {
    let (da, db) = (
        format!("pa{}", std::process::id()),
        format!("pb{}", std::process::id()),
    );
    let side = |me: &str, peer_ip: &str, peer_disc: &str, ifname: &str| {
        args(&[
            ("role", "peer"),
            ("mode", "peer"),
            ("rel", "rd"),
            ("dev", &format!("/dev/via_{ifname}")),
            ("disc", me),
            ("peer", peer_ip),
            ("peer_disc", peer_disc),
        ])
    };
    let a = spawn_in(
        &ns.a,
        "peer a",
        exe,
        &side(&da, &ns.ip_b, &db, &ns.if_a),
        env,
        HELPER_TIMEOUT,
    );
    let b = spawn_in(
        &ns.b,
        "peer b",
        exe,
        &side(&db, &ns.ip_a, &da, &ns.if_b),
        env,
        HELPER_TIMEOUT,
    );
    let done = [a.finish(), b.finish()];
    for f in &done {
        f.assert_ok();
        assert_eq!(f.expect_u64("peer_bytes"), 3000, "{f}");
    }
    done
}

/// Checks a `mode=sizes` run at reliability level `rel`: every size the
/// client sent arrived, the four RDMA writes landed, and on the reliable
/// levels the four RDMA reads came back. `what` names the run in messages.
pub fn assert_sizes_run(server: &Finished, client: &Finished, rel: &str, what: &str) {
    assert_eq!(
        server.expect_u64("messages"),
        client.expect_u64("sizes"),
        "{what} {rel}"
    );
    assert_eq!(server.expect_u64("rdma_writes"), 4, "{what} {rel}");
    if rel != "ur" {
        assert_eq!(client.expect_u64("reads"), 4, "{what} {rel}");
    }
}
