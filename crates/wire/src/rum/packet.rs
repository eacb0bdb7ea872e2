//! The checked view of one RUM datagram: validated once, then read through
//! accessors that only index inside bounds proven by [`Packet::check`].

use super::error::ParseError;
use super::handshake::{
    check_handshake, ATTR_AUTH, AUTHENTICATOR_LEN, HS_ATTR_FLAGS, HS_USER_LEN, HS_USER_OFF,
};
use super::{DATA_HEADER_LEN, FLAG_ACK_REQUEST, MAGIC, MAX_SACK_BLOCKS, VERSION};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 32;

/// Kinds of RUM packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    Data = 1,
    Ack = 2,
    ConnectRequest = 3,
    ConnectAccept = 4,
    ConnectReject = 5,
    Keepalive = 6,
    Disconnect = 7,
}

impl PacketType {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Data,
            2 => Self::Ack,
            3 => Self::ConnectRequest,
            4 => Self::ConnectAccept,
            5 => Self::ConnectReject,
            6 => Self::Keepalive,
            7 => Self::Disconnect,
            _ => return None,
        })
    }

    /// Whether the body is a handshake body.
    pub fn is_handshake(self) -> bool {
        matches!(
            self,
            Self::ConnectRequest | Self::ConnectAccept | Self::ConnectReject
        )
    }
}

