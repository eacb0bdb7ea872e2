//! An on-path attacker on the loopback interface, against two network
//! NICs in this process: a packet socket sniffs a DATA packet of the
//! connection, raw sockets inject a DATA packet forged from it (right
//! connection id, the next sequence and message numbers, no valid tag)
//! and a spoofed ICMP port unreachable. Needs root (elsewhere each test
//! prints why it skipped). The cluster key is read when a NIC opens, from
//! the environment: the tests take a lock and set it in turn.

#[path = "../../../crates/core/tests/scenarios/mod.rs"]
mod scenarios;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use openvia_core::descriptor::status;
use openvia_core::udp_stats;
use openvia_core::vi::{reliability, ViState};
use scenarios::{pair, set_desc, Pair, UDP};

const MAGIC: [u8; 2] = [0x52, 0x4d];
const TYPE_DATA: u8 = 1;
const RUM_DATA_HEADERS: usize = 64;
const TRAILER: usize = 24;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn not_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("SKIPPED {test}: raw sockets need root");
    }
    !root
}

/// A connected reliable pair over loopback, with or without a cluster key.
fn keyed_pair(key: bool, disc: &str) -> Pair {
    scenarios::udp_env();
    let path = std::env::temp_dir().join(format!("openvia-forgery-{}.key", std::process::id()));
    if key {
        std::fs::write(&path, b"cluster key of the forgery tests").unwrap();
        std::env::set_var("OPENVIA_CLUSTER_KEY", &path);
    } else {
        std::env::remove_var("OPENVIA_CLUSTER_KEY");
    }
    let p = pair(UDP, reliability::RELIABLE_DELIVERY, disc, 1 << 20);
    std::env::remove_var("OPENVIA_CLUSTER_KEY");
    let _ = std::fs::remove_file(&path);
    p
}

