//! 8-byte ping-pong across two network namespaces joined by veth: the
//! AF_XDP link against plain UDP sockets, in the same run, alternating.
//!
//! Each side is a thread pinned to its own CPU that busy-polls (no
//! blocking system call on receive). A round measures, in this order:
//! AF_XDP; UDP with the XDP programs still attached (the kernel's path as
//! it is while the Ethernet device runs); UDP with nothing attached (plain
//! veth). One-way latency is half the round trip. Needs root.
//!
//! Usage: xdp_pingpong [ROUNDS (5)] [ITERATIONS per round (20000)]

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use openvia_core::sys::frames::{FrameFilter, FrameIo};
use openvia_core::sys::xdp::XdpLink;

const PAYLOAD: usize = 8;
const WARMUP: usize = 2000;

#[path = "../tests/veth_pair/mod.rs"]
mod veth_pair;
use veth_pair::Pair;

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; we set one bit and apply it to
    // the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Two ends of a ping-pong: send 8 bytes, spin until 8 bytes come back.
trait End: Send {
    fn send(&mut self, msg: &[u8; PAYLOAD]);
    fn try_recv(&mut self, buf: &mut [u8; PAYLOAD]) -> bool;
}

struct Xdp(XdpLink, [u8; 6]);

impl End for Xdp {
    fn send(&mut self, msg: &[u8; PAYLOAD]) {
        while self.0.send(self.1, &[&[msg]]).expect("xdp send") == 0 {}
    }
    fn try_recv(&mut self, buf: &mut [u8; PAYLOAD]) -> bool {
        let mut got = false;
        self.0
            .recv(1, &mut |_, p| {
                buf.copy_from_slice(&p[..PAYLOAD]);
                got = true;
            })
            .expect("xdp recv");
        got
    }
}

struct Udp(UdpSocket);

impl End for Udp {
    fn send(&mut self, msg: &[u8; PAYLOAD]) {
        self.0.send(msg).expect("udp send");
    }
    fn try_recv(&mut self, buf: &mut [u8; PAYLOAD]) -> bool {
        matches!(self.0.recv(buf), Ok(PAYLOAD))
    }
}

/// Round trips in ns, after a warm-up; the responder echoes on CPU 1.
fn ping_pong(mut client: Box<dyn End>, mut server: Box<dyn End>, iters: usize) -> Vec<u64> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let echo = std::thread::spawn(move || {
        pin(1);
        let mut buf = [0u8; PAYLOAD];
        while !stop2.load(Ordering::Relaxed) {
            if server.try_recv(&mut buf) {
                server.send(&buf);
            }
        }
    });
    pin(0);
    let mut rtts = Vec::with_capacity(iters);
    let mut buf = [0u8; PAYLOAD];
    for i in 0..WARMUP + iters {
        let msg = (i as u64).to_be_bytes();
        let t = Instant::now();
        client.send(&msg);
        while !client.try_recv(&mut buf) {}
        let rtt = t.elapsed().as_nanos() as u64;
        assert_eq!(buf, msg, "echo out of step");
        if i >= WARMUP {
            rtts.push(rtt);
        }
    }
    stop.store(true, Ordering::Relaxed);
    echo.join().expect("echo thread");
    rtts
}

fn udp_pair(pair: &Pair) -> (Box<dyn End>, Box<dyn End>) {
    let (ip_a, ip_b) = (pair.ips[0].clone(), pair.ips[1].clone());
    let b = pair.within(1, move || {
        UdpSocket::bind((ip_b.as_str(), 0)).expect("bind b")
    });
    let a = pair.within(0, move || {
        UdpSocket::bind((ip_a.as_str(), 0)).expect("bind a")
    });
    a.connect(b.local_addr().unwrap()).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (Box::new(Udp(a)), Box::new(Udp(b)))
}

fn xdp_pair(pair: &Pair) -> (XdpLink, XdpLink) {
    let filter = FrameFilter {
        ethertype: 0x88b5,
        dst_id: None,
    };
    let (if_a, if_b) = (pair.ifs[0].clone(), pair.ifs[1].clone());
    let a = pair.within(0, move || XdpLink::open(&if_a, filter).expect("open a"));
    let b = pair.within(1, move || XdpLink::open(&if_b, filter).expect("open b"));
    (a, b)
}

/// (median, p99) of one-way latency (half the round trip), in µs.
fn one_way(rtts: &mut [u64]) -> (f64, f64) {
    rtts.sort_unstable();
    let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize] as f64 / 2000.0;
    (at(0.5), at(0.99))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let iters: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20000);
    // The kernel's default queue count: AF_XDP senders land on queue 0.
    let pair = Pair::with(1500, None);
    let kinds = ["AF_XDP", "UDP (XDP attached)", "UDP (plain veth)"];
    let mut all: Vec<Vec<u64>> = vec![Vec::new(); 3];
    println!(
        "round  {:>24}  {:>24}  {:>24}",
        kinds[0], kinds[1], kinds[2]
    );
    for round in 0..rounds {
        let (a, b) = xdp_pair(&pair);
        println!(
            "  (AF_XDP mode {:?}, zero-copy {})",
            a.mode(),
            a.zero_copy()
        );
        let (mac_a, mac_b) = (a.local_mac(), b.local_mac());
        let mut r = [
            ping_pong(Box::new(Xdp(a, mac_b)), Box::new(Xdp(b, mac_a)), iters),
            Vec::new(),
            Vec::new(),
        ];
        // The XDP links were moved into the ping-pong and are closed now;
        // attach the programs again (sockets unused) for the second case.
        let held = xdp_pair(&pair);
        let (ua, ub) = udp_pair(&pair);
        r[1] = ping_pong(ua, ub, iters);
        drop(held);
        let (ua, ub) = udp_pair(&pair);
        r[2] = ping_pong(ua, ub, iters);
        let mut line = format!("{round:>5}");
        for (k, rtts) in r.iter_mut().enumerate() {
            all[k].extend_from_slice(rtts);
            let (med, p99) = one_way(rtts);
            line += &format!("  {med:>10.2} / {p99:>8.2} µs");
        }
        println!("{line}");
    }
    println!(
        "all    (median / p99 one-way, {} samples each)",
        all[0].len()
    );
    let mut med = [0.0; 3];
    for (k, rtts) in all.iter_mut().enumerate() {
        let (m, p99) = one_way(rtts);
        med[k] = m;
        println!("  {:<20} {m:>8.2} / {p99:>8.2} µs", kinds[k]);
    }
    println!(
        "ratio AF_XDP / UDP (XDP attached) = {:.2}, AF_XDP / UDP (plain veth) = {:.2}",
        med[0] / med[1],
        med[0] / med[2]
    );
}
