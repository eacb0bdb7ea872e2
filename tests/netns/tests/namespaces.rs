//! The UDP device between two network namespaces joined by veth: every
//! size class and RDMA at several MTUs, random loss from nft, a peer
//! killed mid-transfer, and the C examples. Needs root (CI is root);
//! elsewhere each test prints why it skipped.
//!
//! Tests take a lock so they run one at a time: on two CPUs, parallel
//! streams would turn the dead-peer timing into a measure of scheduling.

use std::time::Duration;

use openvia_netns_tests::harness::{spawn_in, Finished};
use openvia_netns_tests::namespaces::{nft_unavailable, NetnsPair};
use openvia_netns_tests::pair::{self, env, serial, server_client_args, skip, HELPER_TIMEOUT};
const PEER: &str = env!("CARGO_BIN_EXE_netns_peer");

/// Server in namespace b, client in namespace a; both must succeed.
fn run_pair(
    ns: &NetnsPair,
    common: &[(&str, &str)],
    extra_env: &[(&str, &str)],
) -> (Finished, Finished) {
    pair::run_pair(PEER, ns, common, &env(extra_env))
}

fn sizes_at(mtu: u32, rels: &[&str]) {
    let ns = NetnsPair::new(mtu);
    for rel in rels {
        let (s, c) = run_pair(&ns, &[("mode", "sizes"), ("rel", rel)], &[]);
        pair::assert_sizes_run(&s, &c, rel, &format!("mtu {mtu}"));
    }
}

#[test]
fn every_size_and_rdma_at_mtu_1500() {
    let _g = serial();
    if skip("every_size_and_rdma_at_mtu_1500") {
        return;
    }
    sizes_at(1500, &["rd", "ur"]);
}

#[test]
fn every_size_and_rdma_at_mtu_4138() {
    let _g = serial();
    if skip("every_size_and_rdma_at_mtu_4138") {
        return;
    }
    sizes_at(4138, &["rd"]);
}

#[test]
fn every_size_and_rdma_at_mtu_9000() {
    let _g = serial();
    if skip("every_size_and_rdma_at_mtu_9000") {
        return;
    }
    sizes_at(9000, &["rd", "rr"]);
}

#[test]
fn every_size_and_rdma_at_mtu_65535() {
    let _g = serial();
    if skip("every_size_and_rdma_at_mtu_65535") {
        return;
    }
    sizes_at(65535, &["rd"]);
}

fn stream_under_drop(percent: u32, count: &str) {
    let ns = NetnsPair::new(9000);
    ns.drop_udp(percent);
    let (s, c) = run_pair(
        &ns,
        &[
            ("mode", "stream"),
            ("rel", "rd"),
            ("size", "65536"),
            ("count", count),
            ("window", "8"),
            ("lossy", "1"),
        ],
        &[],
    );
    let want: u64 = count.parse().unwrap();
    assert_eq!(s.expect_u64("received"), want);
    assert_eq!(c.expect_u64("sent"), want);
    let dropped = ns.dropped_packets();
    eprintln!(
        "drop {percent}%: {dropped} datagrams dropped, server {:?} MB/s",
        s.get("mb_per_s")
    );
    assert!(dropped > 0, "the nft rule dropped nothing");
    // Sizes and RDMA under loss too, every byte checked.
    run_pair(
        &ns,
        &[("mode", "sizes"), ("rel", "rr"), ("lossy", "1")],
        &[],
    );
}

#[test]
fn one_percent_drop_every_byte_verified() {
    let _g = serial();
    if skip("one_percent_drop_every_byte_verified") {
        return;
    }
    if let Some(why) = nft_unavailable() {
        eprintln!("SKIPPED one_percent_drop_every_byte_verified: {why}");
        return;
    }
    stream_under_drop(1, "400");
}

#[test]
fn five_percent_drop_every_byte_verified() {
    let _g = serial();
    if skip("five_percent_drop_every_byte_verified") {
        return;
    }
    if let Some(why) = nft_unavailable() {
        eprintln!("SKIPPED five_percent_drop_every_byte_verified: {why}");
        return;
    }
    stream_under_drop(5, "150");
}

