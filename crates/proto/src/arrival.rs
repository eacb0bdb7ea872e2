//! Which arriving data segments a [`SegmentPlacer`] may put in place at
//! once (direct placement: one copy on the receive side, from the
//! datagram into the posted buffer, instead of one into the connection's
//! buffer and another at delivery).
//!
//! A message's first segment (offset 0) is offered if it sits where a
//! message can start — the head of the receive buffer, right after a
//! segment that ended its message, or right after the last sequence number
//! of a message followed here — and its message has not started before.
//! That first segment fixes where the rest of the message must be: a
//! message's segments have consecutive sequence numbers and, but for the
//! last, the first one's length, so segment `seq` holds the bytes from
//! `(seq - first) × length`. A later segment of a followed message is
//! offered only if it says exactly that (the same message length too),
//! whatever arrived before it: after a loss, the segments behind the hole
//! and the retransmission that fills it are placed as well. Each sequence
//! number is offered once at most (the caller offers only free slots), so
//! no two offered segments can claim the same bytes. Anything else takes
//! the buffered path, which checks the whole message before it is
//! delivered. Only on the reliable levels: there every message reaches a
//! descriptor in order, so the placer can tell where a message will go
//! before the ones ahead of it are complete; on the unreliable level a
//! lost segment drops its message and moves every later one up.

use std::collections::{BTreeSet, VecDeque};

use openvia_wire::rum::DataRepr;

use crate::events::{ArrivingSegment, MessageId, SegmentPlacer};

/// Messages followed at once: the newest ones (retransmissions fill holes
/// in messages a little behind the newest; a sender's window holds 16
/// messages at most by default, `viabench -w 16`).
const FOLLOWED: usize = 16;

/// The messages whose first segment was offered, and where theirs go.
#[derive(Debug, Default)]
pub(crate) struct ArrivalChain {
    followed: VecDeque<Layout>,
    /// Undelivered messages whose first segment was offered: each message
    /// starts once.
    started: BTreeSet<MessageId>,
}

/// Where a followed message's segments are, from its first one.
#[derive(Debug, Clone, Copy)]
struct Layout {
    msg_id: MessageId,
    total: u32,
    first_seq: u64,
    /// Payload bytes of every segment but the last.
    stride: u32,
}

impl Layout {
    fn last_seq(&self) -> u64 {
        self.first_seq + (self.total as u64).div_ceil(self.stride as u64) - 1
    }

    /// Whether segment `seq` with `d` is where this message's layout puts
    /// it.
    fn holds(&self, seq: u64, msg_id: MessageId, d: &DataRepr<'_>) -> bool {
        if msg_id != self.msg_id || d.total_len != self.total || seq <= self.first_seq {
            return false;
        }
        let last = self.last_seq();
        let k = seq - self.first_seq;
        let len = d.payload.len() as u64;
        let end = d.offset as u64 + len;
        seq <= last
            && d.offset as u64 == k * self.stride as u64
            && if seq == last {
                end == self.total as u64
            } else {
                len == self.stride as u64
            }
    }
}

impl ArrivalChain {
    /// Whether a message may start at `seq` because a followed message's
    /// last sequence number is right before it (its last segment may not
    /// have come yet).
    fn after_followed(&self, seq: u64) -> bool {
        self.followed.iter().any(|l| l.last_seq() + 1 == seq)
    }

    /// Offers segment `seq` of message `msg_id` to `placer` if it may be
    /// placed on arrival (the caller has checked that its slot is free;
    /// `undelivered` is the first message not yet delivered, `boundary`
    /// whether the receive buffer shows that a message may start at
    /// `seq`); true when the placer took its payload.
    pub(crate) fn offer(
        &mut self,
        placer: &mut dyn SegmentPlacer,
        seq: u64,
        msg_id: MessageId,
        undelivered: MessageId,
        boundary: bool,
        d: &DataRepr<'_>,
    ) -> bool {
        let end = d.offset as u64 + d.payload.len() as u64;
        // A delivered message has no more segments: one claiming so is
        // forged (and refused whole at delivery).
        if end > d.total_len as u64 || d.payload.is_empty() || msg_id < undelivered {
            return false;
        }
        while self.started.first().is_some_and(|&m| m < undelivered) {
            self.started.pop_first();
        }
        // Newest first: most segments belong to the newest message.
        let continues = self.followed.iter().rev().any(|l| l.holds(seq, msg_id, d));
        // A message starts once: a second offset-0 segment of a message
        // already started is a claim on the bytes its first one placed.
        let starts = !continues
            && d.offset == 0
            && (boundary || self.after_followed(seq))
            && !self.started.contains(&msg_id);
        if !continues && !starts {
            return false;
        }
        if starts {
            self.started.insert(msg_id);
            // Followed whether or not the placer takes this segment: it
            // may take the later ones (it learns where the message goes
            // once the messages ahead of it are known).
            if self.followed.len() == FOLLOWED {
                self.followed.pop_front();
            }
            self.followed.push_back(Layout {
                msg_id,
                total: d.total_len,
                first_seq: seq,
                stride: d.payload.len() as u32,
            });
        }
        let seg = ArrivingSegment {
            seq,
            msg_id,
            op: d.op,
            immediate: d.immediate,
            mem_handle: d.mem_handle,
            remote_addr: d.remote_addr,
            offset: d.offset,
            total: d.total_len,
            payload: d.payload,
        };
        placer.place_segment(&seg)
    }
}

