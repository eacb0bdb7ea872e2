//! The writer's account of the data ring: where the next message goes,
//! and which bytes the reader has not yet used (a message's bytes are
//! free once the reader's count on the control page passes it).

use crate::control::RING_BYTES;

pub(super) struct Tx {
    pub(super) free: Vec<usize>,
    pub(super) in_flight: usize,
    /// Messages sent.
    pub(super) sent: u32,
    /// Ring bytes used since the start (a place is this modulo
    /// RING_BYTES): the next message goes at `head` or, if it would cross
    /// the ring's end, at the next start (`release` moves it to the next
    /// start when nothing is unread); the ring is free from `tail`,
    /// where the oldest unread message starts.
    pub(super) head: u64,
    pub(super) tail: u64,
    /// Where each unread message ends, oldest first.
    pub(super) ends: std::collections::VecDeque<u64>,
}

impl Tx {
    /// The reader has used `consumed` messages up: their bytes are free.
    pub(super) fn release(&mut self, consumed: u32) {
        let unread = self.sent.wrapping_sub(consumed) as usize;
        while self.ends.len() > unread {
            self.tail = self.ends.pop_front().unwrap_or(self.tail);
        }
        if self.ends.is_empty() {
            // Nothing unread: the next message goes at the ring's start,
            // not after the last one. A request and its answer then use
            // the same few cache lines each time, where marching on
            // through the ring (1 MiB a direction) would bring new lines
            // into the cache with every message and push out the
            // program's own (a forking server with eight connections ran
            // its own code 18 % slower per request).
            self.head = self.head.next_multiple_of(RING_BYTES as u64);
            self.tail = self.head;
        }
    }

    /// Where a message of `len` bytes goes, if the ring has room for it.
    pub(super) fn place(&self, len: usize) -> Option<u64> {
        let ring = RING_BYTES as u64;
        let mut at = self.head;
        if at % ring + len as u64 > ring {
            at = at.next_multiple_of(ring);
        }
        (at + len as u64 - self.tail <= ring).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::RING_BYTES;
    use crate::link::SLOT_BYTES;

    fn tx() -> Tx {
        Tx {
            free: Vec::new(),
            in_flight: 0,
            sent: 0,
            head: 0,
            tail: 0,
            ends: std::collections::VecDeque::new(),
        }
    }

    /// Sends a message of `len` where `place` says, as `write` does.
    fn send(t: &mut Tx, len: usize) -> Option<u64> {
        let at = t.place(len)?;
        t.head = at + len as u64;
        t.ends.push_back(t.head);
        t.sent += 1;
        Some(at)
    }

    #[test]
    fn messages_pack_wrap_at_the_end_and_never_overlap_unread_ones() {
        let ring = RING_BYTES as u64;
        let mut t = tx();
        assert_eq!(send(&mut t, 16), Some(0));
        assert_eq!(send(&mut t, 16), Some(16), "packed right after");
        // Fill up to just short of the end with 64 KiB messages.
        let mut consumed = 0u32;
        while t.head % ring + SLOT_BYTES as u64 <= ring {
            assert!(send(&mut t, SLOT_BYTES).is_some());
        }
        // The next one would cross the end: it must wait for room at the
        // start, which the first messages still hold.
        assert_eq!(t.place(SLOT_BYTES), None, "ring full: the start is unread");
        consumed += 2;
        t.release(consumed);
        assert_eq!(t.place(SLOT_BYTES), None, "32 bytes freed are not enough");
        consumed += 1;
        t.release(consumed);
        let at = send(&mut t, SLOT_BYTES).expect("room after the first big one");
        assert_eq!(at % ring, 0, "wrapped to the start, not across the end");
        assert!(at + SLOT_BYTES as u64 - t.tail <= ring);
        // Everything read: the ring is empty and the next goes at its
        // start again.
        t.release(t.sent);
        assert_eq!(t.tail, t.head);
        let at = t.place(100).expect("an empty ring has room");
        assert_eq!(at % ring, 0, "an empty ring starts over");
        assert!(at >= t.head, "places only move on");
    }

    #[test]
    fn a_request_and_its_answer_reuse_the_start_of_the_ring() {
        let ring = RING_BYTES as u64;
        let mut t = tx();
        for i in 0..1000u32 {
            let at = send(&mut t, 300).expect("room");
            assert_eq!(at % ring, 0, "message {i} at the start");
            t.release(t.sent);
        }
        // Started over, the whole ring is room: a small unread message
        // and as many whole slots as fit beside it (the bytes skipped to
        // reach the start count as free).
        assert_eq!(send(&mut t, 8).map(|at| at % ring), Some(0));
        let slots = (ring - 8) / SLOT_BYTES as u64;
        for k in 0..slots {
            assert!(send(&mut t, SLOT_BYTES).is_some(), "slot {k} has room");
        }
        assert_eq!(t.place(SLOT_BYTES), None, "and no more");
    }
}
