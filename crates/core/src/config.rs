//! Tunables, read once from the environment so that a benchmark or a test
//! can change them without recompiling. Every setting has a default that was
//! measured on the project's machine; every setting is listed in
//! [`crate::settings`] (docs/settings.md).

use std::sync::OnceLock;

/// The largest `OPENVIA_MAX_VI` taken (VI ids and notice keys stay small).
pub const MAX_VI_LIMIT: usize = 1 << 20;

/// Settings of the shared-memory device and the waiting policy.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long a Wait spins (polling memory) before it blocks, in ns.
    /// `OPENVIA_SPIN_NS`; 0 blocks at once.
    pub spin_ns: u64,
    /// Messages up to this many bytes travel inside the ring (two copies);
    /// larger ones use one copy (CMA) or the chunked bounce path.
    /// `OPENVIA_INLINE_MAX`.
    pub inline_max: usize,
    /// Bytes of each ring direction (power of two). `OPENVIA_RING_BYTES`.
    pub ring_bytes: usize,
    /// Largest chunk of a bounced message in one record. `OPENVIA_CHUNK_BYTES`.
    pub chunk_bytes: usize,
    /// Allow cross-memory attach. `OPENVIA_CMA=0` forces the bounce path.
    pub cma: bool,
    /// Messages of at least this many bytes take one CMA copy; smaller ones
    /// above `inline_max` stream through the ring in chunks, both sides
    /// copying at once (cheaper than a system call per message while the
    /// data fits in cache). `OPENVIA_CMA_MIN`.
    pub cma_min: usize,
    /// A CMA message is copied by both processes at once in pieces of this
    /// many bytes (see `devices::shm::shared_copy`); 0: the receiver
    /// copies alone. `OPENVIA_CMA_PIECE`.
    pub cma_piece: usize,
    /// A message streaming through the ring slower than this (GB/s) counts
    /// as slow; after two in a row the sender sends larger messages by CMA
    /// until the ring is fast again (see `devices::shm::shared_copy`).
    /// 0: never. `OPENVIA_RING_SLOW_GBPS`.
    pub ring_slow_gbps: u64,
    /// While the application is active, the progress thread looks in this
    /// often (µs) instead of asking peers to wake it. `OPENVIA_PROGRESS_US`.
    pub progress_interval_us: u64,
    /// Longest single sleep of a Wait, in ms (a safety net against a lost
    /// wake-up). `OPENVIA_BLOCK_CAP_MS`.
    pub block_cap_ms: u64,
    /// Most VIs one NIC may have at once. `OPENVIA_MAX_VI`.
    pub max_vi: usize,
    /// Without an error callback, also report lost connections (a peer that
    /// went away) on stderr. `OPENVIA_DEBUG=1`.
    pub debug: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            spin_ns: 50_000,
            inline_max: 16 * 1024,
            ring_bytes: 1 << 20,
            chunk_bytes: 16 * 1024,
            cma: true,
            cma_min: 1024 * 1024,
            cma_piece: 32 * 1024,
            ring_slow_gbps: 6,
            progress_interval_us: 20_000,
            block_cap_ms: 50,
            max_vi: 4096,
            debug: false,
        }
    }
}

/// A count with an optional K or M suffix (KiB, MiB), as the settings
/// take them.
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mul) = match v.char_indices().last() {
        Some((i, 'K' | 'k')) => (&v[..i], 1024),
        Some((i, 'M' | 'm')) => (&v[..i], 1024 * 1024),
        _ => (v, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mul)
}

fn env_u64(name: &str) -> Option<u64> {
    parse_size(&std::env::var(name).ok()?)
}

impl Config {
    /// Defaults overridden by the OPENVIA_* environment variables.
    pub fn from_env() -> Self {
        let mut c = Self::default();
        if let Some(v) = env_u64("OPENVIA_SPIN_NS") {
            c.spin_ns = v;
        }
        if let Some(v) = env_u64("OPENVIA_INLINE_MAX") {
            c.inline_max = v as usize;
        }
        if let Some(v) = env_u64("OPENVIA_RING_BYTES") {
            c.ring_bytes = (v as usize).next_power_of_two().clamp(64 * 1024, 1 << 28);
        }
        if let Some(v) = env_u64("OPENVIA_CHUNK_BYTES") {
            c.chunk_bytes = (v as usize).max(4096);
        }
        if let Some(v) = env_u64("OPENVIA_CMA_MIN") {
            c.cma_min = v as usize;
        }
        if let Some(v) = env_u64("OPENVIA_CMA_PIECE") {
            // Below a few pages a piece costs more in system calls than
            // the second copier gains.
            c.cma_piece = if v == 0 {
                0
            } else {
                (v as usize).max(16 * 1024)
            };
        }
        if let Some(v) = env_u64("OPENVIA_RING_SLOW_GBPS") {
            c.ring_slow_gbps = v;
        }
        if let Some(v) = env_u64("OPENVIA_CMA") {
            c.cma = v != 0;
        }
        if let Some(v) = env_u64("OPENVIA_BLOCK_CAP_MS") {
            c.block_cap_ms = v.max(1);
        }
        if let Some(v) = env_u64("OPENVIA_MAX_VI") {
            c.max_vi = (v as usize).clamp(1, MAX_VI_LIMIT);
        }
        if let Some(v) = env_u64("OPENVIA_DEBUG") {
            c.debug = v != 0;
        }
        if let Some(v) = env_u64("OPENVIA_PROGRESS_US") {
            c.progress_interval_us = v.max(10);
        }
        // A record must always fit in a quarter ring, so the ring never
        // deadlocks on one oversized record.
        c.chunk_bytes = c.chunk_bytes.min(c.ring_bytes / 4);
        c.inline_max = c.inline_max.min(c.chunk_bytes);
        c
    }

    /// The process-wide settings.
    pub fn global() -> &'static Config {
        static C: OnceLock<Config> = OnceLock::new();
        C.get_or_init(Config::from_env)
    }
}
