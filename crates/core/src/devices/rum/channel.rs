//! One connected VI pair over a datagram link: a [`Channel`] that feeds
//! an `openvia_proto::Connection` with datagrams and time, and turns the
//! messages it delivers into placements. Generic over the link
//! ([`DatagramLink`]); what follows describes it on the UDP device's.
//!
//! Each VI owns a UDP socket connected to the peer's, so the kernel does
//! the demultiplexing and drops datagrams from anyone else; the socket is
//! also the descriptor the NIC's progress thread sleeps on. Every call of
//! `progress` reads the socket without blocking (one datagram while they
//! come alone, with GRO off and a plain recv once they have for a while;
//! a recvmmsg batch with GRO once they come in numbers). A poll that finds
//! nothing and owes nothing ends there; otherwise it runs due timers (an
//! idle one every [`IDLE_CLOCK_EVERY`]th poll), places complete messages
//! and sends what the protocol wants to send (`tx`: scatter-gather,
//! sendmmsg with GSO runs). An acknowledgement owed for a message just
//! delivered waits up to [`ACK_DELAY_NS`], so a reply the application
//! posts meanwhile carries it.
//!
//! Under a cluster key every datagram after the handshake carries an
//! authentication trailer (`packet_auth`): sealed as the flush writes it,
//! checked before the protocol sees a received one.
//!
//! A peer process that died on a live host is known by the ICMP port
//! unreachable its host answers our next datagram with (an idle VI sends
//! a keepalive every `OPENVIA_UDP_KEEPALIVE_MS`, 50 ms): the kernel
//! reports it on the connected socket as ECONNREFUSED. Without a cluster
//! key that ends the connection at once; with one, where an ICMP may be
//! forged, it asks the peer for an acknowledgement, and only silence for
//! [`UNREACHABLE_ANSWER_NS`] ends it.
//!
//! VIA operations map onto RUM messages one to one. An RDMA read request
//! carries (length, tag) as 16 bytes of payload, the tag being the
//! requester's message number; the response is a message of op
//! `RdmaReadResponse` whose remote address is the tag. A refusal (an RDMA
//! write or read that fails the target's protection check) is a response
//! with memory handle [`NACK_HANDLE`], the refused message number as remote
//! address and the status bits as immediate data.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use openvia_proto::{Connection, Event, OutgoingMessage, Payload, Time, Transmit, ViaOp};
use openvia_wire::handshake::ViAttrs;

use super::direct::DirectPlacement;
use super::fault::{FaultConfig, Faults};
use super::link::DatagramLink;
use super::packet_auth::{overhead, PacketAuth};
use super::rx::RxBatch;
use super::sink::{gather_into, Sink};
use super::stats::STATS;
use super::tx::{Outside, TxBatch};
use crate::descriptor::{OpKind, WorkRequest};
use crate::device::{Channel, ChannelFailed, Completion, PeerEvent};
use crate::ranges::Range;
use crate::vi::placement::Placement;

/// Memory handle that marks a response as a refusal.
pub const NACK_HANDLE: u32 = u32::MAX;
/// Datagrams gathered before one sendmmsg.
const TX_BATCH: usize = 64;
/// Segment payloads from this size on are sent from where they lie
/// (scatter-gather) instead of being copied next to their headers first.
const SPLIT_MIN: usize = 1024;
/// Sends from this size on, from one contiguous range, are read straight
/// from the application's registered memory (as a NIC's DMA would) rather
/// than copied at post, at every level. Where there is retransmission they
/// then complete when every segment is acknowledged, which a smaller
/// message would feel: its acknowledgement may wait for a reply to carry
/// it. Without, they complete as before (the unreliable level once the
/// last segment has left; each flush sends, or copies in, what it took
/// before the completion is reported).
const EXTERNAL_MIN: u64 = 64 << 10;
/// How long an acknowledgement for a delivered message waits for a reply
/// to carry it. Sent by the next progress call instead, it went out just
/// before the reply (a VIA program posts its next receive, which runs
/// progress, before it sends): two datagrams, each with its own trip
/// through both kernels, where one does. Streams lose nothing: their
/// acknowledgements still leave every few tens of microseconds.
const ACK_DELAY_NS: u64 = 25_000;
/// Only an acknowledgement for messages up to this size is held: the
/// reply to a large message is not that close, and the sender of one read
/// in place ([`EXTERNAL_MIN`]) completes it only when acknowledged.
const HOLD_ACK_MAX: usize = 16 << 10;
/// Datagrams that came alone in a row before GRO goes off.
const LONE_FOR_PLAIN: u8 = 4;
/// An idle progress call reads the clock and runs due protocol timers
/// once in this many.
const IDLE_CLOCK_EVERY: u32 = 16;
/// Longest a close waits for the peer to acknowledge what was sent.
const LINGER_NS: u64 = 200_000_000;
/// Under a cluster key, how long the peer has to answer (any packet whose
/// tag holds) after an ICMP port unreachable before the connection fails:
/// a forged ICMP then costs one acknowledgement, not the connection. A
/// genuine ICMP means the port is closed, so only a forger who can also
/// hold back the answer (and could as well drop everything) gains by a
/// peer slow to answer.
const UNREACHABLE_ANSWER_NS: u64 = 25_000_000;

