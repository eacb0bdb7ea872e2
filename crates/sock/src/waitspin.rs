//! How a wait spins before it sleeps in the kernel: a blocking read, and
//! an epoll, poll or select wait on carried connections, on one host
//! (`VIARUN_SPIN_US`) and between hosts (`VIARUN_NET_SPIN_US`).
//!
//! The window adapts by the core's rule (`openvia_core::spin`): halved
//! each time a wait outlasts the limit, doubled back each time a wait is
//! short, and every sixteenth wait at a short window spins the whole limit
//! again (`Window::start_probing`: a wait that slept takes longer than the
//! limit on a virtual machine whatever came when, so a window that shrank
//! would not reopen by itself).
//!
//! And a spin gives its CPU away (sched_yield) between looks once the CPUs
//! look crowded: a yield that came back late (another process ran) says
//! that the peer that will answer, or another waiter's, may be waiting for
//! this CPU, so from then on the waits of this window yield from their
//! first looks on, until a spin whose every yield came back at once. With
//! the CPUs free a spin yields only past `CALM_GIVE_WAY` (a ping-pong
//! between two CPUs is answered well within it), so it pays no system
//! call per look. A yield that gave a CPU-bound program its time slice
//! stops the yields for the next 64 waits: yielding to it only feeds it.
//! A fixed window that never yielded cost a pgbench of two clients
//! against two postgres workers on two CPUs three quarters of its
//! transactions: each waiter spun out its window while the peer it waited
//! for sat on the run queue of that very CPU.

use std::cell::Cell;
use std::time::{Duration, Instant};

use openvia_core::spin::{Spin, Window};

/// Looks of a spin between two asks of the clock.
pub const CLOCK_EVERY: u32 = 16;

/// No pause between two looks ends a spin by itself: a spin that lost its
/// CPU for long ends by the clock at its next look anyway, and one that a
/// longer window (`VIARUN_SPIN_US`) keeps through a time slice given to
/// another program keeps its token out meanwhile, so its writer rings no
/// doorbell (ending it there rang one for up to 40 % of the messages of
/// compat's busy event loops beside two CPU-bound programs).
const NEVER_CONTENDED: u64 = u64::MAX;

/// When a spin yields first with the CPUs free, and when they look
/// crowded. Not sooner with them free: a yield with nothing else to run
/// still costs a system call, and from 8 µs on redis-benchmark with one
/// client against redis-server on one host lost 13 % of its requests.
const CALM_GIVE_WAY: Duration = Duration::from_micros(30);
const CROWDED_GIVE_WAY: Duration = Duration::from_nanos(200);

/// A yield that took longer ran another process; one that took longer
/// still gave a CPU-bound program its time slice.
const SLOW_YIELD: Duration = Duration::from_micros(2);
const HOG_YIELD: Duration = Duration::from_millis(1);
/// Waits of a window that do not yield after a yield gave a time slice
/// away. Counted, not timed: where processes outnumber the CPUs a yield
/// to them may now and then come back as late as one to a CPU-bound
/// program, and a second without yields then cost pgbench's two clients
/// against two workers two thirds of their transactions.
const HOGGED_WAITS: u32 = 64;

/// Whether and when a spin yields, by what its window's last yields said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// They came back at once (or none was made yet): yield late.
    Calm,
    /// Another process ran, briefly (perhaps the peer): yield early.
    Crowded,
    /// A CPU-bound program took its time slice: this many more waits spin
    /// without yielding (a spin that keeps its CPU gets its fair share of
    /// it), then look again.
    Hogged(u32),
}

/// The spin state of one kind of wait (a connection's blocking reads, an
/// epoll set's waits, a thread's poll and select calls).
#[derive(Clone, Copy, Debug)]
pub struct WaitSpin {
    window: Window,
    mode: Mode,
}

impl Default for WaitSpin {
    /// A wait on one host's (`VIARUN_SPIN_US`).
    fn default() -> Self {
        WaitSpin::new(crate::reader::spin_time())
    }
}

impl WaitSpin {
    /// Spins of at most `limit` (zero: none).
    pub fn new(limit: Duration) -> WaitSpin {
        WaitSpin {
            window: Window::new(limit, NEVER_CONTENDED),
            mode: Mode::Calm,
        }
    }

    /// A wait begins: its spin.
    pub fn start(&mut self) -> Looking {
        Looking {
            run: self.window.start_probing(),
            give_way_after: match self.mode {
                Mode::Calm => Some(CALM_GIVE_WAY),
                Mode::Crowded => Some(CROWDED_GIVE_WAY),
                Mode::Hogged(_) => None,
            },
            quick: 0,
            slow: 0,
            hogged: 0,
        }
    }

    /// What the wait of `look` waited for came (before or after a sleep).
    pub fn settle(&mut self, look: &Looking) {
        self.window.settle(&look.run);
        self.mode = if look.hogged > 0 {
            Mode::Hogged(HOGGED_WAITS)
        } else if look.slow > 0 {
            Mode::Crowded
        } else if look.quick > 0 {
            Mode::Calm
        } else {
            match self.mode {
                Mode::Hogged(0) => Mode::Calm,
                Mode::Hogged(n) => Mode::Hogged(n - 1),
                m => m,
            }
        };
    }

    /// The wait's time ran out with nothing: as a long wait.
    pub fn settle_timed_out(&mut self) {
        self.window.settle_caught(false);
    }
}

