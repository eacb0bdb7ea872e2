//! The receiver's side: a ring of segment slots from `consumed` (the first
//! segment not yet handed to the application) up to the window limit.
//! Segments land in their slot whatever the arrival order; `expected` (the
//! cumulative ack) advances over filled slots; a message is offered to the
//! application once all of its segments sit in order at the head of the
//! ring. Duplicates find their slot taken (or below `consumed`) and are
//! dropped.
//!
//! On the unreliable level a hole is never filled again, so it is skipped:
//! when a complete message waits beyond it, or when the sender's probe says
//! every segment below its next sequence number has been sent. The message
//! the hole belongs to is dropped whole; slots marked `Dropped` are freed at
//! the head like consumed ones, so a late copy of a skipped segment finds
//! it below `expected` and is discarded: never delivered twice.

use std::collections::{BTreeMap, VecDeque};

use openvia_wire::rum::{DataRepr, ViaOp};

use crate::events::{MessageInfo, Piece, Placement};
use crate::sack::SackBuilder;

#[derive(Debug)]
pub struct RecvSegment {
    pub msg_id: u32,
    pub offset: u32,
    pub total: u32,
    pub op: ViaOp,
    pub immediate: Option<u32>,
    pub mem_handle: u32,
    pub remote_addr: u64,
    pub data: Vec<u8>,
    /// Bytes a placer put in place on arrival instead of into `data`
    /// (then empty).
    pub placed: u32,
}

impl RecvSegment {
    pub fn from_repr(d: &DataRepr<'_>) -> Self {
        Self::with_buffer(d, Vec::new())
    }

    /// Like `from_repr`, copying the payload into `data` (emptied first).
    pub fn with_buffer(d: &DataRepr<'_>, mut data: Vec<u8>) -> Self {
        data.clear();
        data.extend_from_slice(d.payload);
        Self {
            msg_id: d.msg_id,
            offset: d.offset,
            total: d.total_len,
            op: d.op,
            immediate: d.immediate,
            mem_handle: d.mem_handle,
            remote_addr: d.remote_addr,
            data,
            placed: 0,
        }
    }

    /// `d`'s header alone: its payload was placed where it belongs.
    pub fn placed(d: &DataRepr<'_>) -> Self {
        let mut s = Self::with_buffer(&DataRepr { payload: &[], ..*d }, Vec::new());
        s.placed = d.payload.len() as u32;
        s
    }

    /// Payload bytes the segment stands for, held or placed.
    pub fn len(&self) -> usize {
        self.data.len() + self.placed as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn ends_message(&self) -> bool {
        self.offset as u64 + self.len() as u64 == self.total as u64
    }
}

#[derive(Debug)]
enum Slot {
    Empty,
    Filled(RecvSegment),
    Dropped,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Insert {
    Stored,
    Duplicate,
    OutOfWindow,
}

/// The segments at the head do not form a well-made message.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

#[derive(Debug)]
pub struct Reassembly {
    slots: VecDeque<Slot>,
    consumed: u64,
    /// `consumed` just after the last message was delivered.
    consumed_at_delivery: u64,
    expected: u64,
    /// Highest window bound ever promised (exclusive); see [`Self::limit`].
    promised: u64,
    window: u32,
    /// Message id the next delivered message should have (unreliable loss count).
    next_msg_id: u64,
    /// Payload buffers of delivered or discarded segments, reused for the
    /// next ones instead of an allocation per datagram.
    spare: Vec<Vec<u8>>,
    /// How far the head message has been checked: its first sequence
    /// number, the next one to check and the offset it must carry. Every
    /// progress call asks whether the head message is complete; without
    /// this a 1 MiB message at MTU 1500 (715 segments) was walked from its
    /// start on each call, quadratic in its segments.
    head_scan: Option<HeadScan>,
    /// Runs of filled slots above `expected` (start → end, exclusive): the
    /// SACK blocks. Every acknowledgement asks for them; walking the slots
    /// instead cost a pass over thousands of segments per ACK once a hole
    /// opened (at 1 % loss, most of the time). Empty while segments come
    /// in order, so a lossless stream never touches it.
    runs: BTreeMap<u64, u64>,
}

#[derive(Clone, Copy, Debug)]
struct HeadScan {
    start: u64,
    next: u64,
    end: u64,
}

/// Most payload buffers kept for reuse.
const SPARE_SEGMENTS: usize = 1024;

impl Reassembly {
    pub fn new(window: u32) -> Self {
        Self {
            slots: VecDeque::new(),
            consumed: 0,
            consumed_at_delivery: 0,
            expected: 0,
            promised: window as u64,
            window,
            next_msg_id: 0,
            spare: Vec::new(),
            head_scan: None,
            runs: BTreeMap::new(),
        }
    }

