//! AES-NI and PCLMULQDQ. GHASH works on byte-reversed blocks (Gueron and
//! Kounavis, "Intel Carry-Less Multiplication Instruction and its Usage
//! for Computing the GCM Mode", algorithm 5): the 256-bit products of
//! eight blocks with H^8..H^1 are summed before one shift and reduction,
//! which are linear.

use std::arch::x86_64::*;

use super::for_blocks;

mod zmm;

/// Blocks per reduction (128-bit path).
const AGG: usize = 8;
/// Blocks per reduction on the 256-bit path. The reduction (a chain of
/// shifts and xors that the next round waits for) bounded the speed,
/// not the products: with 8 blocks a round the 256-bit path was 1.17×
/// the 128-bit one (`gmac_speed`), with 16 1.6×, 32 2.3×, 64 1.5×
/// (more of a packet left for the shorter tail round).
const WIDE_AGG: usize = 32;

pub fn available() -> bool {
    is_x86_feature_detected!("aes")
        && is_x86_feature_detected!("pclmulqdq")
        && is_x86_feature_detected!("ssse3")
}

#[derive(Clone)]
pub struct Keys {
    round: [__m128i; 11],
    /// H^1..H^WIDE_AGG, byte-reversed.
    h: [__m128i; WIDE_AGG],
    /// Each power's two halves xored (low lane), for Karatsuba.
    hk: [__m128i; WIDE_AGG],
    /// `h` and `hk` paired for 256-bit products over a round of
    /// [`WIDE_AGG`] blocks: pair k holds the powers of blocks 2k (low
    /// lane) and 2k + 1 (high lane).
    h2: [__m256i; WIDE_AGG / 2],
    hk2: [__m256i; WIDE_AGG / 2],
    /// H^ZMM_AGG..H^1 twisted, then zeros, for the 512-bit path
    /// (`zmm::powers`).
    rpow: [__m128i; zmm::RPOW_LEN],
    /// The widest path the CPU has (tests choose narrower ones).
    pub(super) width: Width,
}

/// Blocks per carry-less multiplication instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// PCLMULQDQ: one block.
    X128,
    /// VPCLMULQDQ on 256-bit registers: two blocks.
    X256,
    /// VPCLMULQDQ on 512-bit registers (AVX-512): four blocks.
    X512,
}

impl Width {
    /// The widest the CPU has (given [`available`]).
    fn detect() -> Self {
        if zmm::available() {
            Self::X512
        } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("vpclmulqdq") {
            Self::X256
        } else {
            Self::X128
        }
    }

    /// This width and each narrower one the CPU runs.
    #[cfg(test)]
    pub fn all() -> Vec<Self> {
        let widest = Self::detect();
        [Self::X128, Self::X256, Self::X512]
            .into_iter()
            .filter(|w| *w as u8 <= widest as u8)
            .collect()
    }
}

macro_rules! expand_step {
    ($k:expr, $rcon:literal) => {{
        let k = $k;
        let t = _mm_shuffle_epi32(_mm_aeskeygenassist_si128::<$rcon>(k), 0xff);
        let k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
        let k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
        let k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
        _mm_xor_si128(k, t)
    }};
}

#[inline]
#[target_feature(enable = "sse2,ssse3")]
fn bswap(x: __m128i) -> __m128i {
    _mm_shuffle_epi8(
        x,
        _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
    )
}

/// The unreduced 256-bit carry-less product (low, high).
#[inline]
#[target_feature(enable = "sse2,pclmulqdq")]
fn mul_wide(a: __m128i, b: __m128i) -> (__m128i, __m128i) {
    let lo = _mm_clmulepi64_si128::<0x00>(a, b);
    let hi = _mm_clmulepi64_si128::<0x11>(a, b);
    let mid = _mm_xor_si128(
        _mm_clmulepi64_si128::<0x10>(a, b),
        _mm_clmulepi64_si128::<0x01>(a, b),
    );
    (
        _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
        _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
    )
}

