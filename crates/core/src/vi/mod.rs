//! A Virtual Interface: a send queue and a receive queue of descriptors,
//! bound to one peer through a transport channel.
//!
//! Posting validates the descriptor (alignment, memory handles, protection
//! tags, lengths) and hands the work to the channel; completion is noticed
//! by whoever drives progress — the application polling, a Wait, a CQ poll
//! or the NIC's progress thread — and written back into the descriptor.
//! Errors follow the reliability level: on the reliable levels any
//! descriptor or transport error breaks the connection, flushes the queues
//! and reports an asynchronous error; on the unreliable level only the
//! descriptor concerned carries the error.

mod complete;
mod done;
pub mod held;
pub mod peer;
pub mod placement;
pub mod queues;

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cq::CompletionQueue;
use crate::descriptor::{self, status, DescPtr, Descriptor, OpKind};
use crate::device::{Channel, Completion, PeerEvent};
use crate::error::{Result, ViaError};
use crate::mem::{HeldUses, PtagId};
use crate::nic::{AsyncError, ErrorCode, NicShared};
use crate::ranges::Range;
use openvia_wire::handshake::ViAttrs;
use placement::Fault;
use queues::{RecvEntry, RecvQueue, SendEntry, SendQueue, SendWait};

/// Most descriptors one work queue holds.
pub const MAX_DESCRIPTORS_PER_QUEUE: usize = 16384;

/// `VIP_SERVICE_*` reliability levels (bit values).
pub mod reliability {
    pub const UNRELIABLE: u16 = 0x01;
    pub const RELIABLE_DELIVERY: u16 = 0x02;
    pub const RELIABLE_RECEPTION: u16 = 0x04;
}

/// The connection state of a VI (`VIP_VI_STATE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ViState {
    Idle = 0,
    Connected = 1,
    ConnectPending = 2,
    Error = 3,
}

impl ViState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => ViState::Connected,
            2 => ViState::ConnectPending,
            3 => ViState::Error,
            _ => ViState::Idle,
        }
    }
}

/// The attributes of a VI (`VIP_VI_ATTRIBUTES` without QoS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViAttributes {
    pub reliability: u16,
    pub max_transfer: u64,
    pub ptag: PtagId,
    pub rdma_write: bool,
    pub rdma_read: bool,
}

impl ViAttributes {
    /// For tests: reliable delivery, 1 MiB transfers, a new ptag of
    /// `nic`, no RDMA.
    #[cfg(test)]
    pub(crate) fn reliable_for_tests(nic: &crate::nic::Nic) -> ViAttributes {
        ViAttributes {
            reliability: reliability::RELIABLE_DELIVERY,
            max_transfer: 1 << 20,
            ptag: nic.create_ptag().unwrap(),
            rdma_write: false,
            rdma_read: false,
        }
    }

    pub(crate) fn wire(&self) -> ViAttrs {
        ViAttrs {
            reliability: self.reliability,
            max_transfer: self.max_transfer,
            rdma_write: self.rdma_write,
            rdma_read: self.rdma_read,
        }
    }

    fn reliable(&self) -> bool {
        self.reliability != reliability::UNRELIABLE
    }
}

/// A one-shot handler for the next completed descriptor of a queue.
pub type DescNotify = Box<dyn FnOnce(DescPtr) + Send>;

/// Work to do after the VI lock is released (user callbacks may call back in).
pub(crate) enum Deferred {
    Error(AsyncError),
    Notify(DescNotify, DescPtr),
}

pub(crate) struct ViInner {
    pub(crate) attrs: ViAttributes,
    sq: SendQueue,
    rq: RecvQueue,
    pub(crate) channel: Option<Box<dyn Channel>>,
    scratch: Vec<Range>,
    faults: Vec<Fault>,
    send_notify: Option<DescNotify>,
    recv_notify: Option<DescNotify>,
    pub(crate) remote_attrs: Option<ViAttrs>,
}

