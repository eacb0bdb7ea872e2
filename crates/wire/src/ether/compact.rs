//! Translation between RUM datagrams and frame payloads: the compact DATA
//! header and the verbatim prefix. Both directions go through the RUM
//! emitter for the DATA header, so the bytes rebuilt on the receive side
//! are by construction the ones the sender's RUM core wrote (the encoder
//! refuses any header the emitter would not reproduce exactly).

use std::ops::Range;

use super::error::EtherError;
use super::{
    peek, COMPACT_BASE_LEN, KIND_DATA, KIND_RESOLVE_REPLY, KIND_RESOLVE_REQUEST, KIND_RUM,
    RUM_PREFIX_LEN,
};
use crate::rum::{
    DataRepr, HeaderRepr, PacketType, ParseError, Repr, ViaOp, DATA_HEADER_LEN, FLAG_ACK_REQUEST,
    HEADER_LEN, MAGIC, TRAILER_LEN, VERSION,
};

/// Flag bits of a compact DATA header (byte 3). `FLAG_TRAILER` also
/// flags a verbatim prefix; no other bit may be set there.
const FLAG_ACK: u8 = 0x01;
const FLAG_TRAILER: u8 = 0x02;
const FLAG_SEGMENT: u8 = 0x04;
const FLAG_IMMEDIATE: u8 = 0x08;
const FLAG_RDMA: u8 = 0x10;
const OP_SHIFT: u8 = 5;
const OP_MASK: u8 = 0x60;
const FLAG_RESERVED: u8 = 0x80;

/// Bytes of the optional fields: segment (offset, total), immediate,
/// RDMA (memory handle, remote address).
const SEGMENT_LEN: usize = 8;
const IMMEDIATE_LEN: usize = 4;
const RDMA_LEN: usize = 12;

/// The longest frame header [`encode`] writes (compact DATA with every
/// optional field).
pub const MAX_HEAD_LEN: usize = COMPACT_BASE_LEN + SEGMENT_LEN + IMMEDIATE_LEN + RDMA_LEN;

/// RUM header plus DATA header: what a compact header stands for.
const RUM_DATA_HEAD: usize = HEADER_LEN + DATA_HEADER_LEN;

/// The frame header of one RUM datagram: the frame payload is
/// [`Self::bytes`] followed by the datagram from [`Self::rum_skip`] on,
/// gathered from wherever the caller holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    buf: [u8; MAX_HEAD_LEN],
    len: u8,
    skip: u8,
}