/// Shift left by one (the reflection) and reduce modulo GCM's polynomial.
#[inline]
#[target_feature(enable = "sse2")]
fn reduce(lo: __m128i, hi: __m128i) -> __m128i {
    let c_lo = _mm_srli_epi32::<31>(lo);
    let c_hi = _mm_srli_epi32::<31>(hi);
    let lo1 = _mm_slli_epi32::<1>(lo);
    let hi1 = _mm_slli_epi32::<1>(hi);
    let cross = _mm_srli_si128::<12>(c_lo);
    let lo = _mm_or_si128(lo1, _mm_slli_si128::<4>(c_lo));
    let hi = _mm_or_si128(_mm_or_si128(hi1, _mm_slli_si128::<4>(c_hi)), cross);
    let a = _mm_xor_si128(
        _mm_xor_si128(_mm_slli_epi32::<31>(lo), _mm_slli_epi32::<30>(lo)),
        _mm_slli_epi32::<25>(lo),
    );
    let a_hi = _mm_srli_si128::<4>(a);
    let lo = _mm_xor_si128(lo, _mm_slli_si128::<12>(a));
    let b = _mm_xor_si128(
        _mm_xor_si128(_mm_srli_epi32::<1>(lo), _mm_srli_epi32::<2>(lo)),
        _mm_xor_si128(_mm_srli_epi32::<7>(lo), a_hi),
    );
    _mm_xor_si128(hi, _mm_xor_si128(lo, b))
}

/// Sums of Karatsuba's products (low, high, middle) to the reduced
/// result: the middle term less the outer ones is the cross product.
#[inline]
#[target_feature(enable = "sse2")]
fn reduce_karatsuba(lo: __m128i, hi: __m128i, mid: __m128i) -> __m128i {
    let mid = _mm_xor_si128(mid, _mm_xor_si128(lo, hi));
    reduce(
        _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
        _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
    )
}

/// GCM's polynomial for [`reduce_mont`]: x^128 + x^127 + x^126 + x^121 + 1
/// in the byte-reversed, bit-reflected order of the blocks.
#[inline]
#[target_feature(enable = "sse2")]
fn poly() -> __m128i {
    _mm_set_epi64x(0xc200_0000_0000_0000_u64 as i64, 1)
}

/// A power of H made ready for [`reduce_mont`]: shifted left by one and
/// reduced, the shift that [`reduce`] applies to every product applied
/// once to the key instead.
#[target_feature(enable = "sse2")]
fn twist(h: __m128i) -> __m128i {
    // The top bit, spread over the register, selects the polynomial.
    let top = _mm_srai_epi32::<31>(_mm_shuffle_epi32::<0xff>(h));
    let carries = _mm_slli_si128::<4>(_mm_srli_epi32::<31>(h));
    let shifted = _mm_or_si128(_mm_slli_epi32::<1>(h), carries);
    _mm_xor_si128(shifted, _mm_and_si128(top, poly()))
}

/// The reduction of a product with a twisted power ([`twist`]): two
/// carry-less multiplications by the polynomial fold the low half into
/// the high one (a Montgomery reduction), shorter than [`reduce`]'s
/// chain of shifts.
#[inline]
#[target_feature(enable = "sse2,pclmulqdq")]
fn reduce_mont(lo: __m128i, hi: __m128i) -> __m128i {
    let p = poly();
    let t = _mm_clmulepi64_si128::<0x01>(p, lo);
    let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
    let t = _mm_clmulepi64_si128::<0x01>(p, lo);
    let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
    _mm_xor_si128(lo, hi)
}

#[target_feature(enable = "sse2,pclmulqdq")]
fn gf_mul(a: __m128i, b: __m128i) -> __m128i {
    let (lo, hi) = mul_wide(a, b);
    reduce(lo, hi)
}

