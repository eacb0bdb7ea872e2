//! The AF_XDP link between two network namespaces joined by a veth pair:
//! frames both ways with every byte checked, batches, the kernel's own
//! traffic (ping) beside ours, the destination-id filter, one socket per
//! queue, and the capability each step needs. Needs root (CI is root);
//! elsewhere each test prints why it skipped.
//!
//! Links are opened on a thread that entered the namespace (setns), so one
//! test process drives both ends; sockets stay in the namespace they were
//! made in whichever thread uses them.

use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use openvia_core::sys::bpf::XdpMode;
use openvia_core::sys::frames::{FrameError, FrameFilter, FrameIo, Mac};
use openvia_core::sys::xdp::{XdpLink, XdpOptions};

mod veth_pair;
use veth_pair::Pair;

const ETHERTYPE: u16 = 0x88b5;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED {test}: not root (namespaces and XDP need it)");
        return true;
    }
    false
}

impl Pair {
    fn open(&self, i: usize, filter: FrameFilter) -> Result<XdpLink, FrameError> {
        self.open_with(i, filter, XdpOptions::default())
    }

    fn open_with(
        &self,
        i: usize,
        filter: FrameFilter,
        opts: XdpOptions,
    ) -> Result<XdpLink, FrameError> {
        let name = self.ifs[i].clone();
        self.within(i, move || XdpLink::open_with(&name, filter, &opts))
    }

    /// A UDP datagram from namespace `from` to the other and its echo
    /// back: ARP and IP through the kernel's stack on both interfaces.
    fn udp_round_trip(&self, from: usize) -> std::io::Result<()> {
        let (to, from_ip) = (1 - from, self.ips[from].clone());
        let to_ip = self.ips[to].clone();
        let server = self.within(to, move || std::net::UdpSocket::bind((to_ip.as_str(), 0)))?;
        let client = self.within(from, move || {
            std::net::UdpSocket::bind((from_ip.as_str(), 0))
        })?;
        let timeout = Some(Duration::from_secs(3));
        server.set_read_timeout(timeout)?;
        client.set_read_timeout(timeout)?;
        client.send_to(b"kernel traffic", server.local_addr()?)?;
        let mut buf = [0u8; 64];
        let (n, peer) = server.recv_from(&mut buf)?;
        assert_eq!(&buf[..n], b"kernel traffic");
        server.send_to(b"echo", peer)?;
        let n = client.recv(&mut buf)?;
        assert_eq!(&buf[..n], b"echo");
        Ok(())
    }
}

fn filter() -> FrameFilter {
    FrameFilter {
        ethertype: ETHERTYPE,
        dst_id: None,
    }
}

/// A payload that names its frame: `seq` in the first 4 bytes, then a
/// pattern that depends on both `seq` and the position.
fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut v = seq.to_be_bytes().to_vec();
    v.extend((4..len).map(|i| (i as u32).wrapping_mul(131).wrapping_add(seq * 7) as u8));
    v.truncate(len);
    v
}

/// Receives until `want` frames came (or 5 s passed): (source, payload).
fn receive(link: &mut XdpLink, want: usize) -> Vec<(Mac, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < want && Instant::now() < deadline {
        let n = link
            .recv(want - got.len(), &mut |src, p| got.push((src, p.to_vec())))
            .unwrap();
        if n == 0 {
            link.wait_readable(Duration::from_millis(50));
        }
    }
    got
}

/// Sends all `frames`, retrying while the ring is full.
fn send_all(link: &mut XdpLink, dst: Mac, frames: &[Vec<u8>]) {
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while sent < frames.len() {
        assert!(Instant::now() < deadline, "send stuck at {sent}");
        let batch: Vec<[&[u8]; 2]> = frames[sent..]
            .iter()
            .map(|f| {
                let (a, b) = f.split_at(f.len() / 3);
                [a, b]
            })
            .collect();
        let refs: Vec<&[&[u8]]> = batch.iter().map(|b| &b[..]).collect();
        sent += link.send(dst, &refs).unwrap();
    }
}

fn exchange(from: &mut XdpLink, to: &mut XdpLink, count: u32, len: usize) {
    let frames: Vec<Vec<u8>> = (0..count).map(|s| payload(s, len)).collect();
    send_all(from, to.local_mac(), &frames);
    let got = receive(to, frames.len());
    assert_eq!(got.len(), frames.len(), "frames lost");
    for (i, (src, p)) in got.iter().enumerate() {
        assert_eq!(*src, from.local_mac());
        // veth pads short frames to 60 bytes; the payload starts as sent.
        assert!(p.len() >= len, "frame {i} short: {}", p.len());
        assert_eq!(&p[..len], &frames[i][..], "frame {i} differs");
    }
}

