//! The Ethernet device between two network namespaces joined by veth: the
//! helper (`netns_peer`) opens `/dev/via_<veth>` with
//! `OPENVIA_NET_DEVICE=ether`, on the AF_PACKET and the AF_XDP path
//! (`OPENVIA_ETHER_PATH`); every size class, RDMA write with immediate
//! data and RDMA read at every reliability level, random frame loss from
//! an nft rule on the veths' ingress, a peer killed mid-transfer, frames
//! from a stranger's MAC, and the error a process without CAP_NET_RAW
//! gets. Needs root (CI is root); elsewhere each test prints why it
//! skipped. One test at a time (`serial`), as the UDP namespace tests.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::Duration;

use openvia_netns_tests::harness::{spawn_in, Finished, Peer};
use openvia_netns_tests::namespaces::{nft_unavailable, NetnsPair};
use openvia_netns_tests::pair::{self, env, serial, server_client_args, skip, HELPER_TIMEOUT};

const PEER: &str = env!("CARGO_BIN_EXE_netns_peer");

/// The helpers' environment on the Ethernet device by `path`.
fn ether_env(path: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut e = vec![
        ("OPENVIA_NET_DEVICE", "ether"),
        ("OPENVIA_ETHER_PATH", path),
    ];
    e.extend_from_slice(extra);
    env(&e)
}

fn run_pair(
    ns: &NetnsPair,
    path: &str,
    common: &[(&str, &str)],
    extra_env: &[(&str, &str)],
) -> (Finished, Finished) {
    let (s, c) = pair::run_pair(PEER, ns, common, &ether_env(path, extra_env));
    assert_eq!(s.expect("device"), "ether", "{s}");
    assert_eq!(c.expect("device"), "ether", "{c}");
    (s, c)
}

/// Every size, RDMA writes with immediate data, RDMA reads (not on the
/// unreliable level), each byte checked on both sides; then a message
/// gathered from three segments and scattered into three, completions
/// through a CQ.
fn sizes(ns: &NetnsPair, path: &str, rels: &[&str]) {
    for rel in rels {
        let (s, c) = run_pair(
            ns,
            path,
            &[("mode", "gather"), ("rel", rel), ("cq", "1")],
            &[],
        );
        assert_eq!(s.expect_u64("scattered"), c.expect_u64("gathered"));
        let (s, c) = run_pair(ns, path, &[("mode", "sizes"), ("rel", rel)], &[]);
        pair::assert_sizes_run(&s, &c, rel, path);
    }
}

#[test]
fn ether_packet_every_op_at_every_reliability_level() {
    let _g = serial();
    if skip("ether_packet_every_op_at_every_reliability_level") {
        return;
    }
    let ns = NetnsPair::new(1500);
    sizes(&ns, "packet", &["rd", "rr", "ur"]);
}

#[test]
fn ether_packet_at_mtu_9000() {
    let _g = serial();
    if skip("ether_packet_at_mtu_9000") {
        return;
    }
    let ns = NetnsPair::new(9000);
    sizes(&ns, "packet", &["rd"]);
}

/// AF_XDP on veth: native mode (the MTU is at most 3506), copying (veth
/// has no zero-copy). Each process has one connection, so each veth end
/// one AF_XDP socket. MTU 3500: a 1 MiB message is 300 frames, within the
/// 512 an AF_XDP socket receives into; at MTU 1500 (720 frames) a burst
/// outruns a lagging receiver, which the reliable levels repair and the
/// unreliable one may not (docs/ether.md).
#[test]
fn ether_xdp_every_op_at_every_reliability_level() {
    let _g = serial();
    if skip("ether_xdp_every_op_at_every_reliability_level") {
        return;
    }
    let ns = NetnsPair::new(3500);
    sizes(&ns, "xdp", &["rd", "rr", "ur"]);
}

