//! The sender's side: messages waiting to be cut into segments, and the
//! segments sent but not yet acknowledged. With retransmission buffers
//! (reliable levels without flow-control-only) a message's bytes stay until
//! every one of its segments is acknowledged; otherwise they are freed once
//! sent. The SACK scoreboard lives here: segments the receiver reported
//! beyond the cumulative ack, and the ones judged lost and due again.

use std::collections::VecDeque;
use std::time::Duration;

use openvia_wire::rum::ViaOp;

use crate::events::{MessageId, OutgoingMessage};
use crate::time::Time;

/// Segments reported above a hole before the hole counts as lost.
pub const DUP_THRESHOLD: usize = 3;
/// Buffers of finished messages kept for the caller's next messages.
const SPARE_BUFFERS: usize = 32;

#[derive(Debug)]
pub struct OutMessage {
    pub id: MessageId,
    pub op: ViaOp,
    pub immediate: Option<u32>,
    pub mem_handle: u32,
    pub remote_addr: u64,
    pub data: Vec<u8>,
    /// Bytes already cut into segments.
    pub cut: usize,
    /// Sequence number of the final segment, once cut.
    pub last_seq: Option<u64>,
    pub completed: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct InFlight {
    pub seq: u64,
    pub msg_id: MessageId,
    pub offset: u32,
    pub len: u32,
    pub sent_at: Time,
    pub retransmitted: bool,
    pub sacked: bool,
    pub lost: bool,
}

/// One segment ready to go on the wire.
#[derive(Debug, Clone, Copy)]
pub struct SegmentRef {
    pub seq: u64,
    pub msg_id: MessageId,
    pub offset: u32,
    pub len: u32,
}

#[derive(Debug)]
pub struct SendQueue {
    messages: VecDeque<OutMessage>,
    next_msg_id: MessageId,
    pub next_seq: u64,
    /// Lowest sequence number not cumulatively acknowledged.
    pub snd_una: u64,
    inflight: VecDeque<InFlight>,
    keep_data: bool,
    /// Buffers of freed messages, handed back by [`Self::take_buffer`]: a
    /// fresh megabyte per message costs page faults and page clearing that
    /// dwarf the copy itself.
    spare: Vec<Vec<u8>>,
}

/// Result of a cumulative ack.
#[derive(Debug, Default)]
pub struct AckOutcome {
    pub newly_acked: u64,
    pub rtt_sample: Option<Duration>,
}

impl SendQueue {
    pub fn new(keep_data: bool) -> Self {
        Self {
            messages: VecDeque::new(),
            next_msg_id: 0,
            next_seq: 0,
            snd_una: 0,
            inflight: VecDeque::new(),
            keep_data,
            spare: Vec::new(),
        }
    }

    pub fn push(&mut self, m: OutgoingMessage) -> MessageId {
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        self.messages.push_back(OutMessage {
            id,
            op: m.op,
            immediate: m.immediate,
            mem_handle: m.mem_handle,
            remote_addr: m.remote_addr,
            data: m.data,
            cut: 0,
            last_seq: None,
            completed: false,
        });
        id
    }

    pub fn message(&self, id: MessageId) -> Option<&OutMessage> {
        let front = self.messages.front()?.id;
        self.messages.get(id.checked_sub(front)? as usize)
    }

    pub fn has_uncut(&self) -> bool {
        self.messages.iter().any(|m| m.last_seq.is_none())
    }

    pub fn unacked(&self) -> u64 {
        self.next_seq - self.snd_una
    }

    pub fn inflight_is_empty(&self) -> bool {
        self.inflight.is_empty()
    }

    /// Cuts the next segment of the first message with bytes left.
    pub fn cut_next(&mut self, segment_size: usize, now: Time) -> Option<SegmentRef> {
        let m = self.messages.iter_mut().find(|m| m.last_seq.is_none())?;
        let offset = m.cut;
        let len = (m.data.len() - offset).min(segment_size);
        m.cut += len;
        let seq = self.next_seq;
        self.next_seq += 1;
        if m.cut == m.data.len() {
            m.last_seq = Some(seq);
        }
        let seg = SegmentRef {
            seq,
            msg_id: m.id,
            offset: offset as u32,
            len: len as u32,
        };
        if self.keep_data {
            self.inflight.push_back(InFlight {
                seq,
                msg_id: seg.msg_id,
                offset: seg.offset,
                len: seg.len,
                sent_at: now,
                retransmitted: false,
                sacked: false,
                lost: false,
            });
        }
        Some(seg)
    }

