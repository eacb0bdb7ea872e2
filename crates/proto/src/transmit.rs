//! What goes out next, in priority order: handshake, disconnect,
//! retransmissions of segments judged lost, new segments (as far as the
//! receiver's window allows), a due ACK (with SACK blocks when there are
//! holes), a probe, a keepalive. Every packet carries the receiver
//! feedback (ack, consumed, window), so DATA doubles as an ACK.

use openvia_wire::rum::{Body, DataRepr, FlowMode, HeaderRepr, Repr};

use crate::connection::{Connection, State, LOSS_MEMORY};
use crate::events::{Payload, PayloadRef, Transmit};
use crate::send_queue::{CompleteOn, SegmentRef};
use crate::time::Time;

impl Connection {
    pub(crate) fn header(&self, seq: u64) -> HeaderRepr {
        HeaderRepr {
            conn_id: self.peer_cid,
            ack_request: false,
            seq: seq as u32,
            ack: self.recv.expected() as u32,
            consumed: self.recv.consumed() as u32,
            window: match self.config.flow_mode {
                FlowMode::Hetero => self.recv.advertised(),
                FlowMode::Homo => 0,
            },
        }
    }

    /// Writes the next datagram into `buf` and returns its length, or
    /// `None` when nothing is due. `buf` must hold
    /// [`Connection::max_datagram_len`] bytes.
    /// A connection with [`Payload::External`] messages is driven with
    /// [`Self::poll_transmit_split`] instead.
    pub fn poll_transmit(&mut self, now: Time, buf: &mut [u8]) -> Option<usize> {
        let t = self.poll_transmit_split(now, buf, usize::MAX)?;
        debug_assert!(
            t.payload.is_none(),
            "external payload through poll_transmit"
        );
        Some(t.len)
    }

    /// Like [`Self::poll_transmit`], but a data segment whose payload is
    /// `split_min` bytes or more (and every segment of an external
    /// payload) is written as its headers alone, with a reference to the
    /// payload: the caller sends both with one scatter-gather call, the
    /// kernel copying the payload once instead of the payload being
    /// copied into `buf` first. The bytes referred to stay in place until
    /// the next call that takes an acknowledgement (`handle_datagram`).
    /// Only where sent bytes are kept for retransmission: elsewhere they
    /// are freed as a message's last segment goes, so they are copied.
    pub fn poll_transmit_split(
        &mut self,
        now: Time,
        buf: &mut [u8],
        split_min: usize,
    ) -> Option<Transmit> {
        if buf.len() < self.max_datagram_len() {
            return None;
        }
        let t = self.next_datagram(now, buf, split_min)?;
        self.counters.datagrams_sent += 1;
        self.last_sent = now;
        self.keepalive_due = false;
        Some(t)
    }

    /// The bytes a [`PayloadRef`] without `external` names.
    pub fn payload_bytes(&self, r: &PayloadRef) -> Option<&[u8]> {
        match &self.send.message(r.msg_id)?.data {
            Payload::Owned(v) => v.get(r.offset..r.offset.checked_add(r.len)?),
            Payload::External { .. } => None,
        }
    }

    fn next_datagram(&mut self, now: Time, buf: &mut [u8], split_min: usize) -> Option<Transmit> {
        let whole = |len: Option<usize>| len.map(|len| Transmit { len, payload: None });
        if self.handshake_due {
            self.handshake_due = false;
            return whole(self.emit_handshake(buf).ok());
        }
        if let Some(reason) = self.disconnect_due.take() {
            let repr = Repr {
                header: self.header(self.send.next_seq),
                body: Body::Disconnect { reason },
            };
            return whole(repr.emit(buf).ok());
        }
        if self.state != State::Connected {
            return None;
        }
        if let Some(seg) = self.send.next_lost(now) {
            self.counters.retransmissions += 1;
            self.arm_rto(now);
            self.rearm_tail_probe(now);
            return self.emit_segment(seg, buf, split_min);
        }
        if self.send.has_uncut() && self.pipe_open(now) {
            if self.credit.available(self.send.next_seq) > 0 {
                self.stalled = false;
                let seg = self.send.cut_next(self.segment_size, now)?;
                self.counters.segments_sent += 1;
                let len = self.emit_segment(seg, buf, split_min);
                if self.send.inflight_is_empty() {
                    // No retransmission buffer: a probe guards the tail.
                    if self.probe_deadline.is_none() {
                        self.probe_deadline = Some(now + self.rtt.rto());
                    }
                } else {
                    self.arm_rto(now);
                    self.rearm_tail_probe(now);
                }
                if self.complete_on() == CompleteOn::Sent {
                    self.collect_completions();
                }
                return len;
            }
            if !self.stalled {
                self.stalled = true;
                self.counters.window_stalls += 1;
            }
            if self.probe_deadline.is_none() {
                self.probe_deadline = Some(now + self.rtt.rto());
            }
        }
        if self.ack_due {
            self.ack_sent();
            self.counters.acks_sent += 1;
            let sack = self.recv.sack(self.sack_room());
            let repr = Repr {
                header: self.header(self.send.next_seq),
                body: Body::Ack(sack.as_body()),
            };
            return whole(repr.emit(buf).ok());
        }
        if self.probe_due || self.keepalive_due {
            let probe = self.probe_due;
            self.probe_due = false;
            if probe {
                self.counters.probes_sent += 1;
            } else {
                self.counters.keepalives_sent += 1;
            }
            let mut header = self.header(self.send.next_seq);
            header.ack_request = probe;
            let repr = Repr {
                header,
                body: Body::Keepalive,
            };
            return whole(repr.emit(buf).ok());
        }
        None
    }