#[test]
fn peer_killed_mid_transfer_breaks_the_vi_in_bounded_time() {
    let _g = serial();
    if skip("peer_killed_mid_transfer_breaks_the_vi_in_bounded_time") {
        return;
    }
    const DEAD_MS: u64 = 1000;
    let ns = NetnsPair::new(1500);
    let disc = format!("k{}", std::process::id());
    let dead = DEAD_MS.to_string();
    let e = env(&[("OPENVIA_UDP_DEAD_MS", &dead)]);
    let (server, client) = pair::endless_stream(PEER, &ns, &e, &disc);
    pair::kill_server_and_check_break(server, client, Duration::from_millis(DEAD_MS + 2000));
}

/// A server process SIGKILLed while its connection is idle, on a host
/// that stays up: the client's posted receive must come back with an error
/// well before the dead-peer time (the host answers the client's next
/// keepalive with ICMP port unreachable), and a send posted after that
/// must not succeed. `OPENVIA_KILL_TRIALS` (default 3) sets the number of
/// kills; their times are printed.
fn peer_killed_while_idle(test: &str, extra_env: &[(&str, &str)]) {
    let _g = serial();
    if skip(test) {
        return;
    }
    let trials: usize = std::env::var("OPENVIA_KILL_TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(3);
    let ns = NetnsPair::new(1500);
    // The kernel rate-limits the ICMP errors a host sends to one
    // destination (a burst of 6, then one a second): kills back to back
    // would measure that limit, not the device (see docs/udp.md).
    let unlimited = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.b,
            "sysctl",
            "-qw",
            "net.ipv4.icmp_ratelimit=0",
        ])
        .status()
        .unwrap();
    assert!(unlimited.success());
    // The defaults: no shortened keepalive, the dead-peer time of a
    // vanished host (3 s) far above the bound.
    let mut e = env(&[
        ("OPENVIA_UDP_KEEPALIVE_MS", ""),
        ("OPENVIA_UDP_DEAD_MS", ""),
    ]);
    e.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let mut took = Vec::new();
    for trial in 0..trials {
        let disc = format!("i{}-{trial}", std::process::id());
        let common = [("mode", "idle"), ("rel", "rd"), ("disc", &disc)];
        let (sargs, cargs) = server_client_args(&ns, &common);
        let mut server = spawn_in(&ns.b, "server", PEER, &sargs, &e, HELPER_TIMEOUT);
        server.wait_line("READY", HELPER_TIMEOUT);
        let mut client = spawn_in(&ns.a, "client", PEER, &cargs, &e, HELPER_TIMEOUT);
        server.wait_line("CONNECTED", HELPER_TIMEOUT);
        client.wait_line("CONNECTED", HELPER_TIMEOUT);
        let killed = server.kill();
        client.wait_line("BROKE", HELPER_TIMEOUT);
        let t = killed.elapsed();
        let c = client.finish();
        c.assert_ok();
        assert_eq!(c.expect_u64("send_succeeded"), 0, "{c}");
        assert_eq!(c.expect_u64("error_state"), 1, "{c}");
        took.push(t);
    }
    took.sort();
    eprintln!(
        "{test}: kill to error, {trials} trials: median {:?}, max {:?}, all {took:?}",
        took[took.len() / 2],
        took[took.len() - 1]
    );
    let worst = took[took.len() - 1];
    // ≤ 100 ms is the aim; 500 ms leaves room for a loaded 2-CPU machine,
    // and is far below the 3 s a vanished host takes.
    assert!(worst < Duration::from_millis(500), "{test}: {took:?}");
}

#[test]
fn peer_killed_while_idle_is_known_fast() {
    peer_killed_while_idle("peer_killed_while_idle_is_known_fast", &[]);
}

#[test]
fn peer_killed_while_idle_is_known_fast_with_a_cluster_key() {
    let path = std::env::temp_dir().join(format!("openvia-kill-test-{}.key", std::process::id()));
    std::fs::write(&path, format!("cluster key of test {}", std::process::id())).unwrap();
    let key = path.to_string_lossy().into_owned();
    peer_killed_while_idle(
        "peer_killed_while_idle_is_known_fast_with_a_cluster_key",
        &[("OPENVIA_CLUSTER_KEY", &key)],
    );
    let _ = std::fs::remove_file(&path);
}