    /// The first segment judged lost, marked as retransmitted now.
    pub fn next_lost(&mut self, now: Time) -> Option<SegmentRef> {
        let f = self.inflight.iter_mut().find(|f| f.lost && !f.sacked)?;
        f.lost = false;
        f.retransmitted = true;
        f.sent_at = now;
        Some(SegmentRef {
            seq: f.seq,
            msg_id: f.msg_id,
            offset: f.offset,
            len: f.len,
        })
    }

    pub fn has_lost(&self) -> bool {
        self.inflight.iter().any(|f| f.lost && !f.sacked)
    }

    /// Applies a cumulative ack (already checked to lie in `snd_una..=next_seq`).
    pub fn on_ack(&mut self, ack: u64, now: Time) -> AckOutcome {
        let mut out = AckOutcome::default();
        if ack <= self.snd_una {
            return out;
        }
        out.newly_acked = ack - self.snd_una;
        self.snd_una = ack;
        while let Some(f) = self.inflight.front() {
            if f.seq >= ack {
                break;
            }
            if !f.retransmitted {
                out.rtt_sample = Some(now.saturating_since(f.sent_at));
            }
            self.inflight.pop_front();
        }
        out
    }

    /// Marks `[start, end)` as received by the peer.
    pub fn on_sack(&mut self, start: u64, end: u64) {
        let Some(front) = self.inflight.front().map(|f| f.seq) else {
            return;
        };
        let from = start.saturating_sub(front) as usize;
        let to = (end.saturating_sub(front) as usize).min(self.inflight.len());
        for f in self.inflight.range_mut(from.min(to)..to) {
            f.sacked = true;
            f.lost = false;
        }
    }

    /// SACK-based loss detection: a segment with at least [`DUP_THRESHOLD`]
    /// SACKed segments above it is lost, unless it was (re)sent less than
    /// `min_age` ago (its retransmission may still be on the way).
    /// Returns how many were newly marked.
    pub fn detect_losses(&mut self, now: Time, min_age: Duration) -> usize {
        let mut sacked_above = 0;
        let mut marked = 0;
        for f in self.inflight.iter_mut().rev() {
            if f.sacked {
                sacked_above += 1;
            } else if sacked_above >= DUP_THRESHOLD
                && !f.lost
                && (!f.retransmitted || now.saturating_since(f.sent_at) >= min_age)
            {
                f.lost = true;
                marked += 1;
            }
        }
        marked
    }

    /// Fast retransmit after duplicate acks: the first unacked segment.
    pub fn mark_first_lost(&mut self, now: Time, min_age: Duration) -> bool {
        match self.inflight.front_mut() {
            Some(f)
                if !f.sacked
                    && !f.lost
                    && (!f.retransmitted || now.saturating_since(f.sent_at) >= min_age) =>
            {
                f.lost = true;
                true
            }
            _ => false,
        }
    }

    /// Retransmission timeout: everything not SACKed is due again.
    pub fn mark_all_lost(&mut self) {
        for f in self.inflight.iter_mut().filter(|f| !f.sacked) {
            f.lost = true;
        }
    }

    /// Reports completions in posting order and frees finished messages.
    /// `placed` is the peer's `consumed`; `on_placement` says completion
    /// waits for it (reliable reception) rather than for transmission.
    pub fn collect_completions(
        &mut self,
        placed: u64,
        on_placement: bool,
        completed: &mut impl FnMut(MessageId),
    ) {
        for m in self.messages.iter_mut() {
            if m.completed {
                continue;
            }
            let Some(last) = m.last_seq else { break };
            if on_placement && placed <= last {
                break;
            }
            m.completed = true;
            completed(m.id);
        }
        while let Some(m) = self.messages.front() {
            let done = match m.last_seq {
                Some(last) => m.completed && (!self.keep_data || self.snd_una > last),
                None => false,
            };
            if !done {
                break;
            }
            if let Some(m) = self.messages.pop_front() {
                if self.spare.len() < SPARE_BUFFERS && m.data.capacity() > 0 {
                    self.spare.push(m.data);
                }
            }
        }
    }

    /// A buffer with room for `len` bytes, reusing a freed message's when
    /// one is big enough. Its contents are stale: the caller overwrites
    /// them (keeping them spares a pass of zeroing).
    pub fn take_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut v = match self.spare.iter().position(|b| b.capacity() >= len) {
            Some(i) => self.spare.swap_remove(i),
            None => self.spare.pop().unwrap_or_default(),
        };
        v.truncate(len);
        v.reserve(len - v.len());
        v
    }

    /// Ids of messages not yet completed (for flushing on connection loss).
    pub fn pending_ids(&self) -> impl Iterator<Item = MessageId> + '_ {
        self.messages.iter().filter(|m| !m.completed).map(|m| m.id)
    }
}
