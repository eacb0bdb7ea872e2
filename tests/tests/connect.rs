//! Connection management between processes: peer-to-peer connections,
//! a client nobody serves, two servers side by side (and a third that
//! wants one's discriminator), ConnectReject, and a reliability mismatch.

use openvia_tests::harness::{args, base_env, run_pair, unique_disc, Peer};

const EXE: &str = env!("CARGO_BIN_EXE_via_peer");

fn peer_to_peer(rel: &str, cma: bool) {
    let (a, b) = (unique_disc("peer-a"), unique_disc("peer-b"));
    let env = base_env(cma);
    let one = |local: &str, remote: &str| {
        args(
            "peer",
            &[
                ("local", local.to_string()),
                ("remote", remote.to_string()),
                ("rel", rel.to_string()),
                ("count", "200".to_string()),
            ],
        )
    };
    // No readiness needed: each side retries until the other shows up.
    let pa = Peer::spawn(EXE, "peer a", &one(&a, &b), &env);
    let pb = Peer::spawn(EXE, "peer b", &one(&b, &a), &env);
    let fa = pa.finish();
    let fb = pb.finish();
    for f in [&fa, &fb] {
        f.assert_ok();
        assert_eq!(f.expect_u64("exchanged"), 200);
    }
}

#[test]
fn peer_to_peer_reliable_delivery_cma() {
    peer_to_peer("rd", true);
}

#[test]
fn peer_to_peer_reliable_reception_bounce() {
    peer_to_peer("rr", false);
}

#[test]
fn peer_to_peer_unreliable() {
    peer_to_peer("ur", true);
}

#[test]
fn connecting_to_nobody_times_out() {
    let disc = unique_disc("nobody");
    let out = Peer::spawn(
        EXE,
        "client",
        &args(
            "connect-once",
            &[("disc", disc), ("timeout_ms", "700".into())],
        ),
        &base_env(true),
    )
    .finish();
    out.assert_ok();
    assert_eq!(out.expect("outcome"), "Timeout", "{out}");
    let ms = out.expect_u64("ms");
    assert!(
        (700..3000).contains(&ms),
        "timed out after {ms} ms, asked for 700"
    );
    assert_eq!(out.expect("state"), "Idle");
}

#[test]
fn two_servers_with_different_discriminators() {
    let env = base_env(true);
    let discs = [unique_disc("two-a"), unique_disc("two-b")];
    let stream = |role: &str, side: &str, disc: &str| {
        args(
            role,
            &[
                ("disc", disc.to_string()),
                ("side", side.to_string()),
                ("count", "300".to_string()),
                ("large", "100000".to_string()),
                ("large_every", "30".to_string()),
            ],
        )
    };
    let mut servers: Vec<Peer> = discs
        .iter()
        .map(|d| {
            Peer::spawn(
                EXE,
                &format!("server {d}"),
                &stream("stream-recv", "server", d),
                &env,
            )
        })
        .collect();
    for s in &mut servers {
        s.wait_ready();
    }
    // A third server cannot take a discriminator that is in use.
    let third = Peer::spawn(
        EXE,
        "third server",
        &args("accept-once", &[("disc", discs[0].clone())]),
        &env,
    )
    .finish();
    third.assert_ok();
    assert_eq!(third.expect("listen"), "InvalidState", "{third}");

    let clients: Vec<Peer> = discs
        .iter()
        .map(|d| {
            Peer::spawn(
                EXE,
                &format!("client {d}"),
                &stream("stream-send", "client", d),
                &env,
            )
        })
        .collect();
    for c in clients {
        let f = c.finish();
        f.assert_ok();
        assert_eq!(f.expect_u64("sent"), 300);
    }
    for s in servers {
        let f = s.finish();
        f.assert_ok();
        assert_eq!(f.expect_u64("received"), 300);
    }
}

fn meet(server: &[(&str, &str)], client: &[(&str, &str)]) -> (String, String, String) {
    let disc = unique_disc("meet");
    let with = |role: &str, extra: &[(&str, &str)]| {
        let mut v = vec![("disc", disc.clone())];
        v.extend(extra.iter().map(|&(k, x)| (k, x.to_string())));
        args(role, &v)
    };
    let (s, c) = run_pair(
        EXE,
        with("accept-once", server),
        with("connect-once", client),
        &base_env(true),
    );
    (
        s.expect("outcome").to_string(),
        c.expect("outcome").to_string(),
        c.expect("state").to_string(),
    )
}

#[test]
fn connect_reject_gives_rejected() {
    let (server, client, state) = meet(&[("action", "reject")], &[]);
    assert_eq!(server, "Ok");
    assert_eq!(client, "Rejected");
    assert_eq!(state, "Idle");
}

#[test]
fn reliability_mismatch_is_refused_on_both_sides() {
    let (server, client, state) = meet(&[("rel", "rd")], &[("rel", "ur")]);
    assert_eq!(server, "InvalidReliability");
    assert_eq!(client, "InvalidReliability");
    assert_eq!(state, "Idle");
}

#[test]
fn accept_then_client_sees_connected() {
    let (server, client, state) = meet(&[("rel", "rr")], &[("rel", "rr")]);
    assert_eq!(server, "Ok");
    assert_eq!(client, "Ok");
    assert_eq!(state, "Connected");
}

#[test]
fn a_peer_leaving_without_disconnect_is_quiet_without_a_handler() {
    // A program with no error callback whose peer exits without
    // VipDisconnect: its VIs break, and stderr stays clean (the default
    // handling reports a lost peer only with OPENVIA_DEBUG set).
    let disc = unique_disc("abandon");
    let kv = |role: &str| args(role, &[("disc", disc.clone()), ("vis", "8".into())]);
    let (server, client) = run_pair(
        EXE,
        kv("abandon-server"),
        kv("abandon-client"),
        &base_env(true),
    );
    assert_eq!(client.expect_u64("connected"), 8);
    assert_eq!(server.expect_u64("broken"), 8);
    assert!(
        !server.stderr.contains("asynchronous error"),
        "the survivor printed:\n{}",
        server.stderr
    );
}
