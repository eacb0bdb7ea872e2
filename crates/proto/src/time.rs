//! Virtual time: the core never reads a clock. The caller passes `now` as
//! nanoseconds since any fixed origin, so tests run in simulated time and
//! the device can use `CLOCK_MONOTONIC` directly.

use std::ops::Add;
use std::time::Duration;

/// A point in time, nanoseconds since an origin chosen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

impl Time {
    pub const ZERO: Time = Time(0);

    pub const fn from_nanos(ns: u64) -> Self {
        Self(ns)
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
    /// `d` before this time, if that is not before the origin.
    pub fn checked_sub(self, d: Duration) -> Option<Time> {
        let d = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_sub(d).map(Time)
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}