/// An ICMP port unreachable under a cluster key, not yet answered.
#[derive(Clone, Copy, Debug)]
struct Unreachable {
    /// The connection fails at this time (ns) unless the peer answers.
    until: u64,
    /// A receive found the socket empty since: what arrives now was sent
    /// after the ICMP's datagram, not queued before the peer died.
    drained: bool,
}

/// Now, as the protocol's time (CLOCK_MONOTONIC).
pub fn now() -> Time {
    Time::from_nanos(crate::sys::now_ns())
}

/// The server's Accept, sent again until the client is heard from (the
/// client's repeated requests reach the listener, not this connection).
pub struct AcceptEcho {
    pub datagram: Vec<u8>,
    pub next: u64,
    pub interval_ns: u64,
    pub give_up: u64,
}

pub struct RumChannel<L: DatagramLink> {
    /// The medium: datagrams to and from the peer.
    link: L,
    conn: Connection,
    remote: ViAttrs,
    reliable: bool,
    /// Large sends may be read in place (`OPENVIA_UDP_COPY_SENDS` not set).
    external_ok: bool,
    /// Flow-control-only: no retransmission, a lost datagram ends it.
    lossless: bool,
    tx: TxBatch,
    rx: RxBatch,
    /// Room for one outgoing datagram, trailer included.
    max_datagram: usize,
    /// Per-packet authentication (a cluster key is set).
    auth: Option<PacketAuth>,
    /// The peer's host said its port is closed; waiting for an answer.
    unreachable: Option<Unreachable>,
    /// The connection failed on the peer's port being closed: nothing is
    /// sent any more (each datagram would draw another ICMP, which the
    /// host's kernel rate-limits per destination).
    peer_gone: bool,
    /// Messages posted (our sequence numbers are message id + 1).
    posted: u64,
    /// Every message below this id has completed.
    completed: u64,
    failed: Option<&'static str>,
    closed: bool,
    /// An acknowledgement (or other datagram) waits for the next call.
    flush_owed: bool,
    /// An acknowledgement for a delivered message waits, since then (ns),
    /// for a reply to carry it (at most [`ACK_DELAY_NS`]).
    ack_held_since: Option<u64>,
    /// The progress thread saw the socket readable.
    readable: bool,
    /// Buffers the next receive asks for (1 or [`RX_BATCH`]).
    rx_want: usize,
    /// The last receive found a datagram.
    rx_streak: bool,
    /// Datagrams that came alone (an empty receive before), in a row.
    lone_arrivals: u8,
    /// Progress calls since a datagram last came.
    idle_polls: u32,
    /// A reliable message waits in the protocol for a receive descriptor.
    held_for_recv: bool,
    /// No reply is posted on this connection (`Channel::set_no_replies`):
    /// an acknowledgement is held only until the next call, which the
    /// program makes once it has taken the message.
    no_replies: bool,
    /// The next progress call runs due timers even if idle
    /// (`Channel::clock_next_progress`).
    clock_next: bool,
    echo: Option<AcceptEcho>,
    heard: bool,
    replies: Vec<OutgoingMessage>,
    /// Injected faults on received datagrams (`OPENVIA_UDP_FAULTS`).
    faults: Option<Faults>,
    /// Data is placed in the VI's receives as it arrives
    /// (`OPENVIA_UDP_DIRECT`, on by default; the protocol offers it only
    /// on the reliable levels).
    place_on_arrival: bool,
    /// Where messages placed on arrival go.
    direct: DirectPlacement,
}

