//! Fault injection at the device's datagram layer, after smoltcp's
//! `FaultInjector`: each datagram a connection receives may be dropped,
//! duplicated, held back behind the next one (reordered) or have one bit
//! flipped (corrupted), each with its own rate, decided by a seeded PRNG
//! so that a run's faults can be replayed. Set by `OPENVIA_UDP_FAULTS`,
//! e.g. `drop=0.05,dup=0.01,reorder=0.01,corrupt=0.001,seed=7`.
//!
//! Faults act on the receive side, per datagram: a GRO buffer is split
//! into its datagrams first, so a drop takes one datagram, never a whole
//! GSO burst (as `nft` with segmentation offloads on did). Both ends of a
//! connection inject into what they receive, so both directions are
//! covered, as by an `nft` input rule in each namespace.
//!
//! Replay: the n-th connection a process makes draws from stream n of the
//! seed, so the same program with the same seed meets the same decisions
//! for the same sequence of datagrams (timing may still change which
//! datagrams those are, as on any real network).

use std::sync::atomic::{AtomicU64, Ordering};

/// Rates (each in 0..=1) and the seed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    pub drop: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub corrupt: f64,
    pub seed: u64,
}

impl FaultConfig {
    /// Parses `key=value` pairs separated by commas (keys `drop`, `dup`,
    /// `reorder`, `corrupt`, `seed`). Empty: no faults (`None`).
    pub fn parse(text: &str) -> Result<Option<Self>, &'static str> {
        let mut c = FaultConfig::default();
        let mut any = false;
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or("OPENVIA_UDP_FAULTS: expected key=value")?;
            let (key, value) = (key.trim(), value.trim());
            if key == "seed" {
                c.seed = value
                    .parse()
                    .map_err(|_| "OPENVIA_UDP_FAULTS: seed is not an integer")?;
                continue;
            }
            let rate: f64 = value
                .parse()
                .map_err(|_| "OPENVIA_UDP_FAULTS: rate is not a number")?;
            if !(0.0..=1.0).contains(&rate) {
                return Err("OPENVIA_UDP_FAULTS: rate outside 0..=1");
            }
            match key {
                "drop" => c.drop = rate,
                "dup" | "duplicate" => c.duplicate = rate,
                "reorder" => c.reorder = rate,
                "corrupt" => c.corrupt = rate,
                _ => return Err("OPENVIA_UDP_FAULTS: unknown key"),
            }
            any = true;
        }
        Ok(any.then_some(c))
    }
}

/// Process-wide counts of injected faults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
}

static DROPPED: AtomicU64 = AtomicU64::new(0);
static DUPLICATED: AtomicU64 = AtomicU64::new(0);
static REORDERED: AtomicU64 = AtomicU64::new(0);
static CORRUPTED: AtomicU64 = AtomicU64::new(0);
/// Connections made with faults so far: the next one's stream number.
static STREAMS: AtomicU64 = AtomicU64::new(0);

/// The faults injected in this process so far.
pub fn fault_counts() -> FaultCounts {
    FaultCounts {
        dropped: DROPPED.load(Ordering::Relaxed),
        duplicated: DUPLICATED.load(Ordering::Relaxed),
        reordered: REORDERED.load(Ordering::Relaxed),
        corrupted: CORRUPTED.load(Ordering::Relaxed),
    }
}

/// One connection's injector.
#[derive(Debug)]
pub struct Faults {
    config: FaultConfig,
    /// splitmix64 state.
    state: u64,
    /// A datagram held back, to be delivered after the next one.
    held: Option<Vec<u8>>,
    /// Room for a corrupted copy.
    scratch: Vec<u8>,
}

impl Faults {
    /// The injector for this process's next connection.
    pub fn next_stream(config: FaultConfig) -> Self {
        Self::new(config, STREAMS.fetch_add(1, Ordering::Relaxed))
    }

