//! Deterministic payloads: both ends derive the bytes of message `i` from
//! a seed, so the receiver can check every byte without the sender telling
//! it anything. A 64-bit FNV-1a checksum travels in the immediate data as
//! an independent second check.

/// One step of SplitMix64: a good 64-bit mix of its input.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small deterministic generator (sizes, seeds) for reproducible streams.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        splitmix64(self.0)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// The seed of message `index` of a stream seeded with `stream`.
pub fn message_seed(stream: u64, index: u64) -> u64 {
    splitmix64(stream ^ splitmix64(index))
}

/// Fills `buf` with the pattern of `seed` (eight bytes per mix step, so a
/// debug build stays quick on megabytes).
pub fn fill(buf: &mut [u8], seed: u64) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let w = splitmix64(seed ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
        chunk.copy_from_slice(&w.to_le_bytes()[..chunk.len()]);
    }
}

/// The pattern of `seed`, `len` bytes long.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(&mut v, seed);
    v
}

/// Index of the first byte of `buf` that differs from the pattern of `seed`.
pub fn first_mismatch(buf: &[u8], seed: u64) -> Option<usize> {
    let expect = pattern(buf.len(), seed);
    buf.iter().zip(&expect).position(|(a, b)| a != b)
}

/// 64-bit FNV-1a.
pub fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The FNV checksum folded to the 32 bits of a descriptor's immediate data.
pub fn checksum32(data: &[u8]) -> u32 {
    let h = fnv1a64(data);
    (h ^ (h >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_seed_dependent() {
        assert_eq!(pattern(100, 7), pattern(100, 7));
        assert_ne!(pattern(100, 7), pattern(100, 8));
        let mut b = pattern(33, 9);
        assert_eq!(first_mismatch(&b, 9), None);
        b[32] ^= 1;
        assert_eq!(first_mismatch(&b, 9), Some(32));
    }

    #[test]
    fn fnv_matches_known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
