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
//!
//! The same thread waits for the acknowledgements of what a connection
//! sent before the program closed it (`acknowledged_later`) or shut it
//! for writing (`shutdown_when_acknowledged`), for any carried link (on
//! one host: until the reader took the messages): the link, its VI still
//! serving the peer, and a copy of the socket (no FIN yet) stay until the
//! peer has acknowledged everything; then the FIN goes. Waited for in the
//! call itself, an event loop stopped for the peer's delayed
//! acknowledgement (nginx between two namespaces: ~50 ms a request; Node,
//! which ends each response with a shutdown, 44 requests a second).

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::switched::NetSwitched;
use crate::carried::Carried;
use crate::real::real;

/// The longest a closed connection waits for its peer's switch prefix.
const LINGER: Duration = Duration::from_secs(2);
/// The longest a closed connection waits for the peer's acknowledgements
/// (as a close did before: `super::LINGER`).
const ACKS_LINGER: Duration = super::LINGER;
/// How often, at most, the thread looks at connections waiting for
/// acknowledgements (the progress thread takes them off the VI); a
/// connection just handed over is looked at sooner (`acks_look`).
const ACKS_LOOK: Duration = Duration::from_millis(1);
/// The first look at a connection waiting for acknowledgements.
const ACKS_FIRST_LOOK: Duration = Duration::from_micros(50);

/// What a lingering copy waits for.
enum Waits {
    /// The peer's switch prefix after our hand-over.
    Switch(Arc<NetSwitched>),
    /// The peer's acknowledgements of what we sent.
    Acks(Arc<dyn Carried>),
    /// The same, then the kernel's shutdown(SHUT_WR) (our FIN) while the
    /// program keeps its descriptor.
    AcksThenShutdown(Arc<dyn Carried>),
}

struct Lingering {
    fd: RawFd,
    waits: Waits,
    until: Instant,
    /// When it began to linger.
    since: Instant,
}

impl Lingering {
    /// Whether it is done (then let go); `now` past its time counts.
    fn done(&self, now: Instant) -> bool {
        now >= self.until
            || match &self.waits {
                Waits::Switch(s) => s.settle_for_close(self.fd) != Some(false),
                // A peer that reset or closed both ways acknowledges
                // nothing more (as the close's own wait gave up then).
                Waits::Acks(link) | Waits::AcksThenShutdown(link) => {
                    !link.unacknowledged() || super::hung_up_both(self.fd)
                }
            }
    }

    /// Lets it go: the link ends, then the copy closes (our FIN); or,
    /// after a shutdown, the FIN goes and the link stays the program's.
    fn let_go(self) {
        match self.waits {
            Waits::Acks(link) => {
                link.shut();
                drop(link);
            }
            Waits::AcksThenShutdown(link) => {
                link.shut();
                // SAFETY: our copy of the program's socket; shutdown acts
                // on the socket, whichever descriptor names it.
                unsafe { (real().shutdown)(self.fd, libc::SHUT_WR) };
            }
            Waits::Switch(_) => {}
        }
        close(self.fd);
    }
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
    let _ = linger(fd, Waits::Switch(switched), LINGER);
}

/// Called as the program closes `fd`, whose `link` has messages the peer
/// has not acknowledged: the link and a copy of the socket stay with the
/// thread until it has, and the close returns now. False if that cannot
/// be done (the caller then waits itself).
pub fn acknowledged_later(fd: RawFd, link: Arc<dyn Carried>) -> bool {
    linger(fd, Waits::Acks(link), ACKS_LINGER)
}

/// Called as the program shuts `fd` for writing, its `link` with messages
/// the peer has not acknowledged: the FIN goes from the thread once it
/// has (or the peer hung up, or `ACKS_LINGER` passed), and the shutdown
/// returns now. An event loop (Node.js ends each response so) waited in
/// the call before, its other connections with it. False if that cannot
/// be done (the caller then waits itself).
pub fn shutdown_when_acknowledged(fd: RawFd, link: Arc<dyn Carried>) -> bool {
    linger(fd, Waits::AcksThenShutdown(link), ACKS_LINGER)
}

/// How long the thread sleeps before it looks again at a connection that
/// has waited `age` for its acknowledgements: a quarter of that, from
/// `ACKS_FIRST_LOOK` up to `ACKS_LOOK`. The peer's acknowledgement mostly
/// comes within a few hundred microseconds (it waits 25 µs for a reply to
/// carry it), while the program's FIN waits for it; looked at every
/// millisecond, a close that lingered (nginx between two namespaces: 39 %
/// of its closes) sent its FIN 1.7 ms late on average.
fn acks_look(age: Duration) -> Duration {
    (age / 4).clamp(ACKS_FIRST_LOOK, ACKS_LOOK)
}

