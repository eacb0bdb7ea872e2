//! EPOLLOUT for a writer told EAGAIN.
//!
//! A nonblocking write to a carried connection says EAGAIN when the data
//! ring or the message slots are full, and the program then waits for its
//! socket to become writable. The kernel socket carries only doorbells,
//! so it never filled and never becomes writable anew: a program that
//! waits for an edge (epoll with EPOLLET, as nginx does) would wait for
//! good. So a write that says EAGAIN hands the connection to this
//! process's room watcher, a thread that looks every 100 µs whether the
//! connection has room again and then *pokes* the socket: it sets
//! TCP_NOTSENT_LOWAT to the value it already has, which makes the kernel
//! run the socket's write-space callback, and that wakes poll, select and
//! epoll waiters with EPOLLOUT (an edge for EPOLLET). Nothing about the
//! socket changes. The thread sleeps while nobody waits.
//!
//! A poke is not always heard: between two namespaces, with doorbells
//! sent at once (TCP_NODELAY), a writer in edge-triggered epoll_wait got
//! no edge from some pokes, the socket writable all the while (compat
//! `epollout-short`, a few dozen pokes a run, stalled in 10 of 11 runs;
//! why the kernel let them pass is not found). So a
//! poked connection stays watched until the program writes on it again
//! (`answered`, from each write while something is watched), and is
//! poked again after 1, 2, 4… ms of silence, eight times at most. An
//! extra edge costs a program that already heard one a write attempt.
//!
//! A level-triggered waiter (poll, select, epoll without EPOLLET) is told
//! writable at once, again and again, while the ring is full: the kernel
//! socket always has room. Such a program writes, gets EAGAIN, waits,
//! writes again, spinning a CPU its reader may need. So a thread whose
//! write on a descriptor says EAGAIN again soon after the last time
//! (`RETRY`) first sleeps until the reader makes room, at most `BACKOFF`
//! ([`backoff`]), and tries once more. A writer that waits for an edge
//! tries again only once there is room, and never waits here.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::carried::Carried;
use crate::conn;
use crate::kernel::inode;

/// How often waiting connections are looked at.
const LOOK: Duration = Duration::from_micros(100);
/// A second EAGAIN on one descriptor within this is a program spinning.
const RETRY: Duration = Duration::from_millis(1);
/// The longest a spinning writer's nonblocking write sleeps for room.
const BACKOFF: Duration = Duration::from_micros(200);
/// Silence after a poke before the next; doubled each time.
const REPOKE: Duration = Duration::from_millis(1);
/// Pokes of one wait at most.
const POKES: u32 = 8;

thread_local! {
    /// This thread's last EAGAINs: (descriptor, when, in ns of
    /// CLOCK_MONOTONIC); a few, for a loop with several full connections.
    static LAST_EAGAIN: std::cell::Cell<[(RawFd, u64); 8]> =
        const { std::cell::Cell::new([(-1, 0); 8]) };
}

/// A nonblocking write on `fd` (carried by `link`) said EAGAIN. If this
/// thread heard that for `fd` less than `RETRY` ago, it is spinning on a
/// level-triggered wait: sleep until the reader makes room (at most
/// `BACKOFF`) and say whether there is room now (then write again).
pub fn backoff(fd: RawFd, link: &dyn Carried) -> bool {
    let now = openvia_core::sys::now_ns();
    let mut last = LAST_EAGAIN.get();
    let slot = last.iter().position(|&(f, _)| f == fd);
    let spinning = slot.is_some_and(|i| now.saturating_sub(last[i].1) < RETRY.as_nanos() as u64);
    // Remember this one (in place of its own entry, else the oldest).
    let i = slot.unwrap_or_else(|| (0..last.len()).min_by_key(|&i| last[i].1).unwrap_or(0));
    last[i] = (fd, now);
    LAST_EAGAIN.set(last);
    if !spinning {
        return false;
    }
    link.wait_room(fd, BACKOFF);
    let room = link.writable();
    if room {
        // Written again at once: the next EAGAIN is no repeat.
        last[i] = (fd, 0);
        LAST_EAGAIN.set(last);
    }
    room
}

struct Waiting {
    fd: RawFd,
    /// The socket's inode: the program may close the descriptor, and the
    /// number may then name something else.
    inode: u64,
    link: Arc<dyn Carried>,
    /// The last poke and how many so far.
    poked: Option<(Instant, u32)>,
}

static WAITING: Mutex<Vec<Waiting>> = Mutex::new(Vec::new());
/// How many connections are watched (a write looks here first).
static WATCHED: AtomicUsize = AtomicUsize::new(0);
static WAKE: Condvar = Condvar::new();
/// The process whose watcher thread runs (a forked child starts its own).
static WATCHER_PID: AtomicU32 = AtomicU32::new(0);

/// A write on `fd` said EAGAIN for want of room: make its socket say
/// writable once there is room.
pub fn watch(fd: RawFd) {
    let Some(link) = conn::carried(fd) else {
        return;
    };
    let Some(inode) = inode(fd) else { return };
    let pid = crate::process::id();
    let mut w = WAITING.lock().unwrap_or_else(|e| e.into_inner());
    if WATCHER_PID.swap(pid, Ordering::AcqRel) != pid {
        // First here, or a child of the process that started the thread:
        // the parent's waiting connections are not ours.
        w.clear();
        if openvia_core::sys::thread::spawn_quiet("viarun-room", watcher).is_err() {
            WATCHER_PID.store(0, Ordering::Release);
            return;
        }
    }
    match w.iter_mut().find(|x| x.fd == fd && x.inode == inode) {
        // Written on since its poke, and full again: poked anew.
        Some(x) => x.poked = None,
        None => w.push(Waiting {
            fd,
            inode,
            link,
            poked: None,
        }),
    }
    WATCHED.store(w.len(), Ordering::Release);
    WAKE.notify_one();
}

/// The program writes on `fd`: a poke it was waiting for was heard, so
/// no other is owed (a write that finds no room watches it again).
pub fn answered(fd: RawFd) {
    if WATCHED.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut w = WAITING.lock().unwrap_or_else(|e| e.into_inner());
    w.retain(|x| x.fd != fd || x.poked.is_none());
    WATCHED.store(w.len(), Ordering::Release);
}

fn watcher() {
    let mut w = WAITING.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        while w.is_empty() {
            w = WAKE.wait(w).unwrap_or_else(|e| e.into_inner());
        }
        let now = Instant::now();
        w.retain_mut(|x| {
            if inode(x.fd) != Some(x.inode) {
                return false; // closed (or the number reused)
            }
            let due = match x.poked {
                None => 0,
                Some((_, n)) if n >= POKES => return false,
                Some((at, n)) if now.duration_since(at) >= REPOKE * (1 << (n - 1)) => n,
                Some(_) => return true,
            };
            if x.link.writable() {
                poke(x.fd);
                x.poked = Some((now, due + 1));
            }
            true
        });
        WATCHED.store(w.len(), Ordering::Release);
        if !w.is_empty() {
            drop(w);
            std::thread::sleep(LOOK);
            w = WAITING.lock().unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Runs `fd`'s write-space callback (see the module's text).
pub fn poke(fd: RawFd) {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int option read into and written from our own int.
    unsafe {
        let p = (&mut v as *mut libc::c_int).cast();
        if libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, p, &mut len) == 0 {
            libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, p, len);
        }
    }
}
