//! A fixed corpus of mutated datagrams run through the parser on stable
//! Rust, so CI exercises what the fuzz targets explore: bit flips, byte
//! overwrites, insertions, deletions and splices of valid packets. Every
//! input must either be rejected with a typed error or parse into a `Repr`
//! that re-emits to the very same bytes.

use super::tests::{samples, SplitMix};
use super::*;

fn mutate(rng: &mut SplitMix, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let pos = if v.is_empty() {
            0
        } else {
            rng.below(v.len() as u64) as usize
        };
        match rng.below(6) {
            0 if !v.is_empty() => v[pos] ^= 1 << rng.below(8),
            1 if !v.is_empty() => v[pos] = rng.next() as u8,
            2 => v.insert(pos.min(v.len()), rng.next() as u8),
            3 if !v.is_empty() => {
                v.remove(pos);
            }
            4 => {
                let cut = rng.below(other.len() as u64 + 1) as usize;
                v.truncate(pos);
                v.extend_from_slice(&other[cut..]);
            }
            _ => {
                // Interesting values in length-ish positions.
                let vals = [0u8, 1, 0x7F, 0x80, 0xFF];
                if !v.is_empty() {
                    v[pos] = vals[rng.below(vals.len() as u64) as usize];
                }
            }
        }
    }
    v
}

#[test]
fn mutated_corpus_parses_or_rejects_consistently() {
    let corpus = samples();
    let mut rng = SplitMix(0xC0FFEE);
    let (mut ok, mut rejected) = (0u32, 0u32);
    for _ in 0..50_000 {
        let a = &corpus[rng.below(corpus.len() as u64) as usize];
        let b = &corpus[rng.below(corpus.len() as u64) as usize];
        let input = mutate(&mut rng, a, b);
        match Repr::parse(&input) {
            Ok(r) => {
                ok += 1;
                let mut out = vec![0u8; r.buffer_len()];
                assert_eq!(r.emit(&mut out), Ok(input.len()));
                let p = Packet::new_checked(&input[..]).unwrap();
                // `Repr` does not carry the authenticator: emit zeroes it.
                let mut expect = input.clone();
                if let Some(range) = p.authenticator_range() {
                    expect[range].fill(0);
                }
                assert_eq!(out, expect);
                // Accessors of every kind are safe on every valid packet.
                let _ = (p.payload().len(), p.sack_block(0), p.authenticator());
            }
            Err(e) => {
                rejected += 1;
                assert!(!e.to_string().is_empty());
            }
        }
    }
    // Both outcomes must be exercised, or the corpus tests nothing.
    assert!(ok > 1_000, "only {ok} mutants parsed");
    assert!(rejected > 1_000, "only {rejected} mutants rejected");
}