    /// A segment for `d`, its payload in a reused buffer.
    pub fn segment(&mut self, d: &DataRepr<'_>) -> RecvSegment {
        RecvSegment::with_buffer(d, self.spare.pop().unwrap_or_default())
    }

    fn recycle(&mut self, slot: Slot) {
        if let Slot::Filled(seg) = slot {
            if self.spare.len() < SPARE_SEGMENTS && seg.data.capacity() > 0 {
                self.spare.push(seg.data);
            }
        }
    }

    pub fn consumed(&self) -> u64 {
        self.consumed
    }
    pub fn expected(&self) -> u64 {
        self.expected
    }
    pub fn window(&self) -> u32 {
        self.window
    }
    pub fn next_msg_id(&self) -> u64 {
        self.next_msg_id
    }

    /// Changes the advertised window (Hetero). A window already promised is
    /// kept, since the sender may have used it.
    pub fn set_window(&mut self, window: u32) {
        self.promised = self.limit();
        self.window = window;
    }

    /// Exclusive bound of sequence numbers the sender may have sent: the
    /// current window past `consumed`, or an earlier, larger promise.
    fn limit(&self) -> u64 {
        self.promised.max(self.consumed + self.window as u64)
    }

    /// Window to advertise: what remains past `consumed` of the promise.
    pub fn advertised(&self) -> u32 {
        self.limit()
            .saturating_sub(self.consumed)
            .min(u32::MAX as u64) as u32
    }

    /// Whether a segment `seq` would be stored now (in the window, its
    /// slot free): only then may its payload be placed on arrival.
    pub fn vacant(&self, seq: u64) -> bool {
        seq >= self.consumed
            && seq < self.limit()
            && matches!(self.slot(seq), None | Some(Slot::Empty))
    }

    /// Whether a message may start at `seq`: the head, or right after a
    /// segment that ended its message.
    pub fn message_boundary(&self, seq: u64) -> bool {
        seq == self.consumed
            || seq
                .checked_sub(1)
                .and_then(|p| self.slot(p))
                .is_some_and(|s| matches!(s, Slot::Filled(seg) if seg.ends_message()))
    }

    pub fn insert(&mut self, seq: u64, seg: RecvSegment) -> Insert {
        if seq < self.consumed {
            self.recycle(Slot::Filled(seg));
            return Insert::Duplicate;
        }
        if seq >= self.limit() {
            self.recycle(Slot::Filled(seg));
            return Insert::OutOfWindow;
        }
        let idx = (seq - self.consumed) as usize;
        while self.slots.len() <= idx {
            self.slots.push_back(Slot::Empty);
        }
        if !matches!(self.slots[idx], Slot::Empty) {
            self.recycle(Slot::Filled(seg));
            return Insert::Duplicate;
        }
        self.slots[idx] = Slot::Filled(seg);
        if seq > self.expected {
            self.add_to_runs(seq);
        }
        self.advance();
        Insert::Stored
    }

    /// Records filled slot `seq` (above `expected`) in [`Self::runs`],
    /// joining the runs it touches.
    fn add_to_runs(&mut self, seq: u64) {
        let mut start = seq;
        let mut end = seq + 1;
        if let Some((&s, &e)) = self.runs.range(..seq).next_back() {
            if e == seq {
                start = s;
            }
        }
        if let Some(e) = self.runs.remove(&end) {
            end = e;
        }
        self.runs.insert(start, end);
    }

    fn slot(&self, seq: u64) -> Option<&Slot> {
        self.slots.get(seq.checked_sub(self.consumed)? as usize)
    }

    fn advance(&mut self) {
        while matches!(
            self.slot(self.expected),
            Some(Slot::Filled(_) | Slot::Dropped)
        ) {
            self.expected += 1;
        }
        // Runs now below `expected` are acknowledged cumulatively.
        while let Some((&s, &e)) = self.runs.first_key_value() {
            if s >= self.expected {
                break;
            }
            self.runs.pop_first();
            if e > self.expected {
                self.runs.insert(self.expected, e);
                break;
            }
        }
    }

    /// Whether any segment beyond `expected` has arrived (a hole exists).
    pub fn has_hole(&self) -> bool {
        self.consumed + (self.slots.len() as u64) > self.expected
    }

    /// SACK blocks for segments received beyond `expected`, the lowest
    /// `limit` runs (the holes nearest the cumulative ack hold the
    /// receiver's window shut; the sender learns the rest as they fill).
    pub fn sack(&self, limit: usize) -> openvia_wire::rum::AckRepr {
        let mut b = SackBuilder::with_limit(limit);
        for (&start, &end) in &self.runs {
            if !b.accepts(start) {
                break;
            }
            b.add_run(start, end);
        }
        b.finish()
    }

