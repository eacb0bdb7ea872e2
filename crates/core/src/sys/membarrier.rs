//! Asymmetric memory barriers (membarrier(2)).
//!
//! Waking a sleeper needs a store–load fence on both sides (publish, then
//! look at the sleeper's flag; set the flag, then look for news). A fence on
//! every message costs the sender the full latency of its store reaching
//! the other core. With membarrier the cost moves to the side that is about
//! to sleep anyway: it forces a barrier on every CPU running a registered
//! process, so the publishing side needs only a compiler barrier.

use std::sync::atomic::{compiler_fence, fence, AtomicU8, Ordering};

const CMD_QUERY: libc::c_int = 0;
const CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

/// 0 unknown, 1 available and registered, 2 unavailable.
static STATE: AtomicU8 = AtomicU8::new(0);

fn membarrier(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes no pointers.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) }
}

/// Registers this process as a target of expedited global barriers; true if
/// the asymmetric scheme is in force.
pub fn register() -> bool {
    match STATE.load(Ordering::Acquire) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    let q = membarrier(CMD_QUERY);
    let ok = q >= 0
        && (q as libc::c_int & CMD_GLOBAL_EXPEDITED) != 0
        && membarrier(CMD_REGISTER_GLOBAL_EXPEDITED) == 0
        && std::env::var_os("OPENVIA_NO_MEMBARRIER").is_none();
    STATE.store(if ok { 1 } else { 2 }, Ordering::Release);
    ok
}

/// The publishing side's fence: free when registered (the sleeper pays).
#[inline]
pub fn light() {
    if STATE.load(Ordering::Relaxed) == 1 {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The sleeping side's fence: a barrier on every CPU running a registered
/// process, then our own.
pub fn heavy() {
    fence(Ordering::SeqCst);
    if STATE.load(Ordering::Relaxed) == 1 {
        membarrier(CMD_GLOBAL_EXPEDITED);
    }
    fence(Ordering::SeqCst);
}
