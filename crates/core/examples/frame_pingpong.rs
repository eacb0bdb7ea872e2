//! Measurement, not a test: 8-byte ping-pong between two network
//! namespaces joined by veth, one thread in each, pinned to CPUs 0 and 1,
//! both busy-polling, with AF_PACKET frames (recv, TPACKET_V2 and V3 rings)
//! and plain UDP sockets in the same run, alternated over rounds. Prints
//! the median and p99 one-way latency (half the round trip) per way and
//! round, then the medians' ratio frames/UDP: whether bypassing IP wins
//! on this machine. Needs root; cleans up its namespaces on exit.
//!
//! `cargo run --release -p openvia-core --example frame_pingpong [rounds] [iters]`

#[path = "../tests/ethw_netns/mod.rs"]
mod ethw_netns;

use std::net::UdpSocket;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use openvia_core::sys::frames::{FrameFilter, FrameIo, Mac};
use openvia_core::sys::packet::{PacketLink, RxPath};

/// One end of a ping-pong: send 8 bytes, poll for 8 bytes.
trait End: Send {
    fn send(&mut self, msg: &[u8; 8]);
    fn try_recv(&mut self, msg: &mut [u8; 8]) -> bool;
}

struct Frames {
    link: PacketLink,
    peer: Mac,
}

impl End for Frames {
    fn send(&mut self, msg: &[u8; 8]) {
        let parts: [&[u8]; 1] = [msg];
        while self.link.send(self.peer, &[&parts]).expect("send") == 0 {}
    }
    fn try_recv(&mut self, msg: &mut [u8; 8]) -> bool {
        let mut got = false;
        self.link
            .recv(1, &mut |_, p| {
                msg.copy_from_slice(&p[..8]);
                got = true;
            })
            .expect("recv");
        got
    }
}

struct Udp(UdpSocket);

impl End for Udp {
    fn send(&mut self, msg: &[u8; 8]) {
        self.0.send(msg).expect("udp send");
    }
    fn try_recv(&mut self, msg: &mut [u8; 8]) -> bool {
        self.0.recv(msg).is_ok()
    }
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays inside it, and
    // sched_setaffinity(0) affects only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

type Opener = dyn Fn(bool) -> Box<dyn End> + Send + Sync;

/// Runs `iters` round trips (after 10 % warm-up) and returns the one-way
/// latencies in ns, sorted.
fn pingpong(pair: &ethw_netns::EthwPair, iters: usize, open: Arc<Opener>) -> Vec<u64> {
    let warm = iters / 10 + 10;
    let ready = Arc::new(Barrier::new(2));
    let (ns_b, open_b, ready_b) = (pair.b.clone(), open.clone(), ready.clone());
    let echo = std::thread::spawn(move || {
        ethw_netns::enter(&ns_b);
        pin(1);
        let mut end = open_b(false);
        ready_b.wait();
        let mut msg = [0u8; 8];
        for _ in 0..warm + iters {
            while !end.try_recv(&mut msg) {}
            end.send(&msg);
        }
    });
    let ns_a = pair.a.clone();
    let mut lat = std::thread::spawn(move || {
        ethw_netns::enter(&ns_a);
        pin(0);
        let mut end = open(true);
        ready.wait();
        let mut lat = Vec::with_capacity(iters);
        let mut back = [0u8; 8];
        for i in 0..(warm + iters) as u64 {
            let t = Instant::now();
            end.send(&i.to_be_bytes());
            while !end.try_recv(&mut back) {}
            assert_eq!(back, i.to_be_bytes(), "echo out of order");
            if i >= warm as u64 {
                lat.push(t.elapsed().as_nanos() as u64 / 2);
            }
        }
        lat
    })
    .join()
    .expect("pinger");
    echo.join().expect("echo");
    lat.sort_unstable();
    lat
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn frames(rx: RxPath, pair: &ethw_netns::EthwPair, macs: (Mac, Mac)) -> Arc<Opener> {
    let (if_a, if_b) = (pair.if_a.clone(), pair.if_b.clone());
    Arc::new(move |is_a: bool| -> Box<dyn End> {
        let filter = FrameFilter {
            ethertype: 0x88B5,
            dst_id: None,
        };
        let (ifname, peer) = if is_a {
            (&if_a, macs.1)
        } else {
            (&if_b, macs.0)
        };
        let link = PacketLink::open(ifname, filter, rx).expect("AF_PACKET");
        Box::new(Frames { link, peer })
    })
}

fn udp(pair: &ethw_netns::EthwPair) -> Arc<Opener> {
    let (ip_a, ip_b) = (pair.ip_a, pair.ip_b);
    Arc::new(move |is_a: bool| -> Box<dyn End> {
        let (me, peer) = if is_a { (ip_a, ip_b) } else { (ip_b, ip_a) };
        let s = UdpSocket::bind((me, 40_000)).expect("udp bind");
        s.connect((peer, 40_000)).expect("udp connect");
        s.set_nonblocking(true).unwrap();
        Box::new(Udp(s))
    })
}

fn main() {
    if let Some(why) = ethw_netns::unavailable() {
        eprintln!("frame_pingpong needs root and `ip`: {why}");
        std::process::exit(2);
    }
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("rounds"));
    let iters: usize = args.next().map_or(20_000, |a| a.parse().expect("iters"));
    let pair = ethw_netns::EthwPair::new();
    let mac = |ns: &str, ifname: &str| {
        let ifname = ifname.to_string();
        ethw_netns::in_ns(ns, move || {
            openvia_core::sys::packet::interface_info(&ifname)
                .expect("interface")
                .mac
        })
    };
    let macs = (mac(&pair.a, &pair.if_a), mac(&pair.b, &pair.if_b));
    // Resolve ARP before timing UDP (the frames need no resolution).
    pingpong(&pair, 10, udp(&pair));
    println!("way          round  median_ns  p99_ns  (one-way = RTT/2)");
    let mut medians: [Vec<u64>; 4] = Default::default();
    let names = ["af_packet", "af_packet_v2", "af_packet_v3", "udp"];
    for round in 0..rounds {
        for (w, name) in names.iter().enumerate() {
            // The ring hands blocks over on a 1 ms timer: few round trips.
            let (n, open) = match w {
                0 => (iters, frames(RxPath::Copy, &pair, macs)),
                1 => (iters, frames(RxPath::FrameRing, &pair, macs)),
                2 => ((iters / 50).max(50), frames(RxPath::BlockRing, &pair, macs)),
                _ => (iters, udp(&pair)),
            };
            let lat = pingpong(&pair, n, open);
            let (m, p99) = (pct(&lat, 0.5), pct(&lat, 0.99));
            println!("{name:<12} {round:>5} {m:>10} {p99:>7}  n={n}");
            medians[w].push(m);
        }
    }
    for m in &mut medians {
        m.sort_unstable();
    }
    let med = |w: usize| medians[w][medians[w].len() / 2];
    println!(
        "median of medians (ns): af_packet {} (recv), af_packet_v2 {} (frame ring), \
         af_packet_v3 {} (block ring), udp {}; ratios to udp: {:.2} {:.2} {:.2}",
        med(0),
        med(1),
        med(2),
        med(3),
        med(0) as f64 / med(3) as f64,
        med(1) as f64 / med(3) as f64,
        med(2) as f64 / med(3) as f64,
    );
}
