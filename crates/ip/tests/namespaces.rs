//! viaip between two network namespaces joined by veth: ping and a
//! checksummed TCP transfer in both modes, a peer that restarts, and the
//! clean-up after SIGTERM and kill -9. Needs root (CI is root); elsewhere
//! each test prints why it skipped.

mod common;

use common::*;
use std::time::Duration;

fn ping_and_tcp(mode: &str, underlay_mtu: u32) {
    let pair = Pair::new(underlay_mtu);
    let a = pair.up(0, mode);
    let b = pair.up(1, mode);
    // The first packets may find the links still connecting (counted as
    // peer_down): a few echoes, and one answer is enough.
    assert!(
        (0..10).any(|_| ping(&pair.ns[0], pair.over[1])),
        "no echo reply across viaip ({mode}): {}",
        pair.show(0)
    );
    let len = 16 << 20;
    let (sent, got, n) = tcp_transfer(&pair.ns[0], &pair.ns[1], pair.over[1], len);
    assert_eq!(n, len, "bytes received");
    assert_eq!(sent, got, "checksum across viaip ({mode})");
    let report = pair.show(0);
    assert!(report.contains(&format!("viaip0: {mode} mode")), "{report}");
    assert!(report.contains("link up"), "{report}");
    let tx_bytes: u64 = report
        .lines()
        .nth(1)
        .and_then(|l| l.split("tx packets").nth(1))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(tx_bytes >= len as u64, "tx bytes {tx_bytes}: {report}");
    // Idle links do not poll: the receiving threads' and the sending
    // loop's windows run out once nothing comes, so the two instances
    // together use under a tenth of a CPU in a quiet second.
    std::thread::sleep(Duration::from_millis(300));
    let before = a.cpu_ticks() + b.cpu_ticks();
    std::thread::sleep(Duration::from_secs(1));
    let used = a.cpu_ticks() + b.cpu_ticks() - before;
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    assert!(
        used * 10 < hz,
        "idle viaip used {used} of {hz} ticks in 1 s ({mode})"
    );
}

#[test]
fn connected_mode_carries_ping_and_tcp() {
    let _g = serial();
    if skip("connected_mode_carries_ping_and_tcp") {
        return;
    }
    ping_and_tcp("connected", 1500);
}

#[test]
fn datagram_mode_carries_ping_and_tcp() {
    let _g = serial();
    if skip("datagram_mode_carries_ping_and_tcp") {
        return;
    }
    ping_and_tcp("datagram", 1500);
}

#[test]
fn traffic_resumes_after_peer_restart() {
    let _g = serial();
    if skip("traffic_resumes_after_peer_restart") {
        return;
    }
    let pair = Pair::new(1500);
    let _a = pair.up(0, "connected");
    let mut b = pair.up(1, "connected");
    assert!((0..10).any(|_| ping(&pair.ns[0], pair.over[1])));
    b.signal(libc::SIGTERM);
    assert!(!pair.has_link(1, "viaip0"), "SIGTERM left the interface");
    // The peer is gone: echoes fail, and once the link is found dead its
    // packets are dropped and counted, the interface staying up.
    let mut counted = false;
    for _ in 0..15 {
        assert!(!ping(&pair.ns[0], pair.over[1]), "echo from a dead peer");
        if counter(&pair.show(0), "peer_down") > 0 {
            counted = true;
            break;
        }
    }
    assert!(counted, "no peer_down drops: {}", pair.show(0));
    assert!(pair.has_link(0, "viaip0"));
    let _b = pair.up(1, "connected");
    assert!(
        (0..15).any(|_| ping(&pair.ns[0], pair.over[1])),
        "traffic did not resume: {}",
        pair.show(0)
    );
    let (sent, got, n) = tcp_transfer(&pair.ns[1], &pair.ns[0], pair.over[0], 1 << 20);
    assert_eq!((sent, n), (got, 1 << 20));
    assert!(pair.show(0).contains("connects 2"), "{}", pair.show(0));
}

#[test]
fn kill_9_leaves_nothing_behind() {
    let _g = serial();
    if skip("kill_9_leaves_nothing_behind") {
        return;
    }
    let pair = Pair::new(1500);
    let mut a = pair.up(0, "connected");
    assert!(pair.has_link(0, "viaip0"));
    assert!(pair.show(0).contains("viaip0:"));
    a.signal(libc::SIGKILL);
    assert!(!pair.has_link(0, "viaip0"), "the TUN outlived kill -9");
    assert_eq!(pair.show(0), "", "a control socket outlived kill -9");
    // The name is free again.
    let _a = pair.up(0, "connected");
    assert!(pair.has_link(0, "viaip0"));
}

#[test]
fn neighbours_are_found_without_configuration() {
    let _g = serial();
    if skip("neighbours_are_found_without_configuration") {
        return;
    }
    let pair = Pair::new(1500);
    let _a = pair.up_with(0, "connected", &[]);
    let _b = pair.up_with(1, "connected", &[]);
    assert!(pair.show(0).contains("0 peer") || !pair.show(0).contains("peer "));
    assert!(
        (0..10).any(|_| ping(&pair.ns[0], pair.over[1])),
        "no echo reply without a peers file: {}",
        pair.show(0)
    );
    let (sent, got, n) = tcp_transfer(&pair.ns[1], &pair.ns[0], pair.over[0], 4 << 20);
    assert_eq!((sent, n), (got, 4 << 20));
    for i in 0..2 {
        let want = format!(
            "peer {} at {}: link up",
            pair.over[1 - i],
            pair.under[1 - i]
        );
        assert!(pair.show(i).contains(&want), "{}", pair.show(i));
    }
    // Junk at the discovery port is counted and changes nothing.
    let target = pair.under[0];
    in_ns(&pair.ns[1], move || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").expect("udp");
        s.send_to(b"viaip1 who connected nonsense", (target, 7251))
            .expect("send");
    });
    let counted = (0..200).any(|_| pair.show(0).contains("discovery: malformed=1"));
    assert!(counted, "{}", pair.show(0));
    assert!(ping(&pair.ns[0], pair.over[1]) || ping(&pair.ns[0], pair.over[1]));
}

#[test]
fn background_instance_is_up_when_up_returns() {
    let _g = serial();
    if skip("background_instance_is_up_when_up_returns") {
        return;
    }
    let pair = Pair::new(1500);
    let addr = format!("{}/24", pair.over[0]);
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &pair.ns[0], VIAIP, "up", "viaip0", &addr])
        .args(["--link", &pair.veth[0], "-d"])
        .output()
        .expect("viaip up -d");
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(line.starts_with("viaip: viaip0 up"), "{line:?}");
    assert!(
        pair.has_link(0, "viaip0"),
        "up -d returned before the interface"
    );
    let pid: i32 = line
        .rsplit("pid ")
        .next()
        .and_then(|p| p.trim().parse().ok())
        .expect("pid in the readiness line");
    assert!(pid > 1, "{line:?}");
    // SAFETY: pidfd_open takes a pid and flags; the result is checked.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    assert!(pidfd >= 0, "pidfd_open");
    // SAFETY: signalling the background instance started above.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let mut p = libc::pollfd {
        fd: pidfd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd; the pidfd becomes readable when it exits.
    let n = unsafe { libc::poll(&mut p, 1, 10_000) };
    // SAFETY: our descriptor.
    unsafe { libc::close(pidfd) };
    assert_eq!(n, 1, "the background instance did not end on SIGTERM");
    assert!(!pair.has_link(0, "viaip0"), "SIGTERM left the interface");
    assert_eq!(pair.show(0), "");
}
