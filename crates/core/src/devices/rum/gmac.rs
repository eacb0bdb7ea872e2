//! GMAC: the tag of AES-128-GCM over associated data only (NIST SP
//! 800-38D with an empty plaintext), the per-packet authenticator of a
//! connection under a cluster key (`rum/packet_auth.rs`).
//!
//! tag = GHASH_H(data) ⊕ AES_K(nonce ‖ 0x00000001), H = AES_K(0). A
//! Carter–Wegman MAC: secure while no (key, nonce) pair repeats, which the
//! per-connection keys and per-packet counters guarantee. GHASH runs
//! through the data at a fraction of a cycle per byte with carry-less
//! multiplication (PCLMULQDQ: eight blocks per reduction, 32 with
//! VPCLMULQDQ's two blocks per instruction) and AES-NI where
//! the CPU has them; elsewhere a portable implementation gives the same
//! tags, slower and with table lookups (not constant-time).

/// Bytes of a tag.
pub const TAG_LEN: usize = 16;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 12;

/// A GMAC key, expanded once per connection and direction.
#[derive(Clone)]
pub struct Gmac {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    #[cfg(target_arch = "x86_64")]
    Hw(Box<hw::Keys>),
    Soft(Box<soft::Keys>),
}

impl Gmac {
    pub fn new(key: &[u8; 16]) -> Self {
        #[cfg(target_arch = "x86_64")]
        if hw::available() {
            // SAFETY: the CPU has the features `hw` is compiled for.
            return Self {
                backend: Backend::Hw(Box::new(unsafe { hw::Keys::new(key) })),
            };
        }
        Self::portable(key)
    }

    /// The portable implementation, whatever the CPU has.
    pub fn portable(key: &[u8; 16]) -> Self {
        Self {
            backend: Backend::Soft(Box::new(soft::Keys::new(key))),
        }
    }

