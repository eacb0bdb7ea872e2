//! Spin, then sleep, with a window that adapts: how long a waiter polls
//! before it sleeps. A message that arrives within the spin costs no
//! wake-up, which on a virtual machine's CPUs (an idle vCPU takes tens of
//! microseconds to wake) is most of a small message's time between hosts.
//! Clients of the core that wait on their own sockets (PVM's tasks and
//! daemons, viarun's readers between hosts) share this rule.
//!
//! The window halves each time a wait lasted longer than the limit (the
//! peer is slow or the CPUs are busy elsewhere: spinning would only steal
//! their time) or the spin found its CPU taken, and doubles, up to the
//! limit, each time a wait was shorter. So a program whose messages come
//! seldom stops spinning after a few waits, and a ping-pong that the spin
//! serves keeps it.

use std::time::{Duration, Instant};

/// Upper bound of any spin limit (10 ms): a spin is a short look, never
/// a way to keep a CPU.
pub const MAX_SPIN_NS: u64 = 10_000_000;
/// The window after a spin that paid off from (almost) zero.
const MIN_WINDOW_NS: u64 = 2_000;
/// Waits begun with a window of at most a quarter of the limit between
/// two that spin the whole limit (`Window::start_probing`).
const PROBE_EVERY: u32 = 16;

/// An adaptive spin window, at most `limit`.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    limit_ns: u64,
    ns: u64,
    /// A pause between two looks longer than this ends a spin: another
    /// process held our CPU (the caller chooses what it tolerates).
    contended_ns: u64,
    /// Waits begun with a short window since the last probe.
    short_starts: u32,
}

impl Window {
    pub fn new(limit: Duration, contended_ns: u64) -> Window {
        let limit_ns = limit.as_nanos().min(u128::from(MAX_SPIN_NS)) as u64;
        Window {
            limit_ns,
            ns: limit_ns,
            contended_ns,
            short_starts: 0,
        }
    }

    /// How long the next wait may spin.
    pub fn get(&self) -> Duration {
        Duration::from_nanos(self.ns)
    }

    /// A wait begins: its spin, for the current window.
    pub fn start(&self) -> Spin {
        let now = Instant::now();
        Spin {
            began: now,
            end: now + self.get(),
            last: now,
            over: self.ns == 0,
            contended: false,
            contended_ns: self.contended_ns,
            probe: false,
        }
    }

    /// As [`Self::start`], but every [`PROBE_EVERY`]th wait begun with a
    /// window of a quarter of the limit or less spins the whole limit: if
    /// that catches what it waits for, the window is the limit again.
    /// Where a wait that slept takes longer than the limit whatever came
    /// when (an idle virtual CPU wakes in tens of microseconds), `settle`
    /// alone never reopens a window that shrank, and a few long waits
    /// would stop the spin for good.
    pub fn start_probing(&mut self) -> Spin {
        if self.ns.saturating_mul(4) > self.limit_ns {
            return self.start();
        }
        self.short_starts += 1;
        if self.short_starts < PROBE_EVERY {
            return self.start();
        }
        self.short_starts = 0;
        let mut spin = self.start();
        spin.end = spin.began + Duration::from_nanos(self.limit_ns);
        spin.over = self.limit_ns == 0;
        spin.probe = true;
        spin
    }

    /// The wait of `spin` is over (what it waited for came). It doubles the
    /// window, up to the limit, when the spin caught it, or when it came
    /// within the limit after a spin that merely was too short (so a
    /// window that shrank to nothing grows back); it halves the window
    /// when the wait was longer than the limit (spinning would only have
    /// taken the CPUs from others) or the spin found its CPU taken.
    pub fn settle(&mut self, spin: &Spin) {
        if spin.probe && !spin.over {
            self.ns = self.limit_ns;
            return;
        }
        let short = spin.began.elapsed().as_nanos() <= u128::from(self.limit_ns);
        self.ns = if !spin.over || (short && !spin.contended) {
            (self.ns * 2).max(MIN_WINDOW_NS).min(self.limit_ns)
        } else {
            self.ns / 2
        };
    }
}

impl Window {
    /// A wait whose spin ran out and which then slept is over: `arrived`
    /// says whether what it waited for woke it (then as [`Self::settle`]:
    /// grown back if it came within the limit) or something else did, a
    /// timer with nothing there (then halved, as a long wait).
    pub fn settle_woken(&mut self, spin: &Spin, arrived: bool) {
        match arrived {
            true => self.settle(spin),
            false => self.settle_caught(false),
        }
    }
}