impl Keys {
    /// # Safety
    /// The CPU must have the features of [`available`].
    #[target_feature(enable = "sse2,ssse3,aes,pclmulqdq")]
    pub unsafe fn new(key: &[u8; 16]) -> Self {
        // SAFETY: 16 bytes read from a 16-byte array (unaligned load).
        let k0 = unsafe { _mm_loadu_si128(key.as_ptr().cast()) };
        let k1 = expand_step!(k0, 0x01);
        let k2 = expand_step!(k1, 0x02);
        let k3 = expand_step!(k2, 0x04);
        let k4 = expand_step!(k3, 0x08);
        let k5 = expand_step!(k4, 0x10);
        let k6 = expand_step!(k5, 0x20);
        let k7 = expand_step!(k6, 0x40);
        let k8 = expand_step!(k7, 0x80);
        let k9 = expand_step!(k8, 0x1b);
        let k10 = expand_step!(k9, 0x36);
        let mut keys = Self {
            round: [k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, k10],
            h: [_mm_setzero_si128(); WIDE_AGG],
            hk: [_mm_setzero_si128(); WIDE_AGG],
            h2: [_mm256_setzero_si256(); WIDE_AGG / 2],
            hk2: [_mm256_setzero_si256(); WIDE_AGG / 2],
            rpow: [_mm_setzero_si128(); zmm::RPOW_LEN],
            width: Width::detect(),
        };
        let h = bswap(keys.encrypt(_mm_setzero_si128()));
        let mut powers = [h; zmm::ZMM_AGG];
        for i in 1..zmm::ZMM_AGG {
            powers[i] = gf_mul(powers[i - 1], h);
        }
        keys.h.copy_from_slice(&powers[..WIDE_AGG]);
        keys.rpow = zmm::powers(&powers);
        for i in 0..WIDE_AGG {
            keys.hk[i] = _mm_xor_si128(keys.h[i], _mm_shuffle_epi32::<0x4e>(keys.h[i]));
        }
        for k in 0..WIDE_AGG / 2 {
            let (a, b) = (WIDE_AGG - 1 - 2 * k, WIDE_AGG - 2 - 2 * k);
            keys.h2[k] = _mm256_set_m128i(keys.h[b], keys.h[a]);
            keys.hk2[k] = _mm256_set_m128i(keys.hk[b], keys.hk[a]);
        }
        keys
    }

    #[target_feature(enable = "sse2,aes")]
    fn encrypt(&self, b: __m128i) -> __m128i {
        let mut s = _mm_xor_si128(b, self.round[0]);
        for k in &self.round[1..10] {
            s = _mm_aesenc_si128(s, *k);
        }
        _mm_aesenclast_si128(s, self.round[10])
    }

    /// Absorbs whole blocks (`data.len()` a multiple of 16): eight at a
    /// time with Karatsuba's three products each (the middle ones use
    /// the precomputed xor of each power's halves), summed, then one
    /// shift and reduction.
    #[target_feature(enable = "sse2,ssse3,pclmulqdq")]
    fn absorb(&self, mut acc: __m128i, data: &[u8]) -> __m128i {
        let n = data.len() / 16;
        let blocks = data.as_ptr().cast::<__m128i>();
        // SAFETY (both loads): block k < n lies inside `data`;
        // unaligned loads.
        let load = |k: usize| bswap(unsafe { _mm_loadu_si128(blocks.add(k)) });
        let mut i = 0;
        while i + AGG <= n {
            let (mut lo, mut hi, mut mid) = (
                _mm_setzero_si128(),
                _mm_setzero_si128(),
                _mm_setzero_si128(),
            );
            for j in 0..AGG {
                let mut x = load(i + j);
                if j == 0 {
                    x = _mm_xor_si128(x, acc);
                }
                let h = self.h[AGG - 1 - j];
                lo = _mm_xor_si128(lo, _mm_clmulepi64_si128::<0x00>(x, h));
                hi = _mm_xor_si128(hi, _mm_clmulepi64_si128::<0x11>(x, h));
                let xk = _mm_xor_si128(x, _mm_shuffle_epi32::<0x4e>(x));
                mid = _mm_xor_si128(mid, _mm_clmulepi64_si128::<0x00>(xk, self.hk[AGG - 1 - j]));
            }
            acc = reduce_karatsuba(lo, hi, mid);
            i += AGG;
        }
        // The blocks left (fewer than AGG) as one shorter round, by
        // H^(n−i)..H^1.
        let left = n - i;
        if left > 0 {
            let (mut lo, mut hi, mut mid) = (
                _mm_setzero_si128(),
                _mm_setzero_si128(),
                _mm_setzero_si128(),
            );
            for j in 0..left {
                let mut x = load(i + j);
                if j == 0 {
                    x = _mm_xor_si128(x, acc);
                }
                let h = self.h[left - 1 - j];
                lo = _mm_xor_si128(lo, _mm_clmulepi64_si128::<0x00>(x, h));
                hi = _mm_xor_si128(hi, _mm_clmulepi64_si128::<0x11>(x, h));
                let xk = _mm_xor_si128(x, _mm_shuffle_epi32::<0x4e>(x));
                mid = _mm_xor_si128(mid, _mm_clmulepi64_si128::<0x00>(xk, self.hk[left - 1 - j]));
            }
            acc = reduce_karatsuba(lo, hi, mid);
        }
        acc
    }

