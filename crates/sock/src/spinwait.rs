//! Waiting for readiness on the pages before the kernel, shared by the
//! epoll and poll hooks: offer a token on each carried connection waited
//! for, spin while they stand (asking the kernel now and then for the
//! other descriptors), take them back. A message that took a token rang no
//! doorbell: the caller reports its connection readable itself.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libc::c_int;

use crate::carried::Carried;
use crate::conn;
use crate::waitspin::{Looking, CLOCK_EVERY};

/// Spin turns between two asks of the kernel for the other descriptors
/// (a system call each).
const KERNEL_EVERY: u32 = 64;

/// Most carried connections one poll or select may name and still be
/// looked at in user space; past it, only the kernel.
const MOST_LOOKED_AT: usize = 64;

/// What a poll or select's look leaves to its caller.
pub enum Outcome {
    /// Return this (the program's results are written).
    Done(c_int),
    /// Nothing ready: sleep in the kernel for the rest of the timeout
    /// (the program's arguments are as it gave them).
    Sleep,
}

/// Where each looked-at connection stands in the caller's arguments, and
/// its link.
pub type Named = (Vec<usize>, Vec<Arc<dyn Carried>>);

/// The carried connections that take tokens among `fds` (each with the
/// caller's own index); None if there are none, or too many.
pub fn carried_links(fds: impl Iterator<Item = (usize, RawFd)>) -> Option<Named> {
    let (mut at, mut held) = (Vec::new(), Vec::new());
    for (i, fd) in fds {
        if let Some(link) = conn::carried_now(fd) {
            if held.len() == MOST_LOOKED_AT {
                return None;
            }
            at.push(i);
            held.push(link);
        }
    }
    (!held.is_empty()).then_some((at, held))
}

/// CLOCK_MONOTONIC in µs: the same clock in every process of the host.
pub fn now_us() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes our own timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000
}

/// How often a waiter stamps the connections it looks at (`unrung`).
pub const LOOK_STAMP_US: u64 = 250;

/// Stamps `links` as looked at if `last` (the caller's last stamp, µs)
/// is `LOOK_STAMP_US` old: a reader that goes on waiting in the library
/// costs its writers no late doorbell, and its waits write each page's
/// line at most every 250 µs.
pub fn stamp_looked(links: &[&dyn Carried], last: &std::sync::atomic::AtomicU64) {
    let now = now_us();
    let then = last.load(std::sync::atomic::Ordering::Relaxed);
    if now.saturating_sub(then) < LOOK_STAMP_US {
        return;
    }
    last.store(now, std::sync::atomic::Ordering::Relaxed);
    for l in links {
        l.stamp_looked(now);
    }
}

/// A C timeout in milliseconds for `limit` (None: -1, no limit).
pub fn millis(limit: Option<Duration>) -> i64 {
    match limit {
        None => -1,
        Some(d) if d.is_zero() => 0,
        // At least 1 ms: a short wait still spins (at most that long).
        Some(d) => d.as_millis().clamp(1, i64::MAX as u128) as i64,
    }
}

/// A program's timespec timeout as a limit (None: no timeout given);
/// negative fields count as zero.
pub fn limit_of(t: Option<&libc::timespec>) -> Option<Duration> {
    t.map(|t| {
        Duration::new(
            t.tv_sec.max(0) as u64,
            t.tv_nsec.clamp(0, 999_999_999) as u32,
        )
    })
}

/// `d` as a timespec.
pub fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// Offers a token on each of `links` (none if `on` is false); which were.
pub fn offer(links: &[&dyn Carried], on: bool) -> Vec<bool> {
    links.iter().map(|l| on && l.offer_poll_token()).collect()
}

/// How long to spin for a wait of `timeout_ms` (negative: no limit).
pub fn limit(timeout_ms: i64) -> Duration {
    let spin = crate::reader::spin_time();
    if timeout_ms >= 0 {
        spin.min(Duration::from_millis(timeout_ms as u64))
    } else {
        spin
    }
}