impl Window {
    /// The pool doorbell's rule since seed 003's work, kept for the waits
    /// on one host (a round trip of a few µs there): the window doubles
    /// only when the spin caught what it waited for, and halves whenever
    /// it ran out. A window stuck "just too short" (which the rule above
    /// reopens) is less costly there than one that keeps spinning while
    /// a peer on the same CPU waits for it (see docs/pvm.md: the slow
    /// mode at the window's length).
    /// `caught`: what the wait was for came before it slept.
    pub fn settle_caught(&mut self, caught: bool) {
        self.ns = if caught {
            (self.ns * 2).max(MIN_WINDOW_NS).min(self.limit_ns)
        } else {
            self.ns / 2
        };
    }
}

/// One wait's spin.
#[derive(Debug, Clone, Copy)]
pub struct Spin {
    began: Instant,
    end: Instant,
    last: Instant,
    /// The spin ended (window used up or CPU taken): the wait sleeps.
    over: bool,
    contended: bool,
    contended_ns: u64,
    /// Begun by [`Window::start_probing`] with the whole limit.
    probe: bool,
}

impl Spin {
    /// How long the spin has looked so far (until its last look).
    pub fn spun(&self) -> Duration {
        self.last.duration_since(self.began)
    }

    /// Pauses (see [`pause`]) and says whether to look again: false once
    /// the window is used up, or when the pause showed another process
    /// holding our CPU; from then on always false.
    pub fn go_on(&mut self) -> bool {
        self.go_on_with(pause)
    }

    /// As [`Self::go_on`], but without giving the CPU away between looks:
    /// for a waiter whose peer is on another host (nothing it waits for
    /// needs this CPU), where a yield to a CPU-bound process costs it
    /// that process's whole time slice.
    pub fn go_on_busy(&mut self) -> bool {
        self.go_on_with(|| {
            for _ in 0..32 {
                std::hint::spin_loop();
            }
        })
    }

    /// As [`Self::go_on`], with the caller's own pause between looks (a
    /// waiter that looks many times between two asks of the clock).
    pub fn go_on_with(&mut self, pause: impl FnOnce()) -> bool {
        if self.over {
            return false;
        }
        pause();
        let now = Instant::now();
        if now.duration_since(self.last).as_nanos() > u128::from(self.contended_ns) {
            self.contended = true;
        }
        self.last = now;
        self.over = self.contended || now >= self.end;
        !self.over
    }
}

