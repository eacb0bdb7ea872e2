//! High-level form of a RUM packet: what the protocol core builds and reads.
//! Parsing goes through [`Packet::new_checked`], so a `Repr` only ever
//! describes a datagram that passed every check.

use super::error::{EmitError, ParseError};
use super::handshake::HandshakeRepr;
use super::packet::{Packet, PacketType, HEADER_LEN};
use super::{DATA_HEADER_LEN, FLAG_ACK_REQUEST, MAGIC, MAX_DATAGRAM, MAX_SACK_BLOCKS, VERSION};

/// The VIA operation a message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ViaOp {
    Send = 0,
    RdmaWrite = 1,
    RdmaReadRequest = 2,
    RdmaReadResponse = 3,
}

impl ViaOp {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Send,
            1 => Self::RdmaWrite,
            2 => Self::RdmaReadRequest,
            3 => Self::RdmaReadResponse,
            _ => return None,
        })
    }
}

/// Fields of the fixed header (magic, version, type and length are implied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderRepr {
    pub conn_id: u64,
    pub ack_request: bool,
    pub seq: u32,
    pub ack: u32,
    pub consumed: u32,
    pub window: u32,
}

/// One DATA segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRepr<'a> {
    pub msg_id: u32,
    pub offset: u32,
    pub total_len: u32,
    pub op: ViaOp,
    pub immediate: Option<u32>,
    pub mem_handle: u32,
    pub remote_addr: u64,
    pub payload: &'a [u8],
}

/// A range of received segments beyond the cumulative ack, end exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SackBlock {
    pub start: u32,
    pub end: u32,
}

/// An ACK body: up to [`MAX_SACK_BLOCKS`] SACK blocks, stored inline so
/// building one never allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRepr {
    blocks: [SackBlock; MAX_SACK_BLOCKS],
    count: u8,
}

impl Default for AckRepr {
    fn default() -> Self {
        Self {
            blocks: [SackBlock::default(); MAX_SACK_BLOCKS],
            count: 0,
        }
    }
}

impl AckRepr {
    /// Adds a block; returns false when full.
    pub fn push(&mut self, block: SackBlock) -> bool {
        if (self.count as usize) < MAX_SACK_BLOCKS {
            self.blocks[self.count as usize] = block;
            self.count += 1;
            true
        } else {
            false
        }
    }
    pub fn blocks(&self) -> &[SackBlock] {
        &self.blocks[..self.count as usize]
    }
    /// The blocks as an ACK body to emit.
    pub fn as_body(&self) -> SackBlocks<'_> {
        SackBlocks::Built(self.blocks())
    }
}

