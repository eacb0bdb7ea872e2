//! The receiving half of a link: a receive notify handler that
//! reassembles fragments into frames for the daemon's loop, or writes a
//! message's body straight into the pool, on whichever thread drove the
//! VI. No thread of its own, so a message costs no hand-off.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use openvia_core::descriptor::DescPtr;
use openvia_core::nic::Nic;
use openvia_core::slots::Slots;
use openvia_core::vi::Vi;

use super::{parse, status_ok, LinkEvent, WakeUp, ENVELOPE, LAST_FRAGMENT, MSG_HEADER};
use crate::pool::inbound::{Inbound, InboundRun};

/// A frame being received: bytes for the daemon's loop, or a message
/// being written into the pool.
pub(super) enum Assembly {
    Idle,
    Bytes(Vec<u8>),
    Pool(InboundRun),
}

/// The message header at the start of a first fragment, if it is a
/// message for this host: (src, dst, tag, ctx, enc, body length).
pub(super) fn message_header(first: &[u8], me: u32) -> Option<(i32, i32, i32, i32, i32, usize)> {
    let h = first.get(..MSG_HEADER)?;
    let int = |at: usize| i32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let frame_len = int(8) as u32 as usize;
    let body_len = int(33) as u32 as usize;
    if int(4) as u32 != me || h[12] != crate::frame::KIND_MSG || frame_len != 1 + 20 + 4 + body_len
    {
        return None;
    }
    Some((int(13), int(17), int(21), int(25), int(29), body_len))
}

/// The receiving half of a link. No thread of its own: a receive notify
/// handler reassembles each fragment on whichever thread drove the VI
/// when it completed (the NIC's progress thread, woken by the datagram,
/// or a thread posting on the same VI), so a message costs no thread
/// hand-off between the device and the pool: the receiver is woken once,
/// when its message is whole (seed 003).
pub(super) struct RecvSide {
    /// Weak: the handler lives in the VI, and must not keep it alive.
    pub(super) vi: std::sync::Weak<Vi>,
    /// Keeps the NIC (and the registration of `slots`) alive.
    pub(super) _nic: Nic,
    pub(super) slots: Slots,
    pub(super) via: u32,
    pub(super) waker: Arc<dyn WakeUp>,
    pub(super) inbound: Option<Arc<Inbound>>,
    pub(super) state: Mutex<RecvState>,
}

// SAFETY: `slots` is plain registered heap memory (see `Slots`); its
// receive buffers are touched only under `state`'s lock, by one handler
// run at a time.
unsafe impl Send for RecvSide {}
unsafe impl Sync for RecvSide {}

pub(super) struct RecvState {
    /// Completions handed to us while a handler run was going on.
    pub(super) pending: std::collections::VecDeque<DescPtr>,
    /// A handler run is draining `pending` (runs do not nest).
    pub(super) running: bool,
    /// Failed or closed: nothing more is taken.
    pub(super) down: bool,
    pub(super) assembly: Assembly,
    pub(super) events: Sender<LinkEvent>,
}

