//! The descriptor pvm_getfds() hands out: an eventfd that is readable while
//! a message for the task is waiting, however it came (a head in the pool
//! ring, a frame on the pvmd's socket, a body from a direct route). Every
//! one of those ends by ringing the task's pool doorbell, so a watcher
//! thread sleeps on the doorbell and, when it moves, makes the eventfd
//! readable. The receive calls keep the level right: after each one the
//! task drains the eventfd, gathers what has arrived, and makes it
//! readable again if a message of the current context is still queued.
//! Anything arriving after the drain rings the doorbell again, so nothing
//! is missed; a ring for something the task has already taken leaves at
//! most one stale readiness, which the next receive clears (no spinning).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::{sys, Task};
use crate::error::PvmResult;
use crate::pool::PoolHandle;

/// The eventfd and the thread that signals it.
pub(super) struct SelectFd {
    efd: Arc<OwnedFd>,
    home: PoolHandle,
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
    /// The process that started the watcher (a fork must not join it).
    owner: u32,
}

/// Adds one to the eventfd's counter: it becomes readable.
fn signal(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer to our own eventfd. A full
    // counter (EAGAIN) is readable already, which is all that matters.
    unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
}

impl SelectFd {
    /// Makes the eventfd and starts the watcher on `home`'s doorbell.
    pub(super) fn start(home: PoolHandle) -> io::Result<SelectFd> {
        // SAFETY: plain flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor, owned from here on.
        let efd = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let stop = Arc::new(AtomicBool::new(false));
        home.pool.set_watcher(home.slot, true);
        // Read here, before the caller's first gather: a ring between that
        // gather and the thread's start must still count as new.
        let mut seen = home.pool.bell(home.slot);
        let (h, e, s) = (home.clone(), efd.clone(), stop.clone());
        let spawned = openvia_core::sys::thread::spawn_quiet_from(
            std::thread::Builder::new()
                .name("pvm-getfds".into())
                .stack_size(64 * 1024),
            move || {
                while !s.load(Ordering::Acquire) {
                    h.pool.watch_bell(h.slot, seen);
                    let now = h.pool.bell(h.slot);
                    if now != seen {
                        seen = now;
                        signal(&e);
                    }
                }
            },
        );
        match spawned {
            Ok(t) => Ok(SelectFd {
                efd,
                home,
                stop,
                watcher: Some(t),
                owner: std::process::id(),
            }),
            Err(e) => {
                home.pool.set_watcher(home.slot, false);
                Err(e)
            }
        }
    }

    pub(super) fn fd(&self) -> i32 {
        self.efd.as_raw_fd()
    }

    /// Not readable any more (until the next signal).
    pub(super) fn drain(&self) {
        let mut v = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer; a non-blocking
        // eventfd with a zero counter just says EAGAIN.
        unsafe { libc::read(self.efd.as_raw_fd(), v.as_mut_ptr().cast(), v.len()) };
    }

    /// Readable now.
    pub(super) fn raise(&self) {
        signal(&self.efd);
    }
}

impl Drop for SelectFd {
    fn drop(&mut self) {
        let Some(t) = self.watcher.take() else {
            return;
        };
        if std::process::id() != self.owner {
            // A fork of the task: the watcher is its parent's thread.
            std::mem::forget(t);
            return;
        }
        self.stop.store(true, Ordering::Release);
        // Wakes the watcher (it counts as one, so every sleeper wakes).
        self.home.pool.ring_bell(self.home.slot);
        let _ = t.join();
        self.home.pool.set_watcher(self.home.slot, false);
    }
}

impl Task {
    /// The descriptor pvm_getfds gives: readable while a message for this
    /// task waits (see `select_fd`). Without a pool every message comes
    /// over the socket, so that is the descriptor.
    pub fn select_fd(&mut self) -> PvmResult<i32> {
        let Some(home) = self.home.clone() else {
            return Ok(self.socket_fd());
        };
        if self.select.is_none() {
            self.select = Some(SelectFd::start(home).map_err(sys)?);
        }
        self.rearm_select()?;
        Ok(self.select.as_ref().map_or(-1, SelectFd::fd))
    }

    /// Sets the getfds descriptor's level after a receive: drained, then
    /// readable again if a message of the current context is waiting.
    pub(super) fn rearm_select(&mut self) -> PvmResult<()> {
        if self.select.is_none() {
            return Ok(());
        }
        if let Some(sel) = &self.select {
            sel.drain();
        }
        // After the drain: whatever rang before it is gathered now, and
        // whatever rings after it signals the descriptor again.
        self.gather()?;
        let ctx = self.ctx;
        let waiting = self.queue.iter().any(|m| m.ctx == ctx);
        if let (true, Some(sel)) = (waiting, &self.select) {
            sel.raise();
        }
        Ok(())
    }
}
