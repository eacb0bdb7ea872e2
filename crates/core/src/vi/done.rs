//! Taking completed descriptors off a VI's queues (`VipSendDone`,
//! `VipRecvDone`, their Waits): from what has completed already, else by
//! driving the channel once; the `_at_hand` forms never drive it (a look
//! at the network device is a system call).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Vi, ViInner};
use crate::descriptor::DescPtr;
use crate::error::{Result, ViaError};
use crate::wait;

impl Vi {
    /// The oldest completed descriptor of the receive queue (`recv`) or
    /// the send queue, driving the channel once if none has completed.
    fn done(&self, recv: bool) -> Option<DescPtr> {
        let mut deferred = Vec::new();
        let mut g = self.lock();
        let inner = &mut *g;
        let q_has = if recv {
            inner.rq.completed > 0
        } else {
            inner.sq.completed > 0
        };
        if !q_has && recv && self.complete_simple_recv(inner) {
            let d = inner.rq.pop_completed();
            drop(g);
            return d;
        }
        if !q_has {
            if let Some(ch) = inner.channel.as_ref() {
                let pending_sends = inner.sq.completed < inner.sq.entries.len();
                if ch.has_work() || (!recv && pending_sends) {
                    self.progress_locked(inner, &mut deferred);
                }
            }
        }
        let d = if recv {
            inner.rq.pop_completed()
        } else {
            inner.sq.pop_completed()
        };
        self.collect_notifies(inner, &mut deferred);
        drop(g);
        if !deferred.is_empty() {
            self.run_deferred(deferred);
        }
        d
    }

    /// The fast path of a plain receive: a whole small message at the
    /// ring's head goes straight into the next posted receive. Returns
    /// whether one completed (and went to the receive CQ).
    #[inline]
    pub(super) fn complete_simple_recv(&self, inner: &mut ViInner) -> bool {
        if inner.recv_notify.is_some() || inner.rq.refused != 0 {
            return false;
        }
        let (Some(ch), Some(e)) = (
            inner.channel.as_mut(),
            inner.rq.entries.get(inner.rq.completed),
        ) else {
            return false;
        };
        let Some((len, imm)) = ch.take_simple_recv(&e.ranges, e.capacity) else {
            return false;
        };
        inner
            .rq
            .complete_next(&self.nic.registry, len, imm, false, 0);
        if let Some(cq) = &self.recv_cq {
            cq.push(self.id, self.token.load(Ordering::Relaxed), true);
        }
        true
    }

    /// `VipSendDone`: the oldest completed send descriptor, if any.
    pub fn send_done(&self) -> Result<DescPtr> {
        self.nic.check_owner()?;
        self.nic.touch();
        self.done(false).ok_or(ViaError::NotDone)
    }

    /// `VipRecvDone`.
    pub fn recv_done(&self) -> Result<DescPtr> {
        self.nic.check_owner()?;
        self.nic.touch();
        self.done(true).ok_or(ViaError::NotDone)
    }

    /// `recv_done` without driving the device: a receive that completed
    /// already, or that the channel completes from memory it holds. For a
    /// reader that has data and wants only what else is at hand: a look at
    /// the network after a lone message finds nothing most times, and each
    /// look is a system call.
    pub fn recv_done_at_hand(&self) -> Result<DescPtr> {
        self.nic.check_owner()?;
        let mut g = self.lock();
        let inner = &mut *g;
        if inner.rq.completed == 0 && !self.complete_simple_recv(inner) {
            return Err(ViaError::NotDone);
        }
        inner.rq.pop_completed().ok_or(ViaError::NotDone)
    }

    /// `send_done` without driving the device: a send already completed,
    /// or one that what the channel already took in completes (an
    /// acknowledgement that came with a reply). For a writer that only
    /// wants its finished sends back while it has room to post: driving
    /// the network device for them is a system call that finds nothing
    /// most times, and it sends a bare acknowledgement that the message
    /// about to be posted would have carried.
    pub fn send_done_at_hand(&self) -> Result<DescPtr> {
        self.nic.check_owner()?;
        let mut g = self.lock();
        let inner = &mut *g;
        if inner.sq.completed == 0 {
            self.reap_sends(inner, None);
        }
        inner.sq.pop_completed().ok_or(ViaError::NotDone)
    }

    /// `VipSendWait`: spins for the NIC's budget, then blocks.
    pub fn send_wait(&self, timeout: Option<Duration>) -> Result<DescPtr> {
        self.nic.check_owner()?;
        wait::wait_for(&self.nic, timeout, || {
            self.nic.touch();
            self.done(false)
        })
    }

    /// `VipRecvWait`.
    pub fn recv_wait(&self, timeout: Option<Duration>) -> Result<DescPtr> {
        self.nic.check_owner()?;
        wait::wait_for(&self.nic, timeout, || {
            self.nic.touch();
            self.done(true)
        })
    }
}