impl<L: DatagramLink> RumChannel<L> {
    /// `in_place_sends`: large sends may be read in place (see
    /// [`EXTERNAL_MIN`]).
    pub fn new(
        link: L,
        conn: Connection,
        remote: ViAttrs,
        echo: Option<AcceptEcho>,
        in_place_sends: bool,
        cluster_key: Option<&[u8]>,
    ) -> Self {
        let reliable = conn.config().reliability.is_reliable();
        let lossless = conn.config().flow_control_only;
        let external_ok = in_place_sends;
        let auth =
            cluster_key.map(|k| PacketAuth::new(k, conn.local_conn_id(), conn.peer_conn_id()));
        let longest = conn.max_datagram_len() + overhead(auth.is_some());
        let max_datagram = longest.max(2048);
        let rx_buf = link.rx_buffer_len(longest);
        let mut ch = Self {
            link,
            conn,
            remote,
            reliable,
            external_ok,
            lossless,
            tx: TxBatch::default(),
            rx: RxBatch::new(rx_buf),
            max_datagram,
            auth,
            unreachable: None,
            peer_gone: false,
            posted: 0,
            completed: 0,
            failed: None,
            closed: false,
            flush_owed: false,
            ack_held_since: None,
            readable: false,
            rx_want: 1,
            rx_streak: false,
            lone_arrivals: 0,
            idle_polls: 0,
            held_for_recv: false,
            no_replies: false,
            clock_next: false,
            heard: echo.is_none(),
            echo,
            replies: Vec::new(),
            faults: None,
            place_on_arrival: true,
            direct: DirectPlacement::default(),
        };
        ch.drain_events();
        ch
    }

    /// Injects `faults` into what this channel receives (see [`super::fault`]).
    pub fn with_faults(mut self, faults: Option<FaultConfig>) -> Self {
        self.faults = faults.map(Faults::next_stream);
        self
    }

    /// Turns placement on arrival off (`false`) or on.
    pub fn with_direct(mut self, on: bool) -> Self {
        self.place_on_arrival = on;
        self
    }

    fn drain_events(&mut self) {
        while let Some(ev) = self.conn.poll_event() {
            match ev {
                Event::SendCompleted(id) => self.completed = self.completed.max(id + 1),
                Event::ConnectionLost(reason) => {
                    self.failed.get_or_insert(match reason {
                        openvia_proto::LostReason::PeerSilent => "peer silent",
                        openvia_proto::LostReason::RetransmitLimit => "retransmission limit",
                        openvia_proto::LostReason::LossWithoutRecovery => "loss on lossless mode",
                        openvia_proto::LostReason::ProtocolViolation => "protocol violation",
                        openvia_proto::LostReason::ConnectTimeout => "connect timeout",
                    });
                }
                Event::PeerDisconnected { .. } => {
                    self.failed.get_or_insert("peer disconnected");
                }
                Event::Connected(_) | Event::Rejected { .. } => {}
            }
        }
    }

