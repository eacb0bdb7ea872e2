//! What the connection tells the application, and how received messages
//! are handed over. Messages are not events: they wait in the receive
//! buffer until [`crate::Connection::poll_message`] offers them to a
//! [`MessageSink`], which either places them (freeing the buffer, which
//! reopens the sender's window) or refuses (no receive descriptor posted
//! yet), which keeps them buffered and, through flow control, holds the
//! sender.

use openvia_wire::rum::ViaOp;

/// Per-connection message number, in posting order from 0.
pub type MessageId = u64;

/// Attributes the peer announced in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAttributes {
    pub conn_id: u64,
    pub reliability: crate::Reliability,
    pub max_transfer_size: u32,
    pub segment_size: u32,
    pub recv_window: u32,
    pub rdma_write: bool,
    pub rdma_read: bool,
}

/// Why a connection ended without an orderly disconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    #[error("nothing heard from the peer within the dead-peer timeout")]
    PeerSilent,
    #[error("too many consecutive retransmission timeouts")]
    RetransmitLimit,
    #[error("no answer to the connect request")]
    ConnectTimeout,
    #[error("a segment was lost on a flow-control-only (lossless) connection")]
    LossWithoutRecovery,
    #[error("the peer violated the protocol")]
    ProtocolViolation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Handshake done (client: accept received; server: at creation).
    Connected(PeerAttributes),
    /// The server refused the connect request.
    Rejected { reason: u32 },
    /// A send finished: left for the wire (unreliable), acknowledged by
    /// the receiver (reliable delivery) or placed by it (reliable
    /// reception). In posting order.
    SendCompleted(MessageId),
    /// The connection is dead; no further data moves. Sends not yet
    /// completed never will be: flush them.
    ConnectionLost(LostReason),
    /// The peer closed the connection.
    PeerDisconnected { reason: u32 },
}

/// A received message as offered to the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageInfo {
    pub msg_id: MessageId,
    pub op: ViaOp,
    pub immediate: Option<u32>,
    pub mem_handle: u32,
    pub remote_addr: u64,
    pub len: usize,
    /// Bytes a [`SegmentPlacer`] put in place as they arrived.
    pub placed: usize,
}

/// The sink's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Placed (or deliberately discarded, e.g. a length error): free it.
    Placed,
    /// Cannot take it now (no descriptor): keep it and offer it again.
    NotNow,
}

/// Bytes of a received message still held by the connection: `data`
/// belongs at `offset` in the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece<'a> {
    pub offset: u64,
    pub data: &'a [u8],
}

/// Where received messages go: the device copies the `pieces` into the
/// receive descriptor or the RDMA target region. Bytes a
/// [`SegmentPlacer`] already put in place on arrival are not among them
/// (`info.placed` counts them); without a placer the pieces are the whole
/// message in order.
pub trait MessageSink {
    fn place(&mut self, info: &MessageInfo, pieces: &[Piece<'_>]) -> Placement;
}

/// A data segment as it arrives, before the connection buffers it: in the
/// window, its slot free, on a reliable level, and where its message's
/// first segment says it must be (no other offered segment can overlap
/// it; see `arrival.rs`).
#[derive(Debug, Clone, Copy)]
pub struct ArrivingSegment<'a> {
    pub seq: u64,
    pub msg_id: MessageId,
    pub op: ViaOp,
    pub immediate: Option<u32>,
    pub mem_handle: u32,
    pub remote_addr: u64,
    /// Where `payload` belongs in the message, and the message's length
    /// (`offset + payload.len() <= total`, checked by the connection).
    pub offset: u32,
    pub total: u32,
    pub payload: &'a [u8],
}

/// Puts a segment's payload where its message will end up (the posted
/// receive, the RDMA target) as it arrives, so that it is copied once
/// instead of into the connection's buffer and again at delivery. True
/// when it did: the connection then keeps only the segment's header. A
/// placer must be able to tell, when the message is offered to the sink,
/// where its placed bytes went.
pub trait SegmentPlacer {
    fn place_segment(&mut self, seg: &ArrivingSegment<'_>) -> bool;
}

/// The bytes of an outgoing message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Held by the connection: its retransmission buffer on the reliable
    /// levels, freed once sent otherwise.
    Owned(Vec<u8>),
    /// `len` bytes in the caller's memory at `addr`, which the connection
    /// never reads: their segments leave through
    /// [`Connection::poll_transmit_split`](crate::Connection::poll_transmit_split)
    /// as a header plus a [`PayloadRef`] the caller sends scatter-gather.
    /// Where there is retransmission (reliable levels, not
    /// flow-control-only) the message completes only once every segment is
    /// acknowledged; elsewhere as any message does (its last segment
    /// taken on the unreliable level), and the caller must have sent or
    /// copied what it took before it reports the completion. The caller
    /// keeps the bytes unchanged until then, as a NIC's DMA source.
    External { addr: u64, len: usize },
}

impl Payload {
    pub fn len(&self) -> usize {
        match self {
            Payload::Owned(v) => v.len(),
            Payload::External { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Self {
        Payload::Owned(v)
    }
}

/// Where the payload of a datagram [`Connection::poll_transmit_split`]
/// left out lives: `len` bytes at `offset` in message `msg_id`, owned by
/// the connection (`external` None,
/// [`Connection::payload_bytes`](crate::Connection::payload_bytes)) or at
/// `external + offset` in the caller's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadRef {
    pub msg_id: MessageId,
    pub offset: usize,
    pub len: usize,
    pub external: Option<u64>,
}

/// One datagram from [`Connection::poll_transmit_split`]: `len` bytes
/// written to the buffer, then `payload`'s bytes if there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub len: usize,
    pub payload: Option<PayloadRef>,
}

/// A message the application asks to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    pub op: ViaOp,
    pub immediate: Option<u32>,
    pub mem_handle: u32,
    pub remote_addr: u64,
    pub data: Payload,
}

impl OutgoingMessage {
    /// A plain send.
    pub fn send(data: Vec<u8>) -> Self {
        Self {
            op: ViaOp::Send,
            immediate: None,
            mem_handle: 0,
            remote_addr: 0,
            data: data.into(),
        }
    }
}