/// How recent an ask of the kernel a spin that ends may stand on instead of
/// asking again.
const FRESH_ASK: Duration = Duration::from_micros(2);

/// Spins while the tokens `offered` stand and nothing else shows, for
/// `look`'s window and at most `limit`, calling `kernel` (a wait of 0 ms on
/// `state`) every few dozen looks and as it ends; what the last such call
/// returned (0 when a page changed). The caller asked the kernel just
/// before: a spin that ends within `FRESH_ASK` of an ask (a shut window)
/// does not ask again (a backend of eight pgbench clients against eight
/// postgres workers on two CPUs made five epoll_pwait calls a
/// transaction, kernel TCP's one epoll_wait for three).
pub fn spin<S: ?Sized>(
    links: &[&dyn Carried],
    offered: &[bool],
    limit: Duration,
    look: &mut Looking,
    state: &mut S,
    kernel: impl Fn(&mut S, c_int) -> c_int,
) -> c_int {
    let start = Instant::now();
    let mut asked = start;
    let mut turns = 0u32;
    loop {
        let changed = links.iter().zip(offered).any(|(l, &o)| {
            if o {
                !l.poll_token_stands()
            } else {
                l.ready_in_user_space()
            }
        });
        if changed {
            return 0;
        }
        turns = turns.wrapping_add(1);
        if turns % KERNEL_EVERY == 0 {
            let n = kernel(state, 0);
            asked = Instant::now();
            if n != 0 || start.elapsed() >= limit {
                return n;
            }
        }
        if turns % CLOCK_EVERY == 0 && !look.go_on() {
            return if asked.elapsed() < FRESH_ASK {
                0
            } else {
                kernel(state, 0)
            };
        }
        std::hint::spin_loop();
    }
}

/// The indices of `links` to report readable once a look or spin ended
/// with the kernel's `n`. With something to report (`n` events, or a page
/// that shows data; or a call that does not wait) and `stand` allowed,
/// the tokens of the others stand on until the next wait (`epoll`), and a
/// read that uses their messages up offers them again; else, and if the
/// report turns out empty for a call that would sleep (another thread
/// read the data meanwhile), every token comes back first.
pub fn report(
    links: &[&dyn Carried],
    offered: &[bool],
    n: c_int,
    timeout_ms: i64,
    stand: bool,
) -> Vec<usize> {
    let something = n > 0 || timeout_ms == 0 || links.iter().any(|l| l.ready_in_user_space());
    if stand && n >= 0 && something {
        let ready = ready_now(links, offered);
        if !ready.is_empty() || n > 0 || timeout_ms == 0 {
            return ready;
        }
    }
    take_back(links, offered)
}

/// The indices of `links` to report readable, their tokens left standing:
/// those whose token a message took and those whose page shows something.
fn ready_now(links: &[&dyn Carried], offered: &[bool]) -> Vec<usize> {
    let mut ready = Vec::new();
    for (i, (l, &o)) in links.iter().zip(offered).enumerate() {
        l.let_token_stand();
        if (o && !l.poll_token_stands()) || l.ready_in_user_space() {
            ready.push(i);
        }
    }
    ready
}

/// Takes back every token of `links` (those `offered` now, and any an
/// epoll wait let stand); the indices of the connections to report
/// readable: those whose token a message took (on its way, with no
/// doorbell) and those whose page shows something.
fn take_back(links: &[&dyn Carried], offered: &[bool]) -> Vec<usize> {
    let mut ready = Vec::new();
    for (i, (l, &o)) in links.iter().zip(offered).enumerate() {
        let taken = !l.revoke_poll_token() && o;
        if taken || l.ready_in_user_space() {
            ready.push(i);
        }
    }
    ready
}

/// A C timeout in milliseconds as a limit (negative: None, no limit).
pub fn limit_of_ms(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// A limit as a C timeout in milliseconds, rounded up (None: -1).
pub fn ms_of(limit: Option<Duration>) -> c_int {
    limit.map_or(-1, |d| {
        d.as_nanos().div_ceil(1_000_000).min(c_int::MAX as u128) as c_int
    })
}