    /// Pulls datagrams out of the protocol and sends them in batches.
    fn flush(&mut self, now: Time) {
        self.flush_owed = false;
        self.ack_held_since = None;
        loop {
            let mut pulled = false;
            let trailer = overhead(self.auth.is_some());
            while self.tx.len() < TX_BATCH {
                let tail = self.tx.tail(self.max_datagram);
                let room = tail.len() - trailer;
                let Some(Transmit { len, payload }) =
                    self.conn
                        .poll_transmit_split(now, &mut tail[..room], SPLIT_MIN)
                else {
                    break;
                };
                pulled = true;
                let outside = match payload {
                    None => None,
                    Some(r) => {
                        let addr = match r.external {
                            Some(base) => base + r.offset as u64,
                            None => match self.conn.payload_bytes(&r) {
                                Some(b) => b.as_ptr() as u64,
                                // Not there: nothing to send; recovery
                                // treats it as lost.
                                None => continue,
                            },
                        };
                        Some(Outside { addr, len: r.len })
                    }
                };
                if let Some(auth) = self.auth.as_mut() {
                    let outside_bytes: &[u8] = match outside {
                        // SAFETY: the protocol named these bytes for this
                        // flush (its buffer, or registered memory of a send
                        // not yet complete); they stay until it takes an
                        // acknowledgement, after the flush.
                        Some(o) => unsafe {
                            std::slice::from_raw_parts(o.addr as *const u8, o.len)
                        },
                        None => &[],
                    };
                    let (head, rest) = self.tx.tail(self.max_datagram).split_at_mut(len);
                    auth.seal(&[head, outside_bytes], rest);
                }
                self.tx.commit_trailed(len, outside, trailer);
            }
            if self.tx.is_empty() {
                break;
            }
            let sent = match self.link.send_batch(&self.tx) {
                Ok(n) => n,
                Err(e) => {
                    if self.link.peer_gone(&e) {
                        self.port_unreachable(now.as_nanos());
                    }
                    // Otherwise an unreachable network: like a loss;
                    // timers decide.
                    self.tx.len()
                }
            };
            self.tx.consume(sent);
            if !self.tx.is_empty() {
                // Socket buffer full: keep the rest for the next call.
                self.flush_owed = true;
                break;
            }
            if !pulled {
                break;
            }
        }
        self.drain_events();
    }

    /// Reads what the socket holds and runs a due protocol timer (what it
    /// wants sent goes with the next flush). Returns the time it ran at.
    fn take_input(&mut self) -> Time {
        let now = self.receive(None).unwrap_or_else(now);
        self.run_due_timers(now);
        now
    }

    /// The peer's host answered a datagram with ICMP port unreachable.
    fn port_unreachable(&mut self, now_ns: u64) {
        STATS.port_unreachable.fetch_add(1, Ordering::Relaxed);
        if self.auth.is_none() {
            self.failed
                .get_or_insert("peer gone (its port is unreachable)");
            self.peer_gone = true;
            return;
        }
        if self.unreachable.is_none() {
            self.unreachable = Some(Unreachable {
                until: now_ns + UNREACHABLE_ANSWER_NS,
                drained: false,
            });
            self.conn.request_ack();
            self.flush_owed = true;
        }
    }

    fn run_due_timers(&mut self, now: Time) {
        if self.unreachable.is_some_and(|u| now.as_nanos() >= u.until) {
            self.failed
                .get_or_insert("peer gone (port unreachable, no answer)");
            self.peer_gone = true;
        }
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
            self.flush_owed = true;
        }
    }

    fn run_echo(&mut self, now: u64) {
        let Some(e) = self.echo.as_mut() else { return };
        if now >= e.give_up {
            self.echo = None;
            return;
        }
        if now >= e.next {
            let _ = self.link.send(&e.datagram);
            e.interval_ns = (e.interval_ns * 2).min(500_000_000);
            e.next = now + e.interval_ns;
        }
    }

    fn publish_counters(&self) {
        let c = self.conn.counters();
        STATS.add_connection(c);
        if std::env::var_os("OPENVIA_UDP_STATS").is_some() {
            eprintln!(
                "openvia udp: connection {:#x} counters {c:?}",
                self.conn.local_conn_id()
            );
        }
    }
}

impl<L: DatagramLink> Channel for RumChannel<L> {
    fn post(
        &mut self,
        wr: &WorkRequest,
        local: &[Range],
        _track: bool,
    ) -> Result<(u64, Completion), ChannelFailed> {
        if self.closed {
            return Err(ChannelFailed("closed"));
        }
        if let Some(why) = self.failed {
            return Err(ChannelFailed(why));
        }
        let seq = self.posted + 1;
        let (addr, handle) = wr.remote.unwrap_or((0, 0));
        let msg = match wr.op {
            OpKind::Send => OutgoingMessage {
                op: ViaOp::Send,
                immediate: wr.immediate,
                mem_handle: 0,
                remote_addr: 0,
                data: self.payload(local, wr.total_len),
            },
            OpKind::RdmaWrite => OutgoingMessage {
                op: ViaOp::RdmaWrite,
                immediate: wr.immediate,
                mem_handle: handle,
                remote_addr: addr,
                data: self.payload(local, wr.total_len),
            },
            OpKind::RdmaRead => {
                let mut data = Vec::with_capacity(16);
                data.extend_from_slice(&wr.total_len.to_be_bytes());
                data.extend_from_slice(&seq.to_be_bytes());
                OutgoingMessage {
                    op: ViaOp::RdmaReadRequest,
                    immediate: None,
                    mem_handle: handle,
                    remote_addr: addr,
                    data: data.into(),
                }
            }
        };
        self.send_message(msg)?;
        self.flush(now());
        let completion = if wr.op == OpKind::RdmaRead {
            Completion::ReadDone
        } else {
            Completion::Sent
        };
        Ok((seq, completion))
    }