impl RecvSide {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, RecvState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the VI for the next completed receive (`first`: the handler
    /// is new, so the progress thread must learn of it).
    pub(super) fn arm(self: &Arc<Self>, first: bool) -> Result<(), String> {
        let Some(vi) = self.vi.upgrade() else {
            return Err("link closed".into());
        };
        let me = self.clone();
        let f: openvia_core::vi::DescNotify = Box::new(move |d| me.on_recv(d));
        match first {
            true => vi.recv_notify(f),
            false => vi.rearm_recv_notify(f),
        }
        .map_err(|e| e.to_string())
    }

    /// The notify handler: queues the completion, and unless a run is
    /// already going on (re-arming below can fire at once), takes every
    /// queued one in order.
    pub(super) fn on_recv(self: Arc<Self>, d: DescPtr) {
        {
            let mut st = self.lock();
            if st.down {
                return;
            }
            st.pending.push_back(d);
            if st.running {
                return;
            }
            st.running = true;
        }
        loop {
            let mut st = self.lock();
            let next = match (st.down, st.pending.pop_front()) {
                (false, Some(d)) => d,
                _ => {
                    st.running = false;
                    return;
                }
            };
            let r = self.take(&mut st, next);
            if let Err(why) = r.and_then(|()| {
                drop(st);
                self.arm(false)
            }) {
                self.fail(why);
                return;
            }
        }
    }

    /// Goes down once: gives up a message half written into the pool
    /// (never delivered) and tells the owner.
    pub(super) fn fail(&self, why: String) {
        let mut st = self.lock();
        st.running = false;
        if std::mem::replace(&mut st.down, true) {
            return;
        }
        self.abandon(&mut st);
        let _ = st.events.send(LinkEvent::Down { via: self.via, why });
        drop(st);
        self.waker.wake();
    }

    pub(super) fn abandon(&self, st: &mut RecvState) {
        if let (Assembly::Pool(run), Some(inb)) = (
            std::mem::replace(&mut st.assembly, Assembly::Idle),
            self.inbound.as_deref(),
        ) {
            inb.abandon(run);
        }
    }

    /// Closed by its owner: no handler run goes on past this (one going
    /// on has finished its fragment: it holds the lock while it works).
    pub(super) fn quiesce(&self) {
        let mut st = self.lock();
        st.down = true;
        self.abandon(&mut st);
    }

    /// One completed receive: its bytes go into the frame or message being
    /// assembled, its slot is posted again, and a last fragment hands the
    /// whole over (one wake-up of its receiver).
    pub(super) fn take(&self, st: &mut RecvState, d: DescPtr) -> Result<(), String> {
        let (len, imm) = status_ok(d)?;
        crate::trace::mark("link.fragment", len as usize);
        let slots = &self.slots;
        let i = slots.index_of(d);
        let len = (len as usize).min(slots.size());
        // SAFETY: the completed receive wrote `len` bytes into slot i,
        // which is not posted again until we are done with them.
        let data = unsafe { std::slice::from_raw_parts(slots.data(i), len) };
        let inbound = self.inbound.as_deref();
        if matches!(st.assembly, Assembly::Idle) {
            // The frame's length is known from its first fragment: one
            // allocation instead of a doubling per fragment.
            let announced = data
                .get(8..12)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
            let cap = (ENVELOPE + 4 + announced).min(16 << 20);
            st.assembly = Assembly::Bytes(Vec::with_capacity(cap));
            if let (Some(inb), Some(me)) = (inbound, data.get(4..8)) {
                let me = u32::from_le_bytes([me[0], me[1], me[2], me[3]]);
                if let Some((src, dst, tag, ctx, enc, n)) = message_header(data, me) {
                    if let Some(mut run) = inb.begin(src, dst, tag, ctx, enc, n) {
                        if !inb.write(&mut run, &data[MSG_HEADER..]) {
                            inb.abandon(run);
                            return Err("message longer than announced".into());
                        }
                        st.assembly = Assembly::Pool(run);
                    }
                }
            }
            if let Assembly::Bytes(b) = &mut st.assembly {
                b.extend_from_slice(data);
            }
        } else {
            match &mut st.assembly {
                Assembly::Bytes(b) => b.extend_from_slice(data),
                Assembly::Pool(run) => {
                    let inb = inbound.ok_or("pool assembly without inbound")?;
                    if !inb.write(run, data) {
                        return Err("message longer than announced".into());
                    }
                }
                Assembly::Idle => unreachable!("handled above"),
            }
        }
        slots.prepare(i, slots.size(), None);
        let vi = self.vi.upgrade().ok_or("link closed")?;
        vi.post_recv(slots.desc(i), slots.desc_handle())
            .map_err(|e| e.to_string())?;
        if imm & LAST_FRAGMENT == 0 {
            return Ok(());
        }
        match std::mem::replace(&mut st.assembly, Assembly::Idle) {
            Assembly::Pool(run) => {
                let inb = inbound.ok_or("pool assembly without inbound")?;
                crate::trace::mark("link.delivered", 0);
                inb.finish(run);
                self.waker.delivered();
            }
            Assembly::Bytes(bytes) => {
                let (src, dst, frame) = parse(&bytes).ok_or("malformed frame from peer daemon")?;
                let ev = LinkEvent::Frame {
                    via: self.via,
                    src,
                    dst,
                    frame,
                };
                st.events.send(ev).map_err(|_| "daemon gone")?;
                self.waker.wake();
                crate::trace::mark("link.to_loop", 0);
            }
            Assembly::Idle => {}
        }
        Ok(())
    }
}