#[cfg(test)]
mod tests {
    use openvia_wire::rum::ViaOp;

    use super::*;

    /// Records what it was offered; takes everything.
    #[derive(Default)]
    struct Taken(Vec<(u64, MessageId, u32)>);
    impl SegmentPlacer for Taken {
        fn place_segment(&mut self, s: &ArrivingSegment<'_>) -> bool {
            self.0.push((s.seq, s.msg_id, s.offset));
            true
        }
    }

    fn data(offset: u32, len: usize, total: u32) -> DataRepr<'static> {
        static BYTES: [u8; 64] = [9; 64];
        DataRepr {
            msg_id: 0,
            offset,
            total_len: total,
            op: ViaOp::Send,
            immediate: None,
            mem_handle: 0,
            remote_addr: 0,
            payload: &BYTES[..len],
        }
    }

    #[test]
    fn a_segment_is_offered_only_where_its_message_layout_puts_it() {
        let (mut chain, mut p) = (ArrivalChain::default(), Taken::default());
        // Message 3: three 16-byte segments from sequence number 10.
        assert!(chain.offer(&mut p, 10, 3, 3, true, &data(0, 16, 48)));
        // Not where the layout puts it: offset, length, message length.
        assert!(!chain.offer(&mut p, 12, 3, 3, true, &data(16, 16, 48)));
        assert!(!chain.offer(&mut p, 11, 3, 3, true, &data(20, 16, 48)));
        assert!(!chain.offer(&mut p, 11, 3, 3, true, &data(16, 8, 48)));
        assert!(!chain.offer(&mut p, 12, 3, 3, true, &data(32, 16, 64)));
        // Past the message's last sequence number.
        assert!(!chain.offer(&mut p, 13, 3, 3, true, &data(48, 16, 48)));
        // A second start of the same message: a claim on placed bytes.
        assert!(!chain.offer(&mut p, 11, 3, 3, true, &data(0, 16, 48)));
        // Behind a hole (11 has not come), then the hole filled.
        assert!(chain.offer(&mut p, 12, 3, 3, true, &data(32, 16, 48)));
        assert!(chain.offer(&mut p, 11, 3, 3, true, &data(16, 16, 48)));
        // Past the message's end, or empty.
        assert!(!chain.offer(&mut p, 13, 4, 3, true, &data(0, 16, 8)));
        assert!(!chain.offer(&mut p, 13, 4, 3, true, &data(0, 0, 8)));
        assert_eq!(p.0, [(10, 3, 0), (12, 3, 32), (11, 3, 16)]);
    }

    /// The next message may start right after a followed message's last
    /// sequence number, though its last segment has not come (the buffer
    /// alone cannot tell).
    #[test]
    fn a_message_starts_after_a_followed_message_s_last_sequence_number() {
        let (mut chain, mut p) = (ArrivalChain::default(), Taken::default());
        assert!(chain.offer(&mut p, 10, 3, 3, true, &data(0, 16, 40)));
        assert!(!chain.offer(&mut p, 14, 4, 3, false, &data(0, 16, 16)));
        assert!(chain.offer(&mut p, 13, 4, 3, false, &data(0, 16, 16)));
        // The last segment of message 3, shorter.
        assert!(chain.offer(&mut p, 12, 3, 3, false, &data(32, 8, 40)));
        assert_eq!(p.0.len(), 3);
    }

    /// Found by the fuzz target `direct_placement`: a message's first
    /// segment at a sequence number where no message can start (its
    /// genuine first segment came later, lower).
    #[test]
    fn a_message_starts_only_at_a_boundary() {
        let (mut chain, mut p) = (ArrivalChain::default(), Taken::default());
        assert!(!chain.offer(&mut p, 2, 0, 0, false, &data(0, 16, 16)));
        assert!(chain.offer(&mut p, 0, 0, 0, true, &data(0, 16, 16)));
        assert_eq!(p.0, [(0, 0, 0)]);
    }

    /// Found by the fuzz target `direct_placement`: a message started again
    /// at a later sequence number, after its first start completed it.
    #[test]
    fn a_message_starts_once() {
        let (mut chain, mut p) = (ArrivalChain::default(), Taken::default());
        assert!(chain.offer(&mut p, 8, 4, 0, true, &data(0, 16, 16)));
        assert!(!chain.offer(&mut p, 63, 4, 0, true, &data(0, 16, 16)));
        // An earlier message whose first segment comes late (it was lost)
        // still starts, once.
        assert!(chain.offer(&mut p, 64, 2, 0, true, &data(0, 16, 16)));
        assert!(!chain.offer(&mut p, 66, 2, 0, true, &data(0, 16, 16)));
        assert!(chain.offer(&mut p, 65, 5, 0, true, &data(0, 16, 16)));
        assert_eq!(p.0.len(), 3);
    }

    /// Found by the fuzz target `direct_placement`: a segment naming a
    /// message already delivered, at a fresh sequence number.
    #[test]
    fn a_segment_of_a_delivered_message_is_not_offered() {
        let (mut chain, mut p) = (ArrivalChain::default(), Taken::default());
        assert!(!chain.offer(&mut p, 20, 2, 3, true, &data(0, 16, 16)));
        assert!(p.0.is_empty());
    }
}
