//! The two work queues of a VI, as the provider keeps them.
//!
//! Entries stay queued after completion until the application dequeues
//! them (SendDone/RecvDone or a notify handler), because VIA hands
//! descriptors back in posting order. A cursor marks where completed
//! entries end. Each entry holds uses of the memory regions it names
//! (`mem::HeldUses`), given back in the critical section that writes its
//! completion.

use std::collections::VecDeque;

use crate::descriptor::{status, DescPtr};
use crate::mem::{HeldUses, MemoryRegistry};
use crate::ranges::Range;

/// What must happen before a send-queue entry is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendWait {
    /// Completed when posted (errors, or data already in the ring).
    Now,
    /// All bytes of message `seq` are written to the transport.
    Sent,
    /// The peer has fully delivered message `seq`.
    Consumed,
    /// The RDMA read's data has arrived (set by the receive path).
    ReadDone,
}

pub struct SendEntry {
    pub desc: DescPtr,
    pub seq: u64,
    pub wait: SendWait,
    /// VIP_STATUS_OP_* of the operation.
    pub op_status: u32,
    /// Error bits to report (0: success).
    pub error: u32,
    pub length: u32,
    pub immediate: bool,
    /// RDMA read: where the data goes; set `read_arrived` when it has.
    pub read_ranges: Vec<Range>,
    pub read_arrived: bool,
    /// Regions the descriptor names, until its completion is written.
    pub uses: HeldUses,
}

impl SendEntry {
    /// Writes the completion and lets go of the memory.
    #[inline]
    pub fn complete(&mut self, reg: &MemoryRegistry, length: u32, bits: u32) {
        self.desc.complete(length, None, bits);
        self.uses.release(reg);
    }
}

pub struct RecvEntry {
    pub desc: DescPtr,
    pub ranges: Vec<Range>,
    pub capacity: u64,
    /// Set when the descriptor was refused at post: it completes with these
    /// bits when it reaches the head, without taking a message.
    pub error: u32,
    /// Regions the descriptor names, until its completion is written.
    pub uses: HeldUses,
}

impl RecvEntry {
    #[inline]
    fn complete(&mut self, reg: &MemoryRegistry, length: u32, imm: Option<u32>, bits: u32) {
        self.desc.complete(length, imm, bits);
        self.uses.release(reg);
    }
}

/// Descriptors posted to the send queue.
#[derive(Default)]
pub struct SendQueue {
    pub entries: VecDeque<SendEntry>,
    /// Entries before this index have their completion written.
    pub completed: usize,
}

/// Descriptors posted to the receive queue.
#[derive(Default)]
pub struct RecvQueue {
    pub entries: VecDeque<RecvEntry>,
    /// Entries before this index have been filled and completed.
    pub completed: usize,
    /// Range lists of dequeued entries, kept for reuse.
    pub spare: Vec<Vec<Range>>,
    /// Entries refused at post that have not completed yet.
    pub refused: usize,
    /// Entries dequeued so far: entry `k` of `entries` is the
    /// `popped + k`th receive ever posted (its index, which stays the same
    /// while entries ahead of it leave).
    pub popped: u64,
}

impl SendQueue {
    /// The outstanding RDMA read with message number `seq`.
    pub fn read_entry(&mut self, seq: u64) -> Option<&mut SendEntry> {
        let from = self.completed;
        self.entries
            .range_mut(from..)
            .find(|e| e.seq == seq && e.wait == SendWait::ReadDone)
    }

    /// Takes the head if it has completed.
    pub fn pop_completed(&mut self) -> Option<DescPtr> {
        if self.completed == 0 {
            return None;
        }
        self.completed -= 1;
        self.entries.pop_front().map(|e| e.desc)
    }

    /// Lets go of the memory of every entry without completing it (the VI
    /// is going away).
    pub fn abandon(&mut self, reg: &MemoryRegistry) {
        for e in self.entries.iter_mut() {
            e.uses.release(reg);
        }
    }