    /// The tag of the concatenation of `parts` under `nonce`.
    pub fn tag(&self, nonce: &[u8; NONCE_LEN], parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let mut j0 = [0u8; 16];
        j0[..NONCE_LEN].copy_from_slice(nonce);
        j0[15] = 1;
        match &self.backend {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Hw` keys exist only where `hw::available()` held.
            Backend::Hw(k) => unsafe { k.tag(&j0, parts) },
            Backend::Soft(k) => k.tag(&j0, parts),
        }
    }
}

/// Feeds `parts` to `absorb` as whole 16-byte blocks (the last one padded
/// with zeros), then GHASH's length block (associated data only).
fn for_blocks(parts: &[&[u8]], mut absorb: impl FnMut(&[u8])) {
    let mut carry = [0u8; 16];
    let mut filled = 0;
    let mut total = 0u64;
    for part in parts {
        let mut p = *part;
        total += p.len() as u64;
        if filled > 0 {
            let n = (16 - filled).min(p.len());
            carry[filled..filled + n].copy_from_slice(&p[..n]);
            filled += n;
            p = &p[n..];
            if filled < 16 {
                continue;
            }
            absorb(&carry);
        }
        let whole = p.len() & !15;
        if whole > 0 {
            absorb(&p[..whole]);
        }
        let rest = &p[whole..];
        carry[..rest.len()].copy_from_slice(rest);
        filled = rest.len();
    }
    if filled > 0 {
        carry[filled..].fill(0);
        absorb(&carry);
    }
    let mut lengths = [0u8; 16];
    lengths[..8].copy_from_slice(&(total * 8).to_be_bytes());
    absorb(&lengths);
}

/// Portable AES-128 (encryption only) and bitwise GHASH.
mod soft {
    use super::for_blocks;

    #[derive(Clone)]
    pub struct Keys {
        round: [[u8; 16]; 11],
        sbox: [u8; 256],
        h: u128,
    }

    fn xtime(b: u8) -> u8 {
        (b << 1) ^ if b & 0x80 != 0 { 0x1b } else { 0 }
    }

    fn gf8_mul(mut a: u8, mut b: u8) -> u8 {
        let mut p = 0;
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            a = xtime(a);
            b >>= 1;
        }
        p
    }

    /// The S-box from its definition: inverse in GF(2^8), then the affine map.
    fn make_sbox() -> [u8; 256] {
        let mut s = [0u8; 256];
        for (x, out) in s.iter_mut().enumerate() {
            let x = x as u8;
            // x^254 is the inverse (0 for 0).
            let mut inv = 1u8;
            for _ in 0..254 {
                inv = gf8_mul(inv, x);
            }
            if x == 0 {
                inv = 0;
            }
            *out = inv
                ^ inv.rotate_left(1)
                ^ inv.rotate_left(2)
                ^ inv.rotate_left(3)
                ^ inv.rotate_left(4)
                ^ 0x63;
        }
        s
    }

    /// GF(2^128) product of GCM (SP 800-38D, algorithm 1).
    fn gf128_mul(x: u128, y: u128) -> u128 {
        const R: u128 = 0xE1 << 120;
        let (mut z, mut v) = (0u128, y);
        for i in 0..128 {
            if (x >> (127 - i)) & 1 == 1 {
                z ^= v;
            }
            v = if v & 1 == 1 { (v >> 1) ^ R } else { v >> 1 };
        }
        z
    }

    impl Keys {
        pub fn new(key: &[u8; 16]) -> Self {
            let sbox = make_sbox();
            let mut w = [[0u8; 4]; 44];
            for (i, c) in key.chunks_exact(4).enumerate() {
                w[i].copy_from_slice(c);
            }
            let mut rcon = 1u8;
            for i in 4..44 {
                let mut t = w[i - 1];
                if i % 4 == 0 {
                    t = [
                        sbox[t[1] as usize] ^ rcon,
                        sbox[t[2] as usize],
                        sbox[t[3] as usize],
                        sbox[t[0] as usize],
                    ];
                    rcon = xtime(rcon);
                }
                for j in 0..4 {
                    w[i][j] = w[i - 4][j] ^ t[j];
                }
            }
            let mut round = [[0u8; 16]; 11];
            for (r, rk) in round.iter_mut().enumerate() {
                for c in 0..4 {
                    rk[4 * c..4 * c + 4].copy_from_slice(&w[4 * r + c]);
                }
            }
            let mut k = Self { round, sbox, h: 0 };
            k.h = u128::from_be_bytes(k.encrypt([0; 16]));
            k
        }

        pub fn encrypt(&self, mut s: [u8; 16]) -> [u8; 16] {
            let add =
                |s: &mut [u8; 16], rk: &[u8; 16]| s.iter_mut().zip(rk).for_each(|(a, b)| *a ^= b);
            add(&mut s, &self.round[0]);
            for r in 1..11 {
                for b in s.iter_mut() {
                    *b = self.sbox[*b as usize];
                }
                let old = s;
                for row in 1..4 {
                    for c in 0..4 {
                        s[row + 4 * c] = old[row + 4 * ((c + row) % 4)];
                    }
                }
                if r < 10 {
                    for c in 0..4 {
                        let a = [s[4 * c], s[4 * c + 1], s[4 * c + 2], s[4 * c + 3]];
                        let all = a[0] ^ a[1] ^ a[2] ^ a[3];
                        for i in 0..4 {
                            s[4 * c + i] = a[i] ^ all ^ xtime(a[i] ^ a[(i + 1) % 4]);
                        }
                    }
                }
                add(&mut s, &self.round[r]);
            }
            s
        }

        pub fn tag(&self, j0: &[u8; 16], parts: &[&[u8]]) -> [u8; 16] {
            let mut y = 0u128;
            for_blocks(parts, |blocks| {
                for b in blocks.chunks_exact(16) {
                    let x = u128::from_be_bytes(b.try_into().unwrap_or_default());
                    y = gf128_mul(y ^ x, self.h);
                }
            });
            (y ^ u128::from_be_bytes(self.encrypt(*j0))).to_be_bytes()
        }
    }
}

/// AES-NI and PCLMULQDQ. GHASH works on byte-reversed blocks (Gueron and
/// Kounavis, "Intel Carry-Less Multiplication Instruction and its Usage
/// for Computing the GCM Mode", algorithm 5): the 256-bit products of
/// eight blocks with H^8..H^1 are summed before one shift and reduction,
/// which are linear.
#[cfg(target_arch = "x86_64")]
mod hw {
    use std::arch::x86_64::*;

    use super::for_blocks;

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
        /// The CPU multiplies two blocks per instruction (VPCLMULQDQ).
        pub(super) wide: bool,
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
                wide: is_x86_feature_detected!("avx2") && is_x86_feature_detected!("vpclmulqdq"),
            };
            let h = bswap(keys.encrypt(_mm_setzero_si128()));
            keys.h[0] = h;
            for i in 1..WIDE_AGG {
                keys.h[i] = gf_mul(keys.h[i - 1], h);
            }
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
                    mid =
                        _mm_xor_si128(mid, _mm_clmulepi64_si128::<0x00>(xk, self.hk[AGG - 1 - j]));
                }
                acc = reduce_karatsuba(lo, hi, mid);
                i += AGG;
            }
            while i < n {
                acc = gf_mul(_mm_xor_si128(load(i), acc), self.h[0]);
                i += 1;
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
                0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                10, 11, 12, 13, 14, 15,
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
            let mut acc = _mm_setzero_si128();
            if self.wide {
                // SAFETY: `wide` is set only where the CPU has the features.
                for_blocks(parts, |b| acc = unsafe { self.absorb_wide(acc, b) });
            } else {
                for_blocks(parts, |b| acc = self.absorb(acc, b));
            }
            // SAFETY: a 16-byte array read unaligned.
            let j0 = unsafe { _mm_loadu_si128(j0.as_ptr().cast()) };
            let t = _mm_xor_si128(bswap(acc), self.encrypt(j0));
            let mut out = [0u8; 16];
            // SAFETY: 16 bytes written into a 16-byte array, unaligned.
            unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), t) };
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    const KEY: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
    const NONCE: [u8; 12] = [0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];

    /// AES-128-GCM tags with an empty plaintext and this data as the
    /// associated data, from an independent implementation (Python's
    /// `cryptography`, `AESGCM(KEY).encrypt(NONCE, b"", aad)`).
    const VECTORS: [(usize, &str); 11] = [
        (0, "4b4b5e01f7c0a49d9a2dd6e091212ec7"),
        (1, "1e336fc34290afb3e93cf156d1c7775f"),
        (15, "a30833e98334f17a0d1da97dfb48b050"),
        (16, "15c07b43ea12d458e0edb744bb944cf1"),
        (17, "51fe1cf2793a2fde097c11b84ad69490"),
        (63, "36ee5374b94c2c22cce4db778027b0cf"),
        (64, "136561e4dc14e7214a845719f4cab756"),
        (100, "c0f6921b3dcf1a80db20dc2b52dc17e4"),
        (129, "ee2c450bab94798ab09c7beef2c0631b"),
        (1000, "86debe804fd499edeb4a1084b12fb418"),
        (9024, "d4302a83c3cdb121e58d416d8bbec562"),
    ];

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn aes_fips197_vector() {
        let k = soft::Keys::new(&KEY);
        let pt = [
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ];
        assert_eq!(hex(&k.encrypt(pt)), "69c4e0d86a7b0430d8cdb78070b4c55a");
    }

    #[test]
    fn both_implementations_match_the_vectors() {
        let mut all = vec![Gmac::new(&KEY), Gmac::portable(&KEY)];
        #[cfg(target_arch = "x86_64")]
        if let Backend::Hw(k) = &Gmac::new(&KEY).backend {
            // The 128-bit path where the 256-bit one would be taken.
            let mut narrow = k.clone();
            narrow.wide = false;
            all.push(Gmac {
                backend: Backend::Hw(narrow),
            });
        }
        for g in all {
            for (n, want) in VECTORS {
                assert_eq!(hex(&g.tag(&NONCE, &[&data(n)])), want, "{n} bytes");
            }
        }
    }

    /// Throughput of the tag over 9000-byte packets (run by hand:
    /// `cargo test --release -p openvia-core gmac_speed -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn gmac_speed() {
        let d = data(9000);
        let time = |g: &Gmac| {
            let t = std::time::Instant::now();
            let mut x = 0u8;
            for _ in 0..20_000 {
                x ^= g.tag(&NONCE, &[&d])[0];
            }
            (9000.0 * 20_000.0 / t.elapsed().as_secs_f64() / 1e9, x)
        };
        let wide = Gmac::new(&KEY);
        #[cfg(target_arch = "x86_64")]
        if let Backend::Hw(k) = &wide.backend {
            let mut k = k.clone();
            k.wide = false;
            let narrow = Gmac {
                backend: Backend::Hw(k),
            };
            for _ in 0..5 {
                let (a, _) = time(&narrow);
                let (b, _) = time(&wide);
                println!("gmac GB/s: 128-bit {a:.2}, as chosen {b:.2}");
            }
        }
        println!("gmac GB/s: portable {:.3}", time(&Gmac::portable(&KEY)).0);
    }

    #[test]
    fn parts_split_anywhere_give_the_same_tag() {
        let g = Gmac::new(&KEY);
        let d = data(1000);
        let want = g.tag(&NONCE, &[&d]);
        for (a, b) in [(0, 0), (1, 1), (15, 600), (16, 32), (17, 999), (500, 1000)] {
            assert_eq!(
                g.tag(&NONCE, &[&d[..a], &d[a..b], &d[b..]]),
                want,
                "{a} {b}"
            );
        }
        let mut other = NONCE;
        other[11] ^= 1;
        assert_ne!(g.tag(&other, &[&d]), want);
    }
}