/// The SACK blocks of an ACK body: read in place from a parsed packet
/// (already checked), or those of an [`AckRepr`] to emit. In place, so
/// that [`Body`] stays small: an inline array of
/// [`MAX_SACK_BLOCKS`] would be copied with every DATA packet parsed.
#[derive(Debug, Clone, Copy)]
pub enum SackBlocks<'a> {
    /// 8 bytes per block, start and end big-endian.
    Wire(&'a [u8]),
    Built(&'a [SackBlock]),
}

impl<'a> SackBlocks<'a> {
    pub fn len(&self) -> usize {
        match self {
            Self::Wire(b) => b.len() / 8,
            Self::Built(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> impl Iterator<Item = SackBlock> + 'a {
        let (wire, built): (&'a [u8], &'a [SackBlock]) = match *self {
            Self::Wire(b) => (b, &[]),
            Self::Built(b) => (&[], b),
        };
        let be = |c: &[u8]| u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        wire.chunks_exact(8)
            .map(move |c| SackBlock {
                start: be(&c[..4]),
                end: be(&c[4..]),
            })
            .chain(built.iter().copied())
    }
}

impl PartialEq for SackBlocks<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for SackBlocks<'_> {}

/// The type-specific part of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    Data(DataRepr<'a>),
    Ack(SackBlocks<'a>),
    ConnectRequest(HandshakeRepr<'a>),
    ConnectAccept(HandshakeRepr<'a>),
    ConnectReject(HandshakeRepr<'a>),
    Keepalive,
    Disconnect { reason: u32 },
}

/// A whole packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    pub header: HeaderRepr,
    pub body: Body<'a>,
}

impl<'a> Repr<'a> {
    /// Checks and decodes one datagram.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let p = Packet::new_checked(bytes)?;
        let header = HeaderRepr {
            conn_id: p.conn_id(),
            ack_request: p.ack_requested(),
            seq: p.seq(),
            ack: p.ack(),
            consumed: p.consumed(),
            window: p.window(),
        };
        let body = match p.packet_type() {
            PacketType::Data => Body::Data(DataRepr {
                msg_id: p.msg_id(),
                offset: p.msg_offset(),
                total_len: p.msg_total_len(),
                op: ViaOp::from_u8(p.op_code()).ok_or(ParseError::BadField("via op"))?,
                immediate: p.has_immediate().then(|| p.immediate()),
                mem_handle: p.mem_handle(),
                remote_addr: p.remote_addr(),
                payload: &bytes[HEADER_LEN + DATA_HEADER_LEN..],
            }),
            PacketType::Ack => {
                let k = p.sack_count();
                Body::Ack(SackBlocks::Wire(
                    &bytes[HEADER_LEN + 4..HEADER_LEN + 4 + 8 * k],
                ))
            }
            PacketType::ConnectRequest => {
                Body::ConnectRequest(HandshakeRepr::parse(&bytes[HEADER_LEN..]))
            }
            PacketType::ConnectAccept => {
                Body::ConnectAccept(HandshakeRepr::parse(&bytes[HEADER_LEN..]))
            }
            PacketType::ConnectReject => {
                Body::ConnectReject(HandshakeRepr::parse(&bytes[HEADER_LEN..]))
            }
            PacketType::Keepalive => Body::Keepalive,
            PacketType::Disconnect => Body::Disconnect {
                reason: p.disconnect_reason(),
            },
        };
        Ok(Self { header, body })
    }

    pub fn packet_type(&self) -> PacketType {
        match self.body {
            Body::Data(_) => PacketType::Data,
            Body::Ack(_) => PacketType::Ack,
            Body::ConnectRequest(_) => PacketType::ConnectRequest,
            Body::ConnectAccept(_) => PacketType::ConnectAccept,
            Body::ConnectReject(_) => PacketType::ConnectReject,
            Body::Keepalive => PacketType::Keepalive,
            Body::Disconnect { .. } => PacketType::Disconnect,
        }
    }

    fn body_len(&self) -> usize {
        match &self.body {
            Body::Data(d) => DATA_HEADER_LEN + d.payload.len(),
            Body::Ack(a) => 4 + 8 * a.len(),
            Body::ConnectRequest(h) | Body::ConnectAccept(h) | Body::ConnectReject(h) => {
                h.body_len()
            }
            Body::Keepalive => 0,
            Body::Disconnect { .. } => 4,
        }
    }

    /// Bytes [`Self::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.body_len()
    }

    /// Writes the packet at the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        self.emit_with_tail(buf, 0)
    }

    /// Writes a data packet's headers, announcing `payload_len` bytes of
    /// payload that the caller sends from its own memory right behind them
    /// (scatter-gather), without copying them; `d.payload` must be empty.
    /// Returns the header bytes written: the datagram on the wire is those
    /// followed by the payload.
    pub fn emit_data_header(
        header: HeaderRepr,
        d: DataRepr<'_>,
        payload_len: usize,
        buf: &mut [u8],
    ) -> Result<usize, EmitError> {
        if !d.payload.is_empty() {
            return Err(EmitError::FieldRange("payload given with its length"));
        }
        Repr {
            header,
            body: Body::Data(d),
        }
        .emit_with_tail(buf, payload_len)
    }

    /// `emit`, with `tail` bytes of data payload the caller appends.
    fn emit_with_tail(&self, buf: &mut [u8], tail: usize) -> Result<usize, EmitError> {
        let len = self.buffer_len();
        if len + tail > MAX_DATAGRAM {
            return Err(EmitError::FieldRange("datagram length"));
        }
        if buf.len() < len {
            return Err(EmitError::BufferTooSmall {
                need: len,
                have: buf.len(),
            });
        }
        let ty = self.packet_type();
        if tail > 0 && ty != PacketType::Data {
            return Err(EmitError::FieldRange("payload on a packet without data"));
        }
        if self.header.conn_id == 0 && ty != PacketType::ConnectRequest {
            return Err(EmitError::FieldRange("connection id"));
        }
        let b = &mut buf[..len];
        let h = &self.header;
        b[0..2].copy_from_slice(&MAGIC.to_be_bytes());
        b[2] = VERSION;
        b[3] = ty as u8;
        b[4] = if h.ack_request { FLAG_ACK_REQUEST } else { 0 };
        b[5] = 0;
        b[6..8].copy_from_slice(&((self.body_len() + tail) as u16).to_be_bytes());
        b[8..16].copy_from_slice(&h.conn_id.to_be_bytes());
        b[16..20].copy_from_slice(&h.seq.to_be_bytes());
        b[20..24].copy_from_slice(&h.ack.to_be_bytes());
        b[24..28].copy_from_slice(&h.consumed.to_be_bytes());
        b[28..32].copy_from_slice(&h.window.to_be_bytes());
        let body = &mut b[HEADER_LEN..];
        match &self.body {
            Body::Data(d) => emit_data(d, tail, body)?,
            Body::Ack(a) => {
                if a.len() > MAX_SACK_BLOCKS {
                    return Err(EmitError::FieldRange("sack count"));
                }
                body[0] = a.len() as u8;
                body[1..4].fill(0);
                for (i, blk) in a.iter().enumerate() {
                    let span = blk.end.wrapping_sub(blk.start);
                    if span == 0 || span > u32::MAX / 2 {
                        return Err(EmitError::FieldRange("sack block"));
                    }
                    body[4 + 8 * i..8 + 8 * i].copy_from_slice(&blk.start.to_be_bytes());
                    body[8 + 8 * i..12 + 8 * i].copy_from_slice(&blk.end.to_be_bytes());
                }
            }
            Body::ConnectRequest(hs) | Body::ConnectAccept(hs) | Body::ConnectReject(hs) => {
                hs.emit(body)?
            }
            Body::Keepalive => {}
            Body::Disconnect { reason } => body.copy_from_slice(&reason.to_be_bytes()),
        }
        Ok(len)
    }
}

/// `tail`: payload bytes that follow outside `body` (see `emit_data_header`).
fn emit_data(d: &DataRepr<'_>, tail: usize, body: &mut [u8]) -> Result<(), EmitError> {
    let n = (d.payload.len() + tail) as u64;
    if d.offset as u64 + n > d.total_len as u64 {
        return Err(EmitError::FieldRange("segment past message end"));
    }
    if n == 0 && d.total_len != 0 {
        return Err(EmitError::FieldRange("empty segment"));
    }
    body[0..4].copy_from_slice(&d.msg_id.to_be_bytes());
    body[4..8].copy_from_slice(&d.offset.to_be_bytes());
    body[8..12].copy_from_slice(&d.total_len.to_be_bytes());
    body[12] = d.op as u8;
    body[13] = u8::from(d.immediate.is_some());
    body[14..16].fill(0);
    body[16..20].copy_from_slice(&d.immediate.unwrap_or(0).to_be_bytes());
    body[20..24].copy_from_slice(&d.mem_handle.to_be_bytes());
    body[24..32].copy_from_slice(&d.remote_addr.to_be_bytes());
    body[DATA_HEADER_LEN..].copy_from_slice(d.payload);
    Ok(())
}
