//! How a VI notices completions and breaks: driving its channel, writing
//! finished send descriptors back in order, acting on faults by
//! reliability level, and closing the connection with the queues flushed.
//! User callbacks run only after the VI lock is released ([`Deferred`]).

use std::sync::atomic::Ordering;

use super::placement::{Fault, Placement};
use super::queues::SendWait;
use super::{Deferred, Vi, ViInner, ViState};
use crate::nic::{AsyncError, ErrorCode, ResourceCode};

impl Vi {
    /// Drives the channel and notes completions. Call with the lock held.
    pub(super) fn progress_locked(
        &self,
        inner: &mut ViInner,
        deferred: &mut Vec<Deferred>,
    ) -> bool {
        let Some((consumed, result, completed_any)) = self.run_channel(inner) else {
            return false;
        };
        let mut did = completed_any;
        did |= self.reap_sends(inner, Some(consumed));
        match result {
            Err(_) => {
                self.fail(inner, ErrorCode::ConnLost, true, deferred);
                return true;
            }
            Ok(moved) => did |= moved,
        }
        if !inner.faults.is_empty() {
            self.handle_faults(inner, deferred);
        }
        did
    }

    /// One progress call of the channel. Returns the peer's delivered count
    /// read *before* its ring (so a refusal it wrote first is seen), the
    /// result, and whether any descriptor completed.
    pub(super) fn run_channel(
        &self,
        inner: &mut ViInner,
    ) -> Option<(
        u64,
        std::result::Result<bool, crate::device::ChannelFailed>,
        bool,
    )> {
        let ch = inner.channel.as_mut()?;
        // The peer's count lives on a line it writes: skip the miss when no
        // send waits on it.
        let consumed = if inner.sq.completed < inner.sq.entries.len() {
            ch.consumed()
        } else {
            0
        };
        let mut place = Placement {
            registry: &self.nic.registry,
            ptag: inner.attrs.ptag,
            rdma_write: inner.attrs.rdma_write,
            rdma_read: inner.attrs.rdma_read,
            rq: &mut inner.rq,
            sq: &mut inner.sq,
            recv_cq: self.recv_cq.as_deref(),
            send_cq: self.send_cq.as_deref(),
            vi_id: self.id,
            vi_token: self.token.load(Ordering::Relaxed),
            faults: &mut inner.faults,
            completed_any: false,
        };
        let result = ch.progress(&mut place);
        Some((consumed, result, place.completed_any))
    }

    pub(super) fn handle_faults(&self, inner: &mut ViInner, deferred: &mut Vec<Deferred>) {
        let faults = std::mem::take(&mut inner.faults);
        let reliable = inner.attrs.reliable();
        for f in faults {
            let code = match f {
                Fault::RecvLength => ErrorCode::PostDesc,
                Fault::RdmaWriteProtection => ErrorCode::RdmawProt,
                Fault::RdmaReadProtection => ErrorCode::RdmarProt,
                Fault::RemoteRefused(_) => ErrorCode::RdmaTransport,
                Fault::Transport => ErrorCode::RdmaTransport,
                Fault::PeerGone => ErrorCode::ConnLost,
            };
            if reliable && self.state() == ViState::Connected {
                self.fail(inner, code, true, deferred);
                return;
            }
            deferred.push(Deferred::Error(self.async_error(code, ResourceCode::Vi)));
        }
    }

    /// Writes completions of finished send-queue entries, in order.
    #[inline]
    pub(super) fn reap_sends(&self, inner: &mut ViInner, consumed: Option<u64>) -> bool {
        if inner.sq.completed == inner.sq.entries.len() {
            return false;
        }
        let ch = inner.channel.as_ref();
        let sent = ch.map_or(0, |c| c.sent());
        let mut consumed = consumed;
        let mut did = false;
        while let Some(e) = inner.sq.entries.get_mut(inner.sq.completed) {
            let ready = e.error != 0
                || match e.wait {
                    SendWait::Now => true,
                    SendWait::Sent => sent >= e.seq,
                    SendWait::Consumed => {
                        *consumed.get_or_insert_with(|| ch.map_or(0, |c| c.consumed())) >= e.seq
                    }
                    SendWait::ReadDone => e.read_arrived,
                };
            if !ready {
                break;
            }
            let bits = e.op_status | e.error;
            let len = if e.error != 0 { 0 } else { e.length };
            e.complete(&self.nic.registry, len, bits);
            inner.sq.completed += 1;
            did = true;
            if let Some(cq) = &self.send_cq {
                cq.push(self.id, self.token.load(Ordering::Relaxed), false);
            }
        }
        did
    }

