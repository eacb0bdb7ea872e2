//! The AF_PACKET link between two namespaces (root; skipped otherwise):
//! frames both ways in batches of hundreds with every byte checked, on
//! every receive path, wrapping around the rings; a ring deep enough for
//! a burst the default one drops; the kernel's
//! per-connection filter; the kernel's own IP traffic flowing beside open
//! links (and filling the neighbour table); and the missing capability
//! named for a user without it.

mod ethw_netns;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::time::{Duration, Instant};

use ethw_netns::{in_ns, skip, EthwPair};
use openvia_core::sys::frames::{FrameError, FrameFilter, FrameIo, Mac};
use openvia_core::sys::packet::{interface_info, neighbour_mac, PacketLink, RxPath, RX_HEADROOM};

const ETHERTYPE: u16 = 0x88B5;

/// Which end of the pair.
#[derive(Clone, Copy)]
enum Side {
    A,
    B,
}

/// Opens a link on `side`'s interface, from inside its namespace.
fn open(pair: &EthwPair, side: Side, dst_id: Option<u16>, rx: RxPath) -> PacketLink {
    let (ns, ifname) = match side {
        Side::A => (&pair.a, pair.if_a.clone()),
        Side::B => (&pair.b, pair.if_b.clone()),
    };
    let filter = FrameFilter {
        ethertype: ETHERTYPE,
        dst_id: dst_id.map(|id| (0, id)),
    };
    in_ns(ns, move || {
        PacketLink::open(&ifname, filter, rx).expect("open AF_PACKET link")
    })
}

/// Frame `i` of a test stream to connection `dst`: the id, then bytes
/// that depend on (dst, i), of a length that varies with i.
fn frame(dst: u16, i: u32) -> Vec<u8> {
    let len = 46 + (i as usize * 37) % 1400;
    let mut f: Vec<u8> = (0..len as u32)
        .map(|k| (k.wrapping_mul(31) ^ i.wrapping_mul(7) ^ u32::from(dst)) as u8)
        .collect();
    f[0..2].copy_from_slice(&dst.to_be_bytes());
    f[2..6].copy_from_slice(&i.to_be_bytes());
    f
}

/// Sends the frames, each gathered from three parts, until all are out.
fn send_all(link: &mut PacketLink, dst: Mac, frames: &[Vec<u8>]) {
    let parts: Vec<[&[u8]; 3]> = frames
        .iter()
        .map(|f| [&f[..2], &f[2..10], &f[10..]])
        .collect();
    let refs: Vec<&[&[u8]]> = parts.iter().map(|p| &p[..]).collect();
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while done < refs.len() {
        done += link.send(dst, &refs[done..]).expect("send");
        assert!(Instant::now() < deadline, "only {done} frames sent");
    }
}

/// Receives `n` frames (waiting as needed, at most 10 s).
fn recv_n(link: &mut PacketLink, n: usize) -> Vec<(Mac, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < n {
        link.recv(n - got.len(), &mut |src, p| got.push((src, p.to_vec())))
            .expect("recv");
        if got.len() < n {
            assert!(Instant::now() < deadline, "{} of {n} frames", got.len());
            link.wait_readable(Duration::from_millis(50));
        }
    }
    got
}

