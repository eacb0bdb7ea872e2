//! One RUM connection (one VI), as a deterministic state machine with no
//! I/O, in the manner of quinn-proto. The caller feeds it datagrams
//! ([`Connection::handle_datagram`]) and time ([`Connection::handle_timeout`]),
//! and drains it: datagrams to send ([`Connection::poll_transmit`]), the next
//! deadline ([`Connection::poll_timeout`]), events ([`Connection::poll_event`])
//! and received messages ([`Connection::poll_message`]).
//!
//! Acknowledgement policy: receiving data only marks an ACK as due; the
//! next `poll_transmit` sends it, piggybacked on a DATA packet when there is
//! one and no hole needs SACK blocks, else as an ACK packet. No timer
//! delays it, so a single small message is acknowledged as soon as the
//! caller polls; a caller that drains a whole receive batch before polling
//! gets one ACK per batch (coalescing without latency).

use std::collections::VecDeque;

use openvia_wire::rum::{Body, DataRepr, HeaderRepr, Repr};

use crate::arrival::ArrivalChain;
use crate::config::{Config, ConfigError, Reliability};
use crate::counters::Counters;
use crate::events::{
    Event, LostReason, MessageId, MessageInfo, MessageSink, OutgoingMessage, PeerAttributes,
    SegmentPlacer,
};
use crate::flow::CreditWindow;
use crate::recv_reassembly::{Insert, Reassembly, RecvSegment};
use crate::rtt::RttEstimator;
use crate::sack::expand;
use crate::segment::segments_for;
use crate::send_queue::{CompleteOn, SendQueue};
use crate::time::Time;

/// Disconnect reason: orderly close by the application.
pub const DISCONNECT_NORMAL: u32 = 0;
/// Disconnect reason: the sender of the DISCONNECT saw a protocol error or
/// a loss it cannot recover from.
pub const DISCONNECT_ERROR: u32 = 1;

/// Tail loss probes in a row without progress; then the retransmission
/// timeout takes over.
pub(crate) const MAX_TAIL_PROBES: u32 = 2;

/// Where the connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Client: connect request sent, no answer yet.
    Connecting,
    Connected,
    /// Ended (disconnected, rejected or lost); only queued DISCONNECT goes out.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Client,
    Server,
}

/// `send_message` refused the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("the connection is closed")]
    Closed,
    #[error("message of {len} bytes exceeds the max transfer size {max}")]
    TooLarge { len: usize, max: u32 },
    #[error("RDMA read is not allowed on this connection")]
    RdmaReadNotAllowed,
}

/// One end of a RUM connection.
#[derive(Debug)]
pub struct Connection {
    pub(crate) config: Config,
    pub(crate) state: State,
    pub(crate) role: Role,
    pub(crate) local_cid: u64,
    pub(crate) peer_cid: u64,
    pub(crate) peer: Option<PeerAttributes>,
    pub(crate) user_data: Vec<u8>,
    /// Negotiated payload bytes per segment.
    pub(crate) segment_size: usize,
    /// Negotiated largest message.
    pub(crate) max_transfer_size: u32,
    pub(crate) send: SendQueue,
    pub(crate) recv: Reassembly,
    pub(crate) arrival: ArrivalChain,
    pub(crate) credit: CreditWindow,
    pub(crate) rtt: RttEstimator,
    pub(crate) events: VecDeque<Event>,
    pub(crate) counters: Counters,
    pub(crate) handshake_due: bool,
    pub(crate) handshake_started: Time,
    pub(crate) handshake_deadline: Option<Time>,
    pub(crate) handshake_attempts: u32,
    pub(crate) ack_due: bool,
    /// In-order data segments come since the last acknowledgement left
    /// (see [`Config::ack_every`]).
    pub(crate) unacked_segments: u32,
    /// When held in-order data must be acknowledged at the latest.
    pub(crate) ack_deadline: Option<Time>,
    pub(crate) probe_due: bool,
    pub(crate) keepalive_due: bool,
    pub(crate) disconnect_due: Option<u32>,
    pub(crate) stalled: bool,
    pub(crate) dup_acks: u32,
    pub(crate) rto_deadline: Option<Time>,
    pub(crate) rto_count: u32,
    /// Tail loss probe: fires when the sender has been quiet this long
    /// with data unacknowledged (see [`Connection::probe_timeout`]).
    pub(crate) tlp_deadline: Option<Time>,
    /// Tail loss probes sent since the last progress.
    pub(crate) tlp_count: u32,
    pub(crate) probe_deadline: Option<Time>,
    /// Unreliable level: when the oldest hole is given up.
    pub(crate) hole_deadline: Option<Time>,
    pub(crate) last_heard: Time,
    pub(crate) last_sent: Time,
    /// When loss detection last found a hole (a segment not received
    /// below ones that were): the cap on bytes in flight holds until
    /// [`LOSS_MEMORY`] after it.
    pub(crate) hole_found_at: Option<Time>,
}

