//! GHASH four blocks per instruction: VPCLMULQDQ on 512-bit registers
//! (AVX-512). A round of [`ZMM_AGG`] blocks is [`ZMM_AGG`] / 4 registers,
//! each multiplied lane by lane with a register of precomputed powers of
//! H (the block k of the round by H^(ZMM_AGG − k)); the 256-bit products
//! are summed over the round, the four lanes folded, and the sum shifted
//! and reduced once, as on the narrower paths, so the tags are the same.
//! Each product is the schoolbook's four (low, high and the two cross
//! halves; three-way xors sum them): Karatsuba's third product saves a
//! multiplication but costs a shuffle and an xor on each data register.

use std::arch::x86_64::*;

use super::{reduce, Keys};

/// Blocks per reduction.
pub const ZMM_AGG: usize = 64;

/// The CPU has what this path needs (besides `super::available`).
pub fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("vpclmulqdq")
}

/// The powers H^ZMM_AGG..H^1 in registers' order: `powers[i]` is
/// H^(i+1), byte-reversed; quad k holds the powers of blocks 4k..4k + 3
/// of a round (lane 0, the lowest, the first block in memory).
pub fn quads(powers: &[__m128i; ZMM_AGG]) -> [[__m128i; 4]; ZMM_AGG / 4] {
    std::array::from_fn(|k| std::array::from_fn(|lane| powers[ZMM_AGG - 1 - 4 * k - lane]))
}

/// The xor of a register's four 128-bit lanes.
#[inline]
#[target_feature(enable = "avx512f")]
fn fold(v: __m512i) -> __m128i {
    let y = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
    _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y))
}

impl Keys {
    /// [`Keys::absorb`] four blocks per instruction: rounds of
    /// [`ZMM_AGG`] blocks, then the quads left as one shorter round (the
    /// last powers), then the last up to three blocks one by one.
    ///
    /// # Safety
    /// The CPU must have the features of [`available`].
    #[target_feature(enable = "avx512f,avx512bw,vpclmulqdq,pclmulqdq,ssse3")]
    pub(super) unsafe fn absorb_zmm(&self, mut acc: __m128i, data: &[u8]) -> __m128i {
        let n = data.len() / 16;
        let blocks = data.as_ptr();
        let mask = _mm512_broadcast_i32x4(_mm_set_epi8(
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
        ));
        // One round: `quads` registers of four blocks from block `i`, by
        // H^(4·quads)..H^1 (the last registers of `h4`), reduced once.
        let round = |acc: __m128i, i: usize, quads: usize| {
            let (mut lo, mut hi, mut mid) = (
                _mm512_setzero_si512(),
                _mm512_setzero_si512(),
                _mm512_setzero_si512(),
            );
            let first = ZMM_AGG / 4 - quads;
            for k in 0..quads {
                // SAFETY: blocks i + 4k .. i + 4k + 3 lie inside `data`
                // (callers keep i + 4·quads <= n); unaligned load.
                let raw = unsafe { _mm512_loadu_si512(blocks.add(16 * (i + 4 * k)).cast()) };
                let mut x = _mm512_shuffle_epi8(raw, mask);
                if k == 0 {
                    x = _mm512_xor_si512(x, _mm512_zextsi128_si512(acc));
                }
                // SAFETY: four 16-byte values read as one 64-byte
                // register, unaligned.
                let h = unsafe { _mm512_loadu_si512(self.h4[first + k].as_ptr().cast()) };
                lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128::<0x00>(x, h));
                hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128::<0x11>(x, h));
                mid = _mm512_ternarylogic_epi64::<0x96>(
                    mid,
                    _mm512_clmulepi64_epi128::<0x01>(x, h),
                    _mm512_clmulepi64_epi128::<0x10>(x, h),
                );
            }
            let mid = fold(mid);
            reduce(
                _mm_xor_si128(fold(lo), _mm_slli_si128::<8>(mid)),
                _mm_xor_si128(fold(hi), _mm_srli_si128::<8>(mid)),
            )
        };
        let mut i = 0;
        while i + ZMM_AGG <= n {
            acc = round(acc, i, ZMM_AGG / 4);
            i += ZMM_AGG;
        }
        let quads = (n - i) / 4;
        if quads > 0 {
            acc = round(acc, i, quads);
            i += 4 * quads;
        }
        self.absorb(acc, &data[16 * i..16 * n])
    }
}
