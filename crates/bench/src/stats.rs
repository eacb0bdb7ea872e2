//! Latency statistics over the measured round trips.
//!
//! Samples are round-trip times in nanoseconds; the summary reports one-way
//! latency (round trip / 2), as ping-pong benchmarks conventionally do. The
//! percentile is nearest-rank (the smallest sample with at least p% of the
//! samples at or below it), so it is always a value that was measured.

/// One-way latency summary in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencySummary {
    pub samples: usize,
    pub min_ns: f64,
    pub median_ns: f64,
    pub p99_ns: f64,
    pub mean_ns: f64,
}

/// Median of sorted samples (mean of the two middle ones for an even count).
pub fn median(sorted: &[u64]) -> f64 {
    let n = sorted.len();
    assert!(n > 0, "median of no samples");
    if n % 2 == 1 {
        sorted[n / 2] as f64
    } else {
        (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0
    }
}

/// Nearest-rank percentile `p` (0 < p <= 100) of sorted samples.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    assert!(!sorted.is_empty(), "percentile of no samples");
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summarises round-trip samples as one-way latency; `None` for no samples.
pub fn summarize_round_trips(round_trips_ns: &mut [u64]) -> Option<LatencySummary> {
    if round_trips_ns.is_empty() {
        return None;
    }
    round_trips_ns.sort_unstable();
    let n = round_trips_ns.len();
    let sum: u128 = round_trips_ns.iter().map(|&x| u128::from(x)).sum();
    Some(LatencySummary {
        samples: n,
        min_ns: round_trips_ns[0] as f64 / 2.0,
        median_ns: median(round_trips_ns) / 2.0,
        p99_ns: percentile(round_trips_ns, 99.0) as f64 / 2.0,
        mean_ns: sum as f64 / n as f64 / 2.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median(&[1, 2, 3]), 2.0);
        assert_eq!(median(&[1, 2, 3, 10]), 2.5);
        assert_eq!(median(&[5]), 5.0);
    }

    #[test]
    fn p99_nearest_rank() {
        let data: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&data, 99.0), 99);
        assert_eq!(percentile(&data, 50.0), 50);
        assert_eq!(percentile(&data, 100.0), 100);
        let data: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&data, 99.0), 990);
        assert_eq!(percentile(&[7], 99.0), 7);
    }

    #[test]
    fn summary_is_one_way_and_order_independent() {
        // 1..=200 shuffled by a fixed stride: the summary must not care.
        let mut rtts: Vec<u64> = (0..200u64).map(|i| (i * 37) % 200 + 1).collect();
        let s = summarize_round_trips(&mut rtts).unwrap();
        assert_eq!(s.samples, 200);
        assert_eq!(s.min_ns, 0.5);
        assert_eq!(s.median_ns, 100.5 / 2.0);
        assert_eq!(s.p99_ns, 198.0 / 2.0);
        assert_eq!(s.mean_ns, 100.5 / 2.0);
        assert!(summarize_round_trips(&mut []).is_none());
    }

    #[test]
    fn outlier_moves_mean_and_p99_not_median() {
        let mut rtts = vec![100u64; 99];
        rtts.push(1_000_000);
        let s = summarize_round_trips(&mut rtts).unwrap();
        assert_eq!(s.median_ns, 50.0);
        assert_eq!(s.p99_ns, 50.0);
        assert!(s.mean_ns > 5000.0);
    }
}
