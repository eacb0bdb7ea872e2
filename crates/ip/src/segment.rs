//! Segmentation in software, for datagram mode: there every message must
//! fit one datagram of the device, but the TUN's segmentation offload
//! still hands viaip a TCP/IPv4 super-packet of up to 64 KiB in one read
//! (instead of 45 reads and 45 passes through the kernel's TCP output).
//! [`cut`] does what the NIC would: a packet of `gso_size` payload bytes
//! at a time, each with its own IPv4 header (length, identification,
//! header checksum) and TCP header (sequence number; FIN and PSH on the
//! last only, CWR on the first only), its TCP checksum left owed as the
//! kernel leaves it (the pseudo-header sum in the field, `NEEDS_CSUM` in
//! its offload header), for the receiving kernel to take as its own.

use crate::packet::Refusal;
use crate::vnet::{self, VnetHeader};

const TCP: u8 = 6;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Cuts the TCP/IPv4 super-packet `pkt` (its offload header `hdr`, checked
/// against it) into messages of at most `max_message` bytes, each an
/// offload header and one segment, handed in turn to `emit`. How many.
pub fn cut(
    hdr: &VnetHeader,
    pkt: &[u8],
    max_message: usize,
    emit: &mut dyn FnMut(&[u8]),
) -> Result<usize, Refusal> {
    let ihl = usize::from(pkt.first().ok_or(Refusal::Malformed)? & 0x0f) * 4;
    if pkt.get(9) != Some(&TCP) || pkt.len() < ihl + 20 {
        return Err(Refusal::Malformed);
    }
    let thl = usize::from(pkt[ihl + 12] >> 4) * 4;
    let head = ihl + thl;
    let mss = usize::from(hdr.gso_size);
    if thl < 20 || pkt.len() < head || mss == 0 || vnet::LEN + head + mss > max_message {
        return Err(Refusal::Malformed);
    }
    let payload = &pkt[head..];
    let count = payload.len().div_ceil(mss).max(1);
    let id = u16::from_be_bytes([pkt[4], pkt[5]]);
    let seq = u32::from_be_bytes([pkt[ihl + 4], pkt[ihl + 5], pkt[ihl + 6], pkt[ihl + 7]]);
    let flags = pkt[ihl + 13];
    let owed = VnetHeader {
        flags: vnet::F_NEEDS_CSUM,
        gso_type: 0,
        hdr_len: 0,
        gso_size: 0,
        csum_start: ihl as u16,
        csum_offset: 16,
    }
    .to_bytes();
    let mut msg = Vec::with_capacity(vnet::LEN + head + mss);
    for (k, part) in payload
        .chunks(mss)
        .chain(payload.is_empty().then_some(&[][..]))
        .enumerate()
    {
        msg.clear();
        msg.extend_from_slice(&owed);
        msg.extend_from_slice(&pkt[..head]);
        msg.extend_from_slice(part);
        let seg = &mut msg[vnet::LEN..];
        let total = (head + part.len()) as u16;
        seg[2..4].copy_from_slice(&total.to_be_bytes());
        seg[4..6].copy_from_slice(&id.wrapping_add(k as u16).to_be_bytes());
        seg[10..12].copy_from_slice(&[0, 0]);
        let ip_sum = !vnet::ones_sum(&seg[..ihl]);
        seg[10..12].copy_from_slice(&ip_sum.to_be_bytes());
        let tcp = &mut seg[ihl..];
        tcp[4..8].copy_from_slice(&seq.wrapping_add((k * mss) as u32).to_be_bytes());
        let mut f = flags;
        if k + 1 < count {
            f &= !(TCP_FIN | TCP_PSH);
        }
        if k > 0 {
            f &= !TCP_CWR;
        }
        tcp[13] = f;
        // The pseudo-header's sum, as the kernel leaves an owed checksum.
        let mut pseudo = [0u8; 12];
        pseudo[..8].copy_from_slice(&pkt[12..20]);
        pseudo[9] = TCP;
        pseudo[10..12].copy_from_slice(&((thl + part.len()) as u16).to_be_bytes());
        tcp[16..18].copy_from_slice(&vnet::ones_sum(&pseudo).to_be_bytes());
        emit(&msg);
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP/IPv4 super-packet of `payload` bytes (seq 1000, FIN|PSH|CWR).
    fn super_packet(payload: usize) -> Vec<u8> {
        let len = 40 + payload;
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0xfffeu16.to_be_bytes());
        p[8] = 64;
        p[9] = TCP;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[24..28].copy_from_slice(&1000u32.to_be_bytes());
        p[32] = 0x50;
        p[33] = TCP_FIN | TCP_PSH | TCP_CWR | 0x10;
        for (i, b) in p[40..].iter_mut().enumerate() {
            *b = (i * 13 + 5) as u8;
        }
        p
    }

    fn gso(mss: u16) -> VnetHeader {
        VnetHeader {
            flags: vnet::F_NEEDS_CSUM,
            gso_type: vnet::GSO_TCPV4,
            hdr_len: 40,
            gso_size: mss,
            csum_start: 20,
            csum_offset: 16,
        }
    }

    #[test]
    fn cuts_into_segments_the_receiver_takes() {
        let pkt = super_packet(3000);
        let mut segs = Vec::new();
        let n = cut(&gso(1400), &pkt, 1450, &mut |m| segs.push(m.to_vec())).unwrap();
        assert_eq!(n, 3);
        assert_eq!(segs.len(), 3);
        let mut payload = Vec::new();
        for (k, m) in segs.iter().enumerate() {
            assert!(m.len() <= 1450);
            let h = VnetHeader::parse(m.first_chunk().unwrap());
            let mut seg = m[vnet::LEN..].to_vec();
            h.check(&seg).unwrap();
            assert!(!h.is_gso());
            assert_eq!(
                crate::packet::ipv4_destination(&seg),
                Ok([10, 0, 0, 2].into())
            );
            assert_eq!(vnet::ones_sum(&seg[..20]), 0xffff, "IP header checksum");
            assert_eq!(
                u16::from_be_bytes([seg[4], seg[5]]),
                0xfffeu16.wrapping_add(k as u16)
            );
            let seq = u32::from_be_bytes([seg[24], seg[25], seg[26], seg[27]]);
            assert_eq!(seq, 1000 + 1400 * k as u32);
            let flags = seg[33];
            assert_eq!(flags & TCP_CWR != 0, k == 0);
            assert_eq!(flags & (TCP_FIN | TCP_PSH) != 0, k == 2);
            // Finishing the owed checksum gives one the receiver accepts.
            vnet::complete_checksum(&h, &mut seg);
            let mut pseudo = seg[12..20].to_vec();
            pseudo.extend_from_slice(&[0, TCP]);
            pseudo.extend_from_slice(&((seg.len() - 20) as u16).to_be_bytes());
            pseudo.extend_from_slice(&seg[20..]);
            assert_eq!(
                vnet::ones_sum(&pseudo),
                0xffff,
                "TCP checksum of segment {k}"
            );
            payload.extend_from_slice(&seg[40..]);
        }
        assert_eq!(payload, pkt[40..]);
    }

    #[test]
    fn refuses_what_it_cannot_cut() {
        let pkt = super_packet(3000);
        // A segment and its headers larger than a message.
        assert_eq!(
            cut(&gso(1400), &pkt, 1400, &mut |_| {}),
            Err(Refusal::Malformed)
        );
        let mut udp = pkt.clone();
        udp[9] = 17;
        assert_eq!(
            cut(&gso(1400), &udp, 1450, &mut |_| {}),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            cut(&gso(1400), &pkt[..30], 1450, &mut |_| {}),
            Err(Refusal::Malformed)
        );
    }
}
