//! The hand-over watcher's bell: an abstract Unix datagram socket named,
//! as the library's other endpoints are (`rendezvous::abstract_name`), by
//! the user and the watcher's process id
//! (`openvia-viarun/UID/handover/PID`), which a process asking that
//! process for a hand-over rings with one datagram, so the watcher sleeps
//! while nobody asks instead of looking twenty times a second. Anyone on
//! the host may ring it; a ring only makes the watcher
//! look at its pages, which say themselves whether anything was asked.
//! Abstract names belong to a network namespace: an asker in another one
//! (rare: the processes of one end share a socket) is served by the
//! watcher's slow look (`IDLE_LOOK`).

use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use crate::real::real;

/// How long the watcher sleeps at most while nobody rings.
pub const IDLE_LOOK: Duration = Duration::from_secs(1);

/// This process's bell (-1: none), closed in a forked child (which gets
/// its own watcher and name).
static OURS: AtomicI32 = AtomicI32::new(-1);

fn name(pid: u32) -> Option<SocketAddr> {
    SocketAddr::from_abstract_name(crate::rendezvous::abstract_name("handover", pid)).ok()
}

pub struct Bell(UnixDatagram);

/// This process's bell, bound under its id; None if the name is taken or
/// no socket can be made. Its descriptor is kept high (`dup_high`), out
/// of the program's way.
pub fn open() -> Option<Bell> {
    let sock = UnixDatagram::bind_addr(&name(crate::process::id())?).ok()?;
    let high = crate::kernel::dup_high(sock.as_raw_fd(), true);
    let sock = if high >= 0 {
        drop(sock);
        // SAFETY: a descriptor just made ours by F_DUPFD_CLOEXEC.
        unsafe { UnixDatagram::from_raw_fd(high) }
    } else {
        sock
    };
    sock.set_nonblocking(true).ok()?;
    OURS.store(sock.as_raw_fd(), Ordering::Release);
    Some(Bell(sock))
}

impl Bell {
    /// Sleeps until a ring or `limit`, then takes every ring.
    pub fn wait(&self, limit: Duration) {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = limit.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: one pollfd of ours.
        unsafe { (real().poll)(&mut p, 1, ms) };
        let mut buf = [0u8; 16];
        // SAFETY: into our own buffer, not waiting (the socket is
        // nonblocking).
        while unsafe {
            (real().recv)(
                self.0.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        } >= 0
        {}
    }
}

/// Rings process `pid`'s bell (nothing if it has none, or is gone).
pub fn ring(pid: u32) {
    let Some(to) = name(pid) else { return };
    if let Ok(s) = UnixDatagram::unbound() {
        let _ = s.set_nonblocking(true);
        let _ = s.send_to_addr(&[1], &to);
    }
}

/// In a child just forked: the bell is the parent's; the child's copy of
/// its descriptor goes (its own watcher makes its own).
pub fn forked_child() {
    let fd: RawFd = OURS.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: our copy of the parent's bell, which nothing here uses
        // (the watcher thread did not come across the fork).
        unsafe { (real().close)(fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A ring wakes a waiting bell at once; without one it sleeps its
    /// limit.
    #[test]
    fn a_ring_wakes_the_bell() {
        // A name of its own (not this process's id, which a watcher of
        // another test may hold).
        let pid = 0x7fff_0000 | (std::process::id() & 0xffff);
        let sock = UnixDatagram::bind_addr(&name(pid).unwrap()).unwrap();
        sock.set_nonblocking(true).unwrap();
        let bell = Bell(sock);
        let t = Instant::now();
        bell.wait(Duration::from_millis(30));
        assert!(t.elapsed() >= Duration::from_millis(25), "slept its limit");
        ring(pid);
        let t = Instant::now();
        bell.wait(Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(4), "woken by the ring");
        // Taken: the next wait sleeps again.
        let t = Instant::now();
        bell.wait(Duration::from_millis(30));
        assert!(t.elapsed() >= Duration::from_millis(25));
    }
}
