//! The offload metadata a TUN with `IFF_VNET_HDR` puts before each packet
//! (`struct virtio_net_hdr`, 10 bytes, little-endian: `Tun` asks for
//! that byte order with TUNSETVNETLE), and what viaip does with it.
//!
//! With checksum and TCP segmentation offload switched on, the kernel
//! hands viaip TCP segments whose checksum is only begun (`NEEDS_CSUM`:
//! the pseudo-header sum sits in the checksum field, the rest is owed from
//! `csum_start` on) and super-packets of up to 64 KiB that a NIC would cut
//! into `gso_size` pieces (`gso_type`). The header travels with the packet
//! as part of the VIA message, and the receiving TUN takes it back: that
//! kernel then treats the checksum as one it made itself and the
//! super-packet as one GRO built, so neither side computes or checks a
//! checksum in software and a 64 KiB segment crosses user space once.
//!
//! A header from a peer is not trusted: [`VnetHeader::check`] refuses one
//! that points outside its packet or asks for an offload viaip never
//! hands on. A receiver whose TUN has no header (`--no-offload`) finishes
//! the checksum itself ([`complete_checksum`]) and writes the packet as a
//! whole (an IPv4 packet that is valid as it stands, if large).

use crate::packet::Refusal;

/// Bytes of the header before each packet.
pub const LEN: usize = 10;

/// The checksum from `csum_start` on is owed.
pub const F_NEEDS_CSUM: u8 = 1;
/// A TCP/IPv4 super-packet to be cut into `gso_size` segments.
pub const GSO_TCPV4: u8 = 1;
/// ECN's CWR seen in a super-packet (a bit beside the type).
pub const GSO_ECN: u8 = 0x80;

/// The header of a packet with nothing owed and nothing to cut.
pub const PLAIN: [u8; LEN] = [0; LEN];

/// One packet's offload metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VnetHeader {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHeader {
    pub fn parse(b: &[u8; LEN]) -> VnetHeader {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        VnetHeader {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        }
    }

    pub fn to_bytes(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }

    /// Whether the packet is a TCP super-packet (to be cut by the stack).
    pub fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != 0
    }

    /// Checks the header against its packet (`pkt`, the IPv4 packet that
    /// follows it): only what viaip's TUN produces is accepted — a
    /// checksum owed inside the packet, and TCP/IPv4 segmentation with a
    /// size and a header inside the packet.
    pub fn check(&self, pkt: &[u8]) -> Result<(), Refusal> {
        if self.flags & !F_NEEDS_CSUM != 0 {
            return Err(Refusal::Malformed);
        }
        if self.flags & F_NEEDS_CSUM != 0 {
            let field = usize::from(self.csum_start) + usize::from(self.csum_offset);
            if field + 2 > pkt.len() {
                return Err(Refusal::Malformed);
            }
        }
        match self.gso_type & !GSO_ECN {
            0 => Ok(()),
            GSO_TCPV4
                if self.gso_size > 0
                    && self.flags & F_NEEDS_CSUM != 0
                    && usize::from(self.hdr_len) <= pkt.len() =>
            {
                Ok(())
            }
            _ => Err(Refusal::Malformed),
        }
    }
}

/// Finishes a checksum the sending kernel left owed: the one's complement
/// sum from `csum_start` to the end (the field holds the pseudo-header's
/// sum already), stored complemented in the field. For a receiver whose
/// TUN takes no header; `hdr` was checked against `pkt`.
pub fn complete_checksum(hdr: &VnetHeader, pkt: &mut [u8]) {
    if hdr.flags & F_NEEDS_CSUM == 0 {
        return;
    }
    let start = usize::from(hdr.csum_start);
    let field = start + usize::from(hdr.csum_offset);
    let c = !ones_sum(&pkt[start..]);
    pkt[field..field + 2].copy_from_slice(&c.to_be_bytes());
}

/// The Internet checksum's one's complement sum of `b` (16-bit words,
/// big-endian, an odd last byte padded), folded to 16 bits.
pub fn ones_sum(b: &[u8]) -> u16 {
    let mut sum = 0u64;
    let mut words = b.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(u16::from_be_bytes([*last, 0]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4/TCP packet with `payload` bytes, its checksum field holding
    /// the pseudo-header sum as a sending kernel leaves it.
    fn owed_tcp(payload: usize) -> Vec<u8> {
        let len = 20 + 20 + payload;
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[32] = 0x50;
        for (i, b) in p[40..].iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p[12..20]);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&((len - 20) as u16).to_be_bytes());
        let partial = ones_sum(&pseudo);
        p[36..38].copy_from_slice(&partial.to_be_bytes());
        p
    }

    fn owed_header() -> VnetHeader {
        VnetHeader {
            flags: F_NEEDS_CSUM,
            gso_type: 0,
            hdr_len: 0,
            gso_size: 0,
            csum_start: 20,
            csum_offset: 16,
        }
    }

    #[test]
    fn parses_little_endian_fields() {
        let h = VnetHeader::parse(&[1, 0x81, 54, 0, 0xb4, 5, 20, 0, 16, 0]);
        assert_eq!(h.flags, F_NEEDS_CSUM);
        assert!(h.is_gso());
        assert_eq!(h.hdr_len, 54);
        assert_eq!(h.gso_size, 1460);
        assert_eq!((h.csum_start, h.csum_offset), (20, 16));
        assert!(!VnetHeader::parse(&PLAIN).is_gso());
        assert_eq!(h.to_bytes(), [1, 0x81, 54, 0, 0xb4, 5, 20, 0, 16, 0]);
    }

    #[test]
    fn completed_checksum_verifies() {
        for payload in [0, 1, 999, 1460] {
            let mut p = owed_tcp(payload);
            complete_checksum(&owed_header(), &mut p);
            // The receiver's check: pseudo-header plus segment sums to
            // all ones.
            let mut pseudo = Vec::new();
            pseudo.extend_from_slice(&p[12..20]);
            pseudo.extend_from_slice(&[0, 6]);
            pseudo.extend_from_slice(&((p.len() - 20) as u16).to_be_bytes());
            pseudo.extend_from_slice(&p[20..]);
            assert_eq!(ones_sum(&pseudo), 0xffff, "payload {payload}");
        }
    }

    #[test]
    fn refuses_headers_outside_their_packet() {
        let p = owed_tcp(100);
        assert_eq!(owed_header().check(&p), Ok(()));
        let mut h = owed_header();
        h.csum_offset = 200;
        assert_eq!(h.check(&p), Err(Refusal::Malformed));
        let mut h = owed_header();
        h.flags |= 0x40;
        assert_eq!(h.check(&p), Err(Refusal::Malformed));
        let gso = VnetHeader {
            gso_type: GSO_TCPV4 | GSO_ECN,
            gso_size: 1460,
            hdr_len: 40,
            ..owed_header()
        };
        assert_eq!(gso.check(&p), Ok(()));
        assert_eq!(
            VnetHeader { gso_size: 0, ..gso }.check(&p),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            VnetHeader { flags: 0, ..gso }.check(&p),
            Err(Refusal::Malformed)
        );
        // UDP segmentation and TCP/IPv6 are never handed on.
        assert_eq!(
            VnetHeader { gso_type: 5, ..gso }.check(&p),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            VnetHeader { gso_type: 4, ..gso }.check(&p),
            Err(Refusal::Malformed)
        );
    }
}
