//! Shared (not process-private) futex wait and wake on words of the pool,
//! which several processes map at different addresses.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == seen`, at most `timeout`.
pub fn wait(word: &AtomicU32, seen: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: word is a live 4-byte aligned atomic in a shared mapping; the
    // kernel only reads it and the optional timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            tp,
            std::ptr::null::<u32>(),
            0,
        )
    };
}

/// Wakes one sleeper on `word`.
pub fn wake(word: &AtomicU32) {
    // SAFETY: as in wait; FUTEX_WAKE touches no memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            1,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0,
        )
    };
}
