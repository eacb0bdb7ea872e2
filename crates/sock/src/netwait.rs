//! Waits on connections carried to other hosts (epoll, poll, select): each
//! message rings its doorbell on the kernel socket (no token spares it),
//! so the kernel's answer is exact; but a waiter asleep pays an idle
//! CPU's wake-up per message (tens of microseconds on a virtual machine),
//! where a blocking read spins on its VI first (`netlink`). So such a wait
//! asks the kernel without sleeping for a spin window
//! (`VIARUN_NET_SPIN_US`, adapting as a read's does: it halves when a
//! wait outlasted it or the spin found its CPU taken, so an idle server
//! soon sleeps at once), one system call a look however many descriptors
//! it names, then sleeps in the kernel. An epoll set keeps its window
//! (one thread of a set spins, others sleep at once); poll and select
//! keep one per thread.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::waitspin::WaitSpin;
use libc::c_int;

use crate::unrung;

/// Asks `kernel` without sleeping (`Some(0)`; non-zero ends the wait) for
/// `window`'s spin, runs `spun`, then sleeps in it (through `unrung`, for
/// what is left of `limit`) and settles the window. None for `window`:
/// another thread spins, this one looks once and sleeps.
pub fn look_then_sleep(
    mut window: Option<&mut WaitSpin>,
    limit: Option<Duration>,
    mut kernel: impl FnMut(Option<Duration>) -> c_int,
    spun: impl FnOnce(),
) -> c_int {
    let n = kernel(Some(Duration::ZERO));
    if n != 0 || limit == Some(Duration::ZERO) {
        spun();
        return n;
    }
    let start = Instant::now();
    let mut spin = match window.as_deref_mut() {
        Some(w) => w.start(),
        None => crate::netlink::spin_window_closed().start(),
    };
    let mut n = 0;
    while spin.go_on() {
        if limit.is_some_and(|l| start.elapsed() >= l) {
            break;
        }
        n = kernel(Some(Duration::ZERO));
        if n != 0 {
            break;
        }
    }
    spun();
    if n == 0 {
        let rest = limit.map(|d| d.saturating_sub(start.elapsed()));
        n = unrung::sleep(rest, &mut kernel);
    }
    if let Some(w) = window {
        if n > 0 {
            w.settle(&spin);
        } else if n == 0 {
            // The limit passed with nothing: as a long wait.
            w.settle_timed_out();
        }
    }
    n
}

std::thread_local! {
    /// This thread's window for its poll and select calls.
    static POLL_WINDOW: Cell<Option<WaitSpin>> = const { Cell::new(None) };
}

/// `look_then_sleep` with this thread's window (poll, select).
pub fn poll_look_then_sleep(
    limit: Option<Duration>,
    kernel: impl FnMut(Option<Duration>) -> c_int,
) -> c_int {
    let mut w = POLL_WINDOW
        .with(|c| c.get())
        .unwrap_or_else(crate::netlink::spin_window);
    let n = look_then_sleep(Some(&mut w), limit, kernel, || {});
    POLL_WINDOW.with(|c| c.set(Some(w)));
    n
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use libc::epoll_event;

    /// A kernel that has an event ready from its `ready_at`th look on
    /// (counting every call), and whose sleeping calls take `sleep` and
    /// then find it ready; it counts both kinds of call.
    struct Kernel {
        calls: Cell<usize>,
        sleeps: Cell<usize>,
        ready_at: usize,
        sleep: Duration,
    }

    impl Kernel {
        fn new(ready_at: usize, sleep: Duration) -> Kernel {
            Kernel {
                calls: Cell::new(0),
                sleeps: Cell::new(0),
                ready_at,
                sleep,
            }
        }
        fn wait(&self, _out: &mut [epoll_event], limit: Option<Duration>) -> c_int {
            self.calls.set(self.calls.get() + 1);
            if limit != Some(Duration::ZERO) {
                self.sleeps.set(self.sleeps.get() + 1);
                std::thread::sleep(self.sleep.min(limit.unwrap_or(self.sleep)));
                return c_int::from(limit.is_none() || self.sleep < limit.unwrap());
            }
            c_int::from(self.calls.get() >= self.ready_at)
        }
    }

    fn events() -> Vec<epoll_event> {
        vec![epoll_event { events: 0, u64: 0 }; 4]
    }

    /// One wait with `window` on the scripted kernel `k`.
    fn run(window: &mut WaitSpin, k: &Kernel, limit: Option<Duration>) -> c_int {
        look_then_sleep(Some(window), limit, |l| k.wait(&mut events(), l), || {})
    }

    /// An event that comes a few looks after the wait began is reported
    /// without a sleep in the kernel.
    #[test]
    fn a_wait_looks_again_before_it_sleeps() {
        let mut set = crate::netlink::spin_window();
        let k = Kernel::new(5, Duration::from_millis(1));
        let n = run(&mut set, &k, None);
        assert_eq!(n, 1);
        assert_eq!(k.calls.get(), 5, "looked five times");
        assert_eq!(k.sleeps.get(), 0, "never slept");
    }

    /// Events that come only long after each wait began (an idle server)
    /// shrink the window: the waits soon sleep after a single look.
    #[test]
    fn waits_that_the_spin_does_not_serve_soon_sleep_at_once() {
        let mut set = crate::netlink::spin_window();
        let mut looks = Vec::new();
        // Twelve halvings take the window to one look on a quiet machine;
        // beside CPU-bound programs a wait whose CPU was taken between
        // looks does not shrink it (waitspin.rs), so a few more may go by.
        while looks.len() < 40 && looks.last() != Some(&1) {
            let k = Kernel::new(usize::MAX, Duration::from_millis(1));
            assert_eq!(run(&mut set, &k, None), 1);
            assert_eq!(k.sleeps.get(), 1);
            looks.push(k.calls.get() - 1);
        }
        assert!(looks[0] > 1, "the first wait spun: {looks:?}");
        assert_eq!(*looks.last().unwrap(), 1, "a wait looked once: {looks:?}");
    }

    /// A wait with a limit returns 0 once it passed, spin included, and
    /// a wait with no time at all makes one look.
    #[test]
    fn a_wait_keeps_its_limit() {
        let mut set = crate::netlink::spin_window();
        let k = Kernel::new(usize::MAX, Duration::from_millis(50));
        let start = Instant::now();
        let n = run(&mut set, &k, Some(Duration::from_millis(5)));
        let took = start.elapsed();
        assert_eq!(n, 0);
        assert!(took >= Duration::from_millis(5), "{took:?}");
        assert!(took < Duration::from_millis(40), "{took:?}");
        let k = Kernel::new(usize::MAX, Duration::from_millis(50));
        assert_eq!(run(&mut set, &k, Some(Duration::ZERO)), 0);
        assert_eq!((k.calls.get(), k.sleeps.get()), (1, 0));
    }
}
