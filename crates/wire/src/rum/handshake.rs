//! The body shared by CONNECT_REQUEST, CONNECT_ACCEPT and CONNECT_REJECT:
//! the VI attributes each side announces, its own random connection id,
//! opaque user data (the device puts the discriminator there) and an
//! optional authenticator that the caller fills with a cluster-key MAC.

use super::error::{EmitError, ParseError};
use super::packet::{be16, be32, be64};

/// Length of the optional authenticator.
pub const AUTHENTICATOR_LEN: usize = 32;
/// Most bytes of user data a handshake carries.
pub const MAX_USER_DATA: usize = 64;

pub(crate) const HS_FIXED_LEN: usize = 32;
pub(crate) const HS_ATTR_FLAGS: usize = 10;
pub(crate) const HS_USER_LEN: usize = 28;
pub(crate) const HS_USER_OFF: usize = 32;
pub(crate) const ATTR_RDMA_WRITE: u8 = 0x01;
pub(crate) const ATTR_RDMA_READ: u8 = 0x02;
pub(crate) const ATTR_AUTH: u8 = 0x04;
const MODE_HOMO: u8 = 0x01;
const MODE_FLOW_ONLY: u8 = 0x80;

/// How the receiver tells the sender how much it may send (RUM paper).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowMode {
    /// The receiver advertises its window in every packet.
    Hetero,
    /// The receiver's total buffer is known from the handshake; packets
    /// carry only the consumed sequence number.
    Homo,
}

/// The high-level handshake body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeRepr<'a> {
    /// The sender's own connection id.
    pub conn_id: u64,
    /// VIA reliability level bit (0x1, 0x2, 0x4).
    pub reliability: u16,
    pub rdma_write: bool,
    pub rdma_read: bool,
    pub flow_mode: FlowMode,
    /// No retransmission buffers (lossless fabric): loss is an error.
    pub flow_control_only: bool,
    pub max_transfer_size: u32,
    /// Largest payload of one DATA segment the sender will emit.
    pub segment_size: u32,
    /// Receive buffer of the sender of this handshake, in segments.
    pub recv_window: u32,
    /// Reason of a reject (0 otherwise).
    pub reject_reason: u32,
    pub user_data: &'a [u8],
    /// Whether room for an authenticator is present; its bytes are read and
    /// written through [`super::Packet`].
    pub has_authenticator: bool,
}

impl<'a> HandshakeRepr<'a> {
    pub(crate) fn parse(body: &'a [u8]) -> Self {
        let flags = body[HS_ATTR_FLAGS];
        let mode = body[11];
        let ulen = body[HS_USER_LEN] as usize;
        Self {
            conn_id: be64(body, 0),
            reliability: be16(body, 8),
            rdma_write: flags & ATTR_RDMA_WRITE != 0,
            rdma_read: flags & ATTR_RDMA_READ != 0,
            flow_mode: if mode & MODE_HOMO != 0 {
                FlowMode::Homo
            } else {
                FlowMode::Hetero
            },
            flow_control_only: mode & MODE_FLOW_ONLY != 0,
            max_transfer_size: be32(body, 12),
            segment_size: be32(body, 16),
            recv_window: be32(body, 20),
            reject_reason: be32(body, 24),
            user_data: &body[HS_USER_OFF..HS_USER_OFF + ulen],
            has_authenticator: flags & ATTR_AUTH != 0,
        }
    }

    pub(crate) fn body_len(&self) -> usize {
        HS_FIXED_LEN
            + self.user_data.len()
            + if self.has_authenticator {
                AUTHENTICATOR_LEN
            } else {
                0
            }
    }

    /// Writes the body into `out` (exactly `body_len()` bytes); the
    /// authenticator, if any, is zeroed.
    pub(crate) fn emit(&self, out: &mut [u8]) -> Result<(), EmitError> {
        if self.user_data.len() > MAX_USER_DATA {
            return Err(EmitError::FieldRange("user data"));
        }
        if !matches!(self.reliability, 1 | 2 | 4) {
            return Err(EmitError::FieldRange("reliability"));
        }
        if self.conn_id == 0 {
            return Err(EmitError::FieldRange("connection id"));
        }
        out.fill(0);
        out[0..8].copy_from_slice(&self.conn_id.to_be_bytes());
        out[8..10].copy_from_slice(&self.reliability.to_be_bytes());
        let mut flags = 0;
        if self.rdma_write {
            flags |= ATTR_RDMA_WRITE;
        }
        if self.rdma_read {
            flags |= ATTR_RDMA_READ;
        }
        if self.has_authenticator {
            flags |= ATTR_AUTH;
        }
        out[HS_ATTR_FLAGS] = flags;
        let mut mode = 0;
        if self.flow_mode == FlowMode::Homo {
            mode |= MODE_HOMO;
        }
        if self.flow_control_only {
            mode |= MODE_FLOW_ONLY;
        }
        out[11] = mode;
        out[12..16].copy_from_slice(&self.max_transfer_size.to_be_bytes());
        out[16..20].copy_from_slice(&self.segment_size.to_be_bytes());
        out[20..24].copy_from_slice(&self.recv_window.to_be_bytes());
        out[24..28].copy_from_slice(&self.reject_reason.to_be_bytes());
        out[HS_USER_LEN] = self.user_data.len() as u8;
        out[HS_USER_OFF..HS_USER_OFF + self.user_data.len()].copy_from_slice(self.user_data);
        Ok(())
    }
}

pub(crate) fn check_handshake(body: &[u8]) -> Result<(), ParseError> {
    if body.len() < HS_FIXED_LEN {
        return Err(ParseError::Truncated {
            len: super::HEADER_LEN + body.len(),
            need: super::HEADER_LEN + HS_FIXED_LEN,
        });
    }
    if be64(body, 0) == 0 {
        return Err(ParseError::BadField("handshake connection id"));
    }
    if !matches!(be16(body, 8), 1 | 2 | 4) {
        return Err(ParseError::BadField("reliability level"));
    }
    let flags = body[HS_ATTR_FLAGS];
    if flags & !(ATTR_RDMA_WRITE | ATTR_RDMA_READ | ATTR_AUTH) != 0 {
        return Err(ParseError::BadField("attribute flags"));
    }
    if body[11] & !(MODE_HOMO | MODE_FLOW_ONLY) != 0 {
        return Err(ParseError::BadField("flow mode"));
    }
    if body[29..32] != [0, 0, 0] {
        return Err(ParseError::BadField("handshake reserved"));
    }
    let ulen = body[HS_USER_LEN] as usize;
    if ulen > MAX_USER_DATA {
        return Err(ParseError::BadLength {
            field: "user data",
            value: ulen,
        });
    }
    let auth = if flags & ATTR_AUTH != 0 {
        AUTHENTICATOR_LEN
    } else {
        0
    };
    let want = HS_FIXED_LEN + ulen + auth;
    if body.len() != want {
        return Err(ParseError::BadLength {
            field: "handshake body",
            value: body.len(),
        });
    }
    Ok(())
}