/// Gives the CPU to whatever else is runnable on it, between two looks
/// of a spin: where processes outnumber CPUs (two PVM tasks and two
/// pvmds on two CPUs) the peer that will answer may be waiting for this
/// one.
pub fn pause() {
    for _ in 0..32 {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTENDED_NS: u64 = 30_000;

    /// A spin that ended, a wait of `waited` after its start.
    fn ended(w: &Window, waited: Duration, caught: bool) -> Spin {
        let mut s = w.start();
        s.began = Instant::now() - waited;
        s.over = !caught;
        s
    }

    #[test]
    fn window_halves_when_unpaid_and_grows_back_to_the_limit() {
        let mut w = Window::new(Duration::from_micros(40), CONTENDED_NS);
        assert_eq!(w.get(), Duration::from_micros(40));
        let (short, long) = (Duration::from_micros(30), Duration::from_micros(41));
        w.settle(&ended(&w, long, false));
        assert_eq!(w.get(), Duration::from_micros(20));
        for _ in 0..20 {
            w.settle(&ended(&w, long, false));
        }
        assert_eq!(w.get(), Duration::ZERO);
        // A short wait (slept through, the window being 0) grows it back.
        let s = w.start();
        assert!(s.over, "a window of 0 does not spin");
        w.settle(&ended(&w, short, false));
        assert_eq!(w.get(), Duration::from_nanos(MIN_WINDOW_NS));
        for _ in 0..20 {
            w.settle(&ended(&w, short, true));
        }
        assert_eq!(w.get(), Duration::from_micros(40));
        // A spin that found its CPU taken halves it, however short.
        let mut s = ended(&w, short, false);
        s.contended = true;
        w.settle(&s);
        assert_eq!(w.get(), Duration::from_micros(20));
        // Off stays off.
        let mut off = Window::new(Duration::ZERO, CONTENDED_NS);
        off.settle(&ended(&off, Duration::ZERO, true));
        assert_eq!(off.get(), Duration::ZERO);
    }

    #[test]
    fn a_wait_woken_by_what_it_waited_for_settles_by_time_else_halves() {
        let mut w = Window::new(Duration::from_micros(40), CONTENDED_NS);
        // Woken by something else (a timer): halved, however short.
        w.settle_woken(&ended(&w, Duration::from_micros(1), false), false);
        assert_eq!(w.get(), Duration::from_micros(20));
        // Woken by its event within the limit: grown back.
        w.settle_woken(&ended(&w, Duration::from_micros(30), false), true);
        assert_eq!(w.get(), Duration::from_micros(40));
        // Woken by its event, but late: halved.
        w.settle_woken(&ended(&w, Duration::from_micros(41), false), true);
        assert_eq!(w.get(), Duration::from_micros(20));
    }

    #[test]
    fn the_doorbell_rule_grows_only_on_a_catch() {
        let mut w = Window::new(Duration::from_micros(40), CONTENDED_NS);
        w.settle_caught(false);
        assert_eq!(w.get(), Duration::from_micros(20));
        w.settle_caught(true);
        assert_eq!(w.get(), Duration::from_micros(40));
        for _ in 0..20 {
            w.settle_caught(false);
        }
        assert_eq!(w.get(), Duration::ZERO);
        // A message already there when the wait looked reopens it.
        w.settle_caught(true);
        assert_eq!(w.get(), Duration::from_nanos(MIN_WINDOW_NS));
    }

    #[test]
    fn a_busy_spin_stops_at_the_end_of_its_window_without_yielding() {
        let w = Window::new(Duration::from_micros(200), CONTENDED_NS);
        // The clock starts before the spin does: the spin ends at its own
        // start plus the window, which is after `t` plus the window.
        let t = Instant::now();
        let mut s = w.start();
        let mut looks = 0u32;
        while s.go_on_busy() {
            looks += 1;
        }
        assert!(looks > 0 || s.contended);
        assert!(t.elapsed() >= Duration::from_micros(200) || s.contended);
        assert!(!s.go_on_busy(), "over stays over");
        // A window of 0 never spins.
        let mut off = Window::new(Duration::ZERO, CONTENDED_NS).start();
        assert!(!off.go_on_busy());
    }

    #[test]
    fn a_spin_stops_at_the_end_of_its_window() {
        let w = Window::new(Duration::from_micros(200), CONTENDED_NS);
        // The clock starts before the spin does: the spin ends at its own
        // start plus the window, which is after `t` plus the window.
        let t = Instant::now();
        let mut s = w.start();
        let mut looks = 0;
        while s.go_on() {
            looks += 1;
        }
        assert!(looks > 0 || s.contended);
        assert!(t.elapsed() >= Duration::from_micros(200) || s.contended);
        assert!(!s.go_on(), "over stays over");
    }

    /// A window shrunk to a quarter of its limit or less spins the whole
    /// limit at every sixteenth wait; a probe that catches what it waits
    /// for reopens the window, one that runs out leaves it shrunk.
    #[test]
    fn a_shrunk_window_probes_with_the_whole_limit_every_sixteenth_wait() {
        let limit = Duration::from_micros(40);
        let mut w = Window::new(limit, CONTENDED_NS);
        let long = Duration::from_micros(41);
        for _ in 0..20 {
            w.settle(&ended(&w, long, false));
        }
        assert_eq!(w.get(), Duration::ZERO);
        let mut probes = 0;
        for k in 1..=32 {
            let s = w.start_probing();
            if s.probe {
                probes += 1;
                assert_eq!(k % PROBE_EVERY, 0, "wait {k} probed");
                assert!(!s.over && s.end - s.began == limit);
                // It ran out too: the window stays shut.
                let mut out = s;
                out.over = true;
                out.began = Instant::now() - long;
                w.settle(&out);
            } else {
                assert!(s.over, "wait {k}: a shut window does not spin");
                w.settle(&ended(&w, long, false));
            }
            assert_eq!(w.get(), Duration::ZERO);
        }
        assert_eq!(probes, 2);
        // A probe that catches it: the whole limit again.
        let s = loop {
            let s = w.start_probing();
            if s.probe {
                break s;
            }
        };
        w.settle(&s);
        assert_eq!(w.get(), limit);
        // An open window never probes.
        for _ in 0..40 {
            assert!(!w.start_probing().probe);
        }
    }
}
