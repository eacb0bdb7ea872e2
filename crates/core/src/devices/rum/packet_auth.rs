//! Every packet of a connection authenticated under the cluster key.
//!
//! The handshake is authenticated with HMAC-SHA256 under the key itself
//! ([`sign`]); it also fixes both ends' random connection ids. From
//! them each end derives one key per direction,
//! K(sender → receiver) = HMAC-SHA256(cluster key, label ‖ sender id ‖
//! receiver id) cut to 128 bits, and appends to every later packet a
//! trailer (`openvia_wire::rum::split_trailer`): a packet number counting
//! its datagrams, then the GMAC of the packet under that key with the
//! number as nonce. A datagram whose tag does not hold is dropped and
//! counted (`auth_failures`) before the protocol sees it. A new
//! connection has new ids, so new keys: nothing recorded from an earlier
//! one verifies. Replays within a connection are not refused here: the
//! protocol already discards a repeated segment or acknowledgement.

use openvia_wire::rum::{
    split_trailer, trailer_nonce, write_trailer, Packet, PacketType, AUTHENTICATOR_LEN,
    TRAILER_LEN, TRAILER_TAG_LEN,
};

use super::gmac::Gmac;
use super::mac::{hmac_sha256, tags_equal};

const LABEL: &[u8] = b"openvia rum packet key v1";

fn direction_key(cluster_key: &[u8], sender: u64, receiver: u64) -> [u8; 16] {
    let full = hmac_sha256(
        cluster_key,
        &[LABEL, &sender.to_be_bytes(), &receiver.to_be_bytes()],
    );
    let mut k = [0u8; 16];
    k.copy_from_slice(&full[..16]);
    k
}

/// The keys and packet counter of one connection.
pub struct PacketAuth {
    cluster_key: Vec<u8>,
    send: Gmac,
    recv: Gmac,
    next_number: u64,
}

/// What a received datagram turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened<'a> {
    /// A packet whose tag held, without its trailer.
    Packet(&'a [u8]),
    /// A handshake packet (a repeated accept) with a valid authenticator.
    Handshake,
    /// Neither: forged, corrupted or from another connection.
    Forged,
}

impl PacketAuth {
    pub fn new(cluster_key: &[u8], local_cid: u64, peer_cid: u64) -> Self {
        Self {
            cluster_key: cluster_key.to_vec(),
            send: Gmac::new(&direction_key(cluster_key, local_cid, peer_cid)),
            recv: Gmac::new(&direction_key(cluster_key, peer_cid, local_cid)),
            next_number: 0,
        }
    }

    /// Writes the trailer of the packet made of `parts` into the first
    /// [`TRAILER_LEN`] bytes of `out`.
    pub fn seal(&mut self, parts: &[&[u8]], out: &mut [u8]) {
        let number = self.next_number;
        self.next_number += 1;
        let tag = self.send.tag(&trailer_nonce(number), parts);
        // The caller reserves TRAILER_LEN bytes; a shorter `out` would be
        // a bug that the peer then sees as a forged packet.
        let _ = write_trailer(out, number, &tag);
    }

    /// Checks a received datagram.
    pub fn open<'a>(&self, datagram: &'a [u8]) -> Opened<'a> {
        if let Ok(t) = split_trailer(datagram) {
            let want: [u8; TRAILER_TAG_LEN] = self.recv.tag(&trailer_nonce(t.number), &[t.packet]);
            if tags_equal(&want, t.tag) {
                return Opened::Packet(t.packet);
            }
        }
        let handshake = datagram
            .get(3)
            .and_then(|&t| PacketType::from_u8(t))
            .is_some_and(PacketType::is_handshake);
        if handshake && verify(Some(&self.cluster_key), datagram) {
            Opened::Handshake
        } else {
            Opened::Forged
        }
    }
}