    /// Completes every not-yet-completed entry with DESC_FLUSHED; returns how many.
    pub fn flush(&mut self, reg: &MemoryRegistry) -> usize {
        let n = self.entries.len() - self.completed;
        for e in self.entries.range_mut(self.completed..) {
            let err = if e.error != 0 {
                e.error
            } else {
                status::DESC_FLUSHED_ERROR
            };
            let bits = e.op_status | err;
            e.complete(reg, 0, bits);
        }
        self.completed = self.entries.len();
        n
    }
}

impl RecvQueue {
    /// The next posted receive that has not been filled.
    #[inline]
    pub fn next_unfilled(&self) -> Option<&RecvEntry> {
        self.entries.get(self.completed)
    }

    /// Index (see [`Self::popped`]) of the next posted receive that has
    /// not been filled.
    #[inline]
    pub fn head_index(&self) -> u64 {
        self.popped + self.completed as u64
    }

    /// The unfilled receive with index `index`, if it is posted.
    #[inline]
    pub fn unfilled_at(&self, index: u64) -> Option<&RecvEntry> {
        if index < self.head_index() {
            return None;
        }
        self.entries.get(usize::try_from(index - self.popped).ok()?)
    }

    pub fn pop_completed(&mut self) -> Option<DescPtr> {
        if self.completed == 0 {
            return None;
        }
        self.completed -= 1;
        let e = self.entries.pop_front()?;
        self.popped += 1;
        let mut r = e.ranges;
        r.clear();
        if self.spare.len() < 64 {
            self.spare.push(r);
        }
        Some(e.desc)
    }

    /// Completes refused descriptors that have reached the head of the
    /// unfilled part; returns how many.
    #[inline]
    pub fn settle_errors(&mut self, reg: &MemoryRegistry) -> usize {
        if self.refused == 0 {
            return 0;
        }
        let mut n = 0;
        while let Some(e) = self.entries.get_mut(self.completed) {
            if e.error == 0 {
                break;
            }
            let bits = status::OP_RECEIVE | e.error;
            e.complete(reg, 0, None, bits);
            self.completed += 1;
            self.refused -= 1;
            n += 1;
        }
        n
    }

    /// Completes the next unfilled receive; false if none is posted.
    #[inline]
    pub fn complete_next(
        &mut self,
        reg: &MemoryRegistry,
        len: u64,
        immediate: Option<u32>,
        remote_write: bool,
        error: u32,
    ) -> bool {
        let Some(e) = self.entries.get_mut(self.completed) else {
            return false;
        };
        let mut bits = if remote_write {
            status::OP_REMOTE_RDMA_WRITE
        } else {
            status::OP_RECEIVE
        };
        if immediate.is_some() {
            bits |= status::IMMEDIATE;
        }
        e.complete(
            reg,
            len.min(u32::MAX as u64) as u32,
            immediate,
            bits | error,
        );
        self.completed += 1;
        true
    }

    pub fn take_spare(&mut self) -> Vec<Range> {
        self.spare.pop().unwrap_or_default()
    }

    /// Lets go of the memory of every entry without completing it (the VI
    /// is going away).
    pub fn abandon(&mut self, reg: &MemoryRegistry) {
        for e in self.entries.iter_mut() {
            e.uses.release(reg);
        }
    }

    /// Completes every unfilled receive with DESC_FLUSHED; returns how many.
    pub fn flush(&mut self, reg: &MemoryRegistry) -> usize {
        let n = self.entries.len() - self.completed;
        for e in self.entries.range_mut(self.completed..) {
            let bits = if e.error != 0 {
                e.error
            } else {
                status::DESC_FLUSHED_ERROR
            };
            e.complete(reg, 0, None, status::OP_RECEIVE | bits);
        }
        self.completed = self.entries.len();
        self.refused = 0;
        n
    }
}