/// One wait's spin.
#[derive(Debug)]
pub struct Looking {
    run: Spin,
    /// When it starts to yield between looks (None: never).
    give_way_after: Option<Duration>,
    /// Its yields that came back at once, late, and a time slice late.
    quick: u32,
    slow: u32,
    hogged: u32,
}

impl Looking {
    /// Whether to look again (called every [`CLOCK_EVERY`] looks): false
    /// once the window is used up.
    pub fn go_on(&mut self) -> bool {
        let give_way = self
            .give_way_after
            .is_some_and(|after| self.run.spun() >= after);
        let mut took = Duration::ZERO;
        let go = self.run.go_on_with(|| {
            if give_way {
                let t = Instant::now();
                // SAFETY: sched_yield takes nothing and cannot fail.
                unsafe { libc::sched_yield() };
                took = t.elapsed();
            }
        });
        if give_way {
            if took > HOG_YIELD {
                self.hogged += 1;
                self.give_way_after = None;
            } else if took > SLOW_YIELD {
                self.slow += 1;
                self.give_way_after = Some(CROWDED_GIVE_WAY);
            } else {
                self.quick += 1;
            }
        }
        go
    }
}

std::thread_local! {
    /// This thread's spin for its poll and select calls, and the spin of
    /// a call that went on to sleep.
    static THREAD: Cell<Option<WaitSpin>> = const { Cell::new(None) };
    static PENDING: Cell<Option<Looking>> = const { Cell::new(None) };
}

fn with_thread<R>(f: impl FnOnce(&mut WaitSpin) -> R) -> R {
    let mut s = THREAD.with(|t| t.get()).unwrap_or_default();
    let r = f(&mut s);
    THREAD.with(|t| t.set(Some(s)));
    r
}

/// A poll or select call's spin: the thread's started.
pub fn thread_start() -> Looking {
    with_thread(|s| s.start())
}

/// The call of `look` has something to report (`caught`: settled now),
/// or is about to sleep (settled by `after_sleep`).
pub fn thread_done(look: Looking, caught: bool) {
    if caught {
        with_thread(|s| s.settle(&look));
    } else {
        PENDING.with(|p| p.set(Some(look)));
    }
}

/// After a poll or select call that spun slept: `n`, what the sleep
/// returned, settles the thread's spin (something came: by the wait's
/// length; nothing within the program's timeout: as a long wait).
pub fn after_sleep(n: libc::c_int) -> libc::c_int {
    if let Some(look) = PENDING.with(|p| p.take()) {
        match n {
            1.. => with_thread(|s| s.settle(&look)),
            0 => with_thread(|s| s.settle_timed_out()),
            _ => {}
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin_with(limit: Duration) -> WaitSpin {
        WaitSpin::new(limit)
    }

    /// How long a wait's spin looks when nothing comes.
    fn spin_out(s: &mut WaitSpin) -> (Looking, Duration) {
        let t = Instant::now();
        let mut look = s.start();
        while look.go_on() {}
        (look, t.elapsed())
    }

    /// Waits that outlast the window shrink it to nothing: a waiter whose
    /// messages come seldom soon sleeps at once (the fixed window spun
    /// it out at every wait), and looks the whole window again at every
    /// sixteenth wait.
    #[test]
    fn waits_that_outlast_the_window_stop_the_spin() {
        let limit = Duration::from_millis(2);
        let mut s = spin_with(limit);
        let mut full = 0;
        for _ in 0..40 {
            let (look, took) = spin_out(&mut s);
            if took >= limit {
                full += 1;
            }
            std::thread::sleep(limit);
            s.settle(&look);
        }
        // Halved each time (1 ms, 0.5, ...), then shut but for the probes.
        assert!(full <= 4, "{full} of 40 waits spun the whole window");
        assert!(s.window.get() < limit / 4);
    }

    /// A spin whose yield came back late makes the next ones yield from
    /// their first looks; one whose yields all came back at once makes
    /// them wait `CALM_GIVE_WAY` again; one whose yield gave a time slice
    /// away makes the next `HOGGED_WAITS` not yield at all; one that never
    /// yielded says nothing (but counts those down).
    #[test]
    fn what_the_yields_said_decides_when_the_next_spins_yield() {
        let mut s = spin_with(Duration::from_micros(50));
        let mut look = s.start();
        assert_eq!(look.give_way_after, Some(CALM_GIVE_WAY));
        look.slow = 1;
        look.quick = 3;
        s.settle(&look);
        assert_eq!(s.start().give_way_after, Some(CROWDED_GIVE_WAY));
        let look = s.start();
        s.settle(&look);
        assert_eq!(
            s.mode,
            Mode::Crowded,
            "a spin that never yielded changes nothing"
        );
        let mut look = s.start();
        look.quick = 2;
        s.settle(&look);
        assert_eq!(s.mode, Mode::Calm);
        let mut look = s.start();
        look.slow = 2;
        look.hogged = 1;
        s.settle(&look);
        for _ in 0..=HOGGED_WAITS {
            let look = s.start();
            assert_eq!(look.give_way_after, None);
            s.settle(&look);
        }
        assert_eq!(s.start().give_way_after, Some(CALM_GIVE_WAY));
        assert_eq!(s.mode, Mode::Calm);
    }
}
