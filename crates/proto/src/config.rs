//! Per-connection settings: the VIA reliability level, the RUM flow-control
//! mode, segment size and the timers. Both ends exchange the parts that
//! must agree in the handshake; [`Config::validate`] rejects combinations
//! that could deadlock (a message larger than the receive window).

use std::time::Duration;

pub use openvia_wire::rum::FlowMode;

use crate::segment::segments_for;

/// VIA reliability levels (their `VIP_RELIABILITY_LEVEL` bit values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reliability {
    /// Lost messages are dropped whole and counted; never corrupted or duplicated.
    Unreliable,
    /// Exactly once, in order, or the connection fails. A send completes
    /// when the peer acknowledged it (holds it in its receive buffer): the
    /// spec allows completion once it left for the wire, but a datagram
    /// lost after that would leave a completed send undelivered whenever
    /// the connection ends before it is resent.
    ReliableDelivery,
    /// As delivery, but a send completes when the receiver has placed it.
    ReliableReception,
}

impl Reliability {
    pub fn via_bits(self) -> u16 {
        match self {
            Self::Unreliable => 0x1,
            Self::ReliableDelivery => 0x2,
            Self::ReliableReception => 0x4,
        }
    }
    pub fn from_via_bits(bits: u16) -> Option<Self> {
        match bits {
            0x1 => Some(Self::Unreliable),
            0x2 => Some(Self::ReliableDelivery),
            0x4 => Some(Self::ReliableReception),
            _ => None,
        }
    }
    pub fn is_reliable(self) -> bool {
        self != Self::Unreliable
    }
}

/// In-order segments per acknowledgement ([`Config::ack_every`]).
pub const DEFAULT_ACK_EVERY: u32 = 64;
/// See [`Config::ack_delay`].
pub const DEFAULT_ACK_DELAY: Duration = Duration::from_micros(50);
/// See [`Config::handshake_resend`].
pub const DEFAULT_HANDSHAKE_RESEND: Duration = Duration::from_millis(2);

/// Settings of one connection (one VI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub reliability: Reliability,
    pub flow_mode: FlowMode,
    /// Lossless fabric: keep no retransmission buffers; any loss is a
    /// connection error (RUM's point: flow control is all such a fabric needs).
    pub flow_control_only: bool,
    /// Payload bytes per segment (see [`crate::segment::segment_size`]).
    pub segment_size: usize,
    /// Largest message, in bytes.
    pub max_transfer_size: u32,
    /// Receive buffer in segments: the Homo total, or the initial Hetero window.
    pub recv_window: u32,
    /// Most payload bytes in flight (sent, neither acknowledged, SACKed
    /// nor judged lost) while loss is being found; 0: as many as the
    /// receiver's window allows at all times. See `Connection::pipe_open`.
    pub max_inflight: usize,
    pub rdma_write: bool,
    pub rdma_read: bool,
    /// Handshake packets carry a 32-byte authenticator the caller fills.
    pub authenticated: bool,
    pub initial_rto: Duration,
    pub min_rto: Duration,
    pub max_rto: Duration,
    /// Consecutive retransmission timeouts before the peer is declared lost.
    pub max_rto_count: u32,
    /// Send a keepalive after this long without sending anything.
    pub keepalive_interval: Duration,
    /// Nothing heard from the peer for this long: connection lost.
    pub dead_peer_timeout: Duration,
    /// Give up connecting after this long.
    pub connect_timeout: Duration,
    /// Client: the connect request goes again this long after the first
    /// send, then after twice as long each time (at most 1 s apart).
    /// Short, not the data path's initial RTO: the acceptor is often a
    /// process just starting to listen (a forked child opening its NIC),
    /// whose request went to no one; a forking server under viarun lost
    /// 20 ms per connection waiting for the second. (A request sent more
    /// than once gives no RTT sample: on a path slower than this, data
    /// starts from `initial_rto`.)
    pub handshake_resend: Duration,
    /// Unreliable level: how long a hole may wait for a reordered segment
    /// before the message it belongs to is dropped.
    pub reorder_tolerance: Duration,
    /// Reliable levels: in-order data is acknowledged once this many
    /// segments have come since the last acknowledgement, when a message
    /// ends, or [`Config::ack_delay`] after the first of them, whichever
    /// is first; a hole or a duplicate is acknowledged at once. 1: every
    /// segment. Fewer acknowledgements cost both ends less (each one is a
    /// datagram the receiver sends and the sender reads), as TCP's delayed
    /// and stretched ACKs do.
    pub ack_every: u32,
    /// The longest an in-order segment waits for its acknowledgement;
    /// the sender's tail loss probe waits this much longer too.
    pub ack_delay: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            reliability: Reliability::ReliableDelivery,
            flow_mode: FlowMode::Hetero,
            flow_control_only: false,
            segment_size: 1408,
            max_transfer_size: 1 << 20,
            recv_window: 1024,
            max_inflight: 0,
            rdma_write: true,
            rdma_read: true,
            authenticated: false,
            initial_rto: Duration::from_millis(20),
            min_rto: Duration::from_millis(1),
            max_rto: Duration::from_millis(500),
            max_rto_count: 12,
            keepalive_interval: Duration::from_millis(500),
            dead_peer_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(3),
            handshake_resend: DEFAULT_HANDSHAKE_RESEND,
            reorder_tolerance: Duration::from_millis(2),
            ack_every: DEFAULT_ACK_EVERY,
            ack_delay: DEFAULT_ACK_DELAY,
        }
    }
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("segment size {0} is not in 1..={max}", max = openvia_wire::rum::MAX_DATAGRAM - openvia_wire::rum::DATA_OVERHEAD)]
    SegmentSize(usize),
    #[error("receive window {window} segments cannot hold one message of {need} segments")]
    WindowTooSmall { window: u32, need: usize },
    #[error("receive window {0} exceeds the limit of 2^24 segments")]
    WindowTooLarge(u32),
    #[error("keepalive interval must be shorter than the dead-peer timeout")]
    Keepalive,
    #[error("RTO bounds must satisfy 0 < min <= initial <= max")]
    Rto,
    #[error("RDMA read is not allowed on an unreliable connection")]
    RdmaReadUnreliable,
}

impl Config {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let max_seg = openvia_wire::rum::MAX_DATAGRAM - openvia_wire::rum::DATA_OVERHEAD;
        if self.segment_size == 0 || self.segment_size > max_seg {
            return Err(ConfigError::SegmentSize(self.segment_size));
        }
        let need = segments_for(self.max_transfer_size as usize, self.segment_size);
        if (self.recv_window as usize) < need {
            return Err(ConfigError::WindowTooSmall {
                window: self.recv_window,
                need,
            });
        }
        if self.recv_window > 1 << 24 {
            return Err(ConfigError::WindowTooLarge(self.recv_window));
        }
        if self.keepalive_interval >= self.dead_peer_timeout {
            return Err(ConfigError::Keepalive);
        }
        if self.min_rto.is_zero()
            || self.min_rto > self.initial_rto
            || self.initial_rto > self.max_rto
            || self.handshake_resend.is_zero()
        {
            return Err(ConfigError::Rto);
        }
        if self.rdma_read && !self.reliability.is_reliable() {
            return Err(ConfigError::RdmaReadUnreliable);
        }
        Ok(())
    }
}
