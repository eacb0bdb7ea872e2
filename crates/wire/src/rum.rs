//! Datagrams of the reliable UDP transport (RUM).
//!
//! One UDP datagram carries exactly one RUM packet: a fixed 32-byte header
//! followed by a body whose layout depends on the packet type. Every packet,
//! data included, piggybacks the receiver feedback of the RUM paper
//! (cumulative ack, consumed sequence number, advertised window), so a
//! stream of data in both directions needs no separate acknowledgements.
//! [`Packet::new_checked`] validates every length and enumerated field once;
//! after that its accessors index only within checked bounds and never panic.
//! [`Repr`] is the owned/borrowed high-level form, parsed with [`Repr::parse`]
//! and written with [`Repr::emit`]. All integers are big-endian.
//!
//! Fixed header (32 bytes):
//!
//! | offset | size | field                                                       |
//! |-------:|-----:|-------------------------------------------------------------|
//! |      0 |    2 | magic `0x524D` ("RM")                                       |
//! |      2 |    1 | version (1)                                                 |
//! |      3 |    1 | packet type (see [`PacketType`])                            |
//! |      4 |    1 | flags (bit 0 `ACK_REQUEST`; other bits must be 0)           |
//! |      5 |    1 | reserved, 0                                                 |
//! |      6 |    2 | body length: datagram length − 32, exactly                  |
//! |      8 |    8 | destination connection id (0 only in a connect request)     |
//! |     16 |    4 | seq: DATA = this segment's number; else sender's next seq   |
//! |     20 |    4 | ack: every segment before this number has been received     |
//! |     24 |    4 | consumed: every segment before this has been placed         |
//! |     28 |    4 | window: segments the receiver accepts past `consumed` (Hetero) |
//!
//! DATA body (32 bytes + payload):
//!
//! | offset | size | field                                                  |
//! |-------:|-----:|--------------------------------------------------------|
//! |      0 |    4 | message id                                             |
//! |      4 |    4 | offset of this segment's payload inside the message    |
//! |      8 |    4 | total message length                                   |
//! |     12 |    1 | VIA op: 0 send, 1 RDMA write, 2 RDMA read request, 3 RDMA read response |
//! |     13 |    1 | data flags: bit 0 immediate data present               |
//! |     14 |    2 | reserved, 0                                            |
//! |     16 |    4 | immediate data                                         |
//! |     20 |    4 | memory handle (RDMA)                                   |
//! |     24 |    8 | remote address (RDMA)                                  |
//! |     32 |    n | payload; offset + n ≤ total length                     |
//!
//! ACK body (4 + 8·k bytes): SACK block count k (≤ [`MAX_SACK_BLOCKS`]),
//! 3 reserved bytes, then k blocks of (start, end) sequence numbers, end
//! exclusive, each non-empty: segments received beyond the cumulative ack.
//!
//! CONNECT_REQUEST / CONNECT_ACCEPT / CONNECT_REJECT body (32 + u + a bytes):
//!
//! | offset | size | field                                                   |
//! |-------:|-----:|---------------------------------------------------------|
//! |      0 |    8 | sender's connection id (the peer writes it in headers)  |
//! |      8 |    2 | VIA reliability level (0x1, 0x2 or 0x4)                  |
//! |     10 |    1 | attribute flags: bit 0 RDMA write, bit 1 RDMA read, bit 2 authenticator present |
//! |     11 |    1 | flow mode: 0 Hetero, 1 Homo; bit 7 flow-control-only    |
//! |     12 |    4 | max transfer size (bytes)                               |
//! |     16 |    4 | segment payload size (bytes)                            |
//! |     20 |    4 | receive window (segments)                               |
//! |     24 |    4 | reject reason (REJECT), else 0                          |
//! |     28 |    1 | user data length u (≤ [`MAX_USER_DATA`])                |
//! |     29 |    3 | reserved, 0                                             |
//! |     32 |    u | user data (e.g. the discriminator), opaque here         |
//! |   32+u |   32 | authenticator, only when flag bit 2 is set              |
//!
//! The authenticator is a cluster-key MAC computed by the caller over the
//! whole datagram with the 32 authenticator bytes set to zero
//! ([`Packet::authenticator_range`] says where they are).
//!
//! KEEPALIVE: empty body. DISCONNECT: 4-byte reason code.
//!
//! Under a cluster key every packet after the handshake is followed by a
//! 24-byte trailer (packet number, tag): see [`split_trailer`].

mod error;
mod handshake;
#[cfg(test)]
mod mutation_tests;
mod packet;
mod repr;
#[cfg(test)]
mod tests;
mod trailer;

pub use error::{EmitError, ParseError};
pub use handshake::{FlowMode, HandshakeRepr, AUTHENTICATOR_LEN, MAX_USER_DATA};
pub use packet::{Packet, PacketType, HEADER_LEN};
pub use repr::{AckRepr, Body, DataRepr, HeaderRepr, Repr, SackBlock, SackBlocks, ViaOp};
pub use trailer::{
    split_trailer, trailer_nonce, write_trailer, Trailed, PACKET_NUMBER_LEN, TRAILER_LEN,
    TRAILER_TAG_LEN,
};

/// Magic number at offset 0 ("RM").
pub const MAGIC: u16 = 0x524D;
/// The one version this code speaks.
pub const VERSION: u8 = 1;
/// Header flag: the receiver should answer with an ACK at once.
pub const FLAG_ACK_REQUEST: u8 = 0x01;
/// Length of the DATA body before the payload.
pub const DATA_HEADER_LEN: usize = 32;
/// Header plus DATA header: the per-segment overhead inside a UDP payload.
pub const DATA_OVERHEAD: usize = HEADER_LEN + DATA_HEADER_LEN;
/// Most SACK blocks one ACK carries (1 028 bytes of body, within an MTU
/// of 1500): at 20 % loss a window of a few thousand segments has
/// hundreds of holes, and a sender told of 16 at a time (the first limit)
/// recovered a few per round trip.
pub const MAX_SACK_BLOCKS: usize = 128;
/// Largest UDP payload (IPv4): a datagram longer than this cannot be sent.
pub const MAX_DATAGRAM: usize = 65507;