    /// [`Self::absorb`] two blocks per instruction: the sixteen blocks
    /// of a round ([`WIDE_AGG`]) as sixteen 256-bit pairs, the lanes
    /// folded before the reduction.
    ///
    /// # Safety
    /// The CPU must have AVX2 and VPCLMULQDQ.
    #[target_feature(enable = "sse2,ssse3,pclmulqdq,avx2,vpclmulqdq")]
    unsafe fn absorb_wide(&self, mut acc: __m128i, data: &[u8]) -> __m128i {
        let n = data.len() / 16;
        let blocks = data.as_ptr();
        let mask = _mm256_set_epi8(
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
            11, 12, 13, 14, 15,
        );
        // One round: `pairs` pairs of blocks from block `i`, multiplied
        // by H^(2·pairs)..H^1 (the last powers of `h2`), summed, reduced
        // once.
        let round = |acc: __m128i, i: usize, pairs: usize| {
            let (mut lo, mut hi, mut mid) = (
                _mm256_setzero_si256(),
                _mm256_setzero_si256(),
                _mm256_setzero_si256(),
            );
            let first = WIDE_AGG / 2 - pairs;
            for k in 0..pairs {
                // SAFETY: blocks i + 2k and i + 2k + 1 lie inside
                // `data` (callers keep i + 2·pairs <= n); unaligned load.
                let raw = unsafe { _mm256_loadu_si256(blocks.add(16 * (i + 2 * k)).cast()) };
                let mut x = _mm256_shuffle_epi8(raw, mask);
                if k == 0 {
                    x = _mm256_xor_si256(x, _mm256_set_m128i(_mm_setzero_si128(), acc));
                }
                let h = self.h2[first + k];
                lo = _mm256_xor_si256(lo, _mm256_clmulepi64_epi128::<0x00>(x, h));
                hi = _mm256_xor_si256(hi, _mm256_clmulepi64_epi128::<0x11>(x, h));
                let xk = _mm256_xor_si256(x, _mm256_shuffle_epi32::<0x4e>(x));
                mid = _mm256_xor_si256(
                    mid,
                    _mm256_clmulepi64_epi128::<0x00>(xk, self.hk2[first + k]),
                );
            }
            let fold = |v: __m256i| {
                _mm_xor_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
            };
            reduce_karatsuba(fold(lo), fold(hi), fold(mid))
        };
        let mut i = 0;
        while i + WIDE_AGG <= n {
            acc = round(acc, i, WIDE_AGG / 2);
            i += WIDE_AGG;
        }
        // The pairs left, as one shorter round; then an odd last block.
        let pairs = (n - i) / 2;
        if pairs > 0 {
            acc = round(acc, i, pairs);
            i += 2 * pairs;
        }
        self.absorb(acc, &data[16 * i..16 * n])
    }

    /// # Safety
    /// The CPU must have the features of [`available`].
    #[target_feature(enable = "sse2,ssse3,aes,pclmulqdq")]
    pub unsafe fn tag(&self, j0: &[u8; 16], parts: &[&[u8]]) -> [u8; 16] {
        // The mask first: its ten dependent rounds overlap GHASH's work
        // instead of following it.
        // SAFETY: a 16-byte array read unaligned.
        let mask = self.encrypt(unsafe { _mm_loadu_si128(j0.as_ptr().cast()) });
        let mut acc = _mm_setzero_si128();
        match self.width {
            // SAFETY: `width` is at most what `Width::detect` found.
            Width::X512 => for_blocks(parts, |b| acc = unsafe { self.absorb_zmm(acc, b) }),
            // SAFETY: as above.
            Width::X256 => for_blocks(parts, |b| acc = unsafe { self.absorb_wide(acc, b) }),
            Width::X128 => for_blocks(parts, |b| acc = self.absorb(acc, b)),
        }
        let t = _mm_xor_si128(bswap(acc), mask);
        let mut out = [0u8; 16];
        // SAFETY: 16 bytes written into a 16-byte array, unaligned.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), t) };
        out
    }
}
