//! This process's id, cached: glibc's getpid is a system call, and every
//! call on a carried descriptor asks whether this process made its VI. A
//! fork handler refreshes it in the child.

use std::sync::atomic::{AtomicU32, Ordering};

static PID: AtomicU32 = AtomicU32::new(0);

extern "C" fn forked_child() {
    PID.store(std::process::id(), Ordering::Relaxed);
    // Connections our parent carries cannot be used here, nor by any
    // program this child execs (through execl, system, anything): a
    // record says so to that program's library (`exec`).
    let _ = std::panic::catch_unwind(crate::exec::mark_for_child);
}

/// Registers the fork handler (from the library's constructor).
pub fn init() {
    PID.store(std::process::id(), Ordering::Relaxed);
    // SAFETY: registering a plain extern "C" function as child handler.
    unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
}

pub fn id() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => std::process::id(),
        p => p,
    }
}

/// Whether this is the child of a vfork (or a clone sharing our memory)
/// before its exec: it runs in the parent's memory, so the connection
/// tables it sees are the parent's, and a close or dup here (Python's
/// subprocess calls them between its vfork and exec) must not change
/// them. Fork handlers do not run for vfork, so the cached id is still
/// the parent's. One getpid system call.
pub fn borrowing_parent_memory() -> bool {
    // SAFETY: getpid has no preconditions.
    let now = unsafe { libc::getpid() } as u32;
    let cached = PID.load(Ordering::Relaxed);
    cached != 0 && cached != now
}