/// A stream and the sizes with `percent` % of the frames lost: dropped by
/// nft on the veths' ingress (`by_nft`), or by the channel's seeded fault
/// injection on receive (`OPENVIA_UDP_FAULTS`) where nft cannot: AF_XDP
/// takes frames off the wire before any ingress hook runs.
fn stream_under_drop(path: &str, percent: u32, count: &str, by_nft: bool) {
    let ns = NetnsPair::new(1500);
    let faults = format!("drop={},seed=7", f64::from(percent) / 100.0);
    let extra: Vec<(&str, &str)> = if by_nft {
        ns.drop_ether(percent);
        Vec::new()
    } else {
        vec![("OPENVIA_UDP_FAULTS", faults.as_str())]
    };
    let (s, c) = run_pair(
        &ns,
        path,
        &[
            ("mode", "stream"),
            ("rel", "rd"),
            ("size", "65536"),
            ("count", count),
            ("window", "8"),
            ("lossy", "1"),
        ],
        &extra,
    );
    let want: u64 = count.parse().unwrap();
    assert_eq!(s.expect_u64("received"), want);
    assert_eq!(c.expect_u64("sent"), want);
    eprintln!(
        "{path} drop {percent}%: {} frames dropped by nft, server {:?} MB/s",
        ns.dropped_frames(),
        s.get("mb_per_s")
    );
    if by_nft {
        assert!(ns.dropped_frames() > 0, "the nft rule dropped nothing");
    }
    // Sizes and RDMA under loss too, every byte checked.
    run_pair(
        &ns,
        path,
        &[("mode", "sizes"), ("rel", "rr"), ("lossy", "1")],
        &extra,
    );
}

fn nft_skip(test: &str) -> bool {
    if skip(test) {
        return true;
    }
    match nft_unavailable() {
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            true
        }
        None => false,
    }
}

#[test]
fn ether_packet_one_percent_drop_every_byte_verified() {
    let _g = serial();
    if nft_skip("ether_packet_one_percent_drop_every_byte_verified") {
        return;
    }
    stream_under_drop("packet", 1, "100", true);
}

#[test]
fn ether_packet_ten_percent_drop_every_byte_verified() {
    let _g = serial();
    if nft_skip("ether_packet_ten_percent_drop_every_byte_verified") {
        return;
    }
    stream_under_drop("packet", 10, "30", true);
}

#[test]
fn ether_xdp_one_and_ten_percent_injected_drop_every_byte_verified() {
    let _g = serial();
    if skip("ether_xdp_one_and_ten_percent_injected_drop_every_byte_verified") {
        return;
    }
    stream_under_drop("xdp", 1, "100", false);
    stream_under_drop("xdp", 10, "30", false);
}

#[test]
fn ether_peer_killed_mid_transfer_breaks_the_vi_within_the_dead_time() {
    let _g = serial();
    if skip("ether_peer_killed_mid_transfer_breaks_the_vi_within_the_dead_time") {
        return;
    }
    const DEAD_MS: u64 = 1000;
    let ns = NetnsPair::new(1500);
    let disc = format!("k{}", std::process::id());
    let dead = DEAD_MS.to_string();
    let e = ether_env("packet", &[("OPENVIA_UDP_DEAD_MS", &dead)]);
    let (server, client) = pair::endless_stream(PEER, &ns, &e, &disc);
    // No ICMP here: the dead-peer time is the bound, with room for a
    // loaded machine.
    let (_, c) =
        pair::kill_server_and_check_break(server, client, Duration::from_millis(DEAD_MS + 2000));
    assert_eq!(c.expect("device"), "ether", "{c}");
}

