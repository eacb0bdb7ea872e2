//! Typed errors of RUM parsing and emission. The wire crate has no
//! dependencies, so `Display` and `Error` are written out here instead of
//! derived.

use std::fmt;

/// Why a datagram was rejected by [`super::Packet::new_checked`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Shorter than the header or than the lengths it announces.
    Truncated { len: usize, need: usize },
    /// The magic number is not [`super::MAGIC`].
    BadMagic(u16),
    /// A version this code does not speak.
    BadVersion(u8),
    /// An unknown packet type.
    BadType(u8),
    /// Reserved flag bits were set.
    BadFlags(u8),
    /// The body length field disagrees with the datagram length, or a
    /// type-specific length (SACK count, user data, payload) is out of range.
    BadLength { field: &'static str, value: usize },
    /// An enumerated or reserved field holds a value that is not allowed.
    BadField(&'static str),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { len, need } => {
                write!(f, "datagram truncated: {len} bytes, need {need}")
            }
            Self::BadMagic(m) => write!(f, "bad magic {m:#06x}"),
            Self::BadVersion(v) => write!(f, "unsupported version {v}"),
            Self::BadType(t) => write!(f, "unknown packet type {t}"),
            Self::BadFlags(b) => write!(f, "reserved flag bits set: {b:#04x}"),
            Self::BadLength { field, value } => write!(f, "bad length {field} = {value}"),
            Self::BadField(name) => write!(f, "bad value in field {name}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Why [`super::Repr::emit`] could not write a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitError {
    /// The output buffer is shorter than [`super::Repr::buffer_len`].
    BufferTooSmall { need: usize, have: usize },
    /// A field does not fit its wire encoding.
    FieldRange(&'static str),
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BufferTooSmall { need, have } => {
                write!(f, "buffer too small: need {need} bytes, have {have}")
            }
            Self::FieldRange(name) => write!(f, "field {name} out of range"),
        }
    }
}

impl std::error::Error for EmitError {}
