//! Sleeping on descriptors: viaip's threads take their packets straight
//! from the kernel and from the VIs, each asleep in one `ppoll` until the
//! TUN has a packet, a VI's socket has a datagram, or a VI's protocol
//! timer is due (`Vi::wait_hint`). Whoever wakes drives the VI itself, so
//! no thread of the core sits between the network and viaip.

use std::os::fd::RawFd;
use std::time::Duration;

use openvia_core::spin::{Spin, Window};
pub use openvia_core::sys::now_ns;
use openvia_core::sys::poll::EventFd;

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

/// A pause this long between two looks of a receiving thread's poll
/// means another process had its CPU (the local program, busy with what
/// came): the poll ends there, and the thread sleeps.
const RX_CONTENDED_NS: u64 = 200_000;

/// A receiving thread's poll of its link before it sleeps. The next
/// datagram on a link often comes within tens of microseconds (the answer
/// to what the local program just sent, the next segment of a stream);
/// a thread asleep in `ppoll` then pays an idle vCPU's wake-up for it,
/// once per packet in a ping-pong. The window adapts as the core's
/// spin windows do (`openvia_core::spin::Window::settle`): it grows back
/// whenever a datagram came within the limit of the poll's start, even
/// after the thread slept, and halves when one came later, none came
/// before the thread woke for a timer, or the CPU was taken; an idle link
/// stops polling after a few empty waits.
pub struct RxPoll {
    window: Window,
    /// The poll that ended in a sleep, settled once the sleep is over.
    slept: Option<Spin>,
}

impl RxPoll {
    /// `limit`: the longest poll (0: the thread sleeps at once).
    pub fn new(limit: Duration) -> RxPoll {
        RxPoll {
            window: Window::new(limit, RX_CONTENDED_NS),
            slept: None,
        }
    }

    /// A poll begins, in the current window.
    pub fn start(&self) -> Spin {
        self.window.start()
    }

    /// The poll found a datagram.
    pub fn caught(&mut self, spin: &Spin) {
        self.window.settle(spin);
    }

    /// The poll ran out: the thread sleeps.
    pub fn sleeping(&mut self, spin: Spin) {
        self.slept = Some(spin);
    }

    /// The thread looked at its link (after a sleep, if it slept);
    /// `arrived`: something was there.
    pub fn after_sleep(&mut self, arrived: bool) {
        if let Some(spin) = self.slept.take() {
            self.window.settle_woken(&spin, arrived);
        }
    }

    /// The current window.
    pub fn window(&self) -> Duration {
        self.window.get()
    }
}

/// The receiving threads' kick to the sending loop: a packet was just
/// written to the TUN, and its answer (a TCP acknowledgement, a reply)
/// will likely be read from the TUN within tens of microseconds. Rung
/// only while the loop sleeps, so its wake-up runs beside the local
/// program's instead of after the program's answer; woken so, the loop
/// polls the TUN for the answer a short while ([`Kick::spin_ns`]) before
/// it sleeps again. One wake-up off each packet's path in a ping-pong.
pub struct Kick {
    fd: EventFd,
    /// The sending loop sleeps (set around its `ppoll`).
    asleep: std::sync::atomic::AtomicBool,
    spin_ns: u64,
}

impl Kick {
    /// `spin`: how long the loop polls for the answer once kicked (0: no
    /// kicks at all).
    pub fn new(spin: Duration) -> std::io::Result<Kick> {
        Ok(Kick {
            fd: EventFd::new()?,
            asleep: std::sync::atomic::AtomicBool::new(false),
            spin_ns: spin.as_nanos().min(u128::from(u64::MAX)) as u64,
        })
    }

    pub fn fd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.fd.fd().as_raw_fd()
    }

    /// How long the kicked loop polls.
    pub fn spin_ns(&self) -> u64 {
        self.spin_ns
    }

    /// The sending loop is about to sleep (true) or has woken (false).
    pub fn set_asleep(&self, on: bool) {
        self.asleep
            .store(on && self.spin_ns > 0, std::sync::atomic::Ordering::SeqCst);
    }

    /// A receiving thread delivered packets: wakes the loop if it sleeps.
    pub fn ring(&self) {
        if self.asleep.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.fd.signal();
        }
    }

    /// Clears the counter after a wake-up.
    pub fn drain(&self) {
        self.fd.drain();
    }
}

/// Whether a kicked sending loop spins for the answer: for the kick's
/// whole length while answers come within it, not at all after
/// [`AnswerSpin::MISSES`] spins in a row found none (a flow into the
/// interface that is not answered soon, one-way UDP, then costs no CPU),
/// and again once a packet from the program comes within a spin's length
/// of a kick.
pub struct AnswerSpin {
    limit_ns: u64,
    misses: u32,
    /// When the last spin that ran out began (CLOCK_MONOTONIC ns).
    missed_at: Option<u64>,
}