/// Sends, from namespace `ns` on `ifname`, one frame of our EtherType to
/// every connection id 1..=65535 from a MAC no peer has (broadcast, so
/// every host on the link takes it). Runs on a thread of its own: setns
/// changes only the calling thread's namespace.
fn frames_from_a_stranger(ns: &str, ifname: &str) {
    let (ns, ifname) = (ns.to_string(), ifname.to_string());
    std::thread::spawn(move || {
        let path = std::ffi::CString::new(format!("/run/netns/{ns}")).unwrap();
        // SAFETY: `path` is NUL-terminated; the result is checked.
        let nsfd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        assert!(nsfd >= 0, "open {ns}");
        // SAFETY: `nsfd` was just opened and is owned by nothing else.
        let nsfd = unsafe { OwnedFd::from_raw_fd(nsfd) };
        // SAFETY: setns on a namespace descriptor, for this thread only.
        assert_eq!(
            unsafe { libc::setns(nsfd.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        let cname = std::ffi::CString::new(ifname).unwrap();
        // SAFETY: `cname` is NUL-terminated.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        assert!(ifindex > 0);
        let proto = 0x88b5u16.to_be();
        // SAFETY: plain socket creation; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        assert!(fd >= 0, "AF_PACKET socket");
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; zero is valid.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_protocol = proto;
        to.sll_ifindex = ifindex as i32;
        to.sll_halen = 6;
        let mut frame = [0u8; 60];
        frame[..6].fill(0xff);
        frame[6..12].copy_from_slice(&[0x02, 0, 0, 0x5e, 0xa1, 0x99]);
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        frame[16] = 1; // kind: compact DATA
        for id in 1..=u16::MAX {
            frame[14..16].copy_from_slice(&id.to_be_bytes());
            // SAFETY: `frame` and `to` are valid for the lengths passed.
            let n = unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    frame.as_ptr().cast(),
                    frame.len(),
                    0,
                    (&to as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(n, frame.len() as isize, "sendto id {id}");
        }
    })
    .join()
    .unwrap();
}

/// A connected, idle pair; a stranger's frames reach the client, which
/// drops and counts them; then the server is killed and the idle client
/// learns it within the dead-peer time (no ICMP on this device).
#[test]
fn ether_frames_from_an_unknown_peer_are_dropped_and_counted() {
    let _g = serial();
    if skip("ether_frames_from_an_unknown_peer_are_dropped_and_counted") {
        return;
    }
    let ns = NetnsPair::new(1500);
    let disc = format!("u{}", std::process::id());
    let e = ether_env(
        "packet",
        &[
            ("OPENVIA_UDP_KEEPALIVE_MS", "100"),
            ("OPENVIA_UDP_DEAD_MS", "1000"),
        ],
    );
    let common = [("mode", "idle"), ("rel", "rd"), ("disc", &disc)];
    let (sargs, cargs) = server_client_args(&ns, &common);
    let mut server = spawn_in(&ns.b, "server", PEER, &sargs, &e, HELPER_TIMEOUT);
    server.wait_line("READY", HELPER_TIMEOUT);
    let mut client = spawn_in(&ns.a, "client", PEER, &cargs, &e, HELPER_TIMEOUT);
    server.wait_line("CONNECTED", HELPER_TIMEOUT);
    client.wait_line("CONNECTED", HELPER_TIMEOUT);
    frames_from_a_stranger(&ns.b, &ns.if_b);
    let killed = server.kill();
    client.wait_line("BROKE", HELPER_TIMEOUT);
    let took = killed.elapsed();
    let c = client.finish();
    c.assert_ok();
    assert_eq!(c.expect("device"), "ether", "{c}");
    assert!(c.expect_u64("unknown_peer") >= 1, "{c}");
    assert_eq!(c.expect_u64("send_succeeded"), 0, "{c}");
    assert_eq!(c.expect_u64("error_state"), 1, "{c}");
    eprintln!("idle ether client broke {took:?} after the kill");
    assert!(took < Duration::from_millis(3000), "{took:?}");
}

/// The helper as a client under `setpriv` without CAP_NET_RAW (dropped
/// from the bounding set, so root's exec does not get it back).
fn client_without_cap_net_raw(ns: &NetnsPair, net_device: &str) -> Finished {
    let mut e = env(&[("OPENVIA_NET_DEVICE", net_device)]);
    e.push(("OPENVIA_ETHER_PATH".into(), "packet".into()));
    let (_, cargs) = server_client_args(ns, &[("mode", "open"), ("rel", "rd"), ("disc", "nocap")]);
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns",
        "exec",
        &ns.a,
        "setpriv",
        "--bounding-set",
        "-net_raw",
    ])
    .arg(PEER)
    .args(&cargs);
    Peer::start("client", cmd, &e, HELPER_TIMEOUT).finish()
}

fn setpriv_missing() -> bool {
    let ok = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: no setpriv (util-linux)");
    }
    !ok
}

#[test]
fn ether_without_cap_net_raw_is_a_clear_error_and_auto_falls_back_to_udp() {
    let _g = serial();
    if skip("ether_without_cap_net_raw_is_a_clear_error_and_auto_falls_back_to_udp")
        || setpriv_missing()
    {
        return;
    }
    let ns = NetnsPair::new(1500);
    let forced = client_without_cap_net_raw(&ns, "ether");
    assert!(!forced.status.success(), "{forced}");
    assert!(
        forced.stderr.contains("open:") && forced.stderr.contains("CAP_NET_RAW"),
        "{forced}"
    );
    let auto = client_without_cap_net_raw(&ns, "auto");
    auto.assert_ok();
    assert_eq!(auto.expect("device"), "udp", "{auto}");
}

/// Two server processes on one host, two client processes on the other,
/// all at once on one interface: each process's agent sees every connect
/// request and hands over only its own servers' (the other's are not
/// its business), and each connection's frames reach only its process.
#[test]
fn ether_two_processes_per_host_share_the_interface() {
    let _g = serial();
    if skip("ether_two_processes_per_host_share_the_interface") {
        return;
    }
    two_processes_per_host("packet");
}

/// `OPENVIA_ETHER_PATH=auto` with two processes per host, streaming at
/// once (every message checked by its server): the first process on
/// each host to open a link takes the interface's AF_XDP queue, the
/// second finds it taken and falls back to AF_PACKET, and both paths
/// carry data on one interface side by side. The servers are then
/// killed; each client reports which paths its links took.
#[test]
fn ether_auto_path_falls_back_to_packet_when_the_xdp_queue_is_taken() {
    let _g = serial();
    if skip("ether_auto_path_falls_back_to_packet_when_the_xdp_queue_is_taken") {
        return;
    }
    let ns = NetnsPair::new(1500);
    let e = ether_env("auto", &[("OPENVIA_UDP_DEAD_MS", "1000")]);
    let pairs: Vec<(Peer, Peer)> = (0..2)
        .map(|k| pair::endless_stream(PEER, &ns, &e, &format!("x{}-{k}", std::process::id())))
        .collect();
    let (mut packet, mut xdp) = (0, 0);
    for (server, client) in pairs {
        let (_, f) = pair::kill_server_and_check_break(server, client, Duration::from_secs(3));
        assert_eq!(f.expect("device"), "ether", "{f}");
        packet += f.expect_u64("packet_links");
        xdp += f.expect_u64("xdp_links");
    }
    assert_eq!((packet, xdp), (1, 1), "one AF_XDP link, one AF_PACKET");
}

fn two_processes_per_host(path: &str) {
    let ns = NetnsPair::new(1500);
    let e = ether_env(path, &[]);
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for k in 0..2 {
        let disc = format!("m{}-{k}", std::process::id());
        let common = [("mode", "sizes"), ("rel", "rd"), ("disc", disc.as_str())];
        let (sargs, cargs) = server_client_args(&ns, &common);
        let mut server = spawn_in(&ns.b, "server", PEER, &sargs, &e, HELPER_TIMEOUT);
        server.wait_line("READY", HELPER_TIMEOUT);
        servers.push(server);
        clients.push(cargs);
    }
    let clients: Vec<Peer> = clients
        .iter()
        .map(|cargs| spawn_in(&ns.a, "client", PEER, cargs, &e, HELPER_TIMEOUT))
        .collect();
    for p in clients.into_iter().chain(servers) {
        let f = p.finish();
        f.assert_ok();
        assert_eq!(f.expect("device"), "ether", "{f}");
        assert_eq!(f.expect_u64("packet_links"), 1, "{f}");
    }
}

/// Peer-to-peer (`VipConnectPeerRequest`) across the namespaces: the end
/// with the smaller address waits for the other's request.
#[test]
fn ether_peer_to_peer_connect() {
    let _g = serial();
    if skip("ether_peer_to_peer_connect") {
        return;
    }
    let ns = NetnsPair::new(1500);
    for f in pair::peer_to_peer(PEER, &ns, &ether_env("packet", &[])) {
        assert_eq!(f.expect("device"), "ether", "{f}");
    }
}

/// As the UDP device's test: a client that exits the moment it has the
/// server's answer, its VI never closed, still acknowledges it (here no
/// ICMP would end the server's wait early: it would wait for the dead
/// time and end flushed).
#[test]
fn ether_exit_right_after_the_answer_still_acknowledges_it() {
    let _g = serial();
    if skip("ether_exit_right_after_the_answer_still_acknowledges_it") {
        return;
    }
    let ns = NetnsPair::new(1500);
    for rel in ["rd", "rr"] {
        let (s, c) = run_pair(
            &ns,
            "packet",
            &[("mode", "last"), ("rel", rel)],
            &[("OPENVIA_PROGRESS_US", "1000000")],
        );
        assert_eq!(s.expect_u64("answered"), 100, "{rel}");
        assert_eq!(c.expect_u64("last"), 100, "{rel}");
    }
}
