//! poll and ppoll on carried connections: as `epoll` does for its sets,
//! a call that names carried connections for reading looks at their
//! pages, and with nothing ready spins with a token on each for
//! `VIARUN_SPIN_US` before it sleeps in the kernel (`spinwait`), so a
//! message that comes meanwhile needs no doorbell. A call with something
//! to report leaves the other tokens standing until the next wait, as
//! epoll's does (`spinwait::report`). No table: the call names its
//! descriptors.

use std::time::Instant;

use libc::{c_int, nfds_t, pollfd};

use crate::carried::Carried;
use crate::conn;
use crate::netwait;
use crate::real::real;
use crate::spinwait::{self, Outcome};
use crate::unrung;
use crate::waitspin;

std::thread_local! {
    /// When this thread's last call stamped its connections (µs).
    static STAMPED: std::sync::atomic::AtomicU64 = const { std::sync::atomic::AtomicU64::new(0) };
}

const READ_EVENTS: i16 = libc::POLLIN | libc::POLLRDNORM;

/// Looks at the carried connections `fds` names for reading; None if it
/// names none (the caller asks the kernel as usual). `now` is a kernel
/// poll of 0 ms on `fds`.
fn look(
    fds: &mut [pollfd],
    timeout_ms: i64,
    now: impl Fn(&mut [pollfd]) -> c_int,
) -> Option<Outcome> {
    let named = fds
        .iter()
        .enumerate()
        .filter(|(_, p)| p.fd >= 0 && p.events & READ_EVENTS != 0)
        .map(|(i, p)| (i, p.fd));
    let (at, held) = spinwait::carried_links(named)?;
    let links: Vec<&dyn Carried> = held.iter().map(|l| &**l).collect();
    STAMPED.with(|t| spinwait::stamp_looked(&links, t));
    let offered = spinwait::offer(&links, timeout_ms != 0);
    let mut n = now(fds);
    let mut run = None;
    if n == 0 && timeout_ms != 0 && !links.iter().any(|l| l.ready_in_user_space()) {
        let run = run.insert(waitspin::thread_start());
        n = spinwait::spin(
            &links,
            &offered,
            spinwait::limit(timeout_ms),
            run,
            fds,
            |f, _| now(f),
        );
    }
    let ready = spinwait::report(&links, &offered, n, timeout_ms, true);
    if n < 0 {
        return Some(Outcome::Done(n));
    }
    for i in ready {
        let p = &mut fds[at[i]];
        if p.revents == 0 {
            n += 1;
        }
        p.revents |= p.events & READ_EVENTS;
    }
    let sleeps = n == 0 && timeout_ms != 0;
    if let Some(run) = run {
        waitspin::thread_done(run, !sleeps);
    }
    if sleeps {
        Some(Outcome::Sleep)
    } else {
        Some(Outcome::Done(n))
    }
}

/// Whether `fds` asks to read a connection carried to another host (and
/// none that takes tokens, which `look` serves): the call looks at the
/// kernel for a while before it sleeps (`netwait`).
fn reads_between_hosts(fds: &[pollfd]) -> bool {
    fds.iter()
        .any(|p| p.fd >= 0 && p.events & READ_EVENTS != 0 && conn::rung_from_another_host(p.fd))
}

/// The program's array as a slice (empty if it gave none).
fn array<'a>(fds: *mut pollfd, nfds: nfds_t) -> &'a mut [pollfd] {
    if fds.is_null() || nfds == 0 {
        return &mut [];
    }
    // SAFETY: the program's array of `nfds` entries, ours for the call.
    unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) }
}

fn poll_with(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    let start = Instant::now();
    let kernel = |f: &mut [pollfd], ms: c_int| -> c_int {
        // SAFETY: the program's array, `f.len()` entries.
        unsafe { (real().poll)(f.as_mut_ptr(), f.len() as nfds_t, ms) }
    };
    let fds_now = array(fds, nfds);
    match look(fds_now, timeout.into(), |f| kernel(f, 0)) {
        None if reads_between_hosts(array(fds, nfds)) => {
            netwait::poll_look_then_sleep(spinwait::limit_of_ms(timeout), |l| {
                kernel(array(fds, nfds), spinwait::ms_of(l))
            })
        }
        // SAFETY: the program's arguments, passed on as they came (the
        // timeout perhaps in two parts).
        None => unrung::sleep_ms(timeout.into(), |ms| unsafe { (real().poll)(fds, nfds, ms) }),
        Some(Outcome::Done(n)) => n,
        Some(Outcome::Sleep) => {
            let rest = if timeout < 0 {
                -1
            } else {
                let spent = start.elapsed().as_millis().min(c_int::MAX as u128) as c_int;
                (timeout - spent).max(0)
            };
            waitspin::after_sleep(unrung::sleep_ms(rest.into(), |ms| {
                kernel(array(fds, nfds), ms)
            }))
        }
    }
}

/// # Safety
/// The C prototype of poll(2).
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    if openvia_core::transport_busy() {
        // The core waiting on descriptors of its own (see data_hook).
        return (real().poll)(fds, nfds, timeout);
    }
    crate::guarded(-1, || poll_with(fds, nfds, timeout))
}

/// # Safety
/// The C prototype of glibc's fortified poll.
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: c_int,
    _fdslen: libc::size_t,
) -> c_int {
    crate::guarded(-1, || poll_with(fds, nfds, timeout))
}

fn ppoll_with(
    fds: *mut pollfd,
    nfds: nfds_t,
    tmo: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    let start = Instant::now();
    // SAFETY: the program's timeout, if it gave one.
    let limit = spinwait::limit_of(unsafe { tmo.as_ref() });
    let timeout_ms = spinwait::millis(limit);
    let kernel = |f: &mut [pollfd], t: *const libc::timespec| -> c_int {
        // SAFETY: the program's array and signal mask; `t` ours or theirs.
        unsafe { (real().ppoll)(f.as_mut_ptr(), f.len() as nfds_t, t, sigmask) }
    };
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match look(array(fds, nfds), timeout_ms, |f| kernel(f, &zero)) {
        None if reads_between_hosts(array(fds, nfds)) => {
            netwait::poll_look_then_sleep(limit, |l| {
                let t = l.map(spinwait::timespec);
                kernel(array(fds, nfds), t.as_ref().map_or(std::ptr::null(), |t| t))
            })
        }
        None => unrung::sleep(limit, |l| {
            let t = l.map(spinwait::timespec);
            kernel(array(fds, nfds), t.as_ref().map_or(std::ptr::null(), |t| t))
        }),
        Some(Outcome::Done(n)) => n,
        Some(Outcome::Sleep) => {
            let rest = limit.map(|d| d.saturating_sub(start.elapsed()));
            waitspin::after_sleep(unrung::sleep(rest, |l| {
                let t = l.map(spinwait::timespec);
                kernel(array(fds, nfds), t.as_ref().map_or(std::ptr::null(), |t| t))
            }))
        }
    }
}

/// # Safety
/// The C prototype of ppoll(2).
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    nfds: nfds_t,
    tmo: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    crate::guarded(-1, || ppoll_with(fds, nfds, tmo, sigmask))
}

/// # Safety
/// The C prototype of glibc's fortified ppoll.
#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    nfds: nfds_t,
    tmo: *const libc::timespec,
    sigmask: *const libc::sigset_t,
    _fdslen: libc::size_t,
) -> c_int {
    crate::guarded(-1, || ppoll_with(fds, nfds, tmo, sigmask))
}
