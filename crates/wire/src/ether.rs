//! Frames of the Ethernet device: RUM carried straight in Ethernet frames
//! of our own EtherType, without IP or UDP, as M-VIA did.
//!
//! The RUM protocol core is unchanged; only the framing differs. Every
//! frame payload (the bytes after the 14-byte Ethernet header) opens with
//! the destination connection id (16 bits, big-endian, offset
//! [`DST_ID_OFFSET`]) so that a kernel filter separates connections, and a
//! kind byte:
//!
//! - [`KIND_DATA`]: a RUM DATA packet translated into a compact header of
//!   26 bytes (40 with the Ethernet header, M-VIA's is 42) for a message
//!   carried whole in one frame; segments of longer messages, immediate
//!   data and RDMA add 8, 4 and 12 bytes of optional fields.
//! - [`KIND_RUM`]: any RUM datagram verbatim behind a 4-byte prefix (ACK
//!   with SACK, CONNECT_*, KEEPALIVE, DISCONNECT).
//! - [`KIND_RESOLVE_REQUEST`] / [`KIND_RESOLVE_REPLY`]: "who has VIA host
//!   address X", broadcast, and its answer with the MAC, so the device
//!   finds a peer's MAC without the kernel's ARP.
//!
//! Translation is exact: [`encode`] of a RUM datagram and [`expand_in_place`]
//! of the frame give back the very same bytes, trailer included, so the
//! cluster-key tag computed over the RUM bytes still verifies. The send
//! side writes only a small header ([`FrameHead`]) and gathers the rest of
//! the datagram from where it lies; the receive side rewrites a compact
//! header into a RUM header in the headroom in front of the frame
//! ([`EXPAND_HEADROOM`] bytes), never moving the payload. Frames may be
//! longer than they announce (Ethernet pads short frames to 60 bytes): the
//! padding is ignored. Layout tables: `docs/ether.md`.

mod compact;
mod error;
mod resolve;
#[cfg(test)]
mod tests;

pub use compact::{
    encode, expand_headroom, expand_in_place, frame_from_rum, to_rum, FrameHead, MAX_HEAD_LEN,
};
pub use error::EtherError;
pub use resolve::{HostAddr, ResolveRepr, RESOLVE_LEN};

/// Our EtherType: IEEE 802 "local experimental ethertype 1" (IEEE Std
/// 802-2014 §9.2.4), reserved for private protocols on one network, as
/// this one is; 0x88B6 (experimental 2) stays free for a future layout.
pub const ETHERTYPE: u16 = 0x88B5;

/// Offset of the 16-bit big-endian destination connection id in every
/// frame payload (for [`KIND_RESOLVE_REQUEST`]/[`KIND_RESOLVE_REPLY`] 0).
pub const DST_ID_OFFSET: usize = 0;
/// Offset of the kind byte.
pub const KIND_OFFSET: usize = 2;
/// The destination id of the host's connection agent: connect requests
/// and resolution (the well-known port of the UDP device).
pub const AGENT_ID: u16 = 0;

/// A RUM DATA packet in the compact form.
pub const KIND_DATA: u8 = 1;
/// A RUM datagram verbatim behind the 4-byte prefix.
pub const KIND_RUM: u8 = 2;
/// "Who has this VIA host address?", broadcast.
pub const KIND_RESOLVE_REQUEST: u8 = 3;
/// The answer: the address and its MAC.
pub const KIND_RESOLVE_REPLY: u8 = 4;

/// Bytes of the compact DATA header without optional fields.
pub const COMPACT_BASE_LEN: usize = 26;
/// Bytes of the prefix in front of a verbatim RUM datagram.
pub const RUM_PREFIX_LEN: usize = 4;
/// Headroom [`expand_in_place`] needs in front of a frame: a RUM DATA
/// header (64 bytes) replaces a compact header of at least 26.
pub const EXPAND_HEADROOM: usize =
    crate::rum::HEADER_LEN + crate::rum::DATA_HEADER_LEN - COMPACT_BASE_LEN;

/// Reads the destination id and kind of a frame payload.
pub fn peek(payload: &[u8]) -> Result<(u16, u8), EtherError> {
    if payload.len() < KIND_OFFSET + 1 {
        return Err(EtherError::Truncated {
            len: payload.len(),
            need: KIND_OFFSET + 1,
        });
    }
    let dst = u16::from_be_bytes([payload[0], payload[1]]);
    Ok((dst, payload[KIND_OFFSET]))
}
