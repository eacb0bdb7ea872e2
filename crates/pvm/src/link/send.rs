//! The sending half of a link: items go out as fragments in registered
//! send slots, at most the window's worth in flight. A one-fragment item
//! is posted by the calling thread when the window has room; longer ones
//! (and anything behind a queue) go to the link's sender thread, in order,
//! so the daemon's poll loop never waits for the network.

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use openvia_core::slots::Slots;
use openvia_core::vi::Vi;
use openvia_core::ViaError;

use std::time::Duration;

use super::{status_ok, LAST_FRAGMENT};
use crate::pool::Body;

/// What the sender thread is asked to do.
pub(super) enum Outgoing {
    /// An encoded envelope and frame.
    Bytes(Vec<u8>),
    /// A message: envelope and header, then the body read from where it
    /// lies (pool pages), so it is copied once, into the fragments.
    Msg { head: Vec<u8>, body: Body },
    /// Close once what is queued has gone out.
    Close,
}

impl Outgoing {
    pub(super) fn parts(&self) -> [&[u8]; 2] {
        match self {
            Outgoing::Bytes(b) => [b, &[]],
            Outgoing::Msg { head, body } => [head, body],
            Outgoing::Close => [&[], &[]],
        }
    }
}

/// Copies `out.len()` bytes of the concatenation `parts` from offset `at`.
pub(super) fn copy_span(parts: [&[u8]; 2], at: usize, out: &mut [u8]) {
    let (a, b) = (parts[0], parts[1]);
    let mut done = 0;
    if at < a.len() {
        let n = (a.len() - at).min(out.len());
        out[..n].copy_from_slice(&a[at..at + n]);
        done = n;
    }
    if done < out.len() {
        let from = at + done - a.len();
        let n = out.len() - done;
        out[done..].copy_from_slice(&b[from..from + n]);
    }
}

/// Free send slots, and items handed to the sender thread not yet posted.
pub(super) struct SendState {
    pub(super) free: Vec<usize>,
    pub(super) queued: usize,
}

/// The sending half of a link, shared by the caller (small items posted
/// inline) and the sender thread (the rest, in order).
pub(super) struct SendSide {
    pub(super) vi: Arc<Vi>,
    pub(super) slots: Slots,
    pub(super) state: Mutex<SendState>,
}

impl SendSide {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, SendState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes completed sends back into the free list, without waiting.
    pub(super) fn reap(&self, st: &mut SendState) -> Result<(), String> {
        loop {
            match self.vi.send_done() {
                Ok(d) => {
                    status_ok(d)?;
                    st.free.push(self.slots.index_of(d));
                }
                Err(ViaError::NotDone) => return Ok(()),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Waits a little for a send to complete (the lock not held).
    pub(super) fn wait_one(&self, timeout: Duration) -> Result<(), String> {
        match self.vi.send_wait(Some(timeout)) {
            Ok(d) => {
                status_ok(d)?;
                self.lock().free.push(self.slots.index_of(d));
                Ok(())
            }
            Err(ViaError::Timeout) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Copies bytes `at..at + len` of `parts` into a free slot and posts
    /// it; the caller checked a slot is free.
    pub(super) fn post_fragment(
        &self,
        st: &mut SendState,
        parts: [&[u8]; 2],
        at: usize,
        len: usize,
        last: bool,
    ) -> Result<(), String> {
        let i = st.free.pop().ok_or("no send slot")?;
        // SAFETY: slot i's buffer is ours (not posted) and `frag` long.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.slots.data(i), len) };
        copy_span(parts, at, dst);
        self.slots
            .prepare(i, len, Some(if last { LAST_FRAGMENT } else { 0 }));
        self.vi
            .post_send(self.slots.desc(i), self.slots.desc_handle())
            .map_err(|e| e.to_string())
    }
}

/// Sends each queued item as fragments, at most `window` in flight.
pub(super) fn send_loop(side: &SendSide, rx: Receiver<Outgoing>) -> Result<(), String> {
    let window = side.slots.len();
    while let Ok(out) = rx.recv() {
        if matches!(out, Outgoing::Close) {
            // Close: let the window drain (bounded), then disconnect.
            let end = std::time::Instant::now() + Duration::from_secs(2);
            loop {
                let done = {
                    let mut st = side.lock();
                    side.reap(&mut st).is_err() || st.free.len() == window
                };
                if done || std::time::Instant::now() >= end {
                    break;
                }
                if side.wait_one(Duration::from_millis(100)).is_err() {
                    break;
                }
            }
            let _ = side.vi.disconnect();
            return Ok(());
        }
        let parts = out.parts();
        let total = parts[0].len() + parts[1].len();
        let frag = side.slots.size();
        let n = total.div_ceil(frag);
        for k in 0..n {
            loop {
                let mut st = side.lock();
                side.reap(&mut st)?;
                if !st.free.is_empty() {
                    let at = k * frag;
                    side.post_fragment(&mut st, parts, at, (total - at).min(frag), k + 1 == n)?;
                    break;
                }
                drop(st);
                // The caller may reap the completion we wait for: wake up
                // now and then to look at the free list again.
                side.wait_one(Duration::from_millis(1))?;
            }
        }
        side.lock().queued -= 1;
    }
    Ok(())
}
