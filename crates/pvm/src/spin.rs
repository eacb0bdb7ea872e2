//! Spin, then sleep: how long a PVM task waiting for a message (`pvm_recv`
//! on the pool doorbell or on a direct VI) and a pvmd waiting for work
//! poll before they sleep. A message that arrives within the spin costs
//! no wake-up, which on a virtual machine's shared CPUs is the largest
//! part of a small message's time between hosts (docs/pvm.md, "Where the
//! time goes between hosts"). The idea and the unit are the core's
//! `OPENVIA_SPIN_NS` (a Wait's spin); this is PVM's own, since its waits
//! poll a socket or a pool doorbell, not a work queue.
//!
//! The window adapts, as the pool doorbell's always did: it halves each
//! time a wait lasted longer than the setting (the peer is slow or the
//! CPUs are busy elsewhere: spinning would only steal their time) and
//! doubles, up to the setting, each time a wait was shorter. So a program
//! whose messages come seldom stops spinning after a few waits, and a
//! ping-pong that the spin serves keeps it.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The setting (docs/settings.md).
pub const ENV_SPIN: &str = "OPENVIA_PVM_SPIN_NS";
/// Its default: 50 µs, the pool doorbell's spin before the setting existed.
pub const DEFAULT_SPIN_NS: u64 = 50_000;
/// Upper bound of the setting (10 ms): a spin is a short look, never a
/// way to keep a CPU.
pub const MAX_SPIN_NS: u64 = 10_000_000;
/// The window after a spin that paid off from (almost) zero.
const MIN_WINDOW_NS: u64 = 2_000;

/// Reads the setting's value: None (unset) gives the default; anything
/// but a number of ns up to [`MAX_SPIN_NS`] is an error that names it.
pub fn parse_spin(v: Option<&str>) -> Result<Duration, String> {
    let Some(v) = v else {
        return Ok(Duration::from_nanos(DEFAULT_SPIN_NS));
    };
    match v.trim().parse::<u64>() {
        Ok(ns) if ns <= MAX_SPIN_NS => Ok(Duration::from_nanos(ns)),
        Ok(_) => Err(format!(
            "{ENV_SPIN}={v}: at most {MAX_SPIN_NS} ns (a spin is bounded)"
        )),
        Err(_) => Err(format!(
            "{ENV_SPIN}={v}: not a number of nanoseconds (0 sleeps at once)"
        )),
    }
}

/// The setting from the environment, or the error naming it.
pub fn from_env() -> Result<Duration, String> {
    parse_spin(std::env::var(ENV_SPIN).ok().as_deref())
}

/// The spin limit in force for this process (read once). A bad value
/// gives the default after one line on stderr naming the setting; the
/// pvmd refuses to start with one (`bin/pvmd.rs`), so a user sees it.
pub fn limit() -> Duration {
    static LIMIT: OnceLock<Duration> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        from_env().unwrap_or_else(|e| {
            eprintln!("openvia-pvm: {e}; using {DEFAULT_SPIN_NS}");
            Duration::from_nanos(DEFAULT_SPIN_NS)
        })
    })
}

/// A pause between two looks that took longer than this means another
/// process held our CPU for a while (a yield hands the CPU to any runnable
/// process, and a CPU hog keeps it for its whole time slice): spinning
/// then only puts us behind it, whereas a sleeper that is woken preempts
/// it. The spin stops at once. A task's look (its peer is on another
/// host: nothing of ours should need its CPU) tolerates little; a pvmd,
/// which yields to its own tasks doing their work (waking, unpacking,
/// sending: tens of microseconds), tolerates [`PVMD_CONTENDED_NS`].
pub const TASK_CONTENDED_NS: u64 = 30_000;
pub const PVMD_CONTENDED_NS: u64 = 200_000;

/// An adaptive spin window, at most `limit`.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    limit_ns: u64,
    ns: u64,
    /// A pause longer than this ends a spin (`TASK_CONTENDED_NS`, ...).
    contended_ns: u64,
}

impl Window {
    pub fn new(limit: Duration, contended_ns: u64) -> Window {
        let limit_ns = limit.as_nanos().min(u128::from(MAX_SPIN_NS)) as u64;
        Window {
            limit_ns,
            ns: limit_ns,
            contended_ns,
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
        }
    }

    /// The wait of `spin` is over (what it waited for came). It doubles the
    /// window, up to the limit, when the spin caught it, or when it came
    /// within the limit after a spin that merely was too short (so a
    /// window that shrank to nothing grows back); it halves the window
    /// when the wait was longer than the limit (spinning would only have
    /// taken the CPUs from others) or the spin found its CPU taken.
    pub fn settle(&mut self, spin: &Spin) {
        let short = spin.began.elapsed().as_nanos() <= u128::from(self.limit_ns);
        self.ns = if !spin.over || (short && !spin.contended) {
            (self.ns * 2).max(MIN_WINDOW_NS).min(self.limit_ns)
        } else {
            self.ns / 2
        };
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
}

impl Spin {
    /// Pauses (see [`pause`]) and says whether to look again: false once
    /// the window is used up, or when the pause showed another process
    /// holding our CPU; from then on always false.
    pub fn go_on(&mut self) -> bool {
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
/// of a spin: with two CPUs shared by four processes (two tasks, two
/// pvmds) the peer that will answer may be waiting for this one.
pub fn pause() {
    for _ in 0..32 {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_refused_naming_the_setting() {
        assert_eq!(parse_spin(None), Ok(Duration::from_nanos(DEFAULT_SPIN_NS)));
        assert_eq!(parse_spin(Some("0")), Ok(Duration::ZERO));
        assert_eq!(parse_spin(Some("20000")), Ok(Duration::from_micros(20)));
        for bad in ["abc", "-1", "1.5", "", "10000001"] {
            let e = parse_spin(Some(bad)).unwrap_err();
            assert!(e.starts_with(&format!("{ENV_SPIN}={bad}:")), "{e}");
        }
    }

    /// A spin that ended, a wait of `waited` after its start.
    fn ended(w: &Window, waited: Duration, caught: bool) -> Spin {
        let mut s = w.start();
        s.began = Instant::now() - waited;
        s.over = !caught;
        s
    }

    #[test]
    fn window_halves_when_unpaid_and_grows_back_to_the_limit() {
        let mut w = Window::new(Duration::from_micros(40), TASK_CONTENDED_NS);
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
        let mut off = Window::new(Duration::ZERO, TASK_CONTENDED_NS);
        off.settle(&ended(&off, Duration::ZERO, true));
        assert_eq!(off.get(), Duration::ZERO);
    }

    #[test]
    fn the_doorbell_rule_grows_only_on_a_catch() {
        let mut w = Window::new(Duration::from_micros(40), TASK_CONTENDED_NS);
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
    fn a_spin_stops_at_the_end_of_its_window() {
        let w = Window::new(Duration::from_micros(200), TASK_CONTENDED_NS);
        let mut s = w.start();
        let t = Instant::now();
        let mut looks = 0;
        while s.go_on() {
            looks += 1;
        }
        assert!(looks > 0 || s.contended);
        assert!(t.elapsed() >= Duration::from_micros(200) || s.contended);
        assert!(!s.go_on(), "over stays over");
    }
}
