//! Messages this process wrote without a doorbell because they took their
//! reader's token, noted so that they are rung for late if still unread
//! when this process is about to sleep in the kernel.
//!
//! An epoll, poll or select waiter lets its tokens stand between its
//! waits (`spinwait::report`): a
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
//! its pages has used the message up by then, and nothing is rung. Nor
//! for a reader still busy with a batch of events: a reader's waits, and
//! its reads and writes between them, stamp the pages of the sets it
//! waits on (`epoll::stamp_mine`, at most every 250 µs), and a message
//! whose reader stamped its page within two graces is looked at again a
//! grace later instead. A reader that stopped looking is woken about two
//! graces late, never not at all.

use std::cell::Cell;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use libc::c_int;

use crate::control::{Control, Side};
use crate::link::Link;

/// Connections noted (so that a wait with none pays one load).
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Looks in a row that kept messages for readers still looking: each
/// puts the next look off twice as long (up to `LONGEST_PUT_OFF`), so a
/// writer whose reader looks but does not read (it chose not to, under
/// EPOLLET) is not woken a thousand times a second meanwhile.
static PUT_OFF: AtomicUsize = AtomicUsize::new(0);
const LONGEST_PUT_OFF: Duration = Duration::from_millis(64);
/// The connections noted, and when the first of them was (or when the
/// last look found their readers still looking).
static NOTED: Mutex<Noted> = Mutex::new(Noted {
    list: Vec::new(),
    since: None,
});

/// A noted connection: the descriptor written on, its page's address
/// (`Link::page_id`), the page itself (looked at without the table) and
/// the side whose messages took tokens.
type Entry = (RawFd, usize, Weak<Control>, Side);

struct Noted {
    list: Vec<Entry>,
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

/// Whether the reader of `side`'s messages on `control` looked at them in
/// a wait recently enough (within two graces and a stamp's interval) to
/// be counted on to look again: then it needs no late doorbell.
fn reader_looks(control: &Control, side: Side) -> bool {
    let live = 2 * grace().as_micros() as u64 + crate::spinwait::LOOK_STAMP_US;
    crate::spinwait::now_us().saturating_sub(control.looked(side)) < live
}

thread_local! {
    /// This thread is ringing (a doorbell's send may wait, and a wait
    /// rings: not again from inside).
    static RINGING: Cell<bool> = const { Cell::new(false) };
}

/// A message written on `fd` of `link` took its reader's token.
pub fn note(fd: RawFd, link: &Link) {
    if link.note_unrung() {
        let (page, side) = link.unrung_handle();
        let mut n = noted();
        n.list.push((fd, link.page_id(), page, side));
        n.since.get_or_insert_with(Instant::now);
        COUNT.fetch_add(1, Ordering::AcqRel);
    }
}

/// Before a sleep in the kernel: rings late for every noted message that
/// is still unread and whose reader has stopped looking; keeps those
/// whose reader still looks (for the next look, a grace later).
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
    let mut kept: Vec<Entry> = Vec::new();
    for (fd, page_id, page, side) in taken {
        // A connection closed meanwhile: its reader sees the end.
        let Some(control) = page.upgrade() else {
            continue;
        };
        // Unlisted first, then looked at: a message that takes a token
        // from now on lists it again (at worst twice, which is harmless).
        control.noted.store(false, Ordering::Release);
        if !control.tx(side).unrung() {
            continue; // used up: nothing is due
        }
        if reader_looks(&control, side) || !crate::conn::ring_unrung(fd, page_id) {
            // Its reader still looks (or its connection was being
            // changed): look again a grace later.
            control.noted.store(true, Ordering::Release);
            kept.push((fd, page_id, page, side));
        }
    }
    if kept.is_empty() {
        PUT_OFF.store(0, Ordering::Relaxed);
    } else {
        let count = kept.len();
        let rounds = PUT_OFF.fetch_add(1, Ordering::Relaxed).min(16) as u32;
        // The next look a grace after `since`: put off to 2^rounds graces.
        let later = grace()
            .checked_mul(1 << rounds)
            .unwrap_or(LONGEST_PUT_OFF)
            .min(LONGEST_PUT_OFF)
            .saturating_sub(grace());
        let mut n = noted();
        n.list.extend(kept);
        n.since.get_or_insert_with(|| Instant::now() + later);
        COUNT.fetch_add(count, Ordering::AcqRel);
    }
    RINGING.with(|r| r.set(false));
}