/// Fills the authenticator of a handshake datagram (no-op without a key
/// or for other packets).
pub fn sign(key: Option<&[u8]>, dg: &mut [u8]) {
    let Some(key) = key else { return };
    let Ok(mut p) = Packet::new_checked(&mut *dg) else {
        return;
    };
    let Some(range) = p.authenticator_range() else {
        return;
    };
    let zero = [0u8; AUTHENTICATOR_LEN];
    p.set_authenticator(&zero);
    let mac = hmac_sha256(key, &[p.as_bytes()]);
    let _ = range;
    p.set_authenticator(&mac);
}

/// Checks a handshake datagram's authenticator; without a key, requires
/// that none is claimed either (both ends must agree on using a key).
pub fn verify(key: Option<&[u8]>, dg: &[u8]) -> bool {
    let Ok(p) = Packet::new_checked(dg) else {
        return false;
    };
    match (key, p.authenticator_range()) {
        (None, None) => true,
        (Some(key), Some(range)) => {
            let mut copy = dg.to_vec();
            copy[range.clone()].fill(0);
            let mac = hmac_sha256(key, &[&copy]);
            tags_equal(&mac, &dg[range])
        }
        _ => false,
    }
}

/// Bytes the trailer adds to every datagram (0 without a key).
pub fn overhead(keyed: bool) -> usize {
    if keyed {
        TRAILER_LEN
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"a cluster key of enough bytes";

    fn sealed(a: &mut PacketAuth, packet: &[u8]) -> Vec<u8> {
        let mut dg = packet.to_vec();
        dg.resize(packet.len() + TRAILER_LEN, 0);
        a.seal(&[packet], &mut dg[packet.len()..]);
        dg
    }

    #[test]
    fn the_peer_opens_what_one_end_sealed() {
        let mut a = PacketAuth::new(KEY, 1, 2);
        let b = PacketAuth::new(KEY, 2, 1);
        let packet = [5u8; 100];
        let d1 = sealed(&mut a, &packet);
        let d2 = sealed(&mut a, &packet);
        assert_ne!(d1, d2, "each packet has its own number");
        assert_eq!(b.open(&d1), Opened::Packet(&packet[..]));
        assert_eq!(b.open(&d2), Opened::Packet(&packet[..]));
        // Not the sender itself (other direction), not another connection,
        // not another key.
        assert_eq!(a.open(&d1), Opened::Forged);
        assert_eq!(PacketAuth::new(KEY, 2, 3).open(&d1), Opened::Forged);
        assert_eq!(
            PacketAuth::new(b"another cluster key, also long", 2, 1).open(&d1),
            Opened::Forged
        );
    }

    /// The sender seals a header and a payload read in place (two parts,
    /// cut anywhere); the receiver opens one contiguous datagram.
    #[test]
    fn a_packet_sealed_in_parts_opens_whole() {
        let mut a = PacketAuth::new(KEY, 3, 4);
        let b = PacketAuth::new(KEY, 4, 3);
        let packet: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
        for cut in [0, 1, 37, 64, 1024, 1100, 8999, 9000] {
            let (head, payload) = packet.split_at(cut);
            let mut dg = packet.clone();
            dg.resize(packet.len() + TRAILER_LEN, 0);
            a.seal(&[head, payload], &mut dg[packet.len()..]);
            assert_eq!(b.open(&dg), Opened::Packet(&packet[..]), "cut at {cut}");
            let last = packet.len() - 1;
            dg[last] ^= 1;
            assert_eq!(
                b.open(&dg),
                Opened::Forged,
                "cut at {cut}, last byte changed"
            );
        }
    }

    #[test]
    fn any_changed_bit_is_refused() {
        let mut a = PacketAuth::new(KEY, 7, 9);
        let b = PacketAuth::new(KEY, 9, 7);
        let packet: Vec<u8> = (0..70u8).collect();
        let d = sealed(&mut a, &packet);
        for i in 0..d.len() {
            let mut f = d.clone();
            f[i] ^= 0x10;
            assert_eq!(b.open(&f), Opened::Forged, "bit flipped in byte {i}");
        }
        assert_eq!(b.open(&d[..d.len() - 1]), Opened::Forged);
        assert_eq!(b.open(&packet), Opened::Forged, "no trailer");
        assert_eq!(b.open(&[]), Opened::Forged);
    }
}
