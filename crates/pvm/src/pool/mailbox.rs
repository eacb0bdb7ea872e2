//! Per-task message-head rings in the pool. A sender that knows the
//! receiver's slot appends a head (source, tag, context, encoding, page run)
//! under the pool lock and rings the receiver's doorbell; the receiver
//! alone advances the head, so reading needs no lock. Heads from one
//! sender reach one receiver in the order sent, as PVM requires.
//!
//! The doorbell is the receiver's only sleep: the pvmd rings it too when it
//! writes to the task's socket, so one futex covers both paths. The
//! receiver spins briefly before sleeping, since on an idle CPU the reply
//! usually comes within microseconds.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

use std::time::{Duration, Instant};

use super::{Pool, RING};
use openvia_core::sys::futex;

/// A message head as sender and receiver see it. `start` is u32::MAX for
/// an empty body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Desc {
    pub src: i32,
    pub tag: i32,
    pub ctx: i32,
    pub enc: i32,
    pub start: u32,
    pub pages: u32,
    pub len: u64,
}

/// Why a head could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The slot no longer belongs to that tid: the task is gone.
    NoTask,
    /// The ring (or the run's hold count) is full; try again later.
    Full,
}

impl Pool {
    /// Queues `d` on `slot`, which must still belong to `tid`. A body run
    /// gains a hold of the receiver, so it outlives the sender.
    pub fn post(&self, slot: usize, tid: i32, d: &Desc) -> Result<(), PostError> {
        let s = self.slot(slot);
        {
            let g = self.lock();
            if s.tid.load(Relaxed) != tid {
                return Err(PostError::NoTask);
            }
            let tail = s.tail.load(Relaxed);
            if tail.wrapping_sub(s.head.load(Acquire)) as usize >= RING {
                return Err(PostError::Full);
            }
            if d.start != u32::MAX && !self.add_hold(&g, d.start, slot) {
                return Err(PostError::Full);
            }
            let e = &s.ring[tail as usize % RING];
            e.src.store(d.src, Relaxed);
            e.tag.store(d.tag, Relaxed);
            e.ctx.store(d.ctx, Relaxed);
            e.enc.store(d.enc, Relaxed);
            e.start.store(d.start, Relaxed);
            e.pages.store(d.pages, Relaxed);
            e.len.store(d.len, Relaxed);
            s.tail.store(tail.wrapping_add(1), Release);
        }
        self.ring_bell(slot);
        Ok(())
    }

    /// Wakes the receiver of `slot` (after a ring post or a socket write).
    pub fn ring_bell(&self, slot: usize) {
        let s = self.slot(slot);
        s.bell.fetch_add(1, SeqCst);
        if s.watchers.load(SeqCst) != 0 {
            // The receiver and a watcher may both sleep on the bell.
            futex::wake_all(&s.bell);
        } else if s.sleeping.load(SeqCst) != 0 {
            futex::wake_one(&s.bell);
        }
    }

    /// A thread of the slot's task other than the receiver starts (true)
    /// or stops sleeping on the bell through [`Pool::watch_bell`].
    pub fn set_watcher(&self, slot: usize, on: bool) {
        let w = &self.slot(slot).watchers;
        if on {
            w.fetch_add(1, SeqCst);
        } else {
            // Never below zero: the pvmd may have reset a reused slot.
            let _ = w.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1));
        }
    }

    /// A watcher's sleep: returns once the bell moved past `seen` (or
    /// spuriously; the caller compares).
    pub fn watch_bell(&self, slot: usize, seen: u32) {
        let s = self.slot(slot);
        if s.bell.load(SeqCst) == seen {
            futex::wait(&s.bell, seen, None);
        }
    }

    /// Whether heads wait in the slot's ring.
    pub fn has_heads(&self, slot: usize) -> bool {
        let s = self.slot(slot);
        s.head.load(Relaxed) != s.tail.load(Acquire)
    }

    /// The pvmd wrote to the task's socket.
    pub fn ring_sock_bell(&self, slot: usize) {
        self.slot(slot).sock_bell.fetch_add(1, SeqCst);
        self.ring_bell(slot);
    }

    /// The next head queued to `slot` (the receiver's own call). Its run
    /// hold now belongs to the caller.
    pub fn take(&self, slot: usize) -> Option<Desc> {
        let s = self.slot(slot);
        let head = s.head.load(Relaxed);
        let tail = s.tail.load(Acquire);
        if head == tail || tail.wrapping_sub(head) as usize > RING {
            return None;
        }
        let e = &s.ring[head as usize % RING];
        let d = Desc {
            src: e.src.load(Relaxed),
            tag: e.tag.load(Relaxed),
            ctx: e.ctx.load(Relaxed),
            enc: e.enc.load(Relaxed),
            start: e.start.load(Relaxed),
            pages: e.pages.load(Relaxed),
            len: e.len.load(Relaxed),
        };
        s.head.store(head.wrapping_add(1), Release);
        Some(d)
    }

    pub fn bell(&self, slot: usize) -> u32 {
        self.slot(slot).bell.load(SeqCst)
    }

    pub fn sock_bell(&self, slot: usize) -> u32 {
        self.slot(slot).sock_bell.load(SeqCst)
    }

    fn spin_window(&self, remote: bool) -> std::sync::MutexGuard<'_, crate::spin::Window> {
        match remote {
            false => &self.spin,
            true => &self.remote_spin,
        }
        .lock()
        .unwrap_or_else(|e| e.into_inner())
    }

    /// The spin of a wait that is over (`caught`: the bell moved before it
    /// slept) adapts its window. A wait for a message from another host
    /// (`remote`) grows its window back whenever the message came within
    /// the limit (`Window::settle`): such a message takes a round trip
    /// between hosts (50–100 µs on the 2-vCPU box), longer than a one-host
    /// window, and with the one-host rule a few late ones shrank the
    /// window to nothing, so each message then cost the receiver a futex
    /// wake-up (docs/pvm.md, "Host links").
    fn settle(&self, remote: bool, spin: &crate::spin::Spin, caught: bool) {
        let mut w = self.spin_window(remote);
        match remote {
            true => w.settle(spin),
            false => w.settle_caught(caught),
        }
    }

    /// Waits until the doorbell moves past `seen` or `deadline` passes;
    /// `remote`: the message waited for comes from a task of another host.
    pub fn wait_bell(&self, slot: usize, seen: u32, deadline: Option<Instant>, remote: bool) {
        let s = self.slot(slot);
        // Poll, yielding the CPU between short spins: when the peer shares
        // our CPU it gets to run at once, whereas a futex sleep costs tens of
        // microseconds of wake-up latency on this VM. The polling window
        // adapts (`spin::Window::settle_caught`, at most
        // OPENVIA_PVM_SPIN_NS): it doubles when the spin saw the bell and
        // halves when it ran out (the CPUs are busy with other work, and a
        // sleeper woken by the kernel is then scheduled sooner than a
        // poller).
        let mut spin = self.spin_window(remote).start();
        while s.bell.load(SeqCst) == seen && spin.go_on() {}
        if s.bell.load(SeqCst) != seen {
            self.settle(remote, &spin, true);
            return;
        }
        s.sleeping.store(1, SeqCst);
        if s.bell.load(SeqCst) == seen {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left != Some(Duration::ZERO) {
                futex::wait(&s.bell, seen, left);
            }
        }
        s.sleeping.store(0, SeqCst);
        self.settle(remote, &spin, false);
    }
}
