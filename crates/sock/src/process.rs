//! This process's id, cached: glibc's getpid is a system call, and every
//! call on a carried descriptor asks whether this process made its VI. A
//! fork handler refreshes it in the child. And whether another process
//! (a VI's maker, a lock's holder) can still act.

use std::sync::atomic::{AtomicU32, Ordering};

static PID: AtomicU32 = AtomicU32::new(0);
/// Forks, vforks and spawns this process has made (or is making): a
/// connection made before the last of them may be shared by another
/// process, so its last close here hands it to the kernel (`switched`)
/// instead of ending it.
static FORKS: AtomicU32 = AtomicU32::new(0);

extern "C" fn before_fork() {
    note_fork();
    // The child may ask for a connection carried between hosts here.
    let _ = std::panic::catch_unwind(crate::netlink::start_watcher);
    crate::netlink::before_fork();
    crate::epoll::hold_across_fork();
    crate::conn::hold_across_fork();
    crate::link::hold_across_fork();
}

extern "C" fn forked_parent() {
    crate::forkheld::release(false);
    crate::netlink::after_fork();
}

/// Another process may share our descriptors from now on (a vfork child
/// calls it too: its memory is ours).
pub fn note_fork() {
    FORKS.fetch_add(1, Ordering::AcqRel);
}

pub fn forks() -> u32 {
    FORKS.load(Ordering::Acquire)
}

extern "C" fn forked_child() {
    PID.store(std::process::id(), Ordering::Relaxed);
    crate::forkheld::release(true);
    crate::netlink::forked_child();
    // Connections our parent carries are handed back to the kernel when
    // used here (`switched`); a record tells the library of any program
    // this child execs (through execl, system, anything: `exec`) how to
    // take them up, or that it cannot.
    let _ = std::panic::catch_unwind(crate::exec::mark_for_child);
}

/// Registers the fork handler (from the library's constructor).
pub fn init() {
    PID.store(std::process::id(), Ordering::Relaxed);
    // SAFETY: registering plain extern "C" functions as fork handlers.
    unsafe { libc::pthread_atfork(Some(before_fork), Some(forked_parent), Some(forked_child)) };
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

/// Whether process `pid` can still act: it exists and has not exited
/// (`openvia_core::sys::process::alive`). A VI's maker that ended with
/// `_exit` (no hand-over at exit) while its parent, which shares the
/// connection, had asked it for the hand-over and waited for it before
/// reaping it, was taken for alive by signal 0 alone, and the parent
/// waited for good (`compat fork-race` between hosts, about one run in
/// 300 beside two CPU hogs).
pub use openvia_core::sys::process::alive;