/// How long the cap on bytes in flight ([`Config::max_inflight`]) holds
/// after loss detection last found a hole.
pub(crate) const LOSS_MEMORY: std::time::Duration = std::time::Duration::from_millis(100);

impl Connection {
    pub(crate) fn new(config: Config, role: Role, local_cid: u64, now: Time) -> Self {
        let keep_data = config.reliability.is_reliable() && !config.flow_control_only;
        Self {
            segment_size: config.segment_size,
            max_transfer_size: config.max_transfer_size,
            send: SendQueue::new(keep_data),
            recv: Reassembly::new(config.recv_window),
            arrival: ArrivalChain::default(),
            credit: CreditWindow::new(config.flow_mode, 0),
            rtt: RttEstimator::new(config.initial_rto, config.min_rto, config.max_rto),
            config,
            state: State::Connecting,
            role,
            local_cid,
            peer_cid: 0,
            peer: None,
            user_data: Vec::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            handshake_due: false,
            handshake_started: now,
            handshake_deadline: None,
            handshake_attempts: 0,
            ack_due: false,
            unacked_segments: 0,
            ack_deadline: None,
            probe_due: false,
            keepalive_due: false,
            disconnect_due: None,
            stalled: false,
            dup_acks: 0,
            rto_deadline: None,
            rto_count: 0,
            tlp_deadline: None,
            tlp_count: 0,
            probe_deadline: None,
            hole_deadline: None,
            last_heard: now,
            last_sent: now,
            hole_found_at: None,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Changes when an idle connection sends a keepalive and how long a
    /// silent peer is waited for, on a live connection (its other
    /// settings stay). The timers follow from the next call on.
    pub fn set_liveness(
        &mut self,
        keepalive_interval: std::time::Duration,
        dead_peer_timeout: std::time::Duration,
    ) -> Result<(), crate::config::ConfigError> {
        if keepalive_interval.is_zero() || keepalive_interval >= dead_peer_timeout {
            return Err(crate::config::ConfigError::Keepalive);
        }
        self.config.keepalive_interval = keepalive_interval;
        self.config.dead_peer_timeout = dead_peer_timeout;
        Ok(())
    }
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    pub fn local_conn_id(&self) -> u64 {
        self.local_cid
    }
    /// The id the peer chose (0 while connecting).
    pub fn peer_conn_id(&self) -> u64 {
        self.peer_cid
    }
    pub fn peer_attributes(&self) -> Option<&PeerAttributes> {
        self.peer.as_ref()
    }
    /// Negotiated payload bytes per segment.
    pub fn segment_size(&self) -> usize {
        self.segment_size
    }
    /// A buffer this long always suffices for `poll_transmit`.
    pub fn max_datagram_len(&self) -> usize {
        let data = self.config.segment_size + openvia_wire::rum::DATA_OVERHEAD;
        data.max(512)
    }
    /// Payload bytes in flight: segments sent, neither acknowledged nor
    /// SACKed nor judged lost (at most [`Config::max_inflight`] plus the
    /// retransmissions, which the cap does not hold).
    pub fn bytes_in_flight(&self) -> usize {
        self.send.pipe() * self.segment_size
    }

    /// Messages posted whose completion has not been reported yet.
    pub fn pending_sends(&self) -> Vec<MessageId> {
        self.send.pending_ids().collect()
    }

    /// Queues a message; segments go out through `poll_transmit` as the
    /// receiver's window allows. Completion is reported as an event.
    pub fn send_message(&mut self, msg: OutgoingMessage) -> Result<MessageId, SendError> {
        if self.state == State::Closed {
            return Err(SendError::Closed);
        }
        if msg.data.len() > self.max_transfer_size as usize {
            return Err(SendError::TooLarge {
                len: msg.data.len(),
                max: self.max_transfer_size,
            });
        }
        if msg.op == openvia_wire::rum::ViaOp::RdmaReadRequest
            && !self.config.reliability.is_reliable()
        {
            return Err(SendError::RdmaReadNotAllowed);
        }
        self.counters.messages_sent += 1;
        Ok(self.send.push(msg))
    }

    /// Hetero mode: changes the window advertised to the peer, e.g. to the
    /// room in the posted receive descriptors. Never takes back a promise.
    pub fn set_recv_window(&mut self, segments: u32) {
        self.recv.set_window(segments);
        self.ack_due = true;
    }

    /// A buffer with room for `len` bytes for the next message's data,
    /// reusing one of a finished message when there is one (contents
    /// stale, to be overwritten).
    pub fn take_buffer(&mut self, len: usize) -> Vec<u8> {
        self.send.take_buffer(len)
    }

    /// Orderly close: a DISCONNECT goes out at the next `poll_transmit`.
    /// Whether data sent or queued still waits for the peer's
    /// acknowledgement: closing now would leave it to chance.
    pub fn awaiting_ack(&self) -> bool {
        self.state == State::Connected && (self.send.unacked() > 0 || self.send.has_uncut())
    }

    /// Asks the peer to acknowledge at once (a KEEPALIVE with the ACK
    /// request flag goes out at the next `poll_transmit`): an answer
    /// proves it is still there, e.g. after an ICMP error that may be
    /// forged.
    pub fn request_ack(&mut self) {
        if self.state == State::Connected {
            self.probe_due = true;
        }
    }

    pub fn close(&mut self) {
        if self.state != State::Closed {
            self.disconnect_due = Some(DISCONNECT_NORMAL);
            self.enter_closed();
        }
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Offers the next complete in-order message to `sink`. Returns its
    /// description if the sink placed it; `None` if nothing is ready or the
    /// sink said not now (the message stays buffered and holds the sender).
    pub fn poll_message(&mut self, sink: &mut impl MessageSink) -> Option<MessageInfo> {
        loop {
            let before = self.recv.next_msg_id();
            let result = self.recv.deliver_head(expand, &mut |i, s| sink.place(i, s));
            match result {
                Ok(Some(info)) => {
                    self.counters.messages_delivered += 1;
                    self.counters.messages_dropped += info.msg_id - before;
                    // The freed buffer reopens the sender's window.
                    self.ack_due = true;
                    return Some(info);
                }
                Ok(None) => return None,
                Err(_) if !self.config.reliability.is_reliable() => {
                    self.recv.drop_head_run();
                }
                Err(_) => {
                    self.counters.protocol_violations += 1;
                    self.fail(LostReason::ProtocolViolation);
                    return None;
                }
            }
        }
    }

    pub(crate) fn enter_closed(&mut self) {
        self.state = State::Closed;
        self.rto_deadline = None;
        self.tlp_deadline = None;
        self.probe_deadline = None;
        self.handshake_deadline = None;
        self.hole_deadline = None;
        self.handshake_due = false;
        self.ack_due = false;
        self.ack_deadline = None;
        self.probe_due = false;
        self.keepalive_due = false;
    }

    /// Ends the connection with an error event, telling the peer.
    pub(crate) fn fail(&mut self, reason: LostReason) {
        if self.state == State::Closed {
            return;
        }
        if matches!(
            reason,
            LostReason::LossWithoutRecovery | LostReason::ProtocolViolation
        ) && self.peer_cid != 0
        {
            self.disconnect_due = Some(DISCONNECT_ERROR);
        }
        self.enter_closed();
        self.events.push_back(Event::ConnectionLost(reason));
    }

    /// Processes one received datagram. Anything that fails to parse,
    /// carries another connection's id or makes no sense now is dropped
    /// and counted.
    pub fn handle_datagram(&mut self, now: Time, datagram: &[u8]) {
        self.handle_datagram_placing(now, datagram, None)
    }

    /// [`Self::handle_datagram`], offering data segments that arrive in
    /// order to `placer` (see [`SegmentPlacer`]).
    pub fn handle_datagram_placing(
        &mut self,
        now: Time,
        datagram: &[u8],
        placer: Option<&mut dyn SegmentPlacer>,
    ) {
        self.counters.datagrams_received += 1;
        let repr = match Repr::parse(datagram) {
            Ok(r) => r,
            Err(_) => {
                self.counters.parse_errors += 1;
                return;
            }
        };
        if self.state == State::Closed {
            self.counters.unexpected_packets += 1;
            return;
        }
        if repr.header.conn_id != self.local_cid {
            // A repeated connect request means our ACCEPT was lost.
            match repr.body {
                Body::ConnectRequest(h)
                    if self.role == Role::Server
                        && repr.header.conn_id == 0
                        && h.conn_id == self.peer_cid =>
                {
                    self.handshake_due = true;
                    self.last_heard = now;
                }
                _ => self.counters.wrong_conn_id += 1,
            }
            return;
        }
        match repr.body {
            Body::ConnectAccept(h) => self.on_accept(now, &h),
            Body::ConnectReject(h) => self.on_reject(&h),
            Body::Disconnect { reason } => {
                self.last_heard = now;
                // Its header carries the peer's final acknowledgement:
                // sends it got complete now, before the loss of the
                // connection fails the rest (its last ACK may have been
                // lost, and nothing else from it will come).
                if self.state == State::Connected && !self.on_feedback(now, &repr.header, None) {
                    self.counters.bogus_acks += 1;
                }
                self.enter_closed();
                self.events.push_back(Event::PeerDisconnected { reason });
            }
            Body::ConnectRequest(_) => self.counters.unexpected_packets += 1,
            Body::Data(_) | Body::Ack(_) | Body::Keepalive => {
                if self.state != State::Connected {
                    self.counters.unexpected_packets += 1;
                    return;
                }
                self.on_connected_packet(now, &repr, placer);
            }
        }
    }

    fn on_connected_packet(
        &mut self,
        now: Time,
        repr: &Repr<'_>,
        placer: Option<&mut dyn SegmentPlacer>,
    ) {
        let h = &repr.header;
        let sack = match &repr.body {
            Body::Ack(a) => Some(a),
            _ => None,
        };
        if !self.on_feedback(now, h, sack) {
            self.counters.bogus_acks += 1;
            return;
        }
        self.last_heard = now;
        match &repr.body {
            Body::Data(d) => self.on_data(now, h, d, placer),
            Body::Keepalive if h.ack_request && !self.config.reliability.is_reliable() => {
                // A probe: every segment below the sender's next sequence
                // number was sent; a hole below it is a loss.
                let upto = expand(self.recv.expected(), h.seq);
                self.recv.skip_holes(Some(upto));
                self.rearm_hole(now);
            }
            Body::Keepalive if h.ack_request && self.config.flow_control_only => {
                let upto = expand(self.recv.expected(), h.seq);
                if upto > self.recv.expected() {
                    self.fail(LostReason::LossWithoutRecovery);
                    return;
                }
            }
            _ => {}
        }
        if h.ack_request {
            self.ack_due = true;
        }
    }

    fn on_data(
        &mut self,
        now: Time,
        h: &HeaderRepr,
        d: &DataRepr<'_>,
        placer: Option<&mut dyn SegmentPlacer>,
    ) {
        self.counters.data_segments_received += 1;
        let seq = expand(self.recv.expected(), h.seq);
        if d.total_len > self.max_transfer_size || d.payload.len() > self.peer_segment_limit() {
            self.counters.protocol_violations += 1;
            return;
        }
        let reliable = self.config.reliability.is_reliable();
        if reliable && self.config.flow_control_only && seq > self.recv.expected() {
            // A gap on a fabric declared lossless: there is no copy to
            // retransmit, so fail rather than deliver anything wrong.
            self.fail(LostReason::LossWithoutRecovery);
            return;
        }
        let placed = match placer {
            Some(p) if reliable && self.recv.vacant(seq) => {
                let next = self.recv.next_msg_id();
                // Asked of first segments only (a look at the buffer).
                let boundary = d.offset == 0 && self.recv.message_boundary(seq);
                self.arrival
                    .offer(p, seq, expand(next, d.msg_id), next, boundary, d)
            }
            _ => false,
        };
        let seg = if placed {
            self.counters.segments_placed += 1;
            RecvSegment::placed(d)
        } else {
            self.recv.segment(d)
        };
        let next_in_line = seq == self.recv.expected() && !self.recv.has_hole();
        let stored = match self.recv.insert(seq, seg) {
            Insert::Stored => true,
            Insert::Duplicate => {
                self.counters.duplicate_segments += 1;
                false
            }
            Insert::OutOfWindow => {
                self.counters.out_of_window += 1;
                false
            }
        };
        if !reliable && self.hole_deadline.is_none() {
            self.rearm_hole(now);
        }
        let ends_message = d.offset as usize + d.payload.len() >= d.total_len as usize;
        self.note_data_for_ack(now, stored && next_in_line, ends_message);
    }

    /// Decides when received data is acknowledged. A segment that came
    /// out of line (a hole, a duplicate, beyond the window) is
    /// acknowledged at once: the sender's loss recovery runs on those
    /// acknowledgements. In-order data is acknowledged every
    /// [`Config::ack_every`] segments, at a message's end (its sender
    /// waits for that to complete it), and at the latest
    /// [`Config::ack_delay`] after it came. Acknowledging once per
    /// receive batch instead let a slowed receiver (smaller batches)
    /// acknowledge more and so slow itself further.
    fn note_data_for_ack(&mut self, now: Time, in_line: bool, ends_message: bool) {
        self.unacked_segments += 1;
        if !in_line || ends_message || self.unacked_segments >= self.config.ack_every.max(1) {
            self.ack_due = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + self.config.ack_delay);
        }
    }

    /// An acknowledgement (bare or piggybacked) left: nothing is held.
    pub(crate) fn ack_sent(&mut self) {
        self.ack_due = false;
        self.unacked_segments = 0;
        self.ack_deadline = None;
    }

    /// Unreliable level: a hole waits `reorder_tolerance` for a late
    /// segment before it is skipped (see [`Reassembly::skip_holes`]).
    pub(crate) fn rearm_hole(&mut self, now: Time) {
        self.hole_deadline = self
            .recv
            .has_hole()
            .then(|| now + self.config.reorder_tolerance);
    }

    fn peer_segment_limit(&self) -> usize {
        self.peer
            .map(|p| p.segment_size as usize)
            .unwrap_or(self.segment_size)
            .max(self.segment_size)
    }

    /// Applies the receiver feedback every packet carries. Returns false
    /// for feedback about data never sent.
    fn on_feedback(
        &mut self,
        now: Time,
        h: &HeaderRepr,
        sack: Option<&openvia_wire::rum::SackBlocks<'_>>,
    ) -> bool {
        let next = self.send.next_seq;
        let ack = expand(self.send.snd_una, h.ack);
        let consumed = expand(self.credit.consumed(), h.consumed);
        if ack > next || consumed > ack {
            return false;
        }
        let mut blocks = Vec::new();
        for b in sack.iter().flat_map(|a| a.iter()) {
            let start = expand(self.send.snd_una, b.start);
            let end = expand(start, b.end);
            if start < ack || end > next || end <= start {
                return false;
            }
            blocks.push((start, end));
        }
        let una_before = self.send.snd_una;
        let consumed_before = self.credit.consumed();
        let min_rtt = self.rtt.min_rtt();
        let outcome = self.send.on_ack(ack, now, min_rtt);
        let complete = blocks.len() < self.sack_room();
        if outcome.newly_acked > 0 {
            if let Some(sample) = outcome.rtt_sample.filter(|_| complete) {
                self.rtt.on_sample(sample);
            } else {
                self.rtt.reset_backoff();
            }
            self.rto_count = 0;
            self.dup_acks = 0;
            self.tlp_count = 0;
            self.rto_deadline = if self.send.inflight_is_empty() {
                None
            } else {
                Some(now + self.rtt.rto())
            };
            self.rearm_tail_probe(now);
        } else if sack.is_some() && ack == una_before && !self.send.inflight_is_empty() {
            self.dup_acks += 1;
            if self.dup_acks == 3 && self.send.mark_first_lost(now, self.rtt.srtt()) {
                self.counters.fast_retransmits += 1;
                self.hole_found_at = Some(now);
            }
        }
        // An ACK with as many blocks as it can hold may have left out the
        // receiver's latest arrivals: a segment it reports for the first
        // time may have arrived long before (holes below filled since), and
        // its age then is no round trip. Samples come from complete ACKs
        // only (under heavy loss, with every ACK full, the estimate holds
        // still; taking them swelled SRTT from 60 µs to 80 ms at 20 % drop).
        let complete = blocks.len() < self.sack_room();
        let mut sack_sample = None;
        for (s, e) in blocks {
            sack_sample = self.send.on_sack(s, e, now, min_rtt).or(sack_sample);
        }
        if let Some(sample) = sack_sample.filter(|_| complete) {
            self.rtt.on_sample(sample);
        }
        let srtt = self.rtt.srtt();
        let marked = self.send.detect_losses(now, srtt, srtt / 4);
        self.counters.fast_retransmits += marked as u64;
        if marked > 0 {
            self.hole_found_at = Some(now);
        }
        self.credit.on_report(consumed, h.window);
        if self.send.snd_una > una_before || self.credit.consumed() > consumed_before {
            self.rto_count = 0;
            self.rearm_probe(now);
        }
        self.collect_completions();
        true
    }

    /// How long the sender may stay quiet with data unacknowledged before
    /// a tail loss probe: two round trips (an acknowledgement is due by
    /// then), at least a tenth of the minimum retransmission timeout (a
    /// descheduled peer costs one needless segment, not a window), at
    /// most the retransmission timeout itself.
    pub(crate) fn probe_timeout(&self) -> std::time::Duration {
        let rto = self.rtt.rto();
        // The peer may hold its acknowledgement up to `ack_delay`.
        (self.rtt.srtt() * 2 + self.config.ack_delay)
            .max(self.config.min_rto / 10)
            .min(rto)
    }

    /// Arms (or pushes back) the tail loss probe while data is unacknowledged.
    pub(crate) fn rearm_tail_probe(&mut self, now: Time) {
        self.tlp_deadline = (!self.send.inflight_is_empty() && self.tlp_count < MAX_TAIL_PROBES)
            .then(|| now + self.probe_timeout());
    }

    /// What a send waits for: on a reliable level the peer must hold the
    /// data before the send is reported done, else a datagram lost after
    /// completion (and a close or a connection loss before it was resent)
    /// would lose a message that both sides reported as fine.
    pub(crate) fn complete_on(&self) -> CompleteOn {
        match self.config.reliability {
            Reliability::Unreliable => CompleteOn::Sent,
            Reliability::ReliableDelivery => CompleteOn::Acknowledged,
            Reliability::ReliableReception => CompleteOn::Placed,
        }
    }

    pub(crate) fn collect_completions(&mut self) {
        let when = self.complete_on();
        let events = &mut self.events;
        self.send
            .collect_completions(self.credit.consumed(), when, &mut |id| {
                events.push_back(Event::SendCompleted(id))
            });
    }

    /// Whether the sender waits on the receiver without a retransmission
    /// timer to wake it: unacknowledged data with no retransmission
    /// buffers, or queued data behind a closed window.
    pub(crate) fn needs_probe(&self) -> bool {
        let no_buffers = !self.config.reliability.is_reliable() || self.config.flow_control_only;
        let blocked = self.send.has_uncut() && self.credit.available(self.send.next_seq) == 0;
        let unplaced = self.config.reliability == Reliability::ReliableReception
            && self.credit.consumed() < self.send.next_seq;
        (no_buffers && self.send.unacked() > 0) || blocked || unplaced
    }

    pub(crate) fn rearm_probe(&mut self, now: Time) {
        self.probe_deadline = self.needs_probe().then(|| now + self.rtt.rto());
    }

    /// Checks that a config can work before building a connection on it.
    pub(crate) fn checked(config: &Config) -> Result<(), ConfigError> {
        config.validate()
    }

    /// The peer's window cannot hold one of our largest messages.
    pub(crate) fn window_fits(&self, peer_window: u32) -> bool {
        segments_for(self.max_transfer_size as usize, self.segment_size) <= peer_window as usize
    }
}