/// Page-aligned for the same reason as `NicShared`: a fork() child's calls
/// must reach the fork check, not an unmapped neighbour page.
#[repr(align(4096))]
pub struct Vi {
    id: u64,
    pub(crate) nic: Arc<NicShared>,
    state: AtomicU8,
    pub(crate) send_cq: Option<Arc<CompletionQueue>>,
    pub(crate) recv_cq: Option<Arc<CompletionQueue>>,
    pub(crate) inner: held::ViMutex<ViInner>,
    /// A peer-to-peer connection in progress.
    pub(crate) peer: Mutex<Option<peer::PeerConnect>>,
    /// Opaque value for the C shell (its handle).
    pub token: AtomicU64,
    /// What peers push to tell our CQ pollers this VI has work (0: no CQ).
    notice_key: u32,
    /// Times this VI was driven by a poll (tests check a CQ drives only
    /// the VIs with work).
    #[cfg(test)]
    pub(crate) pokes: AtomicU64,
}

impl Vi {
    pub(crate) fn new(
        id: u64,
        nic: Arc<NicShared>,
        attrs: ViAttributes,
        send_cq: Option<Arc<CompletionQueue>>,
        recv_cq: Option<Arc<CompletionQueue>>,
        notice_key: u32,
    ) -> Self {
        Self {
            notice_key,
            #[cfg(test)]
            pokes: AtomicU64::new(0),
            id,
            nic,
            state: AtomicU8::new(ViState::Idle as u8),
            send_cq,
            recv_cq,
            inner: held::ViMutex::new(ViInner {
                attrs,
                sq: SendQueue::default(),
                rq: RecvQueue::default(),
                channel: None,
                scratch: Vec::with_capacity(8),
                faults: Vec::new(),
                send_notify: None,
                recv_notify: None,
                remote_attrs: None,
            }),
            peer: Mutex::new(None),
            token: AtomicU64::new(0),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The key peers push into our notice ring for this VI (0: none).
    pub(crate) fn notice_key(&self) -> u32 {
        self.notice_key
    }

    /// Whether our CQ polls this VI on every look (see `nic::notices`).
    pub(crate) fn set_watched(&self, on: bool) {
        if let Some(ch) = self.lock().channel.as_mut() {
            ch.set_watched(on);
        }
    }

    /// Declares a connected VI on which this side never replies (viaip:
    /// one VI per direction, the answers travel on the other): a message
    /// delivered here is acknowledged by the next call that drives the VI
    /// (the `recv_done` that finds nothing more, or its protocol timer,
    /// due at once) instead of the network device holding the
    /// acknowledgement a while for a reply to carry — a wait that here
    /// would only cost the peer its completion and this side a timer
    /// wake-up. The message is handed over first, the acknowledgement
    /// sent after. Not connected: an error.
    pub fn set_no_replies(&self, on: bool) -> Result<()> {
        self.nic.check_owner()?;
        match self.lock().channel.as_mut() {
            Some(ch) => {
                ch.set_no_replies(on);
                Ok(())
            }
            None => Err(ViaError::InvalidState("VI is not connected")),
        }
    }

    /// On a connected VI of a network device: sends a keepalive after
    /// `keepalive` without sending, and counts the peer dead after `dead`
    /// without hearing from it, instead of the device's settings
    /// (`OPENVIA_UDP_KEEPALIVE_MS`, `OPENVIA_UDP_DEAD_MS`). For an owner
    /// that learns of its peer's death another way and does not want an
    /// idle connection to wake its progress thread twenty times a second.
    /// An error where the VI is not connected, its device has no such
    /// timers, or `keepalive` is zero or not shorter than `dead`.
    pub fn set_liveness(&self, keepalive: Duration, dead: Duration) -> Result<()> {
        self.nic.check_owner()?;
        match self
            .lock()
            .channel
            .as_mut()
            .map(|ch| ch.set_liveness(keepalive, dead))
        {
            Some(true) => Ok(()),
            Some(false) => Err(ViaError::InvalidParameter("keepalive and dead-peer times")),
            None => Err(ViaError::InvalidState("VI is not connected")),
        }
    }

    /// The owning NIC's opaque token (the C shell's NIC handle).
    pub fn nic_token(&self) -> u64 {
        self.nic.token.load(Ordering::Relaxed)
    }

    pub fn state(&self) -> ViState {
        ViState::from_u8(self.state.load(Ordering::Acquire))
    }

    pub(crate) fn set_state(&self, s: ViState) {
        self.state.store(s as u8, Ordering::Release);
    }

    pub(crate) fn lock(&self) -> held::Held<'_, ViInner> {
        self.inner.lock()
    }

    pub fn attributes(&self) -> ViAttributes {
        self.lock().attrs
    }

    /// Attributes of the connected peer's VI.
    pub fn remote_attributes(&self) -> Option<ViAttrs> {
        self.lock().remote_attrs
    }

    /// (state, attributes, send queue empty, receive queue empty)
    pub fn query(&self) -> (ViState, ViAttributes, bool, bool) {
        let g = self.lock();
        (
            self.state(),
            g.attrs,
            g.sq.entries.is_empty(),
            g.rq.entries.is_empty(),
        )
    }

    /// Changes attributes; the reliability level and MaxTransferSize may
    /// only change while the VI is not connected.
    pub fn set_attributes(&self, attrs: ViAttributes) -> Result<()> {
        self.nic.check_owner()?;
        self.nic.check_vi_attrs(&attrs)?;
        let mut g = self.lock();
        if self.state() != ViState::Idle
            && (attrs.reliability != g.attrs.reliability
                || attrs.max_transfer != g.attrs.max_transfer)
        {
            return Err(ViaError::InvalidState("VI is connected"));
        }
        g.attrs = attrs;
        Ok(())
    }

    /// `VipPostSend`.
    pub fn post_send(&self, desc: *mut Descriptor, mem_handle: u32) -> Result<()> {
        self.nic.check_owner()?;
        self.nic.touch();
        let mut deferred = Vec::new();
        let mut g = self.lock();
        let ptag = g.attrs.ptag;
        let reg = &self.nic.registry;
        let (d, words) = descriptor::check_placement(reg, desc, mem_handle, ptag)
            .map_err(|_| ViaError::InvalidParameter("descriptor"))?;
        if g.sq.entries.len() >= MAX_DESCRIPTORS_PER_QUEUE {
            return Err(ViaError::Resource("send queue full"));
        }
        let state = self.state();
        if state == ViState::Idle || state == ViState::ConnectPending {
            return Err(ViaError::InvalidState("VI is not connected"));
        }
        // The regions it names; in use only if it stays queued (mem).
        let mut uses = HeldUses::with(mem_handle);
        d.reset_status();
        let inner = &mut *g;
        // Completions by the peer's count are decided only after its ring
        // was read (a refusal precedes the count): snapshot it now.
        // (Reading it costs a cache miss, so only when something waits on it.)
        let consumed_before = match inner.channel.as_ref() {
            Some(c) if inner.sq.completed < inner.sq.entries.len() => Some(c.consumed()),
            _ => Some(0),
        };
        let parsed = descriptor::parse_send(
            reg,
            &mut uses,
            d,
            words,
            ptag,
            inner.attrs.max_transfer,
            &mut inner.scratch,
        );
        let mut entry = SendEntry {
            desc: d,
            seq: 0,
            wait: SendWait::Now,
            op_status: status::OP_SEND,
            error: 0,
            length: 0,
            immediate: false,
            read_ranges: Vec::new(),
            read_arrived: false,
            uses,
        };
        match parsed {
            Ok(wr) => {
                entry.op_status = match wr.op {
                    OpKind::Send => status::OP_SEND,
                    OpKind::RdmaWrite => status::OP_RDMA_WRITE,
                    OpKind::RdmaRead => status::OP_RDMA_READ,
                };
                entry.length = wr.total_len as u32;
                entry.immediate = wr.immediate.is_some();
                let remote = inner.remote_attrs.unwrap_or_default();
                let rdma_refused = (wr.op == OpKind::RdmaRead
                    && (!inner.attrs.reliable() || !remote.rdma_read))
                    || (wr.op == OpKind::RdmaWrite && !remote.rdma_write);
                if rdma_refused {
                    entry.error = status::RDMA_PROT_ERROR;
                } else if state == ViState::Error {
                    entry.error = status::DESC_FLUSHED_ERROR;
                } else if let Some(ch) = inner.channel.as_mut() {
                    let track = inner.attrs.reliability == reliability::RELIABLE_RECEPTION;
                    match ch.post(&wr, &inner.scratch, track) {
                        Ok((seq, completion)) => {
                            entry.seq = seq;
                            entry.wait = match completion {
                                Completion::ReadDone => SendWait::ReadDone,
                                _ if inner.attrs.reliability == reliability::RELIABLE_RECEPTION => {
                                    SendWait::Consumed
                                }
                                Completion::Consumed => SendWait::Consumed,
                                Completion::Sent => SendWait::Sent,
                            };
                            if wr.op == OpKind::RdmaRead {
                                entry.read_ranges = inner.scratch.clone();
                            }
                        }
                        Err(_) => {
                            entry.error = status::TRANSPORT_ERROR;
                            inner.faults.push(Fault::Transport);
                        }
                    }
                } else {
                    entry.error = status::DESC_FLUSHED_ERROR;
                }
            }
            Err(bits) => {
                entry.error = bits;
                if bits != status::DESC_FLUSHED_ERROR {
                    inner.faults.push(Fault::Transport);
                }
            }
        }
        let local_error = entry.error != 0 && entry.error != status::DESC_FLUSHED_ERROR;
        // The common case: nothing else outstanding and this send already
        // complete (its bytes are in the ring). Complete it without the
        // general walk.
        if inner.sq.completed == inner.sq.entries.len()
            && entry.error == 0
            && entry.wait == SendWait::Sent
            && inner
                .channel
                .as_ref()
                .is_some_and(|c| c.sent() >= entry.seq)
        {
            entry.complete(reg, entry.length, entry.op_status);
            inner.sq.entries.push_back(entry);
            inner.sq.completed += 1;
            if let Some(cq) = &self.send_cq {
                cq.push(self.id, self.token.load(Ordering::Relaxed), false);
            }
        } else {
            // Queued past this critical section: its memory is in use.
            entry.uses.commit(reg);
            inner.sq.entries.push_back(entry);
            self.reap_sends(inner, consumed_before);
        }
        if local_error && inner.attrs.reliable() && state == ViState::Connected {
            self.fail(inner, ErrorCode::PostDesc, true, &mut deferred);
        } else {
            inner.faults.clear();
        }
        self.collect_notifies(inner, &mut deferred);
        drop(g);
        self.run_deferred(deferred);
        Ok(())
    }

    /// `VipPostRecv`.
    pub fn post_recv(&self, desc: *mut Descriptor, mem_handle: u32) -> Result<()> {
        self.nic.check_owner()?;
        self.nic.touch();
        let mut deferred = Vec::new();
        let mut g = self.lock();
        let ptag = g.attrs.ptag;
        let reg = &self.nic.registry;
        let (d, words) = descriptor::check_placement(reg, desc, mem_handle, ptag)
            .map_err(|_| ViaError::InvalidParameter("descriptor"))?;
        if g.rq.entries.len() >= MAX_DESCRIPTORS_PER_QUEUE {
            return Err(ViaError::Resource("receive queue full"));
        }
        let mut uses = HeldUses::with(mem_handle);
        d.reset_status();
        let inner = &mut *g;
        let mut ranges = inner.rq.take_spare();
        let state = self.state();
        match descriptor::parse_recv(reg, &mut uses, d, words, ptag, &mut ranges) {
            Ok(capacity) if state != ViState::Error => {
                uses.commit(reg);
                inner.rq.entries.push_back(RecvEntry {
                    desc: d,
                    ranges,
                    capacity,
                    error: 0,
                    uses,
                });
                if inner.channel.as_ref().is_some_and(|c| c.awaits_recv()) {
                    self.progress_locked(inner, &mut deferred);
                }
            }
            res => {
                let bits = match res {
                    Err(b) => b,
                    Ok(_) => status::DESC_FLUSHED_ERROR,
                };
                // It completes in turn, behind receives posted earlier;
                // only the region it lies in stays in use.
                uses.release_after(reg, 1);
                uses.commit(reg);
                inner.rq.entries.push_back(RecvEntry {
                    desc: d,
                    ranges,
                    capacity: 0,
                    error: bits,
                    uses,
                });
                inner.rq.refused += 1;
                let settled = inner.rq.settle_errors(reg);
                if let Some(cq) = &self.recv_cq {
                    for _ in 0..settled {
                        cq.push(self.id, self.token.load(Ordering::Relaxed), true);
                    }
                }
                if bits != status::DESC_FLUSHED_ERROR
                    && inner.attrs.reliable()
                    && state == ViState::Connected
                {
                    self.fail(inner, ErrorCode::PostDesc, true, &mut deferred);
                }
            }
        }
        self.collect_notifies(inner, &mut deferred);
        drop(g);
        self.run_deferred(deferred);
        Ok(())
    }

    /// One round of progress without blocking; used by pollers, CQs and the
    /// progress thread. `only_if_free`: give up if another thread holds the
    /// lock. Returns whether anything completed or moved.
    pub(crate) fn poke(&self, only_if_free: bool) -> bool {
        self.poke_with(only_if_free, None)
    }

    /// [`Self::poke`] for the progress thread, which drives a VI also
    /// because one of its protocol timers may be due: if one is by `now`
    /// (CLOCK_MONOTONIC ns), the channel runs it even if nothing came. (An
    /// idle poll runs timers only every so often, for a program that polls
    /// back to back: driven that way, a due keepalive kept the thread
    /// looping, sixteen polls a timer.)
    pub(crate) fn poke_timers(&self, only_if_free: bool, now: u64) -> bool {
        self.poke_with(only_if_free, Some(now))
    }

    fn poke_with(&self, only_if_free: bool, timers_by: Option<u64>) -> bool {
        #[cfg(test)]
        self.pokes.fetch_add(1, Ordering::Relaxed);
        let mut deferred = Vec::new();
        let mut g = if only_if_free {
            match self.inner.try_lock() {
                Some(g) => g,
                None => return false,
            }
        } else {
            self.lock()
        };
        let inner = &mut *g;
        if let (Some(now), Some(ch)) = (timers_by, inner.channel.as_mut()) {
            if ch.timer_deadline_ns().is_some_and(|t| t <= now) {
                ch.clock_next_progress();
            }
        }
        // A plain message first, the way RecvDone takes it (a CQ poll's
        // common case); then whatever else is there.
        let simple = self.complete_simple_recv(inner);
        let did = simple
            | match inner.channel.as_ref() {
                Some(ch) if ch.has_work() || inner.sq.completed < inner.sq.entries.len() => {
                    self.progress_locked(inner, &mut deferred)
                }
                _ => false,
            };
        self.collect_notifies(inner, &mut deferred);
        drop(g);
        let any = did || !deferred.is_empty();
        self.run_deferred(deferred);
        any
    }

    /// `VipSendNotify`: `f` runs once, with the next completed send descriptor
    /// (which it then owns: it is dequeued).
    pub fn send_notify(&self, f: DescNotify) -> Result<()> {
        self.set_notify(false, f, true)
    }

    /// `VipRecvNotify`.
    pub fn recv_notify(&self, f: DescNotify) -> Result<()> {
        self.set_notify(true, f, true)
    }

    /// `recv_notify` for a handler that installs its successor: the
    /// thread running it is driving this VI already (the progress thread,
    /// or the owner's), so the progress thread is not woken to look for
    /// the new handler, which would cost a wake-up per message.
    pub fn rearm_recv_notify(&self, f: DescNotify) -> Result<()> {
        self.set_notify(true, f, false)
    }

    fn set_notify(&self, recv: bool, f: DescNotify, wake: bool) -> Result<()> {
        self.nic.check_owner()?;
        let mut deferred = Vec::new();
        let mut g = self.lock();
        if recv {
            g.recv_notify = Some(f);
        } else {
            g.send_notify = Some(f);
        }
        self.collect_notifies(&mut g, &mut deferred);
        drop(g);
        if wake {
            self.nic.wake_progress();
        }
        self.run_deferred(deferred);
        Ok(())
    }

    pub(crate) fn has_notify(&self) -> bool {
        match self.inner.try_lock() {
            Some(g) => g.send_notify.is_some() || g.recv_notify.is_some(),
            None => false,
        }
    }

    /// Reacts to what the peer said on the liveness channel.
    pub(crate) fn on_peer_event(&self, ev: PeerEvent) {
        if ev == PeerEvent::Quiet {
            return;
        }
        let mut deferred = Vec::new();
        let mut g = self.lock();
        if self.state() == ViState::Connected {
            self.fail(&mut g, ErrorCode::ConnLost, false, &mut deferred);
        }
        self.collect_notifies(&mut g, &mut deferred);
        drop(g);
        self.run_deferred(deferred);
    }

    /// Reads the liveness channel (progress thread, after epoll said so).
    pub(crate) fn read_peer_event(&self) {
        let ev = {
            let mut g = self.lock();
            match g.channel.as_mut() {
                Some(ch) => ch.peer_event(),
                None => PeerEvent::Quiet,
            }
        };
        self.on_peer_event(ev);
    }

    /// Attaches a connected channel (connection setup).
    pub(crate) fn attach_channel(&self, ch: Box<dyn Channel>, remote: ViAttrs) -> Result<()> {
        let fd = ch.liveness_fd();
        let mut deferred = Vec::new();
        {
            let mut g = self.lock();
            g.remote_attrs = Some(remote);
            g.channel = Some(ch);
            self.set_state(ViState::Connected);
            // Receives posted before the connection may already have data.
            self.progress_locked(&mut g, &mut deferred);
        }
        self.nic.watch(fd, self.id);
        self.run_deferred(deferred);
        Ok(())
    }

    /// For a program that sleeps in its own `poll` rather than in a Wait:
    /// the descriptor that becomes readable when the peer has sent
    /// something, and when the connection's next protocol timer is due
    /// (CLOCK_MONOTONIC ns; an acknowledgement held for a reply, a
    /// retransmission). Driving the VI (`send_done`, `recv_done`) once
    /// either happens keeps it going. None when not connected.
    pub fn wait_hint(&self) -> Option<(std::os::fd::RawFd, Option<u64>)> {
        let g = self.lock();
        let ch = g.channel.as_ref()?;
        Some((ch.liveness_fd(), ch.timer_deadline_ns()))
    }

    /// `VipDisconnect`: tells the peer, flushes both queues, back to Idle.
    pub fn disconnect(&self) -> Result<()> {
        self.nic.check_owner()?;
        self.disconnect_internal()
    }

    pub(crate) fn disconnect_internal(&self) -> Result<()> {
        *self.peer.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let mut g = self.lock();
        let inner = &mut *g;
        self.close_channel(inner, false, true);
        inner.remote_attrs = None;
        self.set_state(ViState::Idle);
        drop(g);
        self.nic.doorbell.ring_local();
        Ok(())
    }

    /// Lets go of the memory named by descriptors still queued, which will
    /// never complete (the VI is destroyed).
    pub(crate) fn abandon_posted(&self) {
        let mut g = self.lock();
        let inner = &mut *g;
        inner.sq.abandon(&self.nic.registry);
        inner.rq.abandon(&self.nic.registry);
    }

    /// Used by the connection manager to check a VI can be connected.
    pub(crate) fn ensure_idle(&self) -> Result<()> {
        match self.state() {
            ViState::Idle => Ok(()),
            _ => Err(ViaError::InvalidState("VI is not idle")),
        }
    }
}

impl Drop for Vi {
    fn drop(&mut self) {
        let inner = self.inner.get_mut();
        inner.sq.abandon(&self.nic.registry);
        inner.rq.abandon(&self.nic.registry);
    }
}
