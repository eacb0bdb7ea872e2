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
            if inner.attrs.reliable() && self.state() == ViState::Connected {
                self.settle_before_break(inner);
            }
            self.handle_faults(inner, deferred);
        }
        did
    }

    /// Completes the sends the peer took before the fault that is about to
    /// break the connection (see `Channel::settle_before_break`).
    fn settle_before_break(&self, inner: &mut ViInner) {
        let Some((ch, mut place)) = self.placement(inner) else {
            return;
        };
        if let Some(consumed) = ch.settle_before_break(&mut place) {
            self.reap_sends(inner, Some(consumed));
        }
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
        // The peer's count lives on a line it writes: skip the miss when no
        // send waits on it.
        let waiting = inner.sq.completed < inner.sq.entries.len();
        let (ch, mut place) = self.placement(inner)?;
        let consumed = if waiting { ch.consumed() } else { 0 };
        let result = ch.progress(&mut place);
        Some((consumed, result, place.completed_any))
    }

    /// The channel and what it may place into (the VI's queues), borrowed
    /// side by side from `inner`.
    fn placement<'a>(
        &'a self,
        inner: &'a mut ViInner,
    ) -> Option<(&'a mut Box<dyn crate::device::Channel>, Placement<'a>)> {
        let ch = inner.channel.as_mut()?;
        let place = Placement {
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
        Some((ch, place))
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

#[cfg(test)]
mod tests {
    //! A channel whose peer counts our message and then sends something
    //! faulty, both between the VI's read of the count and its look at
    //! what arrived: the send the peer took must complete with success,
    //! not be flushed by the break.

    use std::os::fd::{AsRawFd, OwnedFd};
    use std::sync::Arc;

    use openvia_wire::handshake::ViAttrs;

    use crate::descriptor::{status, DataSegment, Descriptor, WorkRequest};
    use crate::device::{Channel, ChannelFailed, Completion, PeerEvent};
    use crate::nic::Nic;
    use crate::ranges::Range;
    use crate::vi::placement::{Fault, Placement};
    use crate::vi::{reliability, Vi, ViAttributes, ViState};

    struct CountsThenErrs {
        posted: bool,
        consumed: u64,
        settles: bool,
        quiet: OwnedFd,
    }

    impl Channel for CountsThenErrs {
        fn post(
            &mut self,
            _wr: &WorkRequest,
            _local: &[Range],
            _track: bool,
        ) -> Result<(u64, Completion), ChannelFailed> {
            self.posted = true;
            Ok((1, Completion::Consumed))
        }
        fn progress(&mut self, place: &mut Placement) -> Result<bool, ChannelFailed> {
            if !self.posted || self.consumed == 1 {
                return Ok(false);
            }
            // The peer took message 1, then wrote an RDMA write we refuse.
            self.consumed = 1;
            place.faults.push(Fault::RdmaWriteProtection);
            Ok(true)
        }
        fn has_work(&self) -> bool {
            true
        }
        fn sent(&self) -> u64 {
            1
        }
        fn consumed(&self) -> u64 {
            self.consumed
        }
        fn settle_before_break(&mut self, _place: &mut Placement) -> Option<u64> {
            self.settles.then_some(self.consumed)
        }
        fn remote_attrs(&self) -> ViAttrs {
            ViAttrs {
                reliability: reliability::RELIABLE_RECEPTION,
                max_transfer: 1 << 20,
                rdma_write: false,
                rdma_read: false,
            }
        }
        fn liveness_fd(&self) -> std::os::fd::RawFd {
            self.quiet.as_raw_fd()
        }
        fn peer_event(&mut self) -> PeerEvent {
            PeerEvent::Quiet
        }
        fn close(&mut self, _broken: bool) {}
    }

    /// The status the send ends with, on a channel that settles (the
    /// shared-memory device) or not (the count read before stands).
    fn send_status(settles: bool) -> u32 {
        let nic = Nic::open(None).unwrap();
        let attrs = ViAttributes {
            reliability: reliability::RELIABLE_RECEPTION,
            max_transfer: 1 << 20,
            ptag: nic.create_ptag().unwrap(),
            rdma_write: false,
            rdma_read: false,
        };
        let vi: Arc<Vi> = nic.create_vi(attrs, None, None).unwrap();
        let mut mem = vec![0u8; 256];
        let base = (mem.as_mut_ptr() as usize).next_multiple_of(64);
        let handle = nic
            .register_mem(base as u64, 128, attrs.ptag, false, false)
            .unwrap();
        let d = base as *mut Descriptor;
        // SAFETY: the first 64 bytes of the registered buffer, not posted.
        unsafe {
            std::ptr::write_bytes(d as *mut u8, 0, 64);
            (*d).cs.seg_count = 1;
            (*d).ds[0] = DataSegment {
                data: (base + 64) as u64,
                handle,
                length: 8,
            };
        }
        // SAFETY: a plain eventfd nobody writes: the channel never wakes.
        let quiet =
            unsafe { std::os::fd::FromRawFd::from_raw_fd(libc::eventfd(0, libc::EFD_CLOEXEC)) };
        let ch = CountsThenErrs {
            posted: false,
            consumed: 0,
            settles,
            quiet,
        };
        let remote = ch.remote_attrs();
        vi.attach_channel(Box::new(ch), remote).unwrap();
        vi.post_send(d, handle).unwrap();
        let done = vi
            .send_wait(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        assert_eq!(done.0, d);
        assert_eq!(vi.state(), ViState::Error);
        // SAFETY: the descriptor completed.
        let st = unsafe { (*d).cs.status };
        drop(mem);
        st
    }

    #[test]
    fn a_send_taken_before_the_peers_fault_completes() {
        let st = send_status(true);
        assert_eq!(st & status::ERROR_MASK, 0, "status {st:#x}");
        assert_ne!(st & status::DONE, 0);
    }

    /// Without a settled count the break flushes the send (why the
    /// shared-memory device settles).
    #[test]
    fn without_a_settled_count_the_send_is_flushed() {
        let st = send_status(false);
        assert_ne!(st & status::DESC_FLUSHED_ERROR, 0, "status {st:#x}");
    }
}
