//! What goes out next, in priority order: handshake, disconnect,
//! retransmissions of segments judged lost, new segments (as far as the
//! receiver's window allows), a due ACK (with SACK blocks when there are
//! holes), a probe, a keepalive. Every packet carries the receiver
//! feedback (ack, consumed, window), so DATA doubles as an ACK.

use openvia_wire::rum::{Body, DataRepr, FlowMode, HeaderRepr, Repr};

use crate::config::Reliability;
use crate::connection::{Connection, State};
use crate::send_queue::SegmentRef;
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
    pub fn poll_transmit(&mut self, now: Time, buf: &mut [u8]) -> Option<usize> {
        if buf.len() < self.max_datagram_len() {
            return None;
        }
        let len = self.next_datagram(now, buf)?;
        self.counters.datagrams_sent += 1;
        self.last_sent = now;
        self.keepalive_due = false;
        Some(len)
    }

    fn next_datagram(&mut self, now: Time, buf: &mut [u8]) -> Option<usize> {
        if self.handshake_due {
            self.handshake_due = false;
            return self.emit_handshake(buf).ok();
        }
        if let Some(reason) = self.disconnect_due.take() {
            let repr = Repr {
                header: self.header(self.send.next_seq),
                body: Body::Disconnect { reason },
            };
            return repr.emit(buf).ok();
        }
        if self.state != State::Connected {
            return None;
        }
        if let Some(seg) = self.send.next_lost(now) {
            self.counters.retransmissions += 1;
            self.arm_rto(now);
            self.rearm_tail_probe(now);
            return self.emit_segment(seg, buf);
        }
        if self.send.has_uncut() {
            if self.credit.available(self.send.next_seq) > 0 {
                self.stalled = false;
                let seg = self.send.cut_next(self.segment_size, now)?;
                self.counters.segments_sent += 1;
                let len = self.emit_segment(seg, buf);
                if self.send.inflight_is_empty() {
                    // No retransmission buffer: a probe guards the tail.
                    if self.probe_deadline.is_none() {
                        self.probe_deadline = Some(now + self.rtt.rto());
                    }
                } else {
                    self.arm_rto(now);
                    self.rearm_tail_probe(now);
                }
                if self.config.reliability != Reliability::ReliableReception {
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
            self.ack_due = false;
            self.counters.acks_sent += 1;
            let repr = Repr {
                header: self.header(self.send.next_seq),
                body: Body::Ack(self.recv.sack()),
            };
            return repr.emit(buf).ok();
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
            return repr.emit(buf).ok();
        }
        None
    }

    fn arm_rto(&mut self, now: Time) {
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rtt.rto());
        }
    }

    fn emit_segment(&mut self, seg: SegmentRef, buf: &mut [u8]) -> Option<usize> {
        let header = self.header(seg.seq);
        let m = self.send.message(seg.msg_id)?;
        let start = seg.offset as usize;
        let repr = Repr {
            header,
            body: Body::Data(DataRepr {
                msg_id: m.id as u32,
                offset: seg.offset,
                total_len: m.data.len() as u32,
                op: m.op,
                immediate: m.immediate,
                mem_handle: m.mem_handle,
                remote_addr: m.remote_addr,
                payload: &m.data[start..start + seg.len as usize],
            }),
        };
        let len = repr.emit(buf).ok()?;
        // Piggybacked feedback settles a due ACK unless holes need SACK.
        if !self.recv.has_hole() {
            self.ack_due = false;
        }
        Some(len)
    }
}
