//! Messages this process wrote without a doorbell because they took their
//! reader's token, noted so that they are rung for late if still unread
//! when this process is about to sleep in the kernel.
//!
//! An epoll waiter lets its tokens stand between its waits (`epoll`): a
//! busy event loop then finds its messages on the pages at its next wait,
//! and neither end makes a system call per message. But a message that
//! takes such a token may meet a reader that is not looking at the page:
//! one asleep in the kernel on that socket by a path the library does not
//! see (a nested epoll set, another process after a fork, a raw system
//! call). So the writer keeps the kernel's rule true itself: before it
//! sleeps in the kernel (where it could wait for that reader's answer for
//! ever), it rings the doorbell of every such message still unread
//! (`Direction::ring_late`). Not at once: a writer that sleeps right after
//! its message (the usual event loop, waiting for the answer) first sleeps
//! for what is left of `VIARUN_LATE_RING_US` (1 ms) since the first such
//! message, woken as usual by its own descriptors; a reader that looks at
//! its pages has used the message up by then, and nothing is rung. A
//! reader that does not is woken that much later, never not at all.

use std::cell::Cell;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use libc::c_int;

use crate::link::Link;

/// Connections noted (so that a wait with none pays one load).
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// (descriptor written on, the connection's page: `Link::page_id`), and
/// when the first of them was noted.
static NOTED: Mutex<Noted> = Mutex::new(Noted {
    list: Vec::new(),
    since: None,
});

struct Noted {
    list: Vec<(RawFd, usize)>,
    since: Option<Instant>,
}

fn noted() -> std::sync::MutexGuard<'static, Noted> {
    NOTED.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long after a message that took a token a writer about to sleep
/// rings for it late.
fn grace() -> Duration {
    static GRACE: OnceLock<Duration> = OnceLock::new();
    *GRACE.get_or_init(|| {
        let us = std::env::var("VIARUN_LATE_RING_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1000);
        Duration::from_micros(us)
    })
}

thread_local! {
    /// This thread is ringing (a doorbell's send may wait, and a wait
    /// rings: not again from inside).
    static RINGING: Cell<bool> = const { Cell::new(false) };
}

/// A message written on `fd` of `link` took its reader's token.
pub fn note(fd: RawFd, link: &Link) {
    if link.note_unrung() {
        let mut n = noted();
        n.list.push((fd, link.page_id()));
        n.since.get_or_insert_with(Instant::now);
        COUNT.fetch_add(1, Ordering::AcqRel);
    }
}

/// Before a sleep in the kernel: rings late for every noted message that
/// is still unread.
pub fn ring_all() {
    if COUNT.load(Ordering::Acquire) == 0 || RINGING.with(|r| r.replace(true)) {
        return;
    }
    let taken = {
        let mut n = noted();
        n.since = None;
        std::mem::take(&mut n.list)
    };
    COUNT.fetch_sub(taken.len(), Ordering::AcqRel);
    let busy: Vec<(RawFd, usize)> = taken
        .into_iter()
        .filter(|&(fd, page)| !crate::conn::ring_unrung(fd, page))
        .collect();
    if !busy.is_empty() {
        // Their connections were being changed: at the next sleep.
        let count = busy.len();
        let mut n = noted();
        n.list.extend(busy);
        n.since.get_or_insert_with(Instant::now);
        COUNT.fetch_add(count, Ordering::AcqRel);
    }
    RINGING.with(|r| r.set(false));
}

/// A sleep in the kernel, `wait(limit)` (None: no limit; it returns 0
/// when the time ran out with nothing to report): with messages noted, it
/// first sleeps until their grace is over, then rings late for those still
/// unread, then sleeps the rest. `wait` must be callable again after it
/// returned 0.
pub fn sleep(limit: Option<Duration>, mut wait: impl FnMut(Option<Duration>) -> c_int) -> c_int {
    if COUNT.load(Ordering::Acquire) == 0 || limit == Some(Duration::ZERO) {
        return wait(limit);
    }
    let start = Instant::now();
    let since = noted().since;
    if let Some(due) = since.map(|s| s + grace()) {
        let first = due.saturating_duration_since(start);
        if !first.is_zero() {
            if limit.is_some_and(|l| l <= first) {
                // Over before the grace: the next sleep rings.
                return wait(limit);
            }
            let r = wait(Some(first));
            if r != 0 {
                return r;
            }
        }
    }
    ring_all();
    wait(limit.map(|l| l.saturating_sub(start.elapsed())))
}

/// `sleep` for a C timeout in milliseconds (negative: no limit).
pub fn sleep_ms(timeout_ms: i64, mut wait: impl FnMut(c_int) -> c_int) -> c_int {
    let limit = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
    sleep(limit, |l| {
        wait(l.map_or(-1, |d| {
            d.as_nanos().div_ceil(1_000_000).min(c_int::MAX as u128) as c_int
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sleep with a message noted first waits out the grace, then rings
    /// (the list empties), then sleeps the rest; one shorter than the
    /// grace leaves the ringing to the next.
    #[test]
    fn a_sleep_rings_after_the_grace_and_not_before() {
        {
            let mut n = noted();
            // A descriptor no connection has: ringing finds nothing.
            n.list.push((-7, 1));
            // Noted "in a second": the grace is not over whatever the
            // test's own speed.
            n.since = Some(Instant::now() + Duration::from_secs(1));
            COUNT.fetch_add(1, Ordering::AcqRel);
        }
        let mut asked = Vec::new();
        let r = sleep(Some(Duration::from_micros(200)), |l| {
            asked.push(l);
            0
        });
        assert_eq!(r, 0);
        assert_eq!(
            asked,
            [Some(Duration::from_micros(200))],
            "within the grace"
        );
        assert_eq!(COUNT.load(Ordering::Acquire), 1, "still noted");

        asked.clear();
        noted().since = Some(Instant::now() + Duration::from_millis(20));
        sleep(Some(Duration::from_millis(50)), |l| {
            asked.push(l);
            0
        });
        assert_eq!(asked.len(), 2, "the grace, then the rest: {asked:?}");
        let first = asked[0].expect("a limit");
        assert!(
            first > Duration::ZERO && first <= grace() + Duration::from_millis(20),
            "{first:?}"
        );
        let rest = asked[1].expect("a limit");
        assert!(
            rest < Duration::from_millis(50) && rest > Duration::from_millis(40),
            "{rest:?}"
        );
        assert_eq!(COUNT.load(Ordering::Acquire), 0, "rung");
        assert!(noted().list.is_empty());

        asked.clear();
        sleep(None, |l| {
            asked.push(l);
            0
        });
        assert_eq!(asked, [None], "nothing noted: one sleep as asked");
    }
}
