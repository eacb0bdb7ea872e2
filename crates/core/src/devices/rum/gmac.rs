//! GMAC: the tag of AES-128-GCM over associated data only (NIST SP
//! 800-38D with an empty plaintext), the per-packet authenticator of a
//! connection under a cluster key (`rum/packet_auth.rs`).
//!
//! tag = GHASH_H(data) ⊕ AES_K(nonce ‖ 0x00000001), H = AES_K(0). A
//! Carter–Wegman MAC: secure while no (key, nonce) pair repeats, which the
//! per-connection keys and per-packet counters guarantee. GHASH runs
//! through the data at a fraction of a cycle per byte with carry-less
//! multiplication and AES-NI where the CPU has them (`hw`: PCLMULQDQ,
//! eight blocks per reduction; VPCLMULQDQ, two blocks per instruction
//! and 32 per reduction; with AVX-512 four and 64, `hw/zmm`, chosen at
//! run time); elsewhere a portable implementation (`soft`) gives the
//! same tags, slower and with table lookups (not constant-time).

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

/// Bytes gathered before one call of `absorb` in [`for_blocks`]: small
/// parts, the blocks that straddle parts, the last partial block and the
/// length block go to `absorb` together, so that they cost one reduction
/// (each call ends with one) instead of one each.
const GATHER: usize = 128;

/// A part's whole blocks go to `absorb` directly, not through the
/// gathering buffer, from this many bytes on.
const DIRECT: usize = 256;

/// Feeds `parts` to `absorb` as whole 16-byte blocks (the last one padded
/// with zeros), then GHASH's length block (associated data only): long
/// runs of whole blocks straight from the parts, the rest gathered.
fn for_blocks(parts: &[&[u8]], mut absorb: impl FnMut(&[u8])) {
    let mut buf = [0u8; GATHER];
    let mut filled = 0;
    let mut total = 0u64;
    for part in parts {
        let mut p = *part;
        total += p.len() as u64;
        // Complete a block begun by the previous part.
        if filled % 16 != 0 {
            let n = (16 - filled % 16).min(p.len());
            buf[filled..filled + n].copy_from_slice(&p[..n]);
            filled += n;
            p = &p[n..];
        }
        let whole = p.len() & !15;
        if whole >= DIRECT && filled % 16 == 0 {
            if filled > 0 {
                absorb(&buf[..filled]);
                filled = 0;
            }
            absorb(&p[..whole]);
            p = &p[whole..];
        }
        while !p.is_empty() {
            if filled == GATHER {
                absorb(&buf);
                filled = 0;
            }
            let n = (GATHER - filled).min(p.len());
            buf[filled..filled + n].copy_from_slice(&p[..n]);
            filled += n;
            p = &p[n..];
        }
    }
    let padded = filled.next_multiple_of(16);
    buf[filled..padded].fill(0);
    filled = padded;
    if filled == GATHER {
        absorb(&buf);
        filled = 0;
    }
    buf[filled..filled + 8].copy_from_slice(&(total * 8).to_be_bytes());
    buf[filled + 8..filled + 16].fill(0);
    absorb(&buf[..filled + 16]);
}

mod soft;

#[cfg(target_arch = "x86_64")]
mod hw;

#[cfg(test)]
mod tests;
