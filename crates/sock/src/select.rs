//! select and pselect on carried connections: as `poll` does, a call
//! whose read set names carried connections looks at their pages, and
//! with nothing ready spins with a token on each for `VIARUN_SPIN_US`
//! before it sleeps in the kernel (`spinwait`). The kernel's own select
//! (with a zero timeout, on copies of the program's sets) answers for
//! everything else.

use std::time::{Duration, Instant};

use libc::{c_int, fd_set};

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

/// The three sets as the program gave them (None: a null pointer).
#[derive(Clone, Copy)]
struct Sets {
    read: fd_set,
    write: Option<fd_set>,
    except: Option<fd_set>,
}

/// One kernel select with a zero timeout on copies of `given`.
struct Now {
    given: Sets,
    got: Sets,
    n: c_int,
}

fn empty() -> fd_set {
    // SAFETY: fd_set is plain bits; FD_ZERO clears them all.
    unsafe {
        let mut s: fd_set = std::mem::zeroed();
        libc::FD_ZERO(&mut s);
        s
    }
}

fn has(set: &fd_set, fd: c_int) -> bool {
    // SAFETY: `fd` is below FD_SETSIZE (the caller's bound).
    unsafe { libc::FD_ISSET(fd, set) }
}

fn ask_now(nfds: c_int, state: &mut Now) -> c_int {
    let mut got = state.given;
    let mut zero = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let ptr = |s: &mut Option<fd_set>| s.as_mut().map_or(std::ptr::null_mut(), |s| s as *mut _);
    // SAFETY: our own copies of the program's sets, and a zero timeout.
    let n = unsafe {
        (real().select)(
            nfds,
            &mut got.read,
            ptr(&mut got.write),
            ptr(&mut got.except),
            &mut zero,
        )
    };
    state.got = got;
    state.n = n;
    n
}

/// Looks at the carried connections the read set names; None if it
/// names none (the caller asks the kernel as usual).
///
/// # Safety
/// The set pointers are the program's (each null or valid for the call).
unsafe fn look(
    nfds: c_int,
    read: *mut fd_set,
    write: *mut fd_set,
    except: *mut fd_set,
    timeout_ms: i64,
) -> Option<Outcome> {
    // A program may pass larger sets than fd_set (nfds past FD_SETSIZE):
    // those go to the kernel untouched.
    if read.is_null() || nfds <= 0 || nfds > libc::FD_SETSIZE as c_int {
        return None;
    }
    // SAFETY: the program's sets, each null or valid (the caller's word).
    let given = unsafe {
        Sets {
            read: *read,
            write: write.as_ref().copied(),
            except: except.as_ref().copied(),
        }
    };
    let named = (0..nfds)
        .filter(|&fd| has(&given.read, fd))
        .map(|fd| (fd as usize, fd));
    let (fds, held) = spinwait::carried_links(named)?;
    let links: Vec<&dyn Carried> = held.iter().map(|l| &**l).collect();
    STAMPED.with(|t| spinwait::stamp_looked(&links, t));
    let offered = spinwait::offer(&links, timeout_ms != 0);
    let mut state = Now {
        given,
        got: given,
        n: 0,
    };
    let mut n = ask_now(nfds, &mut state);
    let mut run = None;
    if n == 0 && timeout_ms != 0 && !links.iter().any(|l| l.ready_in_user_space()) {
        let run = run.insert(waitspin::thread_start());
        n = spinwait::spin(
            &links,
            &offered,
            spinwait::limit(timeout_ms),
            run,
            &mut state,
            |s, _| ask_now(nfds, s),
        );
    }
    let ready = spinwait::report(&links, &offered, n, timeout_ms, true);
    if n < 0 {
        return Some(Outcome::Done(n));
    }
    let mut got = state.got;
    if n == 0 {
        // The last ask found nothing: every set comes back empty but for
        // what the pages say.
        got = Sets {
            read: empty(),
            write: given.write.map(|_| empty()),
            except: given.except.map(|_| empty()),
        };
    }
    for i in ready {
        if !has(&got.read, fds[i] as c_int) {
            // SAFETY: fds[i] is below nfds ≤ FD_SETSIZE.
            unsafe { libc::FD_SET(fds[i] as c_int, &mut got.read) };
            n += 1;
        }
    }
    let sleeps = n == 0 && timeout_ms != 0;
    if let Some(run) = run {
        waitspin::thread_done(run, !sleeps);
    }
    if sleeps {
        return Some(Outcome::Sleep);
    }
    // SAFETY: writing back into the program's sets (valid where non-null).
    unsafe {
        *read = got.read;
        if let (Some(w), Some(s)) = (write.as_mut(), got.write) {
            *w = s;
        }
        if let (Some(e), Some(s)) = (except.as_mut(), got.except) {
            *e = s;
        }
    }
    Some(Outcome::Done(n))
}

