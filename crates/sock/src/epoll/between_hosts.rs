//! An epoll wait on connections carried to other hosts: each message
//! rings its doorbell on the kernel socket (no token spares it), so the
//! kernel's answer is exact; what the library adds is a look at the
//! kernel, without sleeping, for a while before the wait sleeps, as a
//! blocking read spins on its VI (`netlink`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use libc::{c_int, epoll_event};

use super::{lock, KernelWait, Set};
use crate::unrung;

/// A wait on a set whose connections are carried to other hosts (and no
/// one-host connection takes tokens): each message rings its doorbell on
/// the kernel socket, so the kernel's answer is exact, but a waiter asleep
/// pays an idle CPU's wake-up per message (tens of microseconds on a
/// virtual machine), where a blocking read spins on its VI first. So the
/// wait asks the kernel without sleeping for the set's spin window
/// (`VIARUN_NET_SPIN_US`, adapting as a read's does: it shrinks while
/// waits outlast it or the CPU was taken, so an idle server soon sleeps
/// at once), one system call a look however many connections the set
/// holds, then sleeps in the kernel. One thread of a set spins; others
/// sleep at once.
pub(super) fn wait(
    set: &Set,
    out: &mut [epoll_event],
    limit: Option<Duration>,
    kernel_wait: KernelWait<'_>,
) -> c_int {
    let n = kernel_wait(out, Some(Duration::ZERO));
    if n != 0 || limit == Some(Duration::ZERO) {
        return n;
    }
    let start = Instant::now();
    let spinner = !set.spinning.swap(true, Ordering::AcqRel);
    let mut spin = if spinner {
        lock(&set.net_spin).start()
    } else {
        crate::netlink::spin_window_closed().start()
    };
    let mut n = 0;
    while spin.go_on_busy() {
        if limit.is_some_and(|l| start.elapsed() >= l) {
            break;
        }
        n = kernel_wait(out, Some(Duration::ZERO));
        if n != 0 {
            break;
        }
    }
    if spinner {
        set.spinning.store(false, Ordering::Release);
    }
    if n == 0 {
        let rest = limit.map(|d| d.saturating_sub(start.elapsed()));
        n = unrung::sleep(rest, |l| kernel_wait(out, l));
    }
    if spinner {
        let mut w = lock(&set.net_spin);
        if n > 0 {
            w.settle(&spin);
        } else if n == 0 {
            // The limit passed with nothing: as a long wait.
            w.settle_caught(false);
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

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

    /// An event that comes a few looks after the wait began is reported
    /// without a sleep in the kernel.
    #[test]
    fn a_wait_looks_again_before_it_sleeps() {
        let set = Set::new(Vec::new());
        let k = Kernel::new(5, Duration::from_millis(1));
        let n = wait(&set, &mut events(), None, &|o, l| k.wait(o, l));
        assert_eq!(n, 1);
        assert_eq!(k.calls.get(), 5, "looked five times");
        assert_eq!(k.sleeps.get(), 0, "never slept");
    }

    /// Events that come only long after each wait began (an idle server)
    /// shrink the window: the waits soon sleep after a single look.
    #[test]
    fn waits_that_the_spin_does_not_serve_soon_sleep_at_once() {
        let set = Set::new(Vec::new());
        let mut looks = Vec::new();
        for _ in 0..12 {
            let k = Kernel::new(usize::MAX, Duration::from_millis(1));
            assert_eq!(wait(&set, &mut events(), None, &|o, l| k.wait(o, l)), 1);
            assert_eq!(k.sleeps.get(), 1);
            looks.push(k.calls.get() - 1);
        }
        assert!(looks[0] > 1, "the first wait spun: {looks:?}");
        assert_eq!(*looks.last().unwrap(), 1, "the last looked once: {looks:?}");
    }

    /// A wait with a limit returns 0 once it passed, spin included, and
    /// a wait with no time at all makes one look.
    #[test]
    fn a_wait_keeps_its_limit() {
        let set = Set::new(Vec::new());
        let k = Kernel::new(usize::MAX, Duration::from_millis(50));
        let start = Instant::now();
        let n = wait(
            &set,
            &mut events(),
            Some(Duration::from_millis(5)),
            &|o, l| k.wait(o, l),
        );
        let took = start.elapsed();
        assert_eq!(n, 0);
        assert!(took >= Duration::from_millis(5), "{took:?}");
        assert!(took < Duration::from_millis(40), "{took:?}");
        let k = Kernel::new(usize::MAX, Duration::from_millis(50));
        assert_eq!(
            wait(&set, &mut events(), Some(Duration::ZERO), &|o, l| k
                .wait(o, l)),
            0
        );
        assert_eq!((k.calls.get(), k.sleeps.get()), (1, 0));
    }
}