fn exchange_both_ways(rx: RxPath) {
    let pair = EthwPair::new();
    let mut a = open(&pair, Side::A, None, rx);
    let mut b = open(&pair, Side::B, None, rx);
    let (mac_a, mac_b) = (a.local_mac(), b.local_mac());
    assert_ne!(mac_a, mac_b);
    assert_eq!(a.mtu(), 1500);
    for forward in [true, false] {
        let (from, to) = if forward {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        let (from_mac, to_mac) = (from.local_mac(), to.local_mac());
        let dst = if forward { 3 } else { 4 };
        // 6000 frames each way: past the end of every ring and around.
        for round in 0..12u32 {
            let frames: Vec<Vec<u8>> = (0..500).map(|i| frame(dst, round * 1000 + i)).collect();
            send_all(from, to_mac, &frames);
            let got = recv_n(to, frames.len());
            for ((src, payload), sent) in got.iter().zip(&frames) {
                assert_eq!(*src, from_mac);
                // veth does not pad; every byte as sent, in order.
                assert_eq!(payload, sent);
            }
        }
    }
}

#[test]
fn frames_cross_both_ways_byte_exact_through_the_frame_ring() {
    if !skip("ring") {
        exchange_both_ways(RxPath::FrameRing);
    }
}

#[test]
fn frames_cross_both_ways_byte_exact_through_the_block_ring() {
    if !skip("block ring") {
        exchange_both_ways(RxPath::BlockRing);
    }
}

#[test]
fn frames_cross_both_ways_byte_exact_through_recv() {
    if !skip("recv") {
        exchange_both_ways(RxPath::Copy);
    }
}

#[test]
fn a_ring_opened_for_a_window_holds_a_burst_the_default_ring_drops() {
    if skip("deep ring") {
        return;
    }
    let pair = EthwPair::new();
    let mut a = open(&pair, Side::A, None, RxPath::Copy);
    // Both see every frame; neither is read until the burst is over.
    let mut shallow = open(&pair, Side::B, None, RxPath::FrameRing);
    let ifname = pair.if_b.clone();
    let filter = FrameFilter {
        ethertype: ETHERTYPE,
        dst_id: None,
    };
    let mut deep = in_ns(&pair.b, move || {
        PacketLink::open_queued(&ifname, filter, RxPath::FrameRing, 4000).expect("open deep")
    });
    // 3000 frames: more than the 4 MiB default holds at MTU 1500 (2496
    // slots), across many of the deep ring's 64 KiB blocks (39 slots
    // each). Sent in runs of 250: veth hands each frame over within the
    // send, and no run can overflow the kernel's backlog (1000).
    let frames: Vec<Vec<u8>> = (0..3000).map(|i| frame(7, i)).collect();
    for run in frames.chunks(250) {
        send_all(&mut a, deep.local_mac(), run);
    }
    let got = recv_n(&mut deep, frames.len());
    for ((src, payload), sent) in got.iter().zip(&frames) {
        assert_eq!(*src, a.local_mac());
        assert_eq!(payload, sent);
    }
    let (_, deep_drops) = deep.kernel_stats().unwrap();
    assert_eq!(deep_drops, 0, "the deep ring dropped frames");
    let (_, shallow_drops) = shallow.kernel_stats().unwrap();
    assert!(
        shallow_drops >= 3000 - 2496,
        "the default ring dropped {shallow_drops}"
    );
    // The shallow ring hands over what it kept, in order, and goes on.
    let kept = recv_n(&mut shallow, 3000 - shallow_drops as usize);
    assert_eq!(kept[0].1, frames[0]);
    send_all(&mut a, deep.local_mac(), &[frame(7, 9999)]);
    assert_eq!(recv_n(&mut shallow, 1)[0].1, frame(7, 9999));
    assert_eq!(recv_n(&mut deep, 1)[0].1, frame(7, 9999));
}

#[test]
fn the_kernel_hands_each_connection_only_its_own_frames() {
    if skip("filter") {
        return;
    }
    let pair = EthwPair::new();
    let mut a = open(&pair, Side::A, None, RxPath::Copy);
    let mut b5 = open(&pair, Side::B, Some(5), RxPath::FrameRing);
    let mut b9 = open(&pair, Side::B, Some(9), RxPath::Copy);
    let frames: Vec<Vec<u8>> = (0..400)
        .map(|i| frame(if i % 3 == 0 { 9 } else { 5 }, i))
        .collect();
    send_all(&mut a, b5.local_mac(), &frames);
    let want5: Vec<&Vec<u8>> = frames.iter().filter(|f| f[1] == 5).collect();
    let want9: Vec<&Vec<u8>> = frames.iter().filter(|f| f[1] == 9).collect();
    // A last frame to each after all the others: once it is in, every
    // earlier frame has been through that socket's filter.
    let last = [frame(5, 9999), frame(9, 9999)];
    send_all(&mut a, b5.local_mac(), &last);
    let got5 = recv_n(&mut b5, want5.len() + 1);
    let got9 = recv_n(&mut b9, want9.len() + 1);
    for (got, want, last) in [(&got5, &want5, &last[0]), (&got9, &want9, &last[1])] {
        let payloads: Vec<&Vec<u8>> = got.iter().map(|(_, p)| p).collect();
        assert_eq!(&payloads[..want.len()], &want[..]);
        assert_eq!(payloads[want.len()], last);
    }
    let mut extra = 0;
    b5.recv(100, &mut |_, _| extra += 1).unwrap();
    b9.recv(100, &mut |_, _| extra += 1).unwrap();
    assert_eq!(extra, 0, "a socket got another connection's frames");
}

/// Echoes a datagram from namespace A to `ip_b` in B over the kernel's
/// IP stack; returns what A's neighbour table then says of `ip_b`.
fn udp_echo(pair: &EthwPair, ip_b: IpAddr) -> Option<Mac> {
    let server = in_ns(&pair.b, move || UdpSocket::bind((ip_b, 0)).unwrap());
    let to = server.local_addr().unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        server
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (n, from) = server.recv_from(&mut buf).expect("datagram over IP");
        server.send_to(&buf[..n], from).unwrap();
    });
    let if_a = pair.if_a.clone();
    let (reply, neighbour) = in_ns(&pair.a, move || {
        let any: IpAddr = if ip_b.is_ipv4() {
            Ipv4Addr::UNSPECIFIED.into()
        } else {
            Ipv6Addr::UNSPECIFIED.into()
        };
        let c = UdpSocket::bind((any, 0)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.send_to(b"kernel ping", to).unwrap();
        let mut buf = [0u8; 64];
        let n = c.recv(&mut buf).expect("echo over IP");
        (
            buf[..n].to_vec(),
            neighbour_mac(ip_b, &if_a).expect("netlink"),
        )
    });
    echo.join().unwrap();
    assert_eq!(reply, b"kernel ping");
    neighbour
}