/// libvipl.so next to this test's target directory (built by `cargo test
/// --workspace`), a release build, or the staged `dist/`.
fn find_libvipl() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("OPENVIA_LIBVIPL") {
        return Some(p.into());
    }
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?.to_path_buf();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let candidates = [
        profile_dir.join("libvipl.so"),
        profile_dir.join("../release/libvipl.so"),
        root.join("target/debug/libvipl.so"),
        root.join("target/release/libvipl.so"),
        root.join("dist/lib/libvipl.so.1"),
    ];
    candidates.into_iter().find(|p| p.exists())
}

#[test]
fn c_examples_across_namespaces() {
    let _g = serial();
    if skip("c_examples_across_namespaces") {
        return;
    }
    let Some(lib) = find_libvipl() else {
        eprintln!(
            "SKIPPED c_examples_across_namespaces: no libvipl.so found \
             (build it with `cargo build -p vipl` or set OPENVIA_LIBVIPL)"
        );
        return;
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("ovns-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The library's SONAME is libvipl.so.1: give the linker and the loader
    // both names.
    for name in ["libvipl.so", "libvipl.so.1"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(lib.canonicalize().unwrap(), &link).unwrap();
    }
    let exe = dir.join("vnettest");
    let out = std::process::Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(format!("-I{}", root.join("include").display()))
        .arg(root.join("examples/c/vnettest.c"))
        .arg(root.join("examples/c/vipl_example.c"))
        .arg(format!("-L{}", dir.display()))
        .arg("-lvipl")
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIPPED c_examples_across_namespaces: no C compiler: {e}");
            return;
        }
    };
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ns = NetnsPair::new(9000);
    let disc = format!("c{}", std::process::id());
    let e = env(&[("LD_LIBRARY_PATH", &dir.display().to_string())]);
    let exe = exe.display().to_string();
    // vnettest prints no readiness line: the client keeps asking until the
    // server waits (connect requests retry until their timeout).
    let server = spawn_in(
        &ns.b,
        "vnettest -s",
        &exe,
        &[
            "-s".into(),
            "-D".into(),
            format!("/dev/via_{}", ns.if_b),
            "-d".into(),
            disc.clone(),
            "-m".into(),
            "1048576".into(),
        ],
        &e,
        HELPER_TIMEOUT,
    );
    let client = spawn_in(
        &ns.a,
        "vnettest -c",
        &exe,
        &[
            "-c".into(),
            ns.ip_b.clone(),
            "-D".into(),
            format!("/dev/via_{}", ns.if_a),
            "-d".into(),
            disc,
            "-n".into(),
            "20".into(),
            "-m".into(),
            "1048576".into(),
        ],
        &e,
        HELPER_TIMEOUT,
    );
    let c = client.finish();
    let s = server.finish();
    c.assert_ok();
    s.assert_ok();
    assert!(
        c.lines.iter().any(|l| l.contains("all sizes verified")),
        "{c}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that exits the moment it has the server's answer, with its VI
/// held by another thread (never dropped, so never closed; the progress
/// thread may hold it so at exit): the exit still sends the
/// acknowledgement held for a reply, so the server's send of the answer
/// the client placed ends done, not flushed. The long progress interval
/// keeps the client's progress thread from sending it first.
#[test]
fn exit_right_after_the_answer_still_acknowledges_it() {
    let _g = serial();
    if skip("exit_right_after_the_answer_still_acknowledges_it") {
        return;
    }
    let ns = NetnsPair::new(1500);
    for rel in ["rd", "rr"] {
        let (s, c) = run_pair(
            &ns,
            &[("mode", "last"), ("rel", rel)],
            &[("OPENVIA_PROGRESS_US", "1000000")],
        );
        assert_eq!(s.expect_u64("answered"), 100, "{rel}");
        assert_eq!(c.expect_u64("last"), 100, "{rel}");
    }
}

/// Peer-to-peer (`VipConnectPeerRequest`) across the namespaces: the end
/// with the smaller address waits for the other's request; each end's
/// send to the other must end done, though the other exits right after
/// checking what it got.
#[test]
fn peer_to_peer_connect() {
    let _g = serial();
    if skip("peer_to_peer_connect") {
        return;
    }
    let ns = NetnsPair::new(1500);
    for f in pair::peer_to_peer(PEER, &ns, &env(&[])) {
        assert_eq!(f.expect("device"), "udp", "{f}");
    }
}
