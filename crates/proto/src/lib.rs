//! The RUM protocol core: a reliable transport over datagrams with no I/O,
//! driven by datagrams and time passed in (quinn-proto style), so that it
//! runs unchanged in a UDP device and in a virtual-time simulator.
//!
//! After the RUM paper (seed 002) the common path is light: a sequence
//! number per segment and receiver feedback in every packet (cumulative
//! ack, consumed sequence number, advertised window). Flow control is
//! receiver-driven ([`flow`], Hetero and Homo modes) and holds the sender
//! rather than dropping data. Because Ethernet and overrun receivers do
//! drop, loss recovery sits on top: SACK, retransmission timeout with
//! backoff, fast retransmit; a flow-control-only mode keeps no
//! retransmission buffers for fabrics known to be lossless and turns any
//! loss into a connection error. The three VIA reliability levels are
//! [`Reliability`]. Messages up to the max transfer size are cut into
//! segments sized by the M-VIA policies ([`segment`]).
//!
//! Drive a [`Connection`] like this: on each received datagram call
//! `handle_datagram`; when `poll_timeout` passes call `handle_timeout`;
//! after either (and after `send_message`) drain `poll_transmit`,
//! `poll_event` and `poll_message`.

mod arrival;
pub mod config;
pub mod connection;
pub mod counters;
pub mod events;
pub mod flow;
mod handshake;
pub mod recv_reassembly;
pub mod rtt;
pub mod sack;
pub mod segment;
pub mod send_queue;
pub mod time;
mod timers;
mod transmit;

pub use config::{Config, ConfigError, FlowMode, Reliability};
pub use connection::{Connection, SendError, State, DISCONNECT_ERROR, DISCONNECT_NORMAL};
pub use counters::Counters;
pub use events::{
    ArrivingSegment, Event, LostReason, MessageId, MessageInfo, MessageSink, OutgoingMessage,
    Payload, PayloadRef, PeerAttributes, Piece, Placement, SegmentPlacer, Transmit,
};
pub use handshake::{emit_reject, AcceptError, REJECT_MISMATCH};
pub use openvia_wire::rum::ViaOp;
pub use segment::{segment_size, segments_for, SegmentError, SegmentPolicy};
pub use time::Time;
