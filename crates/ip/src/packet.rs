//! The little viaip needs to know about the packets it carries: an IPv4
//! header's destination, checked against the packet's length. Packets come
//! from the kernel (TUN) and from peers; neither is trusted.

use std::net::Ipv4Addr;

/// Why a packet is not carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not IPv4 (IPv6 and others): viaip carries IPv4.
    Unsupported,
    /// Too short, a bad header length, or a total length that disagrees
    /// with the bytes received.
    Malformed,
}

/// The destination of an IPv4 packet whose header agrees with `pkt`.
pub fn ipv4_destination(pkt: &[u8]) -> Result<Ipv4Addr, Refusal> {
    let first = *pkt.first().ok_or(Refusal::Malformed)?;
    if first >> 4 != 4 {
        return Err(if first >> 4 == 6 {
            Refusal::Unsupported
        } else {
            Refusal::Malformed
        });
    }
    let header_len = usize::from(first & 0x0f) * 4;
    if header_len < 20 || pkt.len() < header_len {
        return Err(Refusal::Malformed);
    }
    let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
    if total != pkt.len() {
        return Err(Refusal::Malformed);
    }
    Ok(Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[16..20].copy_from_slice(&[10, 1, 2, 3]);
        p
    }

    #[test]
    fn accepts_a_consistent_header() {
        assert_eq!(
            ipv4_destination(&packet(60)),
            Ok(Ipv4Addr::new(10, 1, 2, 3))
        );
    }

    #[test]
    fn refuses_garbage() {
        assert_eq!(ipv4_destination(&[]), Err(Refusal::Malformed));
        assert_eq!(ipv4_destination(&[0x45; 10]), Err(Refusal::Malformed));
        let mut p = packet(60);
        p[3] = 61;
        assert_eq!(ipv4_destination(&p), Err(Refusal::Malformed));
        let mut p = packet(60);
        p[0] = 0x44;
        assert_eq!(ipv4_destination(&p), Err(Refusal::Malformed));
        let mut p = packet(60);
        p[0] = 0x60;
        assert_eq!(ipv4_destination(&p), Err(Refusal::Unsupported));
        assert_eq!(
            ipv4_destination(b"\x15 not a packet at all"),
            Err(Refusal::Malformed)
        );
    }
}