/// A RUM datagram over any byte container.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    // Validated in `check`, so accessors need no second decode.
    packet_type: PacketType,
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validates every length and enumerated field of `buffer`.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let packet_type = Self::check(buffer.as_ref())?;
        Ok(Self {
            buffer,
            packet_type,
        })
    }

    fn check(b: &[u8]) -> Result<PacketType, ParseError> {
        if b.len() < HEADER_LEN {
            return Err(ParseError::Truncated {
                len: b.len(),
                need: HEADER_LEN,
            });
        }
        let magic = be16(b, 0);
        if magic != MAGIC {
            return Err(ParseError::BadMagic(magic));
        }
        if b[2] != VERSION {
            return Err(ParseError::BadVersion(b[2]));
        }
        let ty = PacketType::from_u8(b[3]).ok_or(ParseError::BadType(b[3]))?;
        if b[4] & !FLAG_ACK_REQUEST != 0 {
            return Err(ParseError::BadFlags(b[4]));
        }
        if b[5] != 0 {
            return Err(ParseError::BadField("header reserved"));
        }
        let body_len = be16(b, 6) as usize;
        let need = HEADER_LEN + body_len;
        if b.len() < need {
            return Err(ParseError::Truncated { len: b.len(), need });
        }
        if b.len() > need {
            return Err(ParseError::BadLength {
                field: "body length",
                value: body_len,
            });
        }
        let body = &b[HEADER_LEN..];
        let conn_id = be64(b, 8);
        if conn_id == 0 && ty != PacketType::ConnectRequest {
            return Err(ParseError::BadField("connection id"));
        }
        match ty {
            PacketType::Data => check_data(body)?,
            PacketType::Ack => check_ack(body)?,
            PacketType::Keepalive => exact(body, 0, "keepalive body")?,
            PacketType::Disconnect => exact(body, 4, "disconnect body")?,
            _ => check_handshake(body)?,
        }
        Ok(ty)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    fn body(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }

    pub fn packet_type(&self) -> PacketType {
        self.packet_type
    }
    pub fn flags(&self) -> u8 {
        self.b()[4]
    }
    pub fn ack_requested(&self) -> bool {
        self.flags() & FLAG_ACK_REQUEST != 0
    }
    pub fn conn_id(&self) -> u64 {
        be64(self.b(), 8)
    }
    pub fn seq(&self) -> u32 {
        be32(self.b(), 16)
    }
    pub fn ack(&self) -> u32 {
        be32(self.b(), 20)
    }
    pub fn consumed(&self) -> u32 {
        be32(self.b(), 24)
    }
    pub fn window(&self) -> u32 {
        be32(self.b(), 28)
    }

    // DATA accessors: meaningful only for `PacketType::Data`; on other types
    // they return 0 / empty rather than panic.
    fn data_field32(&self, at: usize) -> u32 {
        if self.packet_type == PacketType::Data {
            be32(self.body(), at)
        } else {
            0
        }
    }
    pub fn msg_id(&self) -> u32 {
        self.data_field32(0)
    }
    pub fn msg_offset(&self) -> u32 {
        self.data_field32(4)
    }
    pub fn msg_total_len(&self) -> u32 {
        self.data_field32(8)
    }
    pub fn op_code(&self) -> u8 {
        if self.packet_type == PacketType::Data {
            self.body()[12]
        } else {
            0
        }
    }
    pub fn has_immediate(&self) -> bool {
        self.packet_type == PacketType::Data && self.body()[13] & 1 != 0
    }
    pub fn immediate(&self) -> u32 {
        self.data_field32(16)
    }
    pub fn mem_handle(&self) -> u32 {
        self.data_field32(20)
    }
    pub fn remote_addr(&self) -> u64 {
        if self.packet_type == PacketType::Data {
            be64(self.body(), 24)
        } else {
            0
        }
    }
    /// The payload bytes of a DATA packet (empty for other types).
    pub fn payload(&self) -> &[u8] {
        if self.packet_type == PacketType::Data {
            &self.body()[DATA_HEADER_LEN..]
        } else {
            &[]
        }
    }

    /// Number of SACK blocks of an ACK packet (0 for other types).
    pub fn sack_count(&self) -> usize {
        if self.packet_type == PacketType::Ack {
            self.body()[0] as usize
        } else {
            0
        }
    }
    /// SACK block `i` as (start, end); `None` past [`Self::sack_count`].
    pub fn sack_block(&self, i: usize) -> Option<(u32, u32)> {
        if i >= self.sack_count() {
            return None;
        }
        let at = 4 + 8 * i;
        Some((be32(self.body(), at), be32(self.body(), at + 4)))
    }

    /// The handshake body (empty slice for other types).
    pub(crate) fn handshake_body(&self) -> &[u8] {
        if self.packet_type.is_handshake() {
            self.body()
        } else {
            &[]
        }
    }

    /// Disconnect reason (0 for other types).
    pub fn disconnect_reason(&self) -> u32 {
        if self.packet_type == PacketType::Disconnect {
            be32(self.body(), 0)
        } else {
            0
        }
    }

    /// Byte range of the authenticator inside the datagram, if present.
    pub fn authenticator_range(&self) -> Option<std::ops::Range<usize>> {
        let body = self.handshake_body();
        if body.is_empty() || body[HS_ATTR_FLAGS] & ATTR_AUTH == 0 {
            return None;
        }
        let start = HEADER_LEN + HS_USER_OFF + body[HS_USER_LEN] as usize;
        Some(start..start + AUTHENTICATOR_LEN)
    }

    /// The authenticator bytes, if present.
    pub fn authenticator(&self) -> Option<&[u8]> {
        let r = self.authenticator_range()?;
        Some(&self.b()[r])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Overwrites the authenticator (after the caller computed its MAC over
    /// the datagram with these bytes zeroed). Returns false if absent.
    pub fn set_authenticator(&mut self, mac: &[u8; AUTHENTICATOR_LEN]) -> bool {
        match self.authenticator_range() {
            Some(r) => {
                self.buffer.as_mut()[r].copy_from_slice(mac);
                true
            }
            None => false,
        }
    }
}

fn exact(body: &[u8], len: usize, field: &'static str) -> Result<(), ParseError> {
    if body.len() != len {
        return Err(ParseError::BadLength {
            field,
            value: body.len(),
        });
    }
    Ok(())
}

fn check_data(body: &[u8]) -> Result<(), ParseError> {
    if body.len() < DATA_HEADER_LEN {
        return Err(ParseError::Truncated {
            len: HEADER_LEN + body.len(),
            need: HEADER_LEN + DATA_HEADER_LEN,
        });
    }
    if body[12] > 3 {
        return Err(ParseError::BadField("via op"));
    }
    if body[13] & !1 != 0 || be16(body, 14) != 0 {
        return Err(ParseError::BadField("data flags"));
    }
    // Canonical form: immediate bytes are zero unless flagged present.
    if body[13] & 1 == 0 && be32(body, 16) != 0 {
        return Err(ParseError::BadField("immediate without flag"));
    }
    let offset = be32(body, 4) as u64;
    let total = be32(body, 8) as u64;
    let n = (body.len() - DATA_HEADER_LEN) as u64;
    if offset + n > total {
        return Err(ParseError::BadLength {
            field: "segment past message end",
            value: (offset + n) as usize,
        });
    }
    // Only an empty message may carry an empty segment: any other empty
    // segment would be a no-op the receiver cannot account for.
    if n == 0 && total != 0 {
        return Err(ParseError::BadLength {
            field: "empty segment",
            value: 0,
        });
    }
    Ok(())
}

fn check_ack(body: &[u8]) -> Result<(), ParseError> {
    if body.len() < 4 {
        return Err(ParseError::Truncated {
            len: HEADER_LEN + body.len(),
            need: HEADER_LEN + 4,
        });
    }
    let k = body[0] as usize;
    if k > MAX_SACK_BLOCKS {
        return Err(ParseError::BadLength {
            field: "sack count",
            value: k,
        });
    }
    if body[1..4] != [0, 0, 0] {
        return Err(ParseError::BadField("ack reserved"));
    }
    exact(body, 4 + 8 * k, "ack body")?;
    for i in 0..k {
        let (s, e) = (be32(body, 4 + 8 * i), be32(body, 8 + 8 * i));
        // Non-empty in wrapping sequence space, and shorter than half of it.
        let span = e.wrapping_sub(s);
        if span == 0 || span > u32::MAX / 2 {
            return Err(ParseError::BadField("sack block"));
        }
    }
    Ok(())
}
