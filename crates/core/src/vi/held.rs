//! The VI lock, counted per thread. While a thread holds a VI's lock —
//! and on the core's own threads (progress, agent) — the I/O it does is
//! the transport's own (its sockets, its eventfds, its memory), never a
//! program's. A library preloaded into a program (viarun), through whose
//! hooks the core's own C-library calls pass as well, asks
//! [`transport_busy`] and lets such calls straight through: a program's
//! connection tracked under a descriptor number that the core now uses
//! for a socket of its own (the program closed its socket with the raw
//! system call, unseen) must not take them, nor end a link — whose
//! memory is deregistered on every VI — under a VI lock this thread holds.

use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard, TryLockError};

thread_local! {
    static HELD: Cell<u32> = const { Cell::new(0) };
    static TRANSPORT_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread does the transport's own work now: it holds a VI
/// lock, or it is one of the core's threads.
pub fn transport_busy() -> bool {
    HELD.with(|h| h.get() > 0) || TRANSPORT_THREAD.with(|t| t.get())
}

/// Marks the calling thread as one of the core's own for its lifetime.
pub(crate) fn this_thread_is_transport() {
    TRANSPORT_THREAD.with(|t| t.set(true));
}

/// A mutex whose guards count as held VI locks.
pub(crate) struct ViMutex<T>(Mutex<T>);

pub(crate) struct Held<'a, T>(MutexGuard<'a, T>);

impl<T> ViMutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Self(Mutex::new(v))
    }

    pub(crate) fn lock(&self) -> Held<'_, T> {
        let g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        HELD.with(|h| h.set(h.get() + 1));
        Held(g)
    }

    /// The value, with no lock (`&mut self`: no other holder).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// None while another thread holds it (a poisoned lock is taken).
    pub(crate) fn try_lock(&self) -> Option<Held<'_, T>> {
        let g = match self.0.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        HELD.with(|h| h.set(h.get() + 1));
        Some(Held(g))
    }
}

impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        HELD.with(|h| h.set(h.get().saturating_sub(1)));
    }
}

impl<T> Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_counts_until_its_guard_goes() {
        let m = ViMutex::new(1u32);
        assert!(!transport_busy());
        {
            let g = m.lock();
            assert_eq!(*g, 1);
            assert!(transport_busy());
            let other = std::thread::spawn(transport_busy).join().unwrap();
            assert!(!other, "another thread does not count");
        }
        assert!(!transport_busy());
        let t = m.try_lock();
        assert!(t.is_some() && transport_busy());
        drop(t);
        assert!(!transport_busy());
    }
}
