//! The sender's side: messages waiting to be cut into segments, and the
//! segments sent but not yet acknowledged. With retransmission buffers
//! (reliable levels without flow-control-only) a message's bytes stay until
//! every one of its segments is acknowledged; otherwise they are freed once
//! sent. The SACK scoreboard lives here: segments the receiver reported
//! beyond the cumulative ack, and the ones judged lost and due again.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::time::Duration;

use openvia_wire::rum::ViaOp;

use crate::events::{MessageId, OutgoingMessage, Payload};
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
    pub data: Payload,
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
    /// Entries of `inflight` marked lost and not SACKed since. Every
    /// datagram sent asks for the next lost segment; with thousands of
    /// segments in flight (8 MiB at MTU 1500) a scan per datagram cost
    /// more than the sending itself, so the count answers "none" at once.
    lost_count: usize,
    /// No entry below this sequence number is marked lost: where the
    /// search for the next one starts.
    lost_floor: u64,
    /// Entries of `inflight` SACKed (loss detection has nothing to do
    /// while it is zero).
    sacked_count: usize,
    /// The SACKed entries as runs (start → end, exclusive). An ACK repeats
    /// the receiver's lowest blocks each time, and loss detection asks
    /// which entries lie below how many SACKed ones: walking `inflight`
    /// for both cost a pass over thousands of entries per ACK once holes
    /// opened. With the runs, an ACK touches only entries newly SACKed and
    /// the holes between runs. Empty while nothing is lost.
    sacked_runs: BTreeMap<u64, u64>,
    /// Latest send time of a segment, sent once, that the peer has
    /// received (acked or SACKed): what time-based loss detection
    /// compares against.
    delivered_sent_at: Option<Time>,
    keep_data: bool,
    /// Buffers of freed messages, handed back by [`Self::take_buffer`]: a
    /// fresh megabyte per message costs page faults and page clearing that
    /// dwarf the copy itself.
    spare: Vec<Vec<u8>>,
}

