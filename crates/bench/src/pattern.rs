//! The `--verify` byte pattern: every byte is a function of (message index,
//! offset in the message), so a receiver can check any fragment on its own,
//! a swapped, duplicated or stale message fails, and no two messages of a run
//! carry the same bytes.
//!
//! The pattern is built from 8-byte words (a SplitMix64 hash of the index
//! and the word number) so filling and checking run at memory speed; byte
//! `o` of message `i` is byte `o % 8` (little-endian) of word `o / 8`.

/// SplitMix64 finaliser: a cheap, well-mixed hash of one u64.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn word(index: u64, word_no: u64) -> u64 {
    mix(mix(index) ^ word_no)
}

/// Fills a whole message `index` with its pattern.
pub fn fill(index: u64, buf: &mut [u8]) {
    let mut chunks = buf.chunks_exact_mut(8);
    let mut k = 0u64;
    for chunk in &mut chunks {
        chunk.copy_from_slice(&word(index, k).to_le_bytes());
        k += 1;
    }
    let tail = chunks.into_remainder();
    let last = word(index, k).to_le_bytes();
    tail.copy_from_slice(&last[..tail.len()]);
}

/// The expected byte at `offset` of message `index`.
pub fn expected_byte(index: u64, offset: usize) -> u8 {
    word(index, (offset / 8) as u64).to_le_bytes()[offset % 8]
}

/// Offset (within the whole message) of the first byte of `bytes` that
/// differs from the pattern, where `bytes` starts at `offset` of message `index`.
pub fn first_mismatch(index: u64, offset: usize, bytes: &[u8]) -> Option<usize> {
    // Unaligned head byte by byte, then whole words, then the tail.
    let head = ((8 - offset % 8) % 8).min(bytes.len());
    for (i, &b) in bytes[..head].iter().enumerate() {
        if b != expected_byte(index, offset + i) {
            return Some(offset + i);
        }
    }
    let aligned = &bytes[head..];
    let base = offset + head;
    let mut chunks = aligned.chunks_exact(8);
    for (k, chunk) in (&mut chunks).enumerate() {
        let want = word(index, (base / 8 + k) as u64).to_le_bytes();
        if chunk != want {
            let at = chunk
                .iter()
                .zip(want.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Some(base + k * 8 + at);
        }
    }
    let tail_start = base + aligned.len() - chunks.remainder().len();
    for (i, &b) in chunks.remainder().iter().enumerate() {
        if b != expected_byte(index, tail_start + i) {
            return Some(tail_start + i);
        }
    }
    None
}

/// Tallies mismatches across a run (the receiver's `check` hook).
#[derive(Debug, Default)]
pub struct Verifier {
    pub mismatches: u64,
    /// (message index, offset) of the first corrupted byte.
    pub first: Option<(u64, u64)>,
}

impl Verifier {
    pub fn check(&mut self, index: u64, offset: usize, bytes: &[u8]) {
        if let Some(at) = first_mismatch(index, offset, bytes) {
            self.mismatches += 1;
            self.first.get_or_insert((index, at as u64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_message_verifies_whole_and_in_fragments() {
        for size in [1usize, 7, 8, 9, 64, 4095, 65536 + 3] {
            let mut buf = vec![0u8; size];
            fill(42, &mut buf);
            assert_eq!(first_mismatch(42, 0, &buf), None, "size {size}");
            // Any split into fragments at odd offsets checks too.
            let cut = size / 3 + 1;
            if cut < size {
                assert_eq!(first_mismatch(42, cut, &buf[cut..]), None);
                assert_eq!(first_mismatch(42, 0, &buf[..cut]), None);
            }
            for (o, &b) in buf.iter().enumerate().step_by(997) {
                assert_eq!(b, expected_byte(42, o));
            }
        }
    }

    #[test]
    fn corrupted_byte_is_found_at_its_offset() {
        let mut buf = vec![0u8; 10_000];
        fill(7, &mut buf);
        for at in [0usize, 5, 8, 4321, 9_999] {
            let mut bad = buf.clone();
            bad[at] ^= 0x01;
            assert_eq!(first_mismatch(7, 0, &bad), Some(at));
            assert_eq!(
                first_mismatch(7, 3, &bad[3..]),
                if at >= 3 { Some(at) } else { None }
            );
        }
    }

    #[test]
    fn wrong_message_index_is_detected() {
        let mut buf = vec![0u8; 256];
        fill(1, &mut buf);
        assert!(first_mismatch(2, 0, &buf).is_some());
        let mut v = Verifier::default();
        v.check(1, 0, &buf);
        assert_eq!(v.mismatches, 0);
        v.check(2, 0, &buf);
        assert_eq!(v.mismatches, 1);
        assert_eq!(v.first, Some((2, 0)));
    }
}
