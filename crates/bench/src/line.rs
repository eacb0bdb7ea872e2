//! `viabench line`: the round trip of one cache line between two CPUs.
//!
//! Two threads, one pinned to each CPU, hand a counter back and forth
//! through two cache lines, spinning. What that costs is the floor under
//! any shared-memory ping-pong between those CPUs, and on a virtual
//! machine it is not fixed: the host may run the two vCPUs on cores that
//! share a cache or on cores that do not, and move them while we run. On
//! the 2-vCPU development box it was ~100 ns or ~500 ns, run by run, and
//! every one-host latency figure (openvia's, viarun's, UCX's) moved with
//! it; so the benchmarks print it beside their figures.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::cli::LineArgs;
use crate::error::Result;
use crate::pinning::pin_current_thread;

/// A counter alone on its cache lines (two: adjacent-line prefetch).
#[repr(align(128))]
struct Line(AtomicU64);

/// Median ns per round trip over `batches` batches of `per_batch`.
pub fn measure(cpus: (usize, usize), batches: usize, per_batch: u64) -> Result<f64> {
    let (ping, pong) = (Line(AtomicU64::new(0)), Line(AtomicU64::new(0)));
    let total = batches as u64 * per_batch;
    let mut times = std::thread::scope(|s| -> Result<Vec<f64>> {
        let peer = s.spawn(|| -> Result<()> {
            pin_current_thread(cpus.1)?;
            for i in 1..=total {
                while ping.0.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                pong.0.store(i, Ordering::Release);
            }
            Ok(())
        });
        pin_current_thread(cpus.0)?;
        let mut times = Vec::with_capacity(batches);
        let mut i = 0u64;
        for _ in 0..batches {
            let start = Instant::now();
            for _ in 0..per_batch {
                i += 1;
                ping.0.store(i, Ordering::Release);
                while pong.0.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
            }
            times.push(start.elapsed().as_nanos() as f64 / per_batch as f64);
        }
        peer.join().expect("line peer")?;
        Ok(times)
    })?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

pub fn run(args: &LineArgs) -> Result<()> {
    let ns = measure((args.cpus.0, args.cpus.1), args.batches, args.per_batch)?;
    if args.json {
        println!(
            "{{\"test\":\"line\",\"cpus\":[{},{}],\"round_trip_ns\":{ns:.1}}}",
            args.cpus.0, args.cpus.1
        );
    } else {
        println!(
            "cache line round trip CPU {} <-> CPU {}: {ns:.1} ns",
            args.cpus.0, args.cpus.1
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_takes_some_time_and_ends() {
        let cpus = crate::pinning::allowed_cpus().expect("cpus");
        let pair = (cpus[0], *cpus.last().expect("a cpu"));
        let ns = measure(pair, 3, 1000).expect("measured");
        assert!(ns > 0.0 && ns < 1e6, "{ns}");
    }
}
