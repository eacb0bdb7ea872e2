//! GHASH four blocks per instruction: VPCLMULQDQ on 512-bit registers
//! (AVX-512). A round of up to [`ZMM_AGG`] blocks is up to
//! [`ZMM_AGG`] / 4 registers, each multiplied lane by lane with four
//! consecutive powers of H (block j of a round of t blocks by H^(t − j));
//! the 256-bit products are summed over the round, the four lanes folded,
//! and the sum reduced once. The powers are twisted (shifted by one bit,
//! `super::twist`) so that the reduction is two carry-less
//! multiplications (`super::reduce_mont`) instead of the narrower paths'
//! chain of shifts: the same field element, so the same tags, and with
//! it a 9000-byte tag took 0.85× the time (`gmac_speed`). The powers
//! lie in one descending table, so that a
//! register of them is one unaligned load at any offset: a round of any
//! length, its last register loaded in part (masked), costs one
//! reduction. Each product is the schoolbook's four (low, high and the
//! two cross halves; three-way xors sum them): Karatsuba's third product
//! saves a multiplication but costs a shuffle and an xor per register,
//! and measured no faster (`gmac_speed`, Zen 4, where a 512-bit
//! multiplication occupies the unit for two cycles). 32, 64 and 128
//! blocks per reduction measured within a few per cent of each other.

use std::arch::x86_64::*;

use super::{reduce_mont, twist, Keys};

/// Blocks per reduction.
pub const ZMM_AGG: usize = 64;

/// Entries of the power table: H^ZMM_AGG..H^1, then three zeros that a
/// round's last, partial register reads in its empty lanes.
pub const RPOW_LEN: usize = ZMM_AGG + 3;

/// The CPU has what this path needs (besides `super::available`).
pub fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("vpclmulqdq")
}

/// The descending power table from `powers[i]` = H^(i+1) (byte-reversed):
/// entry m is H^(ZMM_AGG − m), twisted for the reduction
/// (`super::twist`), so that the t blocks of a round take their powers
/// from entry ZMM_AGG − t on.
#[target_feature(enable = "sse2")]
pub fn powers(powers: &[__m128i; ZMM_AGG]) -> [__m128i; RPOW_LEN] {
    let mut table = [_mm_setzero_si128(); RPOW_LEN];
    for (entry, power) in table.iter_mut().zip(powers.iter().rev()) {
        *entry = twist(*power);
    }
    table
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
    /// [`ZMM_AGG`] blocks, then the blocks left as one shorter round.
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
        let rpow = self.rpow.as_ptr();
        // One round: the `t` (1..=ZMM_AGG) blocks from block `i`, by
        // H^t..H^1, reduced once.
        let round = |acc: __m128i, i: usize, t: usize| {
            let (mut lo, mut hi, mut mid) = (
                _mm512_setzero_si512(),
                _mm512_setzero_si512(),
                _mm512_setzero_si512(),
            );
            let at = blocks.wrapping_add(16 * i);
            let first = ZMM_AGG - t;
            let mut k = 0;
            while k < t {
                let raw = if t - k >= 4 {
                    // SAFETY: blocks i + k .. i + k + 3 lie inside `data`
                    // (callers keep i + t <= n); unaligned load.
                    unsafe { _mm512_loadu_si512(at.add(16 * k).cast()) }
                } else {
                    // The last t − k blocks, two 64-bit lanes each; the
                    // masked load reads nothing else.
                    let lanes: __mmask8 = (1 << (2 * (t - k))) - 1;
                    // SAFETY: as above, for the lanes of the mask.
                    unsafe { _mm512_maskz_loadu_epi64(lanes, at.add(16 * k).cast()) }
                };
                let mut x = _mm512_shuffle_epi8(raw, mask);
                if k == 0 {
                    x = _mm512_xor_si512(x, _mm512_zextsi128_si512(acc));
                }
                // SAFETY: entries first + k .. first + k + 3 < RPOW_LEN
                // (k < t, so first + k + 3 <= ZMM_AGG + 2); unaligned load.
                let h = unsafe { _mm512_loadu_si512(rpow.add(first + k).cast()) };
                lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128::<0x00>(x, h));
                hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128::<0x11>(x, h));
                mid = _mm512_ternarylogic_epi64::<0x96>(
                    mid,
                    _mm512_clmulepi64_epi128::<0x01>(x, h),
                    _mm512_clmulepi64_epi128::<0x10>(x, h),
                );
                k += 4;
            }
            let mid = fold(mid);
            reduce_mont(
                _mm_xor_si128(fold(lo), _mm_slli_si128::<8>(mid)),
                _mm_xor_si128(fold(hi), _mm_srli_si128::<8>(mid)),
            )
        };
        let mut i = 0;
        while i + ZMM_AGG <= n {
            acc = round(acc, i, ZMM_AGG);
            i += ZMM_AGG;
        }
        if i < n {
            acc = round(acc, i, n - i);
        }
        acc
    }
}
