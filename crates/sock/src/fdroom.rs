//! Room in the descriptor table for the library's own descriptors.
//!
//! A carried connection costs the process up to four descriptors beside
//! the program's socket: its record's memfd and the descriptor the record
//! keeps (`inherit`), the core's liveness socket to the peer, and the
//! peer process's eventfd (one per peer process). Taken out of the
//! program's own limit they made a program that works over kernel TCP
//! fail under viarun: a client of 300 connections under the common soft
//! limit of 1024 got EMFILE. So at start the library raises the soft
//! limit by what its descriptors may take, where the hard limit allows
//! (as Go's runtime raises it), and keeps its descriptors at or above the
//! *floor* — the program's original limit — which the program, taking
//! the lowest free numbers, never reaches while it keeps within the limit
//! it had. A program exec'd (or spawned) gets its original limit back.
//! Where the hard limit allows no raise, the library keeps to the upper
//! half of the table and carries only what fits there.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::inherit::MAX_HELD;
use crate::kernel::descriptor_limit;

/// Descriptors one carried connection may cost the library.
pub const PER_CONNECTION: u64 = 4;
/// A few more the library holds once per process.
const SLACK: u64 = 64;
/// What the soft limit is raised by.
const EXTRA: u64 = PER_CONNECTION * MAX_HELD as u64 + SLACK;

/// The soft limit the program started with, when the library raised it
/// (0: not raised).
static ORIGINAL: AtomicU64 = AtomicU64::new(0);
/// The soft limit the library set (0: not raised).
static RAISED_TO: AtomicU64 = AtomicU64::new(0);

fn limits() -> Option<libc::rlimit> {
    // SAFETY: getrlimit into our own struct.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some(r)
}

fn set_soft(r: libc::rlimit, soft: u64) -> bool {
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: r.rlim_max,
    };
    crate::kernel::forget_descriptor_limit();
    // SAFETY: setrlimit from our own struct; only the soft limit changes.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) == 0 }
}

/// At library start: raises the soft limit where the hard one allows,
/// and tells the core where to keep its descriptors.
pub fn init() {
    if let Some(r) = limits() {
        let (soft, hard) = (r.rlim_cur, r.rlim_max);
        if soft < hard && soft != libc::RLIM_INFINITY {
            let raised = hard.min(soft.saturating_add(EXTRA));
            if set_soft(r, raised) {
                ORIGINAL.store(soft, Ordering::Relaxed);
                RAISED_TO.store(raised, Ordering::Relaxed);
            }
        }
    }
    if let Some(limit) = descriptor_limit() {
        tell_core(floor(limit));
    }
}

fn tell_core(floor: u64) {
    openvia_core::set_descriptor_floor(floor.min(i32::MAX as u64) as i32);
}

/// The lowest number the library keeps its descriptors at, under soft
/// limit `limit`: the program's original limit while the library's
/// raise is in place (or `EXTRA` below a limit the program raised
/// further), else the upper half.
pub fn floor(limit: u64) -> u64 {
    floor_for(limit, ORIGINAL.load(Ordering::Relaxed))
}

/// The highest floor above the program's original limit: half of a
/// limit of a million (a container's default) would put our descriptors
/// past 500,000, and the kernel would grow the process's descriptor
/// table to match (4 MiB of pointers, copied at every fork).
const FLOOR_CAP: u64 = 1 << 16;

fn floor_for(limit: u64, original: u64) -> u64 {
    let floor = if original != 0 && limit >= original.saturating_add(EXTRA) {
        original.max(limit - EXTRA)
    } else {
        limit / 2
    };
    floor.min(FLOOR_CAP.max(original))
}

/// Whether the library has room for one more carried connection's
/// descriptors, `held` being carried now, for a program socket `socket`
/// (which must lie below the floor: the program's own range).
pub fn room_for_one_more(socket: i32, held: usize) -> bool {
    let Some(limit) = descriptor_limit() else {
        return true;
    };
    let floor = floor(limit);
    // The program may have changed its limit since: the core follows.
    tell_core(floor);
    (socket.max(0) as u64) < floor && floor + PER_CONNECTION * (held as u64 + 1) + SLACK <= limit
}

/// Puts the program's original soft limit back for an exec or a spawn
/// (the new program, under viarun or not, starts from what it would have
/// had); the returned guard raises it again if the call returns (an exec
/// that failed; a spawn's child has its limits by then).
pub fn original_for_exec() -> Reraise {
    let raised = RAISED_TO.load(Ordering::Relaxed);
    match limits() {
        Some(r) if raised != 0 && r.rlim_cur == raised => {
            let original = ORIGINAL.load(Ordering::Relaxed);
            Reraise(set_soft(r, original).then_some(raised))
        }
        _ => Reraise(None),
    }
}

/// See [`original_for_exec`].
pub struct Reraise(Option<u64>);

impl Drop for Reraise {
    fn drop(&mut self) {
        if let (Some(raised), Some(r)) = (self.0, limits()) {
            set_soft(r, raised);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_the_original_limit_while_raised() {
        // Not raised: the upper half.
        assert_eq!(floor_for(1024, 0), 512);
        assert_eq!(floor_for(1024 + EXTRA, 1024), 1024);
        // Raised less than asked (hard limit): the upper half.
        assert_eq!(floor_for(2048, 1024), 1024);
        // The program raised it further: the library's room at the top,
        // or the cap.
        assert_eq!(floor_for(20_000, 1024), 20_000 - EXTRA);
        assert_eq!(floor_for(100_000, 1024), FLOOR_CAP);
        // The program lowered it below the original: the upper half.
        assert_eq!(floor_for(256, 1024), 128);
        // A limit of a million, not raised (soft = hard): not half of it.
        assert_eq!(floor_for(1 << 20, 0), 1 << 16);
        // Raised from a large original: that original.
        assert_eq!(floor_for(100_000 + EXTRA, 100_000), 100_000);
    }
}