fn linger(fd: RawFd, waits: Waits, limit: Duration) -> bool {
    let copy = crate::kernel::dup_high(fd, true);
    if copy < 0 {
        return false;
    }
    let me = crate::process::id();
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    if held.pid != me {
        // Copies inherited from a parent are not ours to wait on.
        forget_inherited(&mut held);
        held.pid = me;
        if openvia_core::sys::thread::spawn_quiet("viarun-linger", watch).is_err() {
            held.pid = 0;
            close(copy);
            return false;
        }
    }
    held.list.push(Lingering {
        fd: copy,
        waits,
        until: Instant::now() + limit,
        since: Instant::now(),
    });
    true
}

/// A parent's lingering copies, in a child: closed, and its links (their
/// VIs the parent's) left alone.
fn forget_inherited(held: &mut Held) {
    for l in held.list.drain(..) {
        close(l.fd);
        if let Waits::Acks(link) = l.waits {
            std::mem::forget(link);
        }
    }
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
            let (done, left): (Vec<Lingering>, Vec<Lingering>) =
                held.list.drain(..).partition(|l| l.done(now));
            held.list = left;
            for l in done {
                l.let_go();
            }
            if held.list.is_empty() {
                // Done: the next hold starts a thread again.
                held.pid = 0;
                return;
            }
            // Only the copies awaiting a switch prefix are watched in the
            // kernel; acknowledgements come on the VIs (looked at often).
            held.list
                .iter()
                .filter(|l| matches!(l.waits, Waits::Switch(_)))
                .map(|l| libc::pollfd {
                    fd: l.fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect()
        };
        let wait = {
            let held = HELD.lock().unwrap_or_else(|e| e.into_inner());
            held.list
                .iter()
                .filter(|l| matches!(l.waits, Waits::Acks(_) | Waits::AcksThenShutdown(_)))
                .map(|l| acks_look(l.since.elapsed()))
                .min()
                .unwrap_or(Duration::from_millis(20))
        };
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: wait.as_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is our own array of pollfds (descriptors this
        // module holds), `ts` ours; the C library's ppoll, not this
        // library's hook.
        unsafe {
            (real().ppoll)(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
    }
}

/// In a child just forked: its copies of our lingering sockets would keep
/// the connections open (no EOF at the peer) for as long as it lives.
pub fn forked_child() {
    // The parent's thread may have held the lock at the fork: then the
    // copies stay (closed at exec, they are close-on-exec).
    if let Ok(mut held) = HELD.try_lock() {
        forget_inherited(&mut held);
        held.pid = 0;
    }
}

/// At exit: the lingering sockets would close with the process; waits
/// for them (their peers' prefixes usually come within a round trip) for
/// at most `limit`.
pub fn wait_all(limit: Duration) {
    let start = Instant::now();
    let me = crate::process::id();
    // What the peers have not acknowledged would go with the process:
    // waited for here, each as long as a close waited for it before.
    let acks: Vec<Lingering> = {
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        if held.pid != me {
            Vec::new()
        } else {
            let (acks, rest): (Vec<Lingering>, Vec<Lingering>) = held
                .list
                .drain(..)
                .partition(|l| matches!(l.waits, Waits::Acks(_) | Waits::AcksThenShutdown(_)));
            held.list = rest;
            acks
        }
    };
    for l in acks {
        // Looked at, not flushed: the link's flush would watch the
        // program's descriptor number, which may name another file now.
        while !l.done(Instant::now()) {
            std::thread::sleep(ACKS_LOOK);
        }
        l.let_go();
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A close that waits for its acknowledgements is looked at 50 µs
    /// after it began to linger (it was a millisecond), then at a quarter
    /// of its age, never less often than every millisecond.
    #[test]
    fn a_lingering_close_is_looked_at_soon_then_less_often() {
        assert_eq!(acks_look(Duration::ZERO), Duration::from_micros(50));
        assert_eq!(
            acks_look(Duration::from_micros(400)),
            Duration::from_micros(100)
        );
        assert_eq!(
            acks_look(Duration::from_millis(2)),
            Duration::from_micros(500)
        );
        assert_eq!(acks_look(Duration::from_secs(1)), ACKS_LOOK);
    }
}
