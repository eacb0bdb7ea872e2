//! Which arriving data segments a [`SegmentPlacer`] may put in place at
//! once (direct placement: one copy on the receive side, from the
//! datagram into the posted buffer, instead of one into the connection's
//! buffer and another at delivery).
//!
//! Only segments that arrive in order within their message are offered: a
//! message's first segment (offset 0) starts a chain if it sits where a
//! message can start (the head of the receive buffer, or right after a
//! segment that ended its message) and its message has not started
//! before; the segment with the next sequence number, the same length and
//! the offset where the last one ended continues it. So no two offered
//! segments can claim the same bytes, and
//! a segment that arrives out of order (after a loss, a retransmission)
//! takes the buffered path, which checks the whole message before it is
//! delivered. Only on the reliable levels: there every message reaches a
//! descriptor in order, so the placer can tell where a message will go
//! before the ones ahead of it are complete; on the unreliable level a
//! lost segment drops its message and moves every later one up.

use openvia_wire::rum::DataRepr;

use crate::events::{ArrivingSegment, MessageId, SegmentPlacer};

/// The message whose segments are arriving in order, and what comes next.
#[derive(Debug, Default)]
pub(crate) struct ArrivalChain {
    current: Option<Chain>,
    /// The last message whose first segment was offered: each message
    /// starts once, and later than the one before it.
    last_started: Option<MessageId>,
}

#[derive(Debug, Clone, Copy)]
struct Chain {
    msg_id: MessageId,
    total: u32,
    next_seq: u64,
    next_offset: u64,
}

impl ArrivalChain {
    /// Offers segment `seq` of message `msg_id` to `placer` if it may be
    /// placed on arrival (the caller has checked that its slot is free;
    /// `undelivered` is the first message not yet delivered, `boundary`
    /// whether a message may start at `seq`); true when the placer took
    /// its payload.
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
        let continues = self.current.is_some_and(|c| {
            c.msg_id == msg_id
                && c.total == d.total_len
                && c.next_seq == seq
                && c.next_offset == d.offset as u64
        });
        // A message starts once: a second offset-0 segment of a message
        // already started is a claim on the bytes its first one placed.
        let starts = d.offset == 0 && boundary && self.last_started.is_none_or(|l| msg_id > l);
        if !continues && !starts {
            return false;
        }
        if starts {
            self.last_started = Some(msg_id);
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
        if !placer.place_segment(&seg) {
            // The rest of the message is buffered too: a later segment
            // placed after one that was not would still be in order, but
            // the placer has already said where this message stands.
            self.current = None;
            return false;
        }
        self.current = (end < d.total_len as u64).then_some(Chain {
            msg_id,
            total: d.total_len,
            next_seq: seq + 1,
            next_offset: end,
        });
        true
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
    fn only_the_next_segment_of_a_message_in_order_is_offered() {
        let (mut chain, mut p) = (ArrivalChain::default(), Taken::default());
        assert!(chain.offer(&mut p, 10, 3, 3, true, &data(0, 16, 48)));
        // Not the next sequence number, or not where the last one ended.
        assert!(!chain.offer(&mut p, 12, 3, 3, true, &data(16, 16, 48)));
        assert!(!chain.offer(&mut p, 11, 3, 3, true, &data(20, 16, 48)));
        // A second start of the same message: a claim on placed bytes.
        assert!(!chain.offer(&mut p, 11, 3, 3, true, &data(0, 16, 48)));
        assert!(chain.offer(&mut p, 11, 3, 3, true, &data(16, 16, 48)));
        // Another length for the same message.
        assert!(!chain.offer(&mut p, 12, 3, 3, true, &data(32, 16, 64)));
        assert!(chain.offer(&mut p, 12, 3, 3, true, &data(32, 16, 48)));
        // Past the message's end, or empty.
        assert!(!chain.offer(&mut p, 13, 4, 3, true, &data(0, 16, 8)));
        assert!(!chain.offer(&mut p, 13, 4, 3, true, &data(0, 0, 8)));
        assert_eq!(p.0, [(10, 3, 0), (11, 3, 16), (12, 3, 32)]);
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
        // Nor an earlier message after a later one started.
        assert!(!chain.offer(&mut p, 64, 2, 0, true, &data(0, 16, 16)));
        assert!(chain.offer(&mut p, 65, 5, 0, true, &data(0, 16, 16)));
        assert_eq!(p.0.len(), 2);
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