    pub fn new(config: FaultConfig, stream: u64) -> Self {
        Self {
            config,
            state: config.seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F),
            held: None,
            scratch: Vec::new(),
        }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p` (no draw when `p` is 0, so a rate left
    /// at 0 does not shift the others' sequence).
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// Passes one received datagram through the faults; `deliver` sees it
    /// zero, one or two times, perhaps altered, perhaps after a datagram
    /// held back earlier.
    pub fn receive(&mut self, datagram: &[u8], deliver: &mut impl FnMut(&[u8])) {
        if self.chance(self.config.drop) {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let copies = if self.chance(self.config.duplicate) {
            DUPLICATED.fetch_add(1, Ordering::Relaxed);
            2
        } else {
            1
        };
        let corrupt = self.chance(self.config.corrupt) && !datagram.is_empty();
        let reorder = self.chance(self.config.reorder);
        let bytes: &[u8] = if corrupt {
            CORRUPTED.fetch_add(1, Ordering::Relaxed);
            let bit = self.next() % (datagram.len() as u64 * 8);
            self.scratch.clear();
            self.scratch.extend_from_slice(datagram);
            self.scratch[(bit / 8) as usize] ^= 1 << (bit % 8);
            &self.scratch
        } else {
            datagram
        };
        if reorder && self.held.is_none() {
            REORDERED.fetch_add(1, Ordering::Relaxed);
            self.held = Some(bytes.to_vec());
            if copies == 2 {
                deliver(bytes);
            }
            return;
        }
        for _ in 0..copies {
            deliver(bytes);
        }
        if let Some(late) = self.held.take() {
            deliver(&late);
        }
    }

    /// End of a receive batch: a datagram still held back goes now (it
    /// was overtaken by the rest of the batch, or by nothing), so the
    /// injector never holds one while the program waits.
    pub fn end_batch(&mut self, deliver: &mut impl FnMut(&[u8])) {
        if let Some(late) = self.held.take() {
            deliver(&late);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(config: FaultConfig, n: u32) -> Vec<Vec<u8>> {
        let mut f = Faults::new(config, 3);
        let mut out = Vec::new();
        for i in 0..n {
            f.receive(&i.to_be_bytes(), &mut |d| out.push(d.to_vec()));
        }
        f.end_batch(&mut |d| out.push(d.to_vec()));
        out
    }

    #[test]
    fn parses_rates_and_seed() {
        let c = FaultConfig::parse("drop=0.05, dup=0.01,reorder=0.02,corrupt=0.001,seed=7")
            .unwrap()
            .unwrap();
        assert_eq!(
            c,
            FaultConfig {
                drop: 0.05,
                duplicate: 0.01,
                reorder: 0.02,
                corrupt: 0.001,
                seed: 7
            }
        );
        assert_eq!(FaultConfig::parse(""), Ok(None));
        assert!(FaultConfig::parse("drop=2").is_err());
        assert!(FaultConfig::parse("loss=0.1").is_err());
        assert!(FaultConfig::parse("drop").is_err());
    }

    #[test]
    fn rates_are_kept_and_runs_replay() {
        let c = FaultConfig {
            drop: 0.1,
            duplicate: 0.05,
            reorder: 0.05,
            corrupt: 0.02,
            seed: 11,
        };
        let n = 20_000;
        let a = run(c, n);
        assert_eq!(a, run(c, n), "same seed and stream: same faults");
        assert_ne!(a, run(FaultConfig { seed: 12, ..c }, n));
        let intact = |d: &Vec<u8>| d.len() == 4 && u32::from_be_bytes([d[0], d[1], d[2], d[3]]) < n;
        let mut seen = std::collections::HashMap::new();
        let mut corrupted = 0;
        for d in &a {
            let v = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
            if intact(d) {
                *seen.entry(v).or_insert(0u32) += 1;
            } else {
                corrupted += 1;
            }
        }
        let delivered = seen.len() as f64 / n as f64;
        assert!((0.86..0.94).contains(&delivered), "delivered {delivered}");
        let dups = seen.values().filter(|&&c| c == 2).count() as f64 / n as f64;
        assert!((0.03..0.07).contains(&dups), "duplicated {dups}");
        // A flipped high bit makes a value out of range: most corruptions show.
        assert!(corrupted > 0);
        let out_of_order = a
            .windows(2)
            .filter(|w| intact(&w[0]) && intact(&w[1]) && w[1] < w[0])
            .count();
        assert!(out_of_order > n as usize / 40, "reordered {out_of_order}");
    }

    #[test]
    fn nothing_changes_without_rates() {
        let out = run(FaultConfig::default(), 100);
        let want: Vec<Vec<u8>> = (0..100u32).map(|i| i.to_be_bytes().to_vec()).collect();
        assert_eq!(out, want);
    }
}
