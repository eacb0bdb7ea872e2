//! The network device under injected faults (`OPENVIA_UDP_FAULTS`), on
//! loopback in one process: per-datagram drop, duplication, reordering and
//! corruption on every connection's receive side. Reliable VIs must deliver
//! every byte, in order, once, and complete each send only when the peer
//! holds it; 20 % drop must not stall a transfer.
//!
//! One test per binary run sets the faults for the whole process (they are
//! read when a NIC opens), so every test here runs under the same faults.

#[path = "../../../crates/core/tests/scenarios/mod.rs"]
mod scenarios;

use std::time::{Duration, Instant};

use openvia_core::descriptor::status;
use openvia_core::devices::rum::fault::fault_counts;
use openvia_core::devices::rum::stats::stats;
use openvia_core::vi::reliability;
use scenarios::{pair, set_desc, UDP};

/// 20 % of datagrams dropped, and some duplicated and reordered. (No
/// corruption: injected after the kernel's checksum, a flipped payload bit
/// is caught only by a cluster key's per-packet MAC, not tested here.)
const FAULTS: &str = "drop=0.2,dup=0.02,reorder=0.02,seed=19";

fn fault_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    scenarios::udp_env();
    ONCE.call_once(|| {
        std::env::set_var("OPENVIA_UDP_FAULTS", FAULTS);
        // Ethernet-sized datagrams, not loopback's 64 KiB ones.
        std::env::set_var("OPENVIA_UDP_MTU", "1500");
        // The handshake crosses the same faults: leave it time.
        std::env::set_var("OPENVIA_UDP_DEAD_MS", "5000");
    });
}

fn byte(msg: usize, i: usize) -> u8 {
    (i as u8)
        .wrapping_mul(13)
        .wrapping_add((msg as u8).wrapping_mul(101))
}

/// Streams `count` messages of `size` bytes a→b, a window of `window` at a
/// time, checks every byte and that each send completed without error.
fn stream(rel: u16, disc: &str, size: usize, count: usize, window: usize) -> Duration {
    fault_env();
    let slot = size.next_multiple_of(4096);
    let p = pair(UDP, rel, disc, 8192 + slot * window);
    let start = Instant::now();
    let limit = Some(Duration::from_secs(60));
    let mut next_send = 0;
    let mut next_recv = 0;
    // Receives for the first window.
    let post_recv = |m: usize| {
        let w = m % window;
        let rd = p.mb.desc(w);
        set_desc(
            rd,
            0,
            &[(p.mb.data(8192 + w * slot) as u64, p.mb.handle, size as u32)],
            0,
        );
        p.b.post_recv(rd, p.mb.handle).unwrap();
    };
    for m in 0..window.min(count) {
        post_recv(m);
    }
    while next_recv < count {
        while next_send < count && next_send < next_recv + window {
            let w = next_send % window;
            let src = p.ma.data(8192 + w * slot);
            for i in 0..size {
                // SAFETY: inside the arena; this slot's last send completed.
                unsafe { *src.add(i) = byte(next_send, i) };
            }
            let sd = p.ma.desc(w);
            set_desc(sd, 0, &[(src as u64, p.ma.handle, size as u32)], 0);
            p.a.post_send(sd, p.ma.handle).unwrap();
            next_send += 1;
        }
        let rd = p.b.recv_wait(limit).unwrap().0;
        let w = next_recv % window;
        assert_eq!(rd, p.mb.desc(w));
        // SAFETY: the descriptor completed; its buffer is inside the arena.
        unsafe {
            assert_eq!(
                (*rd).cs.status & status::ERROR_MASK,
                0,
                "message {next_recv}"
            );
            assert_eq!((*rd).cs.length as usize, size);
            let dst = p.mb.data(8192 + w * slot);
            for i in 0..size {
                assert_eq!(
                    *dst.add(i),
                    byte(next_recv, i),
                    "message {next_recv} byte {i}"
                );
            }
        }
        // The send of this message completed, and only with success.
        let sd = p.a.send_wait(limit).unwrap().0;
        // SAFETY: a completed descriptor of ours.
        unsafe { assert_eq!((*sd).cs.status & status::ERROR_MASK, 0) };
        next_recv += 1;
        if next_recv + window <= count {
            post_recv(next_recv + window - 1);
        }
    }
    let took = start.elapsed();
    // Closing adds the connection's counters to the device's.
    p.b.disconnect().unwrap();
    took
}

/// 16 MiB at each reliable level: well inside the bar of 64 MiB
/// in 60 s (before the protocol's SACK and RACK fixes it did not finish
/// in minutes).
fn sixteen_mib(rel: u16, disc: &str) {
    let before = fault_counts().dropped;
    let placed_before = stats().segments_placed;
    let took = stream(rel, disc, 256 << 10, 64, 8);
    let f = fault_counts();
    assert!(f.dropped - before > 1000, "{f:?}");
    // Even at 20 % drop, segments that arrive in order are placed in the
    // posted receive as they come (and every byte was checked above).
    let placed = stats().segments_placed - placed_before;
    assert!(placed > 1000, "{placed} segments placed on arrival");
    assert!(f.duplicated > 0 && f.reordered > 0, "{f:?}");
    assert!(took < Duration::from_secs(30), "16 MiB took {took:?}");
}

#[test]
fn reliable_delivery_survives_twenty_percent_faults() {
    sixteen_mib(reliability::RELIABLE_DELIVERY, "f-rd");
}

#[test]
fn reliable_reception_survives_twenty_percent_faults() {
    sixteen_mib(reliability::RELIABLE_RECEPTION, "f-rr");
}