impl FrameHead {
    /// The header bytes to send first.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
    /// How many leading bytes of the RUM datagram the header replaces
    /// (64 for compact DATA, 0 for a verbatim datagram).
    pub fn rum_skip(&self) -> usize {
        self.skip as usize
    }
    /// Whether the datagram went into the compact DATA form.
    pub fn is_compact(&self) -> bool {
        self.skip != 0
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

/// Builds the frame header of a RUM datagram of `datagram_len` bytes
/// (packet plus, under a cluster key, its 24-byte trailer) whose first
/// bytes are `rum_head`: at least the 32-byte RUM header, and for DATA the
/// 32-byte DATA header too (the payload may lie elsewhere). Checks what the
/// framing depends on (header, lengths, trailer, id); a verbatim packet's
/// body is left to the receiver's RUM parser. Connection ids past 16 bits
/// are refused with [`EtherError::IdTooLarge`].
pub fn encode(rum_head: &[u8], datagram_len: usize) -> Result<FrameHead, EtherError> {
    let h = rum_head;
    if h.len() < HEADER_LEN {
        return Err(EtherError::Truncated {
            len: h.len(),
            need: HEADER_LEN,
        });
    }
    if h.len() > datagram_len {
        return Err(EtherError::BadField("head longer than the datagram"));
    }
    let (ty, packet_len, conn_id) = check_rum_header(h)?;
    if datagram_len < packet_len {
        return Err(EtherError::Truncated {
            len: datagram_len,
            need: packet_len,
        });
    }
    let tail = datagram_len - packet_len;
    if tail != 0 && tail != TRAILER_LEN {
        return Err(EtherError::BadTail(tail));
    }
    let dst = u16::try_from(conn_id).map_err(|_| EtherError::IdTooLarge(conn_id))?;
    let trailer = if tail != 0 { FLAG_TRAILER } else { 0 };
    let mut head = FrameHead {
        buf: [0; MAX_HEAD_LEN],
        len: 0,
        skip: 0,
    };
    head.buf[0..2].copy_from_slice(&dst.to_be_bytes());
    if ty != PacketType::Data {
        head.buf[2] = KIND_RUM;
        head.buf[3] = trailer;
        head.len = RUM_PREFIX_LEN as u8;
        return Ok(head);
    }
    if h.len() < RUM_DATA_HEAD {
        return Err(EtherError::Truncated {
            len: h.len(),
            need: RUM_DATA_HEAD,
        });
    }
    let n = packet_len
        .checked_sub(RUM_DATA_HEAD)
        .ok_or(ParseError::Truncated {
            len: packet_len,
            need: RUM_DATA_HEAD,
        })?;
    let (header, data) = decode_rum_data(h)?;
    // The one canonical header: the emitter must give back these bytes.
    let mut again = [0u8; RUM_DATA_HEAD];
    Repr::emit_data_header(header, data, n, &mut again)
        .map_err(|_| ParseError::BadField("data"))?;
    if again[..] != h[..RUM_DATA_HEAD] {
        return Err(ParseError::BadField("non-canonical data header").into());
    }
    head.len = write_compact(&mut head.buf, dst, header, &data, n, trailer) as u8;
    head.skip = RUM_DATA_HEAD as u8;
    Ok(head)
}

/// Checks the fixed RUM header at the start of `h` (at least 32 bytes)
/// as the RUM parser does; returns the type, the packet length it
/// announces (trailer excluded) and the connection id.
fn check_rum_header(h: &[u8]) -> Result<(PacketType, usize, u64), EtherError> {
    let magic = be16(h, 0);
    if magic != MAGIC {
        return Err(ParseError::BadMagic(magic).into());
    }
    if h[2] != VERSION {
        return Err(ParseError::BadVersion(h[2]).into());
    }
    let ty = PacketType::from_u8(h[3]).ok_or(ParseError::BadType(h[3]))?;
    if h[4] & !FLAG_ACK_REQUEST != 0 {
        return Err(ParseError::BadFlags(h[4]).into());
    }
    if h[5] != 0 {
        return Err(ParseError::BadField("header reserved").into());
    }
    let conn_id = be64(h, 8);
    if conn_id == 0 && ty != PacketType::ConnectRequest {
        return Err(ParseError::BadField("connection id").into());
    }
    Ok((ty, HEADER_LEN + be16(h, 6) as usize, conn_id))
}

/// The fields of a RUM DATA header (`h` holds at least 64 bytes).
fn decode_rum_data(h: &[u8]) -> Result<(HeaderRepr, DataRepr<'static>), EtherError> {
    let header = HeaderRepr {
        conn_id: be64(h, 8),
        ack_request: h[4] & FLAG_ACK_REQUEST != 0,
        seq: be32(h, 16),
        ack: be32(h, 20),
        consumed: be32(h, 24),
        window: be32(h, 28),
    };
    let d = &h[HEADER_LEN..];
    let op = ViaOp::from_u8(d[12]).ok_or(ParseError::BadField("via op"))?;
    if d[13] & !1 != 0 {
        return Err(ParseError::BadField("data flags").into());
    }
    let data = DataRepr {
        msg_id: be32(d, 0),
        offset: be32(d, 4),
        total_len: be32(d, 8),
        op,
        immediate: (d[13] & 1 != 0).then(|| be32(d, 16)),
        mem_handle: be32(d, 20),
        remote_addr: be64(d, 24),
        payload: &[],
    };
    Ok((header, data))
}

/// Writes the compact header into `out`; returns its length.
fn write_compact(
    out: &mut [u8; MAX_HEAD_LEN],
    dst: u16,
    h: HeaderRepr,
    d: &DataRepr<'_>,
    n: usize,
    trailer: u8,
) -> usize {
    let segment = !(d.offset == 0 && d.total_len as usize == n);
    let rdma = d.mem_handle != 0 || d.remote_addr != 0;
    let mut flags = trailer | ((d.op as u8) << OP_SHIFT);
    flags |= if h.ack_request { FLAG_ACK } else { 0 };
    flags |= if segment { FLAG_SEGMENT } else { 0 };
    flags |= if d.immediate.is_some() {
        FLAG_IMMEDIATE
    } else {
        0
    };
    flags |= if rdma { FLAG_RDMA } else { 0 };
    out[0..2].copy_from_slice(&dst.to_be_bytes());
    out[2] = KIND_DATA;
    out[3] = flags;
    out[4..8].copy_from_slice(&h.seq.to_be_bytes());
    out[8..12].copy_from_slice(&h.ack.to_be_bytes());
    out[12..16].copy_from_slice(&h.consumed.to_be_bytes());
    out[16..20].copy_from_slice(&h.window.to_be_bytes());
    out[20..24].copy_from_slice(&d.msg_id.to_be_bytes());
    // n ≤ 65 443: a RUM datagram is at most 65 507 bytes.
    out[24..26].copy_from_slice(&(n as u16).to_be_bytes());
    let mut at = COMPACT_BASE_LEN;
    if segment {
        out[at..at + 4].copy_from_slice(&d.offset.to_be_bytes());
        out[at + 4..at + 8].copy_from_slice(&d.total_len.to_be_bytes());
        at += SEGMENT_LEN;
    }
    if let Some(imm) = d.immediate {
        out[at..at + 4].copy_from_slice(&imm.to_be_bytes());
        at += IMMEDIATE_LEN;
    }
    if rdma {
        out[at..at + 4].copy_from_slice(&d.mem_handle.to_be_bytes());
        out[at + 4..at + 12].copy_from_slice(&d.remote_addr.to_be_bytes());
        at += RDMA_LEN;
    }
    at
}

/// Bytes of a compact DATA header with these flags.
fn compact_head_len(flags: u8) -> usize {
    let mut head_len = COMPACT_BASE_LEN;
    for (bit, len) in [
        (FLAG_SEGMENT, SEGMENT_LEN),
        (FLAG_IMMEDIATE, IMMEDIATE_LEN),
        (FLAG_RDMA, RDMA_LEN),
    ] {
        if flags & bit != 0 {
            head_len += len;
        }
    }
    head_len
}

/// The headroom [`expand_in_place`] writes into in front of this frame
/// payload: for a compact DATA frame the RUM headers' 64 bytes less its
/// own header, so that a frame placed this far into a buffer expands to
/// a datagram starting at 0; for any other frame 0 (a verbatim datagram
/// starts after the 4-byte prefix). A receiver copying frames into
/// datagram buffers places each this way and moves no payload.
pub fn expand_headroom(frame: &[u8]) -> usize {
    match frame {
        [_, _, KIND_DATA, flags, ..] => RUM_DATA_HEAD.saturating_sub(compact_head_len(*flags)),
        _ => 0,
    }
}

/// A parsed compact header: the RUM fields, the header length, the
/// payload length and whether a trailer follows.
struct Compact {
    header: HeaderRepr,
    data: DataRepr<'static>,
    head_len: usize,
    payload_len: usize,
    trailer: bool,
}

fn parse_compact(f: &[u8]) -> Result<Compact, EtherError> {
    let short = |need: usize| EtherError::Truncated { len: f.len(), need };
    if f.len() < COMPACT_BASE_LEN {
        return Err(short(COMPACT_BASE_LEN));
    }
    let flags = f[3];
    if flags & FLAG_RESERVED != 0 {
        return Err(EtherError::BadField("compact flags"));
    }
    let head_len = compact_head_len(flags);
    if f.len() < head_len {
        return Err(short(head_len));
    }
    let n = be16(f, 24) as usize;
    let mut at = COMPACT_BASE_LEN;
    let (mut offset, mut total_len) = (0, n as u32);
    if flags & FLAG_SEGMENT != 0 {
        (offset, total_len) = (be32(f, at), be32(f, at + 4));
        if offset == 0 && total_len as usize == n {
            return Err(EtherError::BadField("segment fields of a whole message"));
        }
        at += SEGMENT_LEN;
    }
    let immediate = (flags & FLAG_IMMEDIATE != 0).then(|| be32(f, at));
    if immediate.is_some() {
        at += IMMEDIATE_LEN;
    }
    let (mut mem_handle, mut remote_addr) = (0, 0);
    if flags & FLAG_RDMA != 0 {
        (mem_handle, remote_addr) = (be32(f, at), be64(f, at + 4));
        if mem_handle == 0 && remote_addr == 0 {
            return Err(EtherError::BadField("empty rdma fields"));
        }
    }
    let op = ViaOp::from_u8((flags & OP_MASK) >> OP_SHIFT).ok_or(EtherError::BadField("op"))?;
    let header = HeaderRepr {
        conn_id: u64::from(be16(f, 0)),
        ack_request: flags & FLAG_ACK != 0,
        seq: be32(f, 4),
        ack: be32(f, 8),
        consumed: be32(f, 12),
        window: be32(f, 16),
    };
    let data = DataRepr {
        msg_id: be32(f, 20),
        offset,
        total_len,
        op,
        immediate,
        mem_handle,
        remote_addr,
        payload: &[],
    };
    Ok(Compact {
        header,
        data,
        head_len,
        payload_len: n,
        trailer: flags & FLAG_TRAILER != 0,
    })
}

/// Turns the frame payload at `buf[frame_start..frame_start + frame_len]`
/// into the RUM datagram it carries, in place, and returns where that
/// datagram now lies in `buf`. A compact DATA frame gets its 64-byte RUM
/// header written over its own header and the headroom in front of it
/// (`buf[..frame_start]`, which must hold [`super::EXPAND_HEADROOM`]
/// bytes; the Ethernet header's 14 count); the payload and trailer are not
/// moved. A verbatim datagram is returned where it lies. Padding after the
/// datagram is excluded. Resolution frames give [`EtherError::NotRum`].
pub fn expand_in_place(
    buf: &mut [u8],
    frame_start: usize,
    frame_len: usize,
) -> Result<Range<usize>, EtherError> {
    let end = frame_start
        .checked_add(frame_len)
        .filter(|&e| e <= buf.len())
        .ok_or(EtherError::Truncated {
            len: buf.len(),
            need: frame_start.saturating_add(frame_len),
        })?;
    let frame = &buf[frame_start..end];
    let (dst, kind) = peek(frame)?;
    match kind {
        KIND_DATA => {
            let c = parse_compact(frame)?;
            let tail = if c.trailer { TRAILER_LEN } else { 0 };
            let need = c.head_len + c.payload_len + tail;
            if frame_len < need {
                return Err(EtherError::Truncated {
                    len: frame_len,
                    need,
                });
            }
            let payload_start = frame_start + c.head_len;
            let rum_start =
                payload_start
                    .checked_sub(RUM_DATA_HEAD)
                    .ok_or(EtherError::Headroom {
                        have: frame_start,
                        need: RUM_DATA_HEAD - c.head_len,
                    })?;
            let mut rum = [0u8; RUM_DATA_HEAD];
            Repr::emit_data_header(c.header, c.data, c.payload_len, &mut rum).map_err(|_| {
                if dst == 0 {
                    EtherError::Rum(ParseError::BadField("connection id"))
                } else {
                    EtherError::BadField("data segment")
                }
            })?;
            buf[rum_start..payload_start].copy_from_slice(&rum);
            Ok(rum_start..payload_start + c.payload_len + tail)
        }
        KIND_RUM => {
            if frame.len() < RUM_PREFIX_LEN + HEADER_LEN {
                return Err(EtherError::Truncated {
                    len: frame.len(),
                    need: RUM_PREFIX_LEN + HEADER_LEN,
                });
            }
            let flags = frame[3];
            if flags & !FLAG_TRAILER != 0 {
                return Err(EtherError::BadField("prefix flags"));
            }
            let rum = &frame[RUM_PREFIX_LEN..];
            let (ty, packet_len, conn_id) = check_rum_header(rum)?;
            if ty == PacketType::Data {
                // Every DATA packet has its compact form: one encoding each.
                return Err(EtherError::BadField("verbatim data"));
            }
            if conn_id != u64::from(dst) {
                return Err(EtherError::IdMismatch {
                    frame: dst,
                    rum: conn_id,
                });
            }
            let tail = if flags & FLAG_TRAILER != 0 {
                TRAILER_LEN
            } else {
                0
            };
            let len = packet_len + tail;
            if rum.len() < len {
                return Err(EtherError::Truncated {
                    len: frame.len(),
                    need: RUM_PREFIX_LEN + len,
                });
            }
            let start = frame_start + RUM_PREFIX_LEN;
            Ok(start..start + len)
        }
        KIND_RESOLVE_REQUEST | KIND_RESOLVE_REPLY => Err(EtherError::NotRum(kind)),
        other => Err(EtherError::BadKind(other)),
    }
}

/// The whole frame payload of a RUM datagram (copies; for tests, tools and
/// rare packets; the data path gathers [`encode`]'s header and the
/// datagram instead).
pub fn frame_from_rum(datagram: &[u8]) -> Result<Vec<u8>, EtherError> {
    let head = encode(
        &datagram[..datagram.len().min(RUM_DATA_HEAD)],
        datagram.len(),
    )?;
    let mut out = head.bytes().to_vec();
    out.extend_from_slice(&datagram[head.rum_skip()..]);
    Ok(out)
}

/// The RUM datagram a frame payload carries (copies; see
/// [`expand_in_place`] for the receive path).
pub fn to_rum(frame: &[u8]) -> Result<Vec<u8>, EtherError> {
    let room = super::EXPAND_HEADROOM;
    let mut buf = vec![0u8; room + frame.len()];
    buf[room..].copy_from_slice(frame);
    let r = expand_in_place(&mut buf, room, frame.len())?;
    Ok(buf[r].to_vec())
}