    /// Offers the message at the head, if complete, to `place`. Returns the
    /// message id placed, `Ok(None)` when nothing is ready or the sink
    /// refused, and `Err` when the head segments are inconsistent.
    pub fn deliver_head(
        &mut self,
        expand_msg: impl Fn(u64, u32) -> u64,
        place: &mut dyn FnMut(&MessageInfo, &[Piece<'_>]) -> Placement,
    ) -> Result<Option<MessageInfo>, Malformed> {
        while matches!(self.slots.front(), Some(Slot::Dropped)) {
            self.slots.pop_front();
            self.consumed += 1;
        }
        let Some(count) = self.complete_head()? else {
            return Ok(None);
        };
        // A one-segment message (the common small one) needs no list.
        let mut one = [Piece {
            offset: 0,
            data: &[],
        }];
        let mut held = 0;
        let mut many: Vec<Piece<'_>> = Vec::new();
        let mut first: Option<&RecvSegment> = None;
        let mut placed = 0;
        for s in self.slots.range(..count) {
            if let Slot::Filled(seg) = s {
                first.get_or_insert(seg);
                placed += seg.placed as usize;
                if seg.data.is_empty() {
                    continue;
                }
                let piece = Piece {
                    offset: seg.offset as u64,
                    data: &seg.data,
                };
                match held {
                    0 => one[0] = piece,
                    1 => {
                        many.reserve(count);
                        many.extend([one[0], piece]);
                    }
                    _ => many.push(piece),
                }
                held += 1;
            }
        }
        let Some(head) = first else {
            return Err(Malformed);
        };
        let pieces: &[Piece<'_>] = match held {
            0 => &[],
            1 => &one,
            _ => &many,
        };
        let info = MessageInfo {
            msg_id: expand_msg(self.next_msg_id, head.msg_id),
            op: head.op,
            immediate: head.immediate,
            mem_handle: head.mem_handle,
            remote_addr: head.remote_addr,
            len: head.total as usize,
            placed,
        };
        // Every message takes at least one sequence number: no more can
        // have been lost since the last one delivered than segments were
        // skipped (none on the reliable levels). A message id further on
        // is forged or corrupt, and would count billions of drops.
        let skipped_segments = self.consumed - self.consumed_at_delivery;
        if info.msg_id < self.next_msg_id || info.msg_id - self.next_msg_id > skipped_segments {
            return Err(Malformed);
        }
        if place(&info, pieces) == Placement::NotNow {
            return Ok(None);
        }
        for _ in 0..count {
            if let Some(slot) = self.slots.pop_front() {
                self.recycle(slot);
            }
        }
        self.consumed += count as u64;
        self.consumed_at_delivery = self.consumed;
        self.next_msg_id = info.msg_id + 1;
        Ok(Some(info))
    }

    /// Number of segments of the message starting at `start` if all are in
    /// order and consistent; `Ok(None)` if some have not arrived yet.
    fn complete_message_at(&self, start: u64) -> Result<Option<usize>, Malformed> {
        self.scan_message_at(start, None).map(|(r, _)| r)
    }

    /// [`Self::complete_message_at`] for the head, resuming where the last
    /// call stopped (a filled slot never changes until it is consumed or,
    /// on the unreliable level, dropped — which forgets the scan).
    fn complete_head(&mut self) -> Result<Option<usize>, Malformed> {
        let start = self.consumed;
        let resume = self.head_scan.filter(|h| h.start == start);
        let (r, scan) = self.scan_message_at(start, resume)?;
        self.head_scan = scan;
        Ok(r)
    }

    /// Walks the message at `start` from `resume` (or its first segment).
    /// Returns the segment count if complete, and where an incomplete walk
    /// stopped.
    fn scan_message_at(
        &self,
        start: u64,
        resume: Option<HeadScan>,
    ) -> Result<(Option<usize>, Option<HeadScan>), Malformed> {
        let Some(Slot::Filled(head)) = self.slot(start) else {
            return Ok((None, None));
        };
        if head.offset != 0 {
            return Err(Malformed);
        }
        let (mut seq, mut end) = resume.map_or((start, 0), |h| (h.next, h.end));
        loop {
            match self.slot(seq) {
                Some(Slot::Filled(s)) => {
                    if s.msg_id != head.msg_id || s.offset as u64 != end || s.total != head.total {
                        return Err(Malformed);
                    }
                    end += s.len() as u64;
                    seq += 1;
                    if s.ends_message() {
                        return Ok((Some((seq - start) as usize), None));
                    }
                }
                Some(Slot::Dropped) => return Err(Malformed),
                _ => {
                    return Ok((
                        None,
                        Some(HeadScan {
                            start,
                            next: seq,
                            end,
                        }),
                    ))
                }
            }
        }
    }

    /// Unreliable level: skips holes below `upto` (the sender's next
    /// sequence number, from a probe) or, when `upto` is `None`, only holes
    /// followed by a complete message. Returns segments dropped.
    pub fn skip_holes(&mut self, upto: Option<u64>) -> u64 {
        self.head_scan = None;
        let mut dropped = 0;
        let bound = upto.map(|u| u.min(self.limit()));
        loop {
            self.advance();
            let end_known = self.consumed + self.slots.len() as u64;
            if self.expected >= bound.unwrap_or(end_known) {
                return dropped;
            }
            // The partial message before the hole starts at the last
            // message boundary at or below `expected`.
            let mut from = self.expected;
            while from > self.consumed {
                match self.slot(from - 1) {
                    Some(Slot::Filled(s)) if !s.ends_message() => from -= 1,
                    _ => break,
                }
            }
            let next_start = (self.expected + 1..end_known)
                .find(|&q| matches!(self.slot(q), Some(Slot::Filled(s)) if s.offset == 0));
            let to = match (next_start, bound) {
                (Some(s), Some(b)) if s <= b => s,
                (Some(s), None) if matches!(self.complete_message_at(s), Ok(Some(_))) => s,
                (_, Some(b)) => b,
                _ => return dropped,
            };
            for q in from..to {
                let idx = (q - self.consumed) as usize;
                while self.slots.len() <= idx {
                    self.slots.push_back(Slot::Empty);
                }
                if !matches!(self.slots[idx], Slot::Dropped) {
                    self.slots[idx] = Slot::Dropped;
                    dropped += 1;
                }
            }
            self.expected = self.expected.max(to);
        }
    }

    /// Unreliable level: drops the run of segments at the head that cannot
    /// form a message (its first segment was skipped as lost). Returns
    /// segments dropped.
    pub fn drop_head_run(&mut self) -> u64 {
        self.head_scan = None;
        let mut dropped = 0;
        for slot in self.slots.iter_mut() {
            let last = match slot {
                Slot::Filled(s) => s.ends_message(),
                Slot::Dropped => false,
                Slot::Empty => break,
            };
            if !matches!(slot, Slot::Dropped) {
                dropped += 1;
            }
            *slot = Slot::Dropped;
            if last {
                break;
            }
        }
        self.advance();
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(msg_id: u32, offset: u32, total: u32, len: usize) -> RecvSegment {
        RecvSegment {
            msg_id,
            offset,
            total,
            op: ViaOp::Send,
            immediate: None,
            mem_handle: 0,
            remote_addr: 0,
            data: vec![(offset / 10) as u8; len],
            placed: 0,
        }
    }

    /// Offers the head; returns (message id, bytes seen) when placed.
    fn deliver(r: &mut Reassembly) -> Result<Option<(u64, Vec<u8>)>, Malformed> {
        let mut got = Vec::new();
        let info = r.deliver_head(|_, id| id as u64, &mut |_, pieces| {
            for p in pieces {
                assert_eq!(p.offset, got.len() as u64);
                got.extend_from_slice(p.data);
            }
            Placement::Placed
        })?;
        Ok(info.map(|i| (i.msg_id, got)))
    }

    #[test]
    fn head_scan_resumes_and_sees_every_segment() {
        let mut r = Reassembly::new(64);
        // Message 0: five 10-byte segments, segment 2 late; message 1 whole.
        for (seq, off) in [(0u64, 0u32), (1, 10), (3, 30), (4, 40)] {
            assert_eq!(r.insert(seq, seg(0, off, 50, 10)), Insert::Stored);
            assert_eq!(deliver(&mut r), Ok(None));
        }
        r.insert(5, seg(1, 0, 7, 7));
        assert_eq!(deliver(&mut r), Ok(None));
        r.insert(2, seg(0, 20, 50, 10));
        let (id, bytes) = deliver(&mut r).unwrap().unwrap();
        assert_eq!(id, 0);
        let want: Vec<u8> = (0..5).flat_map(|k| vec![k as u8; 10]).collect();
        assert_eq!(bytes, want);
        // The scan of message 0 must not leak into message 1.
        assert_eq!(deliver(&mut r).unwrap().unwrap().0, 1);
        assert_eq!(deliver(&mut r), Ok(None));
    }

    #[test]
    fn a_bad_segment_after_a_resumed_scan_is_still_caught() {
        let mut r = Reassembly::new(64);
        r.insert(0, seg(0, 0, 30, 10));
        r.insert(1, seg(0, 10, 30, 10));
        assert_eq!(deliver(&mut r), Ok(None));
        // Wrong offset where 20 is due: the resumed walk must check it.
        r.insert(2, seg(0, 25, 30, 5));
        assert_eq!(deliver(&mut r), Err(Malformed));
    }
}