impl AnswerSpin {
    pub const MISSES: u32 = 4;

    pub fn new(limit_ns: u64) -> AnswerSpin {
        AnswerSpin {
            limit_ns,
            misses: 0,
            missed_at: None,
        }
    }

    /// How long the next kick's spin lasts.
    pub fn spin_ns(&self) -> u64 {
        if self.misses < Self::MISSES {
            self.limit_ns
        } else {
            0
        }
    }

    /// The spin read the answer.
    pub fn caught(&mut self) {
        self.misses = 0;
        self.missed_at = None;
    }

    /// The spin begun at `start` ran out.
    pub fn missed(&mut self, start: u64) {
        self.misses = self.misses.saturating_add(1);
        self.missed_at = Some(start);
    }

    /// The loop slept and then read a packet from the program at `now`:
    /// if it came within a spin's length of the last kick that found
    /// none, spinning would have caught it.
    pub fn read_after_sleep(&mut self, now: u64) {
        if let Some(at) = self.missed_at.take() {
            if now.saturating_sub(at) <= self.limit_ns {
                self.misses = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A poll that runs out and sleeps; `arrived`: what woke the thread.
    fn poll_then_sleep(p: &mut RxPoll, arrived: bool) {
        let mut s = p.start();
        while s.go_on() {}
        p.sleeping(s);
        p.after_sleep(arrived);
    }

    #[test]
    fn rx_poll_stops_on_an_idle_link_and_comes_back_for_quick_datagrams() {
        // Long enough that no preemption of a loaded test machine makes a
        // datagram "late".
        let limit = Duration::from_millis(5);
        let mut p = RxPoll::new(limit);
        assert_eq!(p.window(), limit);
        // Woken for timers with nothing there: the window runs out.
        for _ in 0..25 {
            poll_then_sleep(&mut p, false);
        }
        assert_eq!(p.window(), Duration::ZERO);
        let s = p.start();
        assert!(!{ s }.go_on(), "a window of 0 does not poll");
        // A datagram that came within the limit, though the thread slept
        // for it, reopens the window; caught ones grow it to the limit.
        poll_then_sleep(&mut p, true);
        assert!(p.window() > Duration::ZERO);
        for _ in 0..20 {
            let s = p.start();
            p.caught(&s);
        }
        assert_eq!(p.window(), limit);
        // Off stays off.
        let mut off = RxPoll::new(Duration::ZERO);
        poll_then_sleep(&mut off, true);
        assert_eq!(off.window(), Duration::ZERO);
    }

    #[test]
    fn answer_spin_stops_for_one_way_flows_and_comes_back() {
        let mut a = AnswerSpin::new(50_000);
        assert_eq!(a.spin_ns(), 50_000);
        // Answers caught: the spin stays whole.
        a.missed(0);
        a.caught();
        assert_eq!(a.spin_ns(), 50_000);
        // Four kicks in a row without an answer (nothing read after them
        // either): kicks stop spinning.
        for i in 0..AnswerSpin::MISSES as u64 {
            assert_eq!(a.spin_ns(), 50_000);
            a.missed(i * 1_000_000);
            a.read_after_sleep(i * 1_000_000 + 900_000);
        }
        assert_eq!(a.spin_ns(), 0);
        // A packet read long after the last kick changes nothing...
        a.missed(10_000_000);
        a.read_after_sleep(10_500_000);
        assert_eq!(a.spin_ns(), 0);
        // ...one read within a spin's length of it brings the spin back.
        a.missed(20_000_000);
        a.read_after_sleep(20_030_000);
        assert_eq!(a.spin_ns(), 50_000);
    }

    fn readable(k: &Kick) -> bool {
        openvia_core::sys::poll::readable_now(k.fd())
    }

    #[test]
    fn a_kick_wakes_only_a_sleeping_loop_and_only_once() {
        let k = Kick::new(Duration::from_micros(50)).unwrap();
        // The loop is awake: a delivery costs no system call.
        k.ring();
        assert!(!readable(&k));
        k.set_asleep(true);
        k.ring();
        assert!(readable(&k));
        // A second delivery before the loop woke: no second write.
        k.ring();
        k.drain();
        assert!(!readable(&k));
        // Spinning off: never kicked.
        let off = Kick::new(Duration::ZERO).unwrap();
        off.set_asleep(true);
        off.ring();
        assert!(!readable(&off));
    }
}