/// What a posted message waits for before it completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleteOn {
    /// Its last segment left (unreliable: nothing would be resent anyway).
    Sent,
    /// The peer acknowledged every segment: it holds the data, and a loss
    /// after this point is impossible without the connection failing on
    /// both sides (reliable delivery).
    Acknowledged,
    /// The peer placed it in the application's memory (reliable reception).
    Placed,
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
            lost_count: 0,
            lost_floor: 0,
            sacked_count: 0,
            sacked_runs: BTreeMap::new(),
            delivered_sent_at: None,
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

    /// Whether sent bytes are kept for retransmission.
    pub fn keeps_data(&self) -> bool {
        self.keep_data
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

    /// Segments in the network as far as the sender knows: sent (or
    /// resent), neither acknowledged nor SACKed, and not judged lost and
    /// waiting to go again (RFC 6675's pipe).
    pub fn pipe(&self) -> usize {
        self.inflight.len() - self.sacked_count - self.lost_count
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
        if self.lost_count == 0 {
            return None;
        }
        let from = self.index_of(self.lost_floor);
        let i = from
            + self
                .inflight
                .range(from..)
                .position(|f| f.lost && !f.sacked)?;
        let f = &mut self.inflight[i];
        self.lost_count -= 1;
        self.lost_floor = f.seq + 1;
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
        self.lost_count > 0
    }

    /// Index in `inflight` of sequence number `seq` (clamped to the ends;
    /// the entries' sequence numbers are consecutive).
    fn index_of(&self, seq: u64) -> usize {
        match self.inflight.front() {
            Some(f) => (seq.saturating_sub(f.seq) as usize).min(self.inflight.len()),
            None => 0,
        }
    }

    /// Marks entry `i` lost, keeping the count and the search floor.
    fn mark_lost(&mut self, i: usize) {
        let f = &mut self.inflight[i];
        if f.lost || f.sacked {
            return;
        }
        f.lost = true;
        self.lost_count += 1;
        self.lost_floor = self.lost_floor.min(f.seq);
    }

    /// Whether the receipt of `f`, reported at `now`, says when a segment
    /// that reached the peer was sent: a segment sent once, or a
    /// retransmission acknowledged at least `min_rtt` after it was resent
    /// (sooner, it can only be the original arriving late). As RACK (RFC
    /// 8985, 6.2): without the retransmissions, a lost retransmission is
    /// found only by the timeout whenever nothing new can be sent (the
    /// receiver's window closed behind the hole it should fill).
    fn tells_delivery(f: &InFlight, now: Time, min_rtt: Duration) -> bool {
        !f.retransmitted || now.saturating_since(f.sent_at) >= min_rtt
    }

    /// Applies a cumulative ack (already checked to lie in `snd_una..=next_seq`).
    /// `min_rtt`: the smallest round trip seen (see [`Self::tells_delivery`]).
    pub fn on_ack(&mut self, ack: u64, now: Time, min_rtt: Duration) -> AckOutcome {
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
            // A segment SACKed before gave its sample then: acknowledged
            // cumulatively now, its age measures how long the hole below
            // it took to fill, not a round trip (taken as one, it swelled
            // the timeout to its cap under heavy loss).
            if !f.retransmitted && !f.sacked {
                out.rtt_sample = Some(now.saturating_since(f.sent_at));
            }
            if !f.sacked && Self::tells_delivery(f, now, min_rtt) {
                self.delivered_sent_at = self.delivered_sent_at.max(Some(f.sent_at));
            }
            if f.sacked {
                self.sacked_count -= 1;
            } else if f.lost {
                self.lost_count -= 1;
            }
            self.inflight.pop_front();
        }
        while let Some((&s, &e)) = self.sacked_runs.first_key_value() {
            if s >= ack {
                break;
            }
            self.sacked_runs.pop_first();
            if e > ack {
                self.sacked_runs.insert(ack, e);
                break;
            }
        }
        out
    }

    /// Marks `[start, end)` as received by the peer, reported at `now`.
    /// Returns a round-trip sample if a segment sent once was newly SACKed.
    pub fn on_sack(
        &mut self,
        start: u64,
        end: u64,
        now: Time,
        min_rtt: Duration,
    ) -> Option<Duration> {
        let front = self.inflight.front()?.seq;
        let top = front + self.inflight.len() as u64;
        let (start, end) = (start.max(front), end.min(top));
        if start >= end {
            return None;
        }
        // The runs this block overlaps or touches: only the gaps between
        // them are new.
        let mut touching: Vec<(u64, u64)> = Vec::new();
        if let Some((&s, &e)) = self.sacked_runs.range(..start).next_back() {
            if e >= start {
                touching.push((s, e));
            }
        }
        touching.extend(self.sacked_runs.range(start..=end).map(|(&s, &e)| (s, e)));
        let mut sample = None;
        let mut at = start;
        for &(s, e) in touching.iter().chain(std::iter::once(&(end, end))) {
            if s > at {
                sample = self.sack_entries(at..s.min(end), now, min_rtt).or(sample);
            }
            at = at.max(e);
            if at >= end {
                break;
            }
        }
        let merged_start = touching.first().map_or(start, |r| r.0.min(start));
        let merged_end = touching.last().map_or(end, |r| r.1.max(end));
        for (s, _) in &touching {
            self.sacked_runs.remove(s);
        }
        self.sacked_runs.insert(merged_start, merged_end);
        sample
    }

    /// Marks the entries of sequence numbers `seqs` (none SACKed yet) as
    /// SACKed.
    fn sack_entries(&mut self, seqs: Range<u64>, now: Time, min_rtt: Duration) -> Option<Duration> {
        let from = self.index_of(seqs.start);
        let to = self.index_of(seqs.end);
        let mut sample = None;
        for f in self.inflight.range_mut(from..to) {
            if f.sacked {
                continue;
            }
            f.sacked = true;
            self.sacked_count += 1;
            if Self::tells_delivery(f, now, min_rtt) {
                self.delivered_sent_at = self.delivered_sent_at.max(Some(f.sent_at));
            }
            if !f.retransmitted {
                sample = Some(now.saturating_since(f.sent_at));
            }
            if f.lost {
                f.lost = false;
                self.lost_count -= 1;
            }
        }
        sample
    }

    /// SACK-based loss detection. A segment not SACKed is lost when
    /// [`DUP_THRESHOLD`] SACKed segments lie above it (a retransmitted one
    /// only once it was resent `min_age` ago: its copy may be on the way),
    /// or when a segment sent more than `reorder_window` after it has
    /// reached the peer (time-based, as RACK in RFC 8985: this also finds
    /// a lost retransmission, which no sequence order can, instead of
    /// leaving it to the retransmission timeout). The time rule judges
    /// only segments below one SACKed: an ACK's blocks start at the
    /// cumulative ack and may not reach the top, and what lies above the
    /// last block reported is unknown, not missing.
    /// Returns how many were newly marked.
    pub fn detect_losses(
        &mut self,
        now: Time,
        min_age: Duration,
        reorder_window: Duration,
    ) -> usize {
        if self.sacked_count == 0 {
            return 0;
        }
        let horizon = self
            .delivered_sent_at
            .and_then(|t| t.checked_sub(reorder_window));
        let Some(front) = self.inflight.front().map(|f| f.seq) else {
            return 0;
        };
        // The holes are the gaps below each run, walked from the top so
        // that the SACKed segments above each are known.
        let mut gaps: Vec<(u64, u64, usize)> = Vec::new();
        let mut sacked_above = 0usize;
        let mut runs = self.sacked_runs.iter().rev().peekable();
        while let Some((&s, &e)) = runs.next() {
            sacked_above += (e - s) as usize;
            let below = runs.peek().map_or(front, |(_, &pe)| pe);
            if below < s {
                gaps.push((below, s, sacked_above));
            }
        }
        let mut marked = 0;
        for (from, to, sacked_above) in gaps {
            for i in self.index_of(from)..self.index_of(to) {
                let f = &self.inflight[i];
                if !f.sacked
                    && !f.lost
                    && ((sacked_above >= DUP_THRESHOLD
                        && (!f.retransmitted || now.saturating_since(f.sent_at) >= min_age))
                        || horizon.is_some_and(|h| f.sent_at <= h))
                {
                    self.mark_lost(i);
                    marked += 1;
                }
            }
        }
        marked
    }

    /// Tail loss probe: the sender has been quiet for two round trips
    /// with data unacknowledged, so no acknowledgement is coming to drive
    /// loss detection (a lost tail, or a lost retransmission while the
    /// receiver's window is closed behind the hole it should fill). Every
    /// segment not SACKed below a SACKed one is lost by now; without any
    /// SACK the highest segment goes out again, and its acknowledgement
    /// exposes the holes below. Returns how many were marked.
    pub fn mark_tail_lost(&mut self) -> usize {
        let Some(top) = (0..self.inflight.len())
            .rev()
            .find(|&i| self.inflight[i].sacked)
        else {
            return match self.inflight.len() {
                0 => 0,
                n if self.inflight[n - 1].lost => 0,
                n => {
                    self.mark_lost(n - 1);
                    1
                }
            };
        };
        let mut marked = 0;
        for i in 0..top {
            let f = &self.inflight[i];
            if !f.sacked && !f.lost {
                self.mark_lost(i);
                marked += 1;
            }
        }
        marked
    }

    /// Fast retransmit after duplicate acks: the first unacked segment.
    pub fn mark_first_lost(&mut self, now: Time, min_age: Duration) -> bool {
        match self.inflight.front() {
            Some(f)
                if !f.sacked
                    && !f.lost
                    && (!f.retransmitted || now.saturating_since(f.sent_at) >= min_age) =>
            {
                self.mark_lost(0);
                true
            }
            _ => false,
        }
    }

    /// Retransmission timeout: the oldest segment not SACKed is due again,
    /// and only it. Resending every segment in flight (up to 8 MiB) made
    /// each spurious timeout (a receiver descheduled for longer than the
    /// timeout on a busy host) cost a whole window of duplicates. When the
    /// loss was real, the acknowledgements that follow drive the rest:
    /// SACK and send-time rules, and the tail loss probe, which marks every
    /// hole below a SACKed segment once the sender has been quiet for two
    /// round trips.
    pub fn on_rto(&mut self) {
        if let Some(i) = (0..self.inflight.len()).find(|&i| !self.inflight[i].sacked) {
            self.mark_lost(i);
        }
    }

    /// Reports completions in posting order and frees finished messages.
    /// `placed` is the peer's `consumed`; `when` says what a message waits
    /// for (see [`CompleteOn`]).
    pub fn collect_completions(
        &mut self,
        placed: u64,
        when: CompleteOn,
        completed: &mut impl FnMut(MessageId),
    ) {
        for m in self.messages.iter_mut() {
            if m.completed {
                continue;
            }
            let Some(last) = m.last_seq else { break };
            let reached = match when {
                CompleteOn::Sent => true,
                CompleteOn::Acknowledged => self.snd_una > last,
                CompleteOn::Placed => placed > last,
            };
            // The caller's memory may change once it completes: not while
            // a segment of it may still be sent again. Without
            // retransmission none is once the last has been taken (the
            // caller sends, or copies, what it took before it reports the
            // completion).
            let external_held = matches!(m.data, Payload::External { .. })
                && self.keep_data
                && self.snd_una <= last;
            if !reached || external_held {
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
                match m.data {
                    Payload::Owned(v) if self.spare.len() < SPARE_BUFFERS && v.capacity() > 0 => {
                        self.spare.push(v)
                    }
                    _ => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    fn queue_with(segments: usize, at: Time) -> SendQueue {
        let mut q = SendQueue::new(true);
        q.push(OutgoingMessage::send(vec![7u8; segments * 100]));
        for _ in 0..segments {
            q.cut_next(100, at).expect("a segment");
        }
        q
    }

    fn drain_lost(q: &mut SendQueue, now: Time) -> Vec<u64> {
        std::iter::from_fn(|| q.next_lost(now).map(|s| s.seq)).collect()
    }

    #[test]
    fn holes_below_three_sacked_are_lost_once() {
        let t = Time::from_nanos(1_000);
        let mut q = queue_with(10, t);
        q.on_sack(5, 10, t, Duration::ZERO);
        assert_eq!(
            q.detect_losses(t, Duration::ZERO, Duration::from_secs(1)),
            5
        );
        assert!(q.has_lost());
        assert_eq!(drain_lost(&mut q, t), vec![0, 1, 2, 3, 4]);
        assert!(!q.has_lost());
        // Resent just now: not lost again before `min_age`.
        assert_eq!(
            q.detect_losses(t, Duration::from_millis(1), Duration::from_secs(1)),
            0
        );
        q.on_ack(10, t, Duration::ZERO);
        assert!(q.inflight_is_empty() && !q.has_lost());
    }

    #[test]
    fn a_lost_retransmission_is_found_by_send_time() {
        let t0 = Time::from_nanos(1_000_000);
        let mut q = queue_with(4, t0);
        q.on_sack(1, 4, t0, Duration::ZERO);
        assert_eq!(q.detect_losses(t0, Duration::ZERO, Duration::ZERO), 1);
        let t1 = t0 + Duration::from_millis(1);
        assert_eq!(drain_lost(&mut q, t1), vec![0]);
        // A new segment sent after the retransmission arrives: the
        // retransmission (older by more than the reorder window) is lost.
        q.push(OutgoingMessage::send(vec![1u8; 100]));
        let t2 = t1 + Duration::from_millis(1);
        q.cut_next(100, t2).expect("a segment");
        q.on_sack(4, 5, t2, Duration::ZERO);
        let marked = q.detect_losses(t2, Duration::from_secs(1), Duration::from_micros(100));
        assert_eq!(marked, 1);
        assert_eq!(drain_lost(&mut q, t2), vec![0]);
    }

    #[test]
    fn tail_probe_resends_the_last_or_the_holes() {
        let t = Time::from_nanos(5_000);
        let mut q = queue_with(6, t);
        assert_eq!(q.mark_tail_lost(), 1);
        assert_eq!(drain_lost(&mut q, t), vec![5]);
        q.on_sack(3, 4, t, Duration::ZERO);
        assert_eq!(q.mark_tail_lost(), 3);
        assert_eq!(drain_lost(&mut q, t), vec![0, 1, 2]);
        // Cumulative ack over marked segments keeps the count right.
        q.on_rto();
        assert!(q.has_lost());
        q.on_ack(6, t, Duration::ZERO);
        assert!(!q.has_lost() && q.next_lost(t).is_none());
    }
}