#[test]
fn frames_cross_both_ways_with_every_byte() {
    if skip("frames_cross_both_ways_with_every_byte") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    let mut a = pair.open(0, filter()).expect("open a");
    let mut b = pair.open(1, filter()).expect("open b");
    // veth runs the program in its own receive path and copies into the UMEM.
    assert_eq!(a.mode(), XdpMode::Native);
    assert!(!a.zero_copy());
    assert_eq!(a.mtu(), 1500);
    assert_eq!(a.rx_queues(), Some(1));
    for len in [8, 46, 100, 1000, 1500] {
        exchange(&mut a, &mut b, 3, len);
        exchange(&mut b, &mut a, 3, len);
    }
}

#[test]
fn batches_of_hundreds_arrive_whole_and_in_order() {
    if skip("batches_of_hundreds_arrive_whole_and_in_order") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    let mut a = pair.open(0, filter()).expect("open a");
    let mut b = pair.open(1, filter()).expect("open b");
    for round in 0..3 {
        exchange(&mut a, &mut b, 400, 1400 - round * 300);
        exchange(&mut b, &mut a, 300, 64 + round * 500);
    }
    assert_eq!(a.dropped().unwrap(), 0);
    assert_eq!(b.dropped().unwrap(), 0);
}

#[test]
fn oversized_frames_are_refused() {
    if skip("oversized_frames_are_refused") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    let mut a = pair.open(0, filter()).expect("open a");
    let big = vec![0u8; a.mtu() + 1];
    let err = a.send([2; 6], &[&[&big]]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

/// The kernel's own traffic (ARP, IP) keeps flowing while the program is
/// attached, and the program is gone once the link is dropped.
#[test]
fn kernel_traffic_flows_while_attached_and_drop_detaches() {
    if skip("kernel_traffic_flows_while_attached_and_drop_detaches") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    let xdp_shown = |i: usize| {
        let out = Command::new("ip")
            .args(["-n", &pair.ns[i], "link", "show", &pair.ifs[i]])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    };
    let mut a = pair.open(0, filter()).expect("open a");
    let mut b = pair.open(1, filter()).expect("open b");
    assert!(xdp_shown(0) && xdp_shown(1));
    pair.udp_round_trip(0)
        .expect("UDP a -> b with XDP attached");
    pair.udp_round_trip(1)
        .expect("UDP b -> a with XDP attached");
    // Our frames still arrive after the kernel's.
    exchange(&mut a, &mut b, 10, 200);
    drop(a);
    drop(b);
    assert!(!xdp_shown(0) && !xdp_shown(1), "program left attached");
    // Reopening at once finds the interface and queue free.
    let _a = pair.open(0, filter()).expect("reopen a");
    let _b = pair.open(1, filter()).expect("reopen b");
}

#[test]
fn a_second_socket_on_the_queue_is_refused() {
    if skip("a_second_socket_on_the_queue_is_refused") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    let _a = pair.open(0, filter()).expect("open a");
    match pair.open(0, filter()) {
        Err(FrameError::Unsupported(why)) => assert_eq!(why, "queue busy"),
        Err(e) => panic!("second open: {e}"),
        Ok(_) => panic!("second open on a busy queue succeeded"),
    }
}

/// An AF_PACKET socket in namespace `i` that sends raw frames and sees
/// every frame the kernel's stack receives there.
struct RawSocket(std::os::fd::OwnedFd);

impl RawSocket {
    fn open(pair: &Pair, i: usize) -> RawSocket {
        let name = std::ffi::CString::new(pair.ifs[i].clone()).unwrap();
        pair.within(i, move || {
            // SAFETY: plain socket creation; the fd is owned right after.
            let fd = unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW | libc::SOCK_NONBLOCK,
                    (libc::ETH_P_ALL as u16).to_be() as i32,
                )
            };
            assert!(fd >= 0);
            // SAFETY: socket() returned a fresh descriptor.
            let fd = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
            // SAFETY: a valid C string.
            let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
            let raw = RawSocket(fd);
            // SAFETY: an all-zero sockaddr_ll is valid; filled below.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
            sll.sll_ifindex = ifindex;
            // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
            let r = unsafe {
                libc::bind(
                    raw.0.as_raw_fd(),
                    &sll as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(r, 0);
            raw
        })
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: `frame` is a valid buffer of its length.
        let n = unsafe { libc::send(self.0.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        assert_eq!(n, frame.len() as isize);
    }

    /// Every frame waiting (the kernel stack's view), without blocking.
    fn drain(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let mut buf = vec![0u8; 2048];
            // SAFETY: `buf` is writable for its length.
            let n =
                unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 {
                return out;
            }
            buf.truncate(n as usize);
            out.push(buf);
        }
    }
}

fn raw_frame(dst: Mac, src: Mac, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Only our EtherType reaches the socket; any other goes to the kernel.
#[test]
fn other_ethertypes_go_to_the_kernel() {
    if skip("other_ethertypes_go_to_the_kernel") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    let mut a = pair.open(0, filter()).expect("open a");
    let watch_a = RawSocket::open(&pair, 0);
    let raw_b = RawSocket::open(&pair, 1);
    let src: Mac = [0x02, 0, 0, 0, 0, 0xbb];
    for seq in 0..20u32 {
        let ethertype = if seq % 2 == 0 { ETHERTYPE } else { 0x88b6 };
        raw_b.send(&raw_frame(
            a.local_mac(),
            src,
            ethertype,
            &payload(seq, 100),
        ));
    }
    let got = receive(&mut a, 10);
    let seqs: Vec<u32> = got
        .iter()
        .map(|(_, p)| u32::from_be_bytes(p[..4].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, (0..20).step_by(2).collect::<Vec<u32>>());
    assert!(got.iter().all(|(s, _)| *s == src));
    // The kernel saw the others, and none of ours.
    let seen: Vec<(u16, u32)> = watch_a
        .drain()
        .iter()
        .filter(|f| f.len() >= 18 && f[6..12] == src)
        .map(|f| {
            (
                u16::from_be_bytes([f[12], f[13]]),
                u32::from_be_bytes(f[14..18].try_into().unwrap()),
            )
        })
        .collect();
    let expect: Vec<(u16, u32)> = (1..20).step_by(2).map(|s| (0x88b6, s)).collect();
    assert_eq!(seen, expect);
}

/// With a destination id in the filter, only frames carrying it arrive.
#[test]
fn the_destination_id_filter_selects_frames() {
    if skip("the_destination_id_filter_selects_frames") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    let mut a = pair
        .open(
            0,
            FrameFilter {
                ethertype: ETHERTYPE,
                dst_id: Some((6, 0x1234)),
            },
        )
        .expect("open a");
    let raw_b = RawSocket::open(&pair, 1);
    let src: Mac = [0x02, 0, 0, 0, 0, 0xbc];
    let mut expect = Vec::new();
    for seq in 0..30u32 {
        let mut p = payload(seq, 80);
        let id: u16 = [0x1234, 0x1235, 0x3412][seq as usize % 3];
        p[6..8].copy_from_slice(&id.to_be_bytes());
        if id == 0x1234 {
            expect.push(seq);
        }
        raw_b.send(&raw_frame(a.local_mac(), src, ETHERTYPE, &p));
    }
    let got = receive(&mut a, 30);
    let seqs: Vec<u32> = got
        .iter()
        .map(|(_, p)| u32::from_be_bytes(p[..4].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, expect);
}

/// Runs `XdpLink::open` in a forked child inside namespace 0 after
/// `restrict` lowered its privileges; returns the result as text.
fn open_restricted(pair: &Pair, restrict: fn()) -> String {
    let ns = std::fs::File::open(format!("/run/netns/{}", pair.ns[0])).unwrap();
    let ifname = pair.ifs[0].clone();
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only enters the namespace, lowers privileges,
    // opens the link and writes the outcome before _exit; no lock is held
    // across fork by this thread.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: a valid namespace descriptor, in the single-threaded child.
        unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        restrict();
        let text = match XdpLink::open(&ifname, filter()) {
            Ok(_) => "Ok".to_string(),
            Err(e) => format!("{e:?}"),
        };
        // SAFETY: writing our buffer to the pipe, then leaving at once.
        unsafe {
            libc::write(fds[1], text.as_ptr().cast(), text.len());
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    let mut status = 0;
    // SAFETY: reaping our own child; closing our read end.
    unsafe {
        libc::waitpid(pid, &mut status, 0);
        libc::close(fds[0]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;
const CAP_BPF: u32 = 39;

/// Keeps only `caps` (effective and permitted) on the calling thread.
fn keep_only(caps: &[u32]) {
    let mut words = [0u32; 6]; // two {effective, permitted, inheritable}
    for &c in caps {
        let w = (c / 32) as usize * 3;
        words[w] |= 1 << (c % 32);
        words[w + 1] |= 1 << (c % 32);
    }
    let mut hdr = [0x2008_0522u32, 0];
    // SAFETY: v3 capset reads the header and two data triples.
    let r = unsafe { libc::syscall(libc::SYS_capset, hdr.as_mut_ptr(), words.as_ptr()) };
    assert_eq!(r, 0);
}

#[test]
fn missing_capabilities_are_named() {
    if skip("missing_capabilities_are_named") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    let nobody = open_restricted(&pair, || {
        // SAFETY: dropping to an unprivileged user in the forked child.
        assert_eq!(unsafe { libc::setuid(65534) }, 0);
    });
    assert_eq!(nobody, "Permission(\"CAP_NET_RAW\")");
    let no_bpf = open_restricted(&pair, || keep_only(&[CAP_NET_RAW, CAP_NET_ADMIN]));
    assert_eq!(no_bpf, "Permission(\"CAP_BPF\")");
    let no_admin = open_restricted(&pair, || keep_only(&[CAP_NET_RAW, CAP_BPF]));
    assert_eq!(no_admin, "Permission(\"CAP_NET_ADMIN\")");
    let all = open_restricted(&pair, || keep_only(&[CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN]));
    assert_eq!(all, "Ok");
}

/// A link opened right after another closed gets the queue: the kernel
/// frees a closed socket's queue in deferred work, which open waits out.
#[test]
fn reopening_at_once_finds_the_queue_free() {
    if skip("reopening_at_once_finds_the_queue_free") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    for round in 0..20 {
        let link = pair.open(0, filter());
        assert!(link.is_ok(), "round {round}: {:?}", link.err());
    }
}

/// Forced into generic mode (the path for drivers without native XDP),
/// the link still carries our frames and passes the kernel's.
#[test]
fn generic_mode_carries_frames_and_kernel_traffic() {
    if skip("generic_mode_carries_frames_and_kernel_traffic") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    let generic = XdpOptions {
        queue: 0,
        mode: Some(XdpMode::Generic),
    };
    let mut a = pair.open_with(0, filter(), generic).expect("open a");
    let mut b = pair.open_with(1, filter(), generic).expect("open b");
    assert_eq!(a.mode(), XdpMode::Generic);
    exchange(&mut a, &mut b, 200, 1500);
    exchange(&mut b, &mut a, 200, 700);
    pair.udp_round_trip(0).expect("UDP in generic mode");
}

/// Above MTU 3506 veth refuses native mode for a program that is not
/// multi-buffer aware: the link falls back to generic mode and carries
/// the largest frame a UMEM frame holds.
#[test]
fn a_large_mtu_falls_back_to_generic_mode() {
    if skip("a_large_mtu_falls_back_to_generic_mode") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(4138, Some(1));
    let mut a = pair.open(0, filter()).expect("open a");
    let mut b = pair.open(1, filter()).expect("open b");
    assert_eq!(a.mode(), XdpMode::Generic);
    assert_eq!(a.mtu(), 4096 - 256 - 14);
    let largest = a.mtu();
    exchange(&mut a, &mut b, 50, largest);
    exchange(&mut b, &mut a, 50, 4000 - 256);
}

/// On a veth with two queues an AF_XDP sender (bound to queue 0) still
/// reaches the peer's queue 0, where its socket is.
#[test]
fn a_two_queue_veth_carries_xdp_to_xdp() {
    if skip("a_two_queue_veth_carries_xdp_to_xdp") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(2));
    let mut a = pair.open(0, filter()).expect("open a");
    let mut b = pair.open(1, filter()).expect("open b");
    assert_eq!(a.rx_queues(), Some(2));
    assert_eq!(a.mode(), XdpMode::Native);
    exchange(&mut a, &mut b, 300, 1000);
    exchange(&mut b, &mut a, 300, 1000);
}

/// An AF_XDP sender reaches a peer with no program, every byte intact.
#[test]
fn an_xdp_sender_reaches_a_plain_raw_socket() {
    if skip("an_xdp_sender_reaches_a_plain_raw_socket") {
        return;
    }
    let _g = serial();
    let pair = Pair::with(1500, Some(1));
    let mut a = pair.open(0, filter()).expect("open a");
    let raw_b = RawSocket::open(&pair, 1);
    let dst: Mac = [0x02, 0, 0, 0, 0, 0xcd];
    let frames: Vec<Vec<u8>> = (0..100).map(|s| payload(s, 64 + s as usize * 13)).collect();
    send_all(&mut a, dst, &frames);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = Vec::new();
    while seen.len() < frames.len() && Instant::now() < deadline {
        seen.extend(
            raw_b
                .drain()
                .into_iter()
                .filter(|f| f.len() >= 14 && f[..6] == dst),
        );
    }
    assert_eq!(seen.len(), frames.len());
    for (f, p) in seen.iter().zip(&frames) {
        assert_eq!(f[6..12], a.local_mac());
        assert_eq!(f[12..14], ETHERTYPE.to_be_bytes());
        assert_eq!(&f[14..], &p[..]);
    }
}
