//! Typed errors of the Ethernet framing.

use crate::rum::ParseError;

/// Why a frame or a RUM datagram could not be translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EtherError {
    /// Shorter than the header or than the lengths it announces.
    #[error("frame truncated: {len} bytes, need {need}")]
    Truncated { len: usize, need: usize },
    /// An unknown kind byte.
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    /// A reserved bit or byte is set, or an optional field is present
    /// where its absence is the one encoding (non-canonical).
    #[error("bad value in field {0}")]
    BadField(&'static str),
    /// The connection id does not fit the 16-bit destination id.
    #[error("connection id {0:#x} does not fit 16 bits")]
    IdTooLarge(u64),
    /// The destination id of the prefix and the RUM header's disagree.
    #[error("destination id {frame} but RUM connection id {rum}")]
    IdMismatch { frame: u16, rum: u64 },
    /// Bytes after the RUM packet are neither nothing nor one trailer.
    #[error("{0} bytes after the RUM packet (0 or 24 allowed)")]
    BadTail(usize),
    /// Too little headroom in front of the frame to expand it.
    #[error("headroom {have} bytes, need {need}")]
    Headroom { have: usize, need: usize },
    /// The frame is not a RUM packet (a resolution frame).
    #[error("frame kind {0} carries no RUM packet")]
    NotRum(u8),
    /// The RUM packet itself is invalid.
    #[error("RUM: {0}")]
    Rum(#[from] ParseError),
}
