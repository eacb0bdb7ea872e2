//! The authentication trailer a connection under a cluster key appends to
//! every packet after the handshake (both ends know from the handshake's
//! authenticator flag that it is there; nothing in the packet says so):
//!
//! | offset from the end | size | field                                   |
//! |--------------------:|-----:|-----------------------------------------|
//! |                 −24 |    8 | packet number, big-endian (the nonce)   |
//! |                 −16 |   16 | tag over the packet before the trailer  |
//!
//! The packet number counts the sender's datagrams on the connection
//! (retransmissions included), so no (key, nonce) pair repeats; the tag
//! is computed by the caller (the UDP device's per-connection GMAC).

use super::error::{EmitError, ParseError};
use super::packet::HEADER_LEN;

/// Bytes of the packet number.
pub const PACKET_NUMBER_LEN: usize = 8;
/// Bytes of the tag.
pub const TRAILER_TAG_LEN: usize = 16;
/// Bytes the trailer adds to a datagram.
pub const TRAILER_LEN: usize = PACKET_NUMBER_LEN + TRAILER_TAG_LEN;

/// A datagram taken apart: the packet the tag covers, then the trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailed<'a> {
    pub packet: &'a [u8],
    pub number: u64,
    pub tag: &'a [u8; TRAILER_TAG_LEN],
}

/// Splits off the trailer. The rest must still be long enough for a
/// packet header; the packet itself is checked by [`super::Packet`].
pub fn split_trailer(datagram: &[u8]) -> Result<Trailed<'_>, ParseError> {
    let need = HEADER_LEN + TRAILER_LEN;
    if datagram.len() < need {
        return Err(ParseError::Truncated {
            len: datagram.len(),
            need,
        });
    }
    let (packet, trailer) = datagram.split_at(datagram.len() - TRAILER_LEN);
    let (number, tag) = trailer.split_at(PACKET_NUMBER_LEN);
    let number = u64::from_be_bytes(
        number
            .try_into()
            .map_err(|_| ParseError::BadField("trailer"))?,
    );
    let tag = tag
        .try_into()
        .map_err(|_| ParseError::BadField("trailer"))?;
    Ok(Trailed {
        packet,
        number,
        tag,
    })
}

/// Writes a trailer into the first [`TRAILER_LEN`] bytes of `out`.
pub fn write_trailer(
    out: &mut [u8],
    number: u64,
    tag: &[u8; TRAILER_TAG_LEN],
) -> Result<(), EmitError> {
    let have = out.len();
    let out = out
        .get_mut(..TRAILER_LEN)
        .ok_or(EmitError::BufferTooSmall {
            need: TRAILER_LEN,
            have,
        })?;
    out[..PACKET_NUMBER_LEN].copy_from_slice(&number.to_be_bytes());
    out[PACKET_NUMBER_LEN..].copy_from_slice(tag);
    Ok(())
}

/// The 96-bit nonce of packet `number`.
pub fn trailer_nonce(number: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&number.to_be_bytes());
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut dg = vec![7u8; HEADER_LEN + 5 + TRAILER_LEN];
        let at = dg.len() - TRAILER_LEN;
        write_trailer(&mut dg[at..], 0x0102_0304_0506_0708, &[9; 16]).unwrap();
        let t = split_trailer(&dg).unwrap();
        assert_eq!(t.packet, &[7u8; HEADER_LEN + 5][..]);
        assert_eq!(t.number, 0x0102_0304_0506_0708);
        assert_eq!(t.tag, &[9; 16]);
        assert_eq!(trailer_nonce(t.number)[4..], t.number.to_be_bytes());
    }

    #[test]
    fn short_datagrams_are_refused() {
        for n in 0..HEADER_LEN + TRAILER_LEN {
            assert!(matches!(
                split_trailer(&vec![0u8; n]),
                Err(ParseError::Truncated { .. })
            ));
        }
        assert!(split_trailer(&[0u8; HEADER_LEN + TRAILER_LEN]).is_ok());
        let mut small = [0u8; TRAILER_LEN - 1];
        assert!(write_trailer(&mut small, 1, &[0; 16]).is_err());
    }
}
