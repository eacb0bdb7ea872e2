//! Waiting: spin first, then block.
//!
//! A message seen while spinning costs tens of nanoseconds; a futex
//! wake-up across CPUs costs tens of microseconds. So a Wait polls for the
//! NIC's spin budget and only then sleeps on its doorbell, which peers ring
//! when they publish something (see `doorbell`). The block
//! is capped so a missed wake-up can only ever cost a short delay.

use std::time::Duration;

use crate::error::{Result, ViaError};
use crate::nic::NicShared;
use crate::sys::{cpu_relax, now_ns};

/// Longest single sleep: bounds the cost of any lost wake-up
/// (`OPENVIA_BLOCK_CAP_MS`; the tests raise it so that a lost wake-up
/// shows up as a hang instead of a hidden delay).
fn max_block() -> Duration {
    Duration::from_millis(crate::config::Config::global().block_cap_ms)
}

/// Calls `poll` until it yields a value or `timeout` passes (None: forever).
pub(crate) fn wait_for<T>(
    nic: &NicShared,
    timeout: Option<Duration>,
    mut poll: impl FnMut() -> Option<T>,
) -> Result<T> {
    if let Some(v) = poll() {
        return Ok(v);
    }
    let start = now_ns();
    let deadline = timeout.map(|t| start.saturating_add(t.as_nanos().min(u64::MAX as u128) as u64));
    let spin_ns = nic.spin_ns();
    let spin_until = start.saturating_add(spin_ns);
    // A poll of the network device is a system call, long enough a pause
    // between polls only delays noticing what came.
    let relax = !nic.drive.costly_poll;
    let mut n: u32 = 0;
    loop {
        if let Some(v) = poll() {
            return Ok(v);
        }
        n = n.wrapping_add(1);
        // With no spin budget, block at once: on the network device a poll
        // is a system call under the VI's lock, and 64 of them would both
        // burn the budget the caller declined and keep other threads (a
        // sender posting on the same VI) waiting for that lock.
        if spin_ns > 0 && !n.is_multiple_of(64) {
            if relax {
                cpu_relax();
            }
            continue;
        }
        let now = now_ns();
        if deadline.is_some_and(|d| now >= d) {
            return Err(ViaError::Timeout);
        }
        if nic.is_closed() {
            return Err(ViaError::InvalidState("NIC closed"));
        }
        if now < spin_until {
            continue;
        }
        let cap = max_block();
        let left = deadline.map_or(cap, |d| Duration::from_nanos(d - now).min(cap));
        let mut got = None;
        nic.doorbell.block(left, || {
            got = poll();
            got.is_some()
        });
        if let Some(v) = got {
            return Ok(v);
        }
    }
}
