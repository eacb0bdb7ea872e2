//! A connection handed back to the kernel as this process let it go.
//!
//! A process that closes a carried connection between hosts after it
//! forked or spawned hands it to the kernel first (the socket may live on
//! in the child). The peer's end answers with its own switch byte and
//! count (`handover`), one round trip later or at its next call. Closed
//! at once, our socket would meet that answer (or doorbells still
//! unread) closed, and the kernel would reset the connection: a peer
//! reading to EOF got ECONNRESET instead, which kernel TCP never gives
//! it. So the library keeps a copy of the socket a little longer, takes
//! the peer's switch prefix off it as it comes (as a reader would: the
//! hand-over page, shared with any child still holding the socket, says
//! how far it got), and closes the copy when plain data is next, at EOF,
//! or after [`LINGER`]. One thread does it for all such sockets of the
//! process.

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::switched::NetSwitched;
use crate::real::real;

/// The longest a closed connection waits for its peer's switch prefix.
const LINGER: Duration = Duration::from_secs(2);

struct Lingering {
    fd: RawFd,
    switched: Arc<NetSwitched>,
    until: Instant,
}

/// The sockets lingering, and the process whose thread looks after them.
struct Held {
    pid: u32,
    list: Vec<Lingering>,
}

static HELD: Mutex<Held> = Mutex::new(Held {
    pid: 0,
    list: Vec::new(),
});

fn close(fd: RawFd) {
    // SAFETY: a copy of ours, closed once.
    unsafe { (real().close)(fd) };
}

/// Called as the program lets `fd` go, after the hand-over: done at once
/// if the peer's prefix is off already, else a copy lingers.
pub fn hold(fd: RawFd, switched: Arc<NetSwitched>) {
    if switched.settle_for_close(fd) != Some(false) {
        return;
    }
    let copy = crate::kernel::dup_high(fd, true);
    if copy < 0 {
        return;
    }
    let me = crate::process::id();
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    if held.pid != me {
        // Copies inherited from a parent are not ours to wait on.
        for l in held.list.drain(..) {
            close(l.fd);
        }
        held.pid = me;
        if std::thread::Builder::new()
            .name("viarun-linger".into())
            .spawn(watch)
            .is_err()
        {
            held.pid = 0;
            close(copy);
            return;
        }
    }
    held.list.push(Lingering {
        fd: copy,
        switched,
        until: Instant::now() + LINGER,
    });
}

/// The thread: waits for any lingering socket to become readable, settles
/// what came, lets go of those done; ends when none is left (the next
/// `hold` starts another), so an idle process has no thread waking.
fn watch() {
    let me = crate::process::id();
    loop {
        let mut fds: Vec<libc::pollfd> = {
            let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
            if held.pid != me {
                return;
            }
            let now = Instant::now();
            held.list.retain(|l| {
                let done = now >= l.until || l.switched.settle_for_close(l.fd) != Some(false);
                if done {
                    close(l.fd);
                }
                !done
            });
            if held.list.is_empty() {
                // Done: the next hold starts a thread again.
                held.pid = 0;
                return;
            }
            held.list
                .iter()
                .map(|l| libc::pollfd {
                    fd: l.fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect()
        };
        // SAFETY: `fds` is our own array of pollfds (descriptors this
        // module holds); the C library's poll, not this library's hook.
        unsafe { (real().poll)(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 20) };
    }
}

/// In a child just forked: its copies of our lingering sockets would keep
/// the connections open (no EOF at the peer) for as long as it lives.
pub fn forked_child() {
    // The parent's thread may have held the lock at the fork: then the
    // copies stay (closed at exec, they are close-on-exec).
    if let Ok(mut held) = HELD.try_lock() {
        for l in held.list.drain(..) {
            close(l.fd);
        }
        held.pid = 0;
    }
}

/// At exit: the lingering sockets would close with the process; waits
/// for them (their peers' prefixes usually come within a round trip) for
/// at most `limit`.
pub fn wait_all(limit: Duration) {
    let start = Instant::now();
    let me = crate::process::id();
    while start.elapsed() < limit {
        {
            let held = HELD.lock().unwrap_or_else(|e| e.into_inner());
            if held.pid != me || held.list.is_empty() {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