#[test]
fn kernel_traffic_flows_beside_open_links_and_fills_the_neighbour_table() {
    if skip("kernel traffic") {
        return;
    }
    let pair = EthwPair::new();
    let mut a = open(&pair, Side::A, None, RxPath::FrameRing);
    let mut b = open(&pair, Side::B, None, RxPath::FrameRing);
    let mac_b = b.local_mac();
    // UDP echoes over IPv4 and IPv6 (ARP, NDP first) while both links
    // are open; each leaves B in A's neighbour table.
    for ip_b in [IpAddr::V4(pair.ip_b), IpAddr::V6(pair.ip6_b)] {
        assert_eq!(udp_echo(&pair, ip_b), Some(mac_b), "A's entry for {ip_b}");
    }
    // Our links saw none of it, and still carry frames.
    let mut seen = 0;
    b.recv(100, &mut |_, _| seen += 1).unwrap();
    assert_eq!(seen, 0, "IP or ARP reached the raw link");
    send_all(&mut a, mac_b, &[frame(1, 1)]);
    assert_eq!(recv_n(&mut b, 1)[0].1, frame(1, 1));
}

#[test]
fn every_path_leaves_the_documented_headroom_in_front_of_each_payload() {
    if skip("headroom") {
        return;
    }
    let pair = EthwPair::new();
    let mut a = open(&pair, Side::A, None, RxPath::FrameRing);
    for rx in [RxPath::FrameRing, RxPath::BlockRing, RxPath::Copy] {
        let mut b = open(&pair, Side::B, None, rx);
        let frames: Vec<Vec<u8>> = (0..50).map(|i| frame(2, i)).collect();
        send_all(&mut a, b.local_mac(), &frames);
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen.len() < frames.len() {
            b.recv_in_place(64, &mut |_, buf, start, len| {
                assert!(start >= RX_HEADROOM, "{start} bytes of headroom");
                buf[..start].fill(0xEE); // ours to overwrite
                seen.push(buf[start..start + len].to_vec());
            })
            .unwrap();
            assert!(Instant::now() < deadline);
            b.wait_readable(Duration::from_millis(50));
        }
        assert_eq!(seen, frames);
    }
}

#[test]
fn without_cap_net_raw_the_missing_capability_is_named() {
    if skip("permission") {
        return;
    }
    let info = interface_info("lo").expect("lo");
    assert!(info.ifindex > 0);
    // SAFETY: the child only drops privileges, tries to open and exits
    // with the verdict; glibc keeps malloc usable after fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: plain system calls in the child; _exit never returns.
        unsafe {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(2);
            }
            let filter = FrameFilter {
                ethertype: ETHERTYPE,
                dst_id: None,
            };
            let code = match PacketLink::open("lo", filter, RxPath::FrameRing) {
                Err(FrameError::Permission("CAP_NET_RAW")) => 0,
                Err(_) => 3,
                Ok(_) => 4,
            };
            libc::_exit(code);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status));
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "2 setuid, 3 other error, 4 opened"
    );
}

#[test]
fn frames_past_the_receive_slots_are_dropped_and_counted() {
    if skip("oversize") {
        return;
    }
    let pair = EthwPair::new();
    let mut a = open(&pair, Side::A, None, RxPath::Copy);
    let links: Vec<PacketLink> = [RxPath::FrameRing, RxPath::BlockRing, RxPath::Copy]
        .into_iter()
        .map(|rx| open(&pair, Side::B, None, rx))
        .collect();
    // The MTU grows after the links sized their receive slots.
    for (ns, ifname) in [(&pair.a, &pair.if_a), (&pair.b, &pair.if_b)] {
        let out = std::process::Command::new("ip")
            .args(["-n", ns, "link", "set", ifname, "mtu", "9000"])
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    let big = {
        let mut f = frame(1, 0);
        f.resize(8000, 0x5A);
        f
    };
    let small = frame(1, 1);
    send_all(&mut a, links[0].local_mac(), &[big.clone(), small.clone()]);
    // V3 packs frames of any size into its 256 KiB blocks and takes both;
    // the V2 slots and the copy buffer were sized for 1500.
    let paths = ["frame ring", "block ring", "copy"];
    for ((path, mut link), takes_big) in paths.into_iter().zip(links).zip([false, true, false]) {
        let n = if takes_big { 2 } else { 1 };
        let got = recv_n(&mut link, n);
        let lens: Vec<usize> = got.iter().map(|(_, p)| p.len()).collect();
        let want: Vec<usize> = if takes_big {
            vec![big.len(), small.len()]
        } else {
            vec![small.len()]
        };
        assert_eq!(lens, want, "{path}");
        assert_eq!(got.last().unwrap().1, small, "{path}");
        assert_eq!(link.dropped(), u64::from(!takes_big), "{path}");
    }
}