fn socket(domain: i32, ty: i32, proto: i32) -> OwnedFd {
    // SAFETY: plain socket creation; the descriptor is owned at once.
    let fd = unsafe { libc::socket(domain, ty, proto) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor nobody else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A DATA datagram seen on the wire: UDP ports and payload.
struct Seen {
    sport: u16,
    dport: u16,
    payload: Vec<u8>,
}

/// A packet socket on `lo` (IP packets, link header stripped).
fn sniffer() -> OwnedFd {
    let proto = (libc::ETH_P_ALL as u16).to_be() as i32;
    let s = socket(libc::AF_PACKET, libc::SOCK_DGRAM, proto);
    // SAFETY: all-zero is a valid sockaddr_ll; the name is a C string.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto as u16;
    sll.sll_ifindex = unsafe { libc::if_nametoindex(c"lo".as_ptr()) } as i32;
    // SAFETY: binding to a sockaddr_ll of its size.
    let r = unsafe {
        libc::bind(
            s.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(r, 0, "bind packet socket");
    only_rum_data(&s);
    s
}

/// Lets through the sniffer only IPv4 UDP datagrams that open with a RUM
/// DATA header: other loopback traffic (a busy host's) would otherwise
/// fill its buffer before the test reads it and push out the packet the
/// test waits for.
fn only_rum_data(s: &OwnedFd) {
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    const LDB_ABS: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
    const LDH_ABS: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS
    const LDX_MSH: u16 = 0xb1; // BPF_LDX | BPF_B | BPF_MSH: x = 4 * (ip[k] & 0xf)
    const LDH_IND: u16 = 0x48; // BPF_LD | BPF_H | BPF_IND
    const LDB_IND: u16 = 0x50; // BPF_LD | BPF_B | BPF_IND
    const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JSET: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
    const RET: u16 = 0x06; // BPF_RET | BPF_K
    let prog = [
        op(LDB_ABS, 0, 0, 9), // IP protocol
        op(JEQ, 0, 8, libc::IPPROTO_UDP as u32),
        op(LDH_ABS, 0, 0, 6), // fragment offset
        op(JSET, 6, 0, 0x1fff),
        op(LDX_MSH, 0, 0, 0), // x = IP header length
        op(LDH_IND, 0, 0, 8), // RUM magic, after the UDP header
        op(JEQ, 0, 3, u32::from(u16::from_be_bytes(MAGIC))),
        op(LDB_IND, 0, 0, 8 + 3), // RUM packet type
        op(JEQ, 0, 1, u32::from(TYPE_DATA)),
        op(RET, 0, 0, 0x0004_0000),
        op(RET, 0, 0, 0),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: the program outlives the call (the kernel copies it).
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as u32,
        )
    };
    assert_eq!(r, 0, "attach filter: {}", std::io::Error::last_os_error());
}

/// The next DATA packet whose payload holds `marker`.
fn sniff_data(s: &OwnedFd, marker: u8) -> Seen {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = vec![0u8; 70000];
    while Instant::now() < deadline {
        let mut pfd = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, ours.
        if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
            continue;
        }
        // SAFETY: receiving into a buffer we own, of its length.
        let n = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 28 {
            continue;
        }
        let ip = &buf[..n as usize];
        let ihl = ((ip[0] & 0x0f) as usize) * 4;
        if ip[0] >> 4 != 4 || ip[9] != libc::IPPROTO_UDP as u8 || ip.len() < ihl + 8 {
            continue;
        }
        let udp = &ip[ihl..];
        let payload = &udp[8..];
        if payload.len() > RUM_DATA_HEADERS
            && payload[..2] == MAGIC
            && payload[3] == TYPE_DATA
            && payload[RUM_DATA_HEADERS] == marker
        {
            return Seen {
                sport: u16::from_be_bytes([udp[0], udp[1]]),
                dport: u16::from_be_bytes([udp[2], udp[3]]),
                payload: payload.to_vec(),
            };
        }
    }
    panic!("no DATA packet with marker {marker:#x} seen on lo");
}

/// Sends a raw IPv4 packet 127.0.0.1 → 127.0.0.1 of protocol `proto`
/// (the kernel writes the IP header for it).
fn send_raw(proto: i32, body: &[u8]) {
    let s = socket(libc::AF_INET, libc::SOCK_RAW, proto);
    let to = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sending a buffer we own to a sockaddr_in of its size.
    let n = unsafe {
        libc::sendto(
            s.as_raw_fd(),
            body.as_ptr().cast(),
            body.len(),
            0,
            (&to as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    };
    assert_eq!(
        n,
        body.len() as isize,
        "{}",
        std::io::Error::last_os_error()
    );
}

fn udp_header(sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let mut h = Vec::with_capacity(8);
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&((8 + len) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]); // no checksum (IPv4)
    h
}

/// Injects a UDP datagram that claims to come from `sport`.
fn spoof_udp(sport: u16, dport: u16, payload: &[u8]) {
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, libc::IPPROTO_UDP as u8, 0, 0];
    ip.extend_from_slice(&[127, 0, 0, 1, 127, 0, 0, 1]);
    let total = (20 + 8 + payload.len()) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend(udp_header(sport, dport, payload.len()));
    ip.extend_from_slice(payload);
    send_raw(libc::IPPROTO_RAW, &ip);
}

fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ICMP port unreachable for a datagram `sport` → `dport`, as the
/// host of `dport` would send it.
fn spoof_port_unreachable(sport: u16, dport: u16) {
    let mut quoted = vec![
        0x45,
        0,
        0,
        128,
        0,
        0,
        0,
        0,
        64,
        libc::IPPROTO_UDP as u8,
        0,
        0,
    ];
    quoted.extend_from_slice(&[127, 0, 0, 1, 127, 0, 0, 1]);
    quoted.extend(udp_header(sport, dport, 100));
    let mut icmp = vec![3, 3, 0, 0, 0, 0, 0, 0];
    icmp.extend(quoted);
    let c = checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    send_raw(libc::IPPROTO_ICMP, &icmp);
}

/// Posts a 100-byte send of `byte`s from a, completed cleanly.
fn send_marked(p: &Pair, byte: u8) {
    // SAFETY: inside a's arena.
    unsafe { std::ptr::write_bytes(p.ma.data(0), byte, 100) };
    let sd = p.ma.desc(1);
    set_desc(sd, 0, &[(p.ma.data(0) as u64, p.ma.handle, 100)], 0);
    p.a.post_send(sd, p.ma.handle).unwrap();
    let got = p.a.send_wait(Some(Duration::from_secs(5))).unwrap();
    // SAFETY: the descriptor is ours and complete.
    assert_eq!(unsafe { (*got.0).cs.status } & status::ERROR_MASK, 0);
}

/// Posts a receive at b; returns the first byte and length received.
fn received(p: &Pair, post_first: impl FnOnce()) -> (u8, u32) {
    let rd = p.mb.desc(3);
    set_desc(rd, 0, &[(p.mb.data(4096) as u64, p.mb.handle, 4096)], 0);
    p.b.post_recv(rd, p.mb.handle).unwrap();
    post_first();
    let got = p.b.recv_wait(Some(Duration::from_secs(5))).unwrap();
    // SAFETY: the descriptor is ours and complete; the data in b's arena.
    unsafe {
        assert_eq!((*got.0).cs.status & status::ERROR_MASK, 0);
        (*p.mb.data(4096), (*got.0).cs.length)
    }
}

#[test]
fn forged_in_window_data_is_dropped_under_a_cluster_key() {
    let _g = serial();
    if not_root("forged_in_window_data_is_dropped_under_a_cluster_key") {
        return;
    }
    let p = keyed_pair(true, "t-forge");
    let sniff = sniffer();
    let (first, _) = received(&p, || send_marked(&p, 0xa1));
    assert_eq!(first, 0xa1);
    let seen = sniff_data(&sniff, 0xa1);
    // The next packet of the stream, as the attacker guesses it: sequence
    // and message numbers one on, the payload replaced, the trailer's
    // packet number one on and its tag kept (the attacker has no key).
    let mut forged = seen.payload.clone();
    let seq = u32::from_be_bytes(forged[16..20].try_into().unwrap());
    forged[16..20].copy_from_slice(&(seq + 1).to_be_bytes());
    let msg = u32::from_be_bytes(forged[32..36].try_into().unwrap());
    forged[32..36].copy_from_slice(&(msg + 1).to_be_bytes());
    let end = forged.len() - TRAILER;
    forged[RUM_DATA_HEADERS..end].fill(0xee);
    let number = u64::from_be_bytes(forged[end..end + 8].try_into().unwrap());
    forged[end..end + 8].copy_from_slice(&(number + 1).to_be_bytes());
    let before = udp_stats().auth_failures;
    let (first, len) = received(&p, || {
        spoof_udp(seen.sport, seen.dport, &forged);
        send_marked(&p, 0xa2);
    });
    assert_eq!(
        (first, len),
        (0xa2, 100),
        "the forged message was delivered"
    );
    assert!(udp_stats().auth_failures > before, "{:?}", udp_stats());
    assert!(
        udp_stats().messages_dropped < 1_000_000,
        "{:?}",
        udp_stats()
    );
}

#[test]
fn spoofed_icmp_ends_a_connection_only_without_a_cluster_key() {
    let _g = serial();
    if not_root("spoofed_icmp_ends_a_connection_only_without_a_cluster_key") {
        return;
    }
    for key in [false, true] {
        let p = keyed_pair(key, if key { "t-icmp-k" } else { "t-icmp" });
        let sniff = sniffer();
        received(&p, || send_marked(&p, 0xb1));
        let seen = sniff_data(&sniff, 0xb1);
        // A posted receive at a shows when a's VI breaks.
        let rd = p.ma.desc(3);
        set_desc(rd, 0, &[(p.ma.data(8192) as u64, p.ma.handle, 4096)], 0);
        p.a.post_recv(rd, p.ma.handle).unwrap();
        let before = udp_stats().port_unreachable;
        spoof_port_unreachable(seen.sport, seen.dport);
        // Without a key the ICMP is believed: the VI breaks at once. With
        // one, the peer answers the probe and nothing breaks: the wait
        // runs out.
        let waited = p.a.recv_wait(Some(Duration::from_millis(300)));
        assert!(udp_stats().port_unreachable > before, "ICMP not seen");
        if key {
            assert!(waited.is_err(), "keyed VI broke on a spoofed ICMP");
            assert_eq!(p.a.state(), ViState::Connected);
            let (first, _) = received(&p, || send_marked(&p, 0xb2));
            assert_eq!(first, 0xb2);
        } else {
            let got = waited.expect("the VI did not break on the ICMP");
            // SAFETY: the descriptor is ours and complete.
            assert_ne!(unsafe { (*got.0).cs.status } & status::ERROR_MASK, 0);
            assert_eq!(p.a.state(), ViState::Error);
        }
    }
}
