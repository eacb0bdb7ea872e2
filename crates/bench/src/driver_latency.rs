//! The latency test: ping-pong of `size`-byte messages.
//!
//! The client sends a message and waits for the echo; each round trip is
//! timed on its own with the monotonic clock (`Instant`, i.e.
//! CLOCK_MONOTONIC through the vDSO), so the summary has a real median and
//! p99, not only a mean. Warm-up round trips (caches, page faults, TCP
//! slow paths, CPU frequency) run first and are discarded. Reading the clock
//! twice per round trip costs a few tens of nanoseconds; that is inside every
//! sample, for every transport alike.
//!
//! A ping of 8 bytes or more carries its round number in its first 8
//! bytes: an endpoint that can lose a datagram (the unreliable VIA level)
//! sends a ping again after a timeout and drops stale echoes instead of
//! stalling the ping-pong; such repeats are counted and reported.

use crate::error::{BenchError, Result};
use crate::session::{send_control, start_test, Reply, Request};
use crate::stats::{summarize_round_trips, LatencySummary};
use crate::transports::Endpoint;
use std::time::Instant;

/// Round trips when `--iters` is not given: many for small messages, fewer
/// as size grows (same bytes moved as 100000 x 4 KiB), never under 100.
pub fn default_iters(size: usize) -> u64 {
    const SMALL: u64 = 100_000;
    if size <= 4096 {
        SMALL
    } else {
        (SMALL * 4096 / size as u64).max(100)
    }
}

/// Warm-up when `--warmup` is not given: 10% of the measured count, at most 1000.
pub fn default_warmup(iters: u64) -> u64 {
    (iters / 10).clamp(1, 1000)
}

#[derive(Clone, Copy, Debug)]
pub struct LatencyParams {
    pub size: usize,
    pub iters: u64,
    pub warmup: u64,
}

/// What a latency run measured.
#[derive(Clone, Copy, Debug)]
pub struct LatencyOutcome {
    pub summary: LatencySummary,
    /// Round trips that sent their ping again after a lost datagram.
    pub repeated: u64,
}

/// Writes the round number into a ping long enough to carry it.
fn tag(ping: &mut [u8], round: u64) {
    if let Some(head) = ping.get_mut(..8) {
        head.copy_from_slice(&round.to_le_bytes());
    }
}

/// Client side: runs the test and summarises the measured round trips.
pub fn run(ep: &mut dyn Endpoint, p: &LatencyParams) -> Result<LatencyOutcome> {
    if p.iters == 0 {
        return Err(BenchError::Usage("--iters must be at least 1".into()));
    }
    start_test(
        ep,
        &Request::Latency {
            size: p.size as u64,
            rounds: p.warmup + p.iters,
        },
    )?;
    let mut ping = vec![0x5au8; p.size];
    let mut pong = vec![0u8; p.size];
    for round in 0..p.warmup {
        tag(&mut ping, round);
        ep.round_trip(round, &ping, &mut pong)?;
    }
    let repeated_in_warmup = ep.repeated_round_trips();
    let mut round_trips = Vec::with_capacity(p.iters as usize);
    for round in p.warmup..p.warmup + p.iters {
        tag(&mut ping, round);
        let start = Instant::now();
        let n = ep.round_trip(round, &ping, &mut pong)?;
        round_trips.push(start.elapsed().as_nanos() as u64);
        if n != p.size {
            return Err(BenchError::Protocol(format!(
                "echo of {n} bytes, sent {}",
                p.size
            )));
        }
    }
    Ok(LatencyOutcome {
        summary: summarize_round_trips(&mut round_trips).expect("iters >= 1"),
        repeated: ep.repeated_round_trips() - repeated_in_warmup,
    })
}

/// Server side: echoes `rounds` messages of `size` bytes.
pub fn respond(ep: &mut dyn Endpoint, size: usize, rounds: u64) -> Result<()> {
    send_control(ep, &Reply::Ready.encode())?;
    ep.echo_rounds(size, rounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_defaults_shrink_with_size() {
        assert_eq!(default_iters(8), 100_000);
        assert_eq!(default_iters(4096), 100_000);
        assert_eq!(default_iters(65536), 6250);
        assert_eq!(default_iters(1 << 20), 390);
        assert_eq!(default_iters(1 << 30), 100);
        assert_eq!(default_warmup(200), 20);
        assert_eq!(default_warmup(100_000), 1000);
        assert_eq!(default_warmup(5), 1);
    }
}