    /// Whether new data may go. While loss detection has found holes in
    /// the last [`LOSS_MEMORY`], only with fewer than
    /// [`Config::max_inflight`] bytes in the pipe. The receiver's window
    /// alone let a sender faster than its receiver put the whole window
    /// (8 MiB) into the queue before the receiver (its socket buffer):
    /// every retransmission then waited behind that queue while the window
    /// stayed shut on the hole it fills, and the receiver held thousands
    /// of segments out of order. With the pipe capped the queue stays
    /// short, holes are repaired within it, and the window has room to
    /// send on meanwhile. Without loss the cap does not hold: on a loaded
    /// host the deep queue is what carries a stream across the peers'
    /// scheduling gaps (a 2 MiB cap at all times cut lossless streaming at
    /// MTU 9000 to 0.6×). Retransmissions are not held by the cap.
    ///
    /// [`Config::max_inflight`]: crate::Config::max_inflight
    fn pipe_open(&self, now: Time) -> bool {
        let cap = self.config.max_inflight;
        cap == 0
            || self.bytes_in_flight() < cap
            || self
                .hole_found_at
                .is_none_or(|t| now.saturating_since(t) >= LOSS_MEMORY)
    }

    /// SACK blocks an ACK may carry within [`Connection::max_datagram_len`]:
    /// as many as the wire allows (128) at the device's segment sizes, so
    /// that at 20 % loss one ACK still describes most of a window's holes
    /// (16 blocks, the old limit, let the sender learn of only 16 holes a
    /// round trip and cut goodput at 5 % loss to a few percent).
    pub(crate) fn sack_room(&self) -> usize {
        let room = self.max_datagram_len() - openvia_wire::rum::HEADER_LEN - 4;
        (room / 8).min(openvia_wire::rum::MAX_SACK_BLOCKS)
    }

    fn arm_rto(&mut self, now: Time) {
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rtt.rto());
        }
    }

    fn emit_segment(
        &mut self,
        seg: SegmentRef,
        buf: &mut [u8],
        split_min: usize,
    ) -> Option<Transmit> {
        let header = self.header(seg.seq);
        let m = self.send.message(seg.msg_id)?;
        let start = seg.offset as usize;
        let len = seg.len as usize;
        let mut d = DataRepr {
            msg_id: m.id as u32,
            offset: seg.offset,
            total_len: m.data.len() as u32,
            op: m.op,
            immediate: m.immediate,
            mem_handle: m.mem_handle,
            remote_addr: m.remote_addr,
            payload: &[],
        };
        let external = match &m.data {
            // Without retransmission a message's bytes are freed as its
            // last segment goes: copy them while they are here.
            Payload::Owned(v) if len < split_min || !self.send.keeps_data() => {
                d.payload = v.get(start..start + len)?;
                None
            }
            Payload::Owned(_) => Some(None),
            Payload::External { addr, .. } => Some(Some(*addr)),
        };
        let t = match external {
            None => Transmit {
                len: Repr {
                    header,
                    body: Body::Data(d),
                }
                .emit(buf)
                .ok()?,
                payload: None,
            },
            Some(external) => Transmit {
                len: Repr::emit_data_header(header, d, len, buf).ok()?,
                payload: Some(PayloadRef {
                    msg_id: seg.msg_id,
                    offset: start,
                    len,
                    external,
                }),
            },
        };
        // Piggybacked feedback settles a due ACK unless holes need SACK.
        if !self.recv.has_hole() {
            self.ack_sent();
        }
        Some(t)
    }
}
