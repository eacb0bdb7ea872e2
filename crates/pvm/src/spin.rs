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
use std::time::Duration;

/// The setting (docs/settings.md).
pub const ENV_SPIN: &str = "OPENVIA_PVM_SPIN_NS";
/// Its default: 50 µs, the pool doorbell's spin before the setting existed.
pub const DEFAULT_SPIN_NS: u64 = 50_000;
/// Upper bound of the setting (10 ms): the core's bound on any spin.
pub use openvia_core::spin::MAX_SPIN_NS;
/// The adaptive window, one wait's spin and the pause between looks live
/// in the core (`openvia_core::spin`), shared with viarun.
pub use openvia_core::spin::{pause, Spin, Window};

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

/// The spin limit of a task waiting for a message from a task of another
/// host (on the pool doorbell, or on a direct VI): three times
/// [`limit`]. Such a message takes a round trip between hosts (15–100 µs
/// on the 2-vCPU box); `Window::settle` grows a window back only when a
/// message came within the limit, and with the one-host limit a few slow
/// round trips (a wake-up makes them slower still) shrank the window to
/// nothing for good: every message then cost a wake-up (docs/pvm.md,
/// "The receiver's spin for a message from another host").
pub fn remote_limit() -> Duration {
    limit() * 3
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
}
