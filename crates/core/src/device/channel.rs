//! The one interface every transport implements for a connected VI.
//!
//! A [`Channel`] moves operations of one VI pair: it accepts validated work
//! requests, reports how far they got (written out, delivered by the peer),
//! and on `progress` places arriving data through a
//! [`Placement`](crate::vi::placement::Placement). Descriptor bookkeeping,
//! completion order, errors and waiting live above it, in `vi`, so a new
//! transport only has to move bytes. Each transport has its own folder with
//! the same parts: `channel` (this trait), `connect` (setting up a pair),
//! and whatever its medium needs.

use std::os::fd::RawFd;
use std::time::Duration;

use crate::descriptor::WorkRequest;
use crate::ranges::Range;
use crate::vi::placement::Placement;
use openvia_wire::handshake::ViAttrs;

/// When an accepted operation counts as complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// When `sent()` reaches its sequence number.
    Sent,
    /// When `consumed()` reaches its sequence number.
    Consumed,
    /// When the read's data has arrived (reported through the placement).
    ReadDone,
}

/// What the liveness socket said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerEvent {
    /// Nothing to report.
    Quiet,
    /// The peer disconnected on purpose.
    Disconnected,
    /// The peer broke the connection because of an error on its side.
    Broken,
    /// The peer's process is gone (end-of-file).
    Gone,
}

/// The channel cannot go on (the peer wrote garbage, or vanished).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("transport channel failed: {0}")]
pub struct ChannelFailed(pub &'static str);

pub trait Channel: Send {
    /// Starts an operation whose local buffers are `local`. Returns its
    /// message number and when it completes. Never blocks: what does not fit
    /// now is kept and moved by later `progress` calls. `track`: the caller
    /// will wait for the peer to consume it (reliable reception), so the
    /// peer must tell us when it has.
    fn post(
        &mut self,
        wr: &WorkRequest,
        local: &[Range],
        track: bool,
    ) -> Result<(u64, Completion), ChannelFailed>;

    /// Moves pending outbound data and places inbound data. Returns whether
    /// anything happened.
    fn progress(&mut self, place: &mut Placement) -> Result<bool, ChannelFailed>;

    /// The common case without the general machinery: if the next inbound
    /// message is a plain send, carried whole, that fits `capacity`, copy it
    /// into `local` and return (length, immediate data). None means nothing
    /// is there or `progress` must handle it.
    fn take_simple_recv(&mut self, _local: &[Range], _capacity: u64) -> Option<(u64, Option<u32>)> {
        None
    }

    /// Cheap check: is there inbound data or outbound work waiting?
    fn has_work(&self) -> bool;

    /// Whether a receive descriptor just posted should be offered to
    /// `progress` at once: inbound data may be waiting for one. A channel
    /// that knows nothing waits says no and spares the post a trip to the
    /// medium (a system call on the network device, on the critical path
    /// of every ping-pong).
    fn awaits_recv(&self) -> bool {
        true
    }

    /// Highest message number entirely handed to the medium.
    fn sent(&self) -> u64;

    /// Highest message number the peer has delivered.
    fn consumed(&self) -> u64;

    /// We are about to break the connection over a fault in what the peer
    /// sent: the peer's delivered count as it stands *after* that fault
    /// was seen, with every refusal (and RDMA read answer) the peer wrote
    /// before counting put into `place`, so sends it took before it erred
    /// complete with success instead of being flushed. Nothing is
    /// delivered. `None`: the count read before the last pass stands (a
    /// device whose counts travel in order with its messages).
    fn settle_before_break(&mut self, _place: &mut Placement) -> Option<u64> {
        None
    }

    /// The remote VI's attributes.
    fn remote_attrs(&self) -> ViAttrs;

    /// The descriptor whose hang-up or input means the peer has something
    /// to say about the connection (watched by the progress thread).
    fn liveness_fd(&self) -> RawFd;

    /// Reads what the liveness descriptor has to say.
    fn peer_event(&mut self) -> PeerEvent;

    /// Tells the peer we are leaving (`broken`: because of an error).
    fn close(&mut self, broken: bool);

    /// The process is exiting with the connection still open (its VI not
    /// dropped, or dropped on a thread the exit ends): send at once what
    /// is owed and would otherwise have waited, such as an acknowledgement
    /// held for a reply, since nothing here runs again. The connection
    /// stays open.
    fn flush_at_exit(&mut self) {}

    /// When (CLOCK_MONOTONIC ns) `progress` must run next even if nothing
    /// arrives: protocol timers (retransmission, keepalive, dead peer).
    /// The progress thread sleeps no longer than this.
    fn timer_deadline_ns(&self) -> Option<u64> {
        None
    }

    /// Our CQ polls this VI on every look (or no longer does): the peer
    /// may stop (or must resume) telling it which VI has work.
    fn set_watched(&mut self, _on: bool) {}

    /// The next `progress` call reads the clock and runs the protocol
    /// timers that are due, even if it finds nothing to receive: the
    /// progress thread drives a VI because a timer of its is due, where a
    /// busy-polling program's idle polls run timers only now and then.
    fn clock_next_progress(&mut self) {}

    /// An idle connection sends a keepalive every `keepalive` and counts
    /// its peer dead after `dead` of silence (the device's settings until
    /// then); false where the pair cannot work (`keepalive` zero or not
    /// shorter than `dead`) or the device has no such timers.
    fn set_liveness(&mut self, _keepalive: Duration, _dead: Duration) -> bool {
        false
    }

    /// No reply will be posted on this connection (its owner answers on
    /// another): acknowledge a delivered message on the next call that
    /// drives the connection (the program takes the message first) rather
    /// than hold the acknowledgement a while for a reply to carry it.
    /// Where nothing is held, nothing changes.
    fn set_no_replies(&mut self, _on: bool) {}
}