    fn progress(&mut self, place: &mut Placement) -> Result<bool, ChannelFailed> {
        if self.closed {
            return Err(ChannelFailed("closed"));
        }
        self.readable = false;
        let clock_asked = std::mem::take(&mut self.clock_next);
        // Before anything can drain the protocol's events: the flush
        // below (an acknowledgement owed) counts the completions of what
        // this call receives too, and they must still hold back a failure
        // that arrives with them (see the end).
        let completed_before = self.completed;
        let got = self.receive(Some(&mut *place));
        self.idle_polls = if got.is_some() {
            0
        } else {
            self.idle_polls + 1
        };
        // An idle poll of a busy-polling program: nothing came and nothing
        // waits on the clock but the protocol timers, which every
        // [`IDLE_CLOCK_EVERY`]th idle poll runs (they are milliseconds
        // long; a poll is a microsecond or two).
        if got.is_none()
            && !self.flush_owed
            && self.ack_held_since.is_none()
            && self.echo.is_none()
            && !self.held_for_recv
            && self.failed.is_none()
            && self.unreachable.is_none()
            && !clock_asked
            && !self.idle_polls.is_multiple_of(IDLE_CLOCK_EVERY)
        {
            return Ok(false);
        }
        let now_t = got.unwrap_or_else(now);
        let ack_ripe = self
            .ack_held_since
            .is_some_and(|t| now_t.as_nanos() >= t + self.ack_delay_ns());
        if self.flush_owed || ack_ripe {
            self.flush(now_t);
        }
        self.run_due_timers(now_t);
        let mut did = got.is_some();
        self.run_echo(now_t.as_nanos());
        let mut sink = Sink {
            place,
            direct: &mut self.direct,
            reliable: self.reliable,
            replies: &mut self.replies,
            held: false,
        };
        let mut delivered = false;
        let mut delivered_large = false;
        while let Some(info) = self.conn.poll_message(&mut sink) {
            delivered = true;
            delivered_large |= info.len > HOLD_ACK_MAX;
        }
        self.held_for_recv = sink.held;
        did |= delivered;
        let replies = std::mem::take(&mut self.replies);
        let replied = !replies.is_empty();
        for m in replies {
            self.send_message(m)?;
        }
        self.drain_events();
        // Hold a bare acknowledgement for a reply the application may post
        // next; anything else goes out now.
        if delivered && !replied && !delivered_large {
            self.ack_held_since.get_or_insert(now_t.as_nanos());
        } else if did || self.flush_owed {
            self.flush(now_t);
        }
        if let Some(why) = self.failed {
            if self.peer_gone {
                // Its port closed, learnt maybe after this call read the
                // link (a send here drew the error): what the peer sent
                // before closing may be queued still.
                if self.receive(None).is_some() {
                    self.drain_events();
                }
            } else {
                self.flush(now_t);
            }
            // The datagram that completed our last sends (the peer's final
            // acknowledgement) often comes with its disconnect. The caller
            // reads the completed count before this call: report the
            // failure on the next call, so those sends complete rather than
            // being flushed with an error.
            if self.completed > completed_before {
                return Ok(true);
            }
            return Err(ChannelFailed(why));
        }
        Ok(did)
    }

    fn has_work(&self) -> bool {
        // Whether the socket holds data is known only by asking it, which
        // progress does without blocking.
        !self.closed
    }

    fn awaits_recv(&self) -> bool {
        self.held_for_recv
    }

    fn sent(&self) -> u64 {
        self.completed
    }

    fn consumed(&self) -> u64 {
        self.completed
    }

    fn remote_attrs(&self) -> ViAttrs {
        self.remote
    }

