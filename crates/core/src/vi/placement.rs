//! Where a transport puts what arrives for a VI.
//!
//! A transport knows how bytes travel; it does not know descriptors. When a
//! message arrives it asks a [`Placement`] for the next posted receive, the
//! memory an RDMA operation targets (protection checked here), or the
//! buffers of an outstanding RDMA read, and reports completions back. The
//! same interface serves every transport.

use crate::cq::CompletionQueue;
use crate::descriptor::status;
use crate::mem::{MemoryRegistry, PtagId};
use crate::ranges::{self, Range};
use crate::vi::queues::{RecvQueue, SendQueue};

/// Something that went wrong while placing data, for the VI to act on
/// once the transport call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A receive buffer was too small (the message was dropped).
    RecvLength,
    /// An incoming RDMA write named memory it may not touch.
    RdmaWriteProtection,
    /// An incoming RDMA read named memory it may not read.
    RdmaReadProtection,
    /// The peer refused one of our operations.
    RemoteRefused(u32),
    /// Data could not be copied (the peer's memory went away).
    Transport,
    /// Data could not be copied because the peer's process is gone.
    PeerGone,
}

impl Fault {
    /// Whether data was lost: on the reliable levels nothing after it may
    /// be delivered (a hole in the stream).
    pub fn lost_data(&self) -> bool {
        matches!(self, Fault::Transport | Fault::PeerGone)
    }
}

/// The receiving side of a VI, lent to a transport for one progress call.
pub struct Placement<'a> {
    pub registry: &'a MemoryRegistry,
    pub ptag: PtagId,
    pub rdma_write: bool,
    pub rdma_read: bool,
    pub rq: &'a mut RecvQueue,
    pub sq: &'a mut SendQueue,
    pub recv_cq: Option<&'a CompletionQueue>,
    pub send_cq: Option<&'a CompletionQueue>,
    pub vi_id: u64,
    pub vi_token: u64,
    pub faults: &'a mut Vec<Fault>,
    /// Set when any descriptor completed (waiters should look again).
    pub completed_any: bool,
}

impl Placement<'_> {
    /// Capacity of the next posted, unfilled receive.
    pub fn recv_capacity(&mut self) -> Option<u64> {
        let settled = self.rq.settle_errors(self.registry);
        if settled > 0 {
            self.completed_any = true;
            if let Some(cq) = self.recv_cq {
                for _ in 0..settled {
                    cq.push(self.vi_id, self.vi_token, true);
                }
            }
        }
        self.rq.next_unfilled().map(|e| e.capacity)
    }

    /// The buffers of the next posted receive.
    pub fn recv_ranges(&self) -> &[Range] {
        self.rq.next_unfilled().map_or(&[], |e| &e.ranges)
    }

    /// Copies `data` into the next posted receive at `offset`.
    pub fn recv_write(&mut self, offset: u64, data: &[u8]) {
        if let Some(e) = self.rq.next_unfilled() {
            // SAFETY: the ranges were validated against the registry, with
            // this VI's ptag, when the receive was posted.
            unsafe { ranges::scatter(&e.ranges, offset, data) };
        }
    }

    /// Index (`RecvQueue::popped`) of the next posted receive that has not
    /// been filled.
    pub fn recv_head_index(&self) -> u64 {
        self.rq.head_index()
    }

    /// The first posted receive from index `from` on (and not before the
    /// next unfilled one) that can take a message, i.e. was not refused at
    /// post: its index and capacity.
    pub fn takeable_recv_from(&self, from: u64) -> Option<(u64, u64)> {
        let mut index = from.max(self.rq.head_index());
        loop {
            let e = self.rq.unfilled_at(index)?;
            if e.error == 0 {
                return Some((index, e.capacity));
            }
            index += 1;
        }
    }

    /// Copies `data` into posted receive `index` at `offset`, before the
    /// receive completes (placement on arrival); false, writing nothing,
    /// unless that receive is posted, unfilled, was not refused and holds
    /// `offset + data.len()` bytes.
    pub fn recv_write_at(&mut self, index: u64, offset: u64, data: &[u8]) -> bool {
        let Some(e) = self.rq.unfilled_at(index) else {
            return false;
        };
        let fits = offset
            .checked_add(data.len() as u64)
            .is_some_and(|end| end <= e.capacity);
        if e.error != 0 || !fits {
            return false;
        }
        // SAFETY: the ranges were validated against the registry, with this
        // VI's ptag, when the receive was posted, and the entry holds uses
        // of their regions until it completes; `offset + len` is within
        // its capacity (the ranges' total).
        unsafe { ranges::scatter(&e.ranges, offset, data) };
        true
    }

    /// Completes the next posted receive.
    pub fn recv_complete(
        &mut self,
        len: u64,
        immediate: Option<u32>,
        remote_write: bool,
        error: u32,
    ) {
        if !self
            .rq
            .complete_next(self.registry, len, immediate, remote_write, error)
        {
            return;
        }
        self.completed_any = true;
        if let Some(cq) = self.recv_cq {
            cq.push(self.vi_id, self.vi_token, true);
        }
        if error == status::LENGTH_ERROR {
            self.faults.push(Fault::RecvLength);
        }
    }

    /// Checks that [addr, addr+len) may be the target of an incoming RDMA
    /// write (`write`) or the source of an RDMA read; returns the status bits
    /// to refuse it with.
    pub fn check_rdma(&self, write: bool, addr: u64, handle: u32, len: u64) -> Result<(), u32> {
        let vi_ok = if write {
            self.rdma_write
        } else {
            self.rdma_read
        };
        let region = self
            .registry
            .lookup(handle)
            .ok_or(status::RDMA_PROT_ERROR)?;
        let mem_ok = if write {
            region.rdma_write
        } else {
            region.rdma_read
        };
        if !vi_ok || !mem_ok || region.ptag != self.ptag || (len > 0 && !region.contains(addr, len))
        {
            return Err(status::RDMA_PROT_ERROR);
        }
        Ok(())
    }

    /// The local buffers of our outstanding RDMA read `seq`.
    pub fn read_ranges(&mut self, seq: u64) -> Option<&[Range]> {
        self.sq.read_entry(seq).map(|e| &e.read_ranges[..])
    }

    /// Marks our RDMA read `seq` as arrived (with `error` bits, if any).
    pub fn read_done(&mut self, seq: u64, error: u32) {
        if let Some(e) = self.sq.read_entry(seq) {
            e.read_arrived = true;
            e.error |= error;
        }
    }

    /// The peer refused our operation `seq`.
    pub fn remote_refused(&mut self, seq: u64, bits: u32) {
        let from = self.sq.completed;
        if let Some(e) = self.sq.entries.range_mut(from..).find(|e| e.seq == seq) {
            e.error |= bits & status::ERROR_MASK;
            if e.error == 0 {
                e.error = status::TRANSPORT_ERROR;
            }
            e.read_arrived = true;
        }
        self.faults.push(Fault::RemoteRefused(bits));
    }
}