    /// Breaks the connection, flushes both queues, reports `code`.
    /// `tell_peer`: the break is ours (an error here); the peer is told and
    /// nothing more is delivered. Otherwise the peer broke it, and what it
    /// wrote before is delivered first.
    pub(super) fn fail(
        &self,
        inner: &mut ViInner,
        code: ErrorCode,
        tell_peer: bool,
        deferred: &mut Vec<Deferred>,
    ) {
        if self.state() == ViState::Error {
            return;
        }
        self.set_state(ViState::Error);
        self.close_channel(inner, tell_peer, !tell_peer);
        deferred.push(Deferred::Error(self.async_error(code, ResourceCode::Vi)));
        self.nic.doorbell.ring_local();
    }

    /// Ends the connection: deliver what already arrived if `drain` (data
    /// the peer wrote before it left is still in the ring), close the
    /// channel (`broken`: tell the peer it was an error) and flush both
    /// queues.
    pub(super) fn close_channel(&self, inner: &mut ViInner, broken: bool, drain: bool) {
        // Without a drain, sends not yet seen complete are flushed: an
        // unread refusal could otherwise pass for success.
        if drain {
            self.drain_and_reap(inner);
        }
        if let Some(mut ch) = inner.channel.take() {
            self.nic.unwatch(ch.liveness_fd());
            ch.close(broken);
        }
        let token = self.token.load(Ordering::Relaxed);
        for _ in 0..inner.sq.flush(&self.nic.registry) {
            if let Some(cq) = &self.send_cq {
                cq.push(self.id, token, false);
            }
        }
        for _ in 0..inner.rq.flush(&self.nic.registry) {
            if let Some(cq) = &self.recv_cq {
                cq.push(self.id, token, true);
            }
        }
    }

    /// Places whatever already arrived and completes what the peer has
    /// finished, before the channel goes away.
    pub(super) fn drain_and_reap(&self, inner: &mut ViInner) {
        if let Some((consumed, _, _)) = self.run_channel(inner) {
            inner.faults.clear();
            self.reap_sends(inner, Some(consumed));
        }
    }

    pub(super) fn async_error(&self, code: ErrorCode, resource: ResourceCode) -> AsyncError {
        AsyncError {
            vi_id: Some(self.id),
            vi_token: self.token.load(Ordering::Relaxed),
            cq_token: 0,
            desc: None,
            op_code: 0,
            resource,
            code,
        }
    }

    #[inline(always)]
    pub(super) fn collect_notifies(&self, inner: &mut ViInner, deferred: &mut Vec<Deferred>) {
        if inner.send_notify.is_some() || inner.recv_notify.is_some() {
            self.collect_notifies_slow(inner, deferred);
        }
    }

    #[cold]
    pub(super) fn collect_notifies_slow(&self, inner: &mut ViInner, deferred: &mut Vec<Deferred>) {
        if inner.send_notify.is_some() {
            if let Some(d) = inner.sq.pop_completed() {
                deferred.push(Deferred::Notify(inner.send_notify.take().unwrap(), d));
            }
        }
        if inner.recv_notify.is_some() {
            if let Some(d) = inner.rq.pop_completed() {
                deferred.push(Deferred::Notify(inner.recv_notify.take().unwrap(), d));
            }
        }
    }

    #[inline(always)]
    pub(super) fn run_deferred(&self, deferred: Vec<Deferred>) {
        if deferred.is_empty() && self.send_cq.is_none() && self.recv_cq.is_none() {
            return;
        }
        self.run_deferred_slow(deferred);
    }

    #[cold]
    pub(super) fn run_deferred_slow(&self, deferred: Vec<Deferred>) {
        for d in deferred {
            match d {
                Deferred::Error(e) => self.nic.report_error(e),
                Deferred::Notify(f, desc) => f(desc),
            }
        }
        if let Some(cq) = &self.send_cq {
            self.nic.fire_cq_notify(cq);
        }
        if let Some(cq) = &self.recv_cq {
            self.nic.fire_cq_notify(cq);
        }
    }
}
