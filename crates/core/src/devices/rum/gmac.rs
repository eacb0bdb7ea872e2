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

mod soft;

#[cfg(target_arch = "x86_64")]
mod hw;

#[cfg(test)]
mod tests;