/// A sleep in the kernel, `wait(limit)` (None: no limit; it returns 0
/// when the time ran out with nothing to report): with messages noted, it
/// sleeps in parts, until each grace is over, and rings late for those
/// still unread whose readers stopped looking (`ring_all`), until nothing
/// is noted; then the rest. `wait` must be callable again after it
/// returned 0.
pub fn sleep(limit: Option<Duration>, mut wait: impl FnMut(Option<Duration>) -> c_int) -> c_int {
    // A doorbell's send waiting for room, from inside `ring_all`.
    if RINGING.with(|r| r.get()) {
        return wait(limit);
    }
    let start = Instant::now();
    let _blocked = (limit != Some(Duration::ZERO))
        .then(crate::link::network_blocked)
        .flatten();
    loop {
        let rest = limit.map(|l| l.saturating_sub(start.elapsed()));
        if COUNT.load(Ordering::Acquire) == 0 || rest == Some(Duration::ZERO) {
            return wait(rest);
        }
        // (No time yet: another thread is putting its kept ones back.)
        let due = noted().since.unwrap_or_else(Instant::now) + grace();
        let first = due.saturating_duration_since(Instant::now());
        if !first.is_zero() {
            if rest.is_some_and(|r| r <= first) {
                // Over before the grace: the next sleep rings.
                return wait(rest);
            }
            let r = wait(Some(first));
            if r != 0 {
                return r;
            }
        }
        ring_all();
    }
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

    /// The list is the process's: one test at a time uses it.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    /// A sleep with a message noted first waits out the grace, then rings
    /// (the list empties), then sleeps the rest; one shorter than the
    /// grace leaves the ringing to the next.
    #[test]
    fn a_sleep_rings_after_the_grace_and_not_before() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut n = noted();
            // A descriptor no connection has: ringing finds nothing.
            n.list.push((-7, 1, Weak::new(), Side::Connector));
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
        assert_eq!(asked.len(), 1, "within the grace: one sleep");
        assert!(asked[0].is_some_and(|d| d <= Duration::from_micros(200)));
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

    /// A message still unread whose reader looked at it lately is kept
    /// for a later look; once the reader stops looking, it is rung for
    /// (here: its connection is in no table, so nothing is sent) and
    /// forgotten.
    #[test]
    fn a_reader_that_goes_on_looking_gets_no_late_ring() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let (page, fd) = Control::create().expect("page");
        // SAFETY: closing the memfd just made.
        unsafe { libc::close(fd) };
        let page = std::sync::Arc::new(page);
        let writer = Side::Connector;
        assert!(page.rx(Side::Acceptor).offer_token(0, usize::MAX));
        assert_eq!(
            page.tx(writer).announce(8),
            Some(crate::control::Announced::TookToken)
        );
        page.set_looked(writer, crate::spinwait::now_us());
        page.noted.store(true, Ordering::Release);
        {
            let mut n = noted();
            n.list
                .push((-9, 2, std::sync::Arc::downgrade(&page), writer));
            COUNT.fetch_add(1, Ordering::AcqRel);
        }
        ring_all();
        assert_eq!(COUNT.load(Ordering::Acquire), 1, "kept: its reader looks");
        assert!(page.noted.load(Ordering::Acquire));
        page.set_looked(writer, 0);
        ring_all();
        assert_eq!(
            COUNT.load(Ordering::Acquire),
            0,
            "its reader stopped looking"
        );
        assert!(!page.noted.load(Ordering::Acquire));
        assert!(noted().list.is_empty());
    }
}