    fn liveness_fd(&self) -> RawFd {
        self.link.raw_fd()
    }

    fn peer_event(&mut self) -> PeerEvent {
        self.readable = true;
        PeerEvent::Quiet
    }

    fn close(&mut self, broken: bool) {
        if self.closed {
            return;
        }
        if broken {
            self.failed.get_or_insert("broken");
        }
        if self.peer_gone {
            self.closed = true;
            self.publish_counters();
            return;
        }
        // An acknowledgement held for a reply goes out before the
        // disconnect: closing discards it, and the peer's reliable send of
        // the message we just took would then fail.
        self.flush(now());
        if !broken && self.reliable {
            self.linger();
        }
        self.conn.close();
        self.flush(now());
        self.closed = true;
        self.publish_counters();
    }

    fn set_no_replies(&mut self, on: bool) {
        self.no_replies = on;
    }

    fn clock_next_progress(&mut self) {
        self.clock_next = true;
    }

    fn set_liveness(&mut self, keepalive: Duration, dead: Duration) -> bool {
        self.conn.set_liveness(keepalive, dead).is_ok()
    }

    fn flush_at_exit(&mut self) {
        // An acknowledgement held for a reply would never leave: the
        // peer's send of a message we placed would then end flushed.
        if !self.closed && !self.peer_gone {
            self.flush(now());
        }
    }

    fn timer_deadline_ns(&self) -> Option<u64> {
        if self.closed {
            return None;
        }
        let t = self.conn.poll_timeout().map(|t| t.as_nanos());
        let e = self.echo.as_ref().map(|e| e.next);
        let f = self.flush_owed.then(crate::sys::now_ns);
        let a = self.ack_held_since.map(|t| t + self.ack_delay_ns());
        let u = self.unreachable.map(|u| u.until);
        [t, e, f, a, u].into_iter().flatten().min()
    }
}

impl<L: DatagramLink> RumChannel<L> {
    /// Before a disconnect: sends the peer has not acknowledged have not
    /// completed (a reliable send completes only once the peer holds it)
    /// and are flushed with an error when the channel closes. Keep
    /// answering (acknowledgements in, retransmissions out) until the peer
    /// has everything, it fails, or [`LINGER_NS`] passes, so that an
    /// orderly close loses nothing the peer could still get.
    fn linger(&mut self) {
        let deadline = crate::sys::now_ns() + LINGER_NS;
        while self.conn.awaiting_ack() && self.failed.is_none() {
            let t = crate::sys::now_ns();
            if t >= deadline {
                break;
            }
            let wake = self
                .conn
                .poll_timeout()
                .map_or(deadline, |w| w.as_nanos().min(deadline));
            let wait = std::time::Duration::from_nanos(wake.saturating_sub(t).min(1_000_000));
            self.link.wait_readable(wait);
            let now_t = self.take_input();
            self.flush(now_t);
        }
    }

    /// The bytes of a send or RDMA write: read in place when they are
    /// large and one range (see [`EXTERNAL_MIN`]); copied otherwise.
    fn payload(&mut self, local: &[Range], len: u64) -> Payload {
        if let [r] = local {
            if len >= EXTERNAL_MIN && r.len >= len && self.external_ok {
                return Payload::External {
                    addr: r.addr,
                    len: len as usize,
                };
            }
        }
        let buf = self.conn.take_buffer(len as usize);
        Payload::Owned(gather_into(buf, local, len))
    }

    /// How long an acknowledgement waits for a reply to carry it: none
    /// where no reply comes (`set_no_replies`); it then leaves on the next
    /// call, after the program has taken the message.
    fn ack_delay_ns(&self) -> u64 {
        if self.no_replies {
            0
        } else {
            ACK_DELAY_NS
        }
    }

    fn send_message(&mut self, msg: OutgoingMessage) -> Result<(), ChannelFailed> {
        match self.conn.send_message(msg) {
            Ok(id) => {
                self.posted = id + 1;
                Ok(())
            }
            Err(_) => Err(ChannelFailed("message refused by the protocol")),
        }
    }
}

#[cfg(test)]
mod tests;

mod receive;

impl<L: DatagramLink> Drop for RumChannel<L> {
    fn drop(&mut self) {
        if !self.closed {
            self.close(false);
        }
    }
}