/// `call` (select or pselect on the program's sets with the time given)
/// made callable again: the program's sets are kept, and put back before
/// every call after the first, so that each waits for the same ones.
fn on_kept_sets(
    read: *mut fd_set,
    write: *mut fd_set,
    except: *mut fd_set,
    call: impl Fn(Option<Duration>) -> c_int,
) -> impl FnMut(Option<Duration>) -> c_int {
    // SAFETY: the program's sets, valid where non-null.
    let kept = unsafe { [read, write, except].map(|p| p.as_ref().copied()) };
    let mut again = false;
    move |l| {
        if again {
            for (p, k) in [read, write, except].into_iter().zip(kept) {
                if let Some(k) = k {
                    // SAFETY: as above (non-null where `k` was taken).
                    unsafe { *p = k };
                }
            }
        }
        again = true;
        call(l)
    }
}

/// The rest of the select in the kernel, through `unrung::sleep`, for at
/// most `limit`, on the program's sets as it gave them (`on_kept_sets`).
/// A read set that names a connection carried to another host (and none
/// that takes tokens: then `look` was None) looks at the kernel for a
/// while first (`netwait`).
fn sleep_on_sets(
    nfds: c_int,
    read: *mut fd_set,
    write: *mut fd_set,
    except: *mut fd_set,
    limit: Option<Duration>,
    call: impl Fn(Option<Duration>) -> c_int,
) -> c_int {
    let call = on_kept_sets(read, write, except, call);
    // SAFETY: the program's read set, valid where non-null.
    if unsafe { reads_between_hosts(nfds, read) } {
        return netwait::poll_look_then_sleep(limit, call);
    }
    unrung::sleep(limit, call)
}

/// Whether the read set names a connection carried to another host.
///
/// # Safety
/// `read` is the program's (null or valid for the call).
unsafe fn reads_between_hosts(nfds: c_int, read: *const fd_set) -> bool {
    // SAFETY: the caller's word.
    let Some(read) = (unsafe { read.as_ref() }) else {
        return false;
    };
    if nfds <= 0 || nfds > libc::FD_SETSIZE as c_int {
        return false;
    }
    (0..nfds).any(|fd| has(read, fd) && conn::rung_from_another_host(fd))
}

fn select_with(
    nfds: c_int,
    read: *mut fd_set,
    write: *mut fd_set,
    except: *mut fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    let start = Instant::now();
    // SAFETY: the program's timeout, if it gave one.
    let limit = unsafe { timeout.as_ref() }.map(|t| {
        Duration::from_secs(t.tv_sec.max(0) as u64)
            + Duration::from_micros(t.tv_usec.clamp(0, 999_999) as u64)
    });
    let kernel = |l: Option<Duration>| {
        let mut tv = l.map(|d| libc::timeval {
            tv_sec: d.as_secs() as libc::time_t,
            tv_usec: d.subsec_micros() as libc::suseconds_t,
        });
        let tp = tv.as_mut().map_or(std::ptr::null_mut(), |t| t as *mut _);
        // SAFETY: the program's sets and our timeout.
        unsafe { (real().select)(nfds, read, write, except, tp) }
    };
    // SAFETY: the program's arguments.
    let r = match unsafe { look(nfds, read, write, except, spinwait::millis(limit)) } {
        None => sleep_on_sets(nfds, read, write, except, limit, kernel),
        Some(Outcome::Done(n)) => n,
        Some(Outcome::Sleep) => {
            let rest = limit.map(|d| d.saturating_sub(start.elapsed()));
            waitspin::after_sleep(unrung::sleep(
                rest,
                on_kept_sets(read, write, except, kernel),
            ))
        }
    };
    // Linux leaves the time not slept in the program's timeout.
    // SAFETY: the program's timeout, if it gave one.
    if let (Some(t), Some(d)) = (unsafe { timeout.as_mut() }, limit) {
        let rest = d.saturating_sub(start.elapsed());
        t.tv_sec = rest.as_secs() as libc::time_t;
        t.tv_usec = rest.subsec_micros() as libc::suseconds_t;
    }
    r
}

/// # Safety
/// The C prototype of select(2).
#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    read: *mut fd_set,
    write: *mut fd_set,
    except: *mut fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    crate::guarded(-1, || select_with(nfds, read, write, except, timeout))
}

/// # Safety
/// The C prototype of pselect(2).
#[no_mangle]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    read: *mut fd_set,
    write: *mut fd_set,
    except: *mut fd_set,
    timeout: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    crate::guarded(-1, || {
        let start = Instant::now();
        // SAFETY: the program's timeout, if it gave one.
        let limit = spinwait::limit_of(unsafe { timeout.as_ref() });
        let kernel = |l: Option<Duration>| {
            let t = l.map(spinwait::timespec);
            let tp = t.as_ref().map_or(std::ptr::null(), |t| t as *const _);
            // SAFETY: the program's sets and mask, and our timeout.
            unsafe { (real().pselect)(nfds, read, write, except, tp, sigmask) }
        };
        // SAFETY: the program's arguments.
        match unsafe { look(nfds, read, write, except, spinwait::millis(limit)) } {
            None => sleep_on_sets(nfds, read, write, except, limit, kernel),
            Some(Outcome::Done(n)) => n,
            Some(Outcome::Sleep) => {
                let rest = limit.map(|d| d.saturating_sub(start.elapsed()));
                waitspin::after_sleep(unrung::sleep(
                    rest,
                    on_kept_sets(read, write, except, kernel),
                ))
            }
        }
    })
}
