//! Sleeping on descriptors: viaip's threads take their packets straight
//! from the kernel and from the VIs, each asleep in one `ppoll` until the
//! TUN has a packet, a VI's socket has a datagram, or a VI's protocol
//! timer is due (`Vi::wait_hint`). Whoever wakes drives the VI itself, so
//! no thread of the core sits between the network and viaip.

use std::os::fd::RawFd;
use std::time::Duration;

pub use openvia_core::sys::now_ns;

/// The shortest sleep for a timer already due: a VI runs its protocol
/// timers on every sixteenth idle drive only, so a due timer may take a
/// few looks; this keeps them from spinning.
const MIN_SLEEP_NS: u64 = 20_000;

/// Descriptors to sleep on, and the earliest deadline.
pub struct Sleep {
    fds: Vec<libc::pollfd>,
    deadline_ns: Option<u64>,
}

impl Sleep {
    pub fn new() -> Sleep {
        Sleep {
            fds: Vec::new(),
            deadline_ns: None,
        }
    }

    /// Forgets the last round's descriptors.
    pub fn clear(&mut self) {
        self.fds.clear();
        self.deadline_ns = None;
    }

    /// Watches `fd` for reading; its index in [`Sleep::ready`].
    pub fn watch(&mut self, fd: RawFd) -> usize {
        self.fds.push(libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        self.fds.len() - 1
    }

    /// Wakes at `at` (CLOCK_MONOTONIC ns) at the latest.
    pub fn until(&mut self, at: u64) {
        self.deadline_ns = Some(self.deadline_ns.map_or(at, |d| d.min(at)));
    }

    /// A VI's wait hint: its descriptor and timer; the descriptor's index.
    pub fn hint(&mut self, hint: (RawFd, Option<u64>)) -> usize {
        if let Some(t) = hint.1 {
            self.until(t);
        }
        self.watch(hint.0)
    }

    /// Sleeps until a descriptor is readable (or hung up), the deadline,
    /// or `max`. True if the deadline was reached.
    pub fn sleep(&mut self, max: Duration) -> bool {
        let now = now_ns();
        let max_ns = max.as_nanos().min(u128::from(u64::MAX)) as u64;
        let ns = self.deadline_ns.map_or(max_ns, |d| {
            d.saturating_sub(now)
                .clamp(MIN_SLEEP_NS, max_ns.max(MIN_SLEEP_NS))
        });
        let ts = libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: a live array of pollfds of the given length, a live
        // timespec, no signal mask.
        unsafe {
            libc::ppoll(
                self.fds.as_mut_ptr(),
                self.fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        self.deadline_ns.is_some_and(|d| now_ns() >= d)
    }

    /// Whether descriptor `i` woke the sleep.
    pub fn ready(&self, i: usize) -> bool {
        self.fds.get(i).is_some_and(|p| p.revents != 0)
    }
}

impl Default for Sleep {
    fn default() -> Self {
        Sleep::new()
    }
}
