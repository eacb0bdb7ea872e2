//! Portable AES-128 (encryption only) and bitwise GHASH: the tags of
//! `hw` where the CPU lacks AES-NI and PCLMULQDQ, and the
//! reference every hardware path is tested against.

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
        let add = |s: &mut [u8; 16], rk: &[u8; 16]| s.iter_mut().zip(rk).for_each(|(a, b)| *a ^= b);
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
