//! epoll and eventfd: how the progress thread sleeps until a peer rings it
//! or a connection socket hangs up.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::cvt;

/// An eventfd counter (non-blocking, close-on-exec).
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall with constant flags.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: a fresh descriptor we own.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn from_owned(fd: OwnedFd) -> Self {
        Self(fd)
    }

    /// Adds one to the counter; wakes a poller.
    pub fn signal(&self) {
        signal_raw(self.0.as_raw_fd());
    }

    /// Resets the counter to zero.
    pub fn drain(&self) {
        let mut v = 0u64;
        // SAFETY: reading 8 bytes into a u64 we own; the fd is non-blocking.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.0
    }
}

/// Signals an eventfd given by raw descriptor.
pub fn signal_raw(fd: RawFd) {
    let one = 1u64;
    // SAFETY: writing 8 bytes from a u64 we own; an error (counter overflow)
    // only means the poller is already signalled.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// The events of `fd` among `events` (and errors and hang-ups) right now,
/// by a poll that does not wait; 0 for none.
fn poll_now(fd: RawFd, events: i16) -> i16 {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    if unsafe { libc::poll(&mut p, 1, 0) } == 1 {
        p.revents
    } else {
        0
    }
}

/// Whether `fd` is readable right now: for tests that check an eventfd
/// was or was not signalled.
pub fn readable_now(fd: RawFd) -> bool {
    poll_now(fd, libc::POLLIN) != 0
}

/// Whether the other end of the socket `fd` has hung up (its process
/// closed it or died), without waiting.
pub fn hung_up(fd: RawFd) -> bool {
    poll_now(fd, libc::POLLRDHUP) & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
}

/// An epoll instance.
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: a fresh descriptor we own.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for input and hang-up, tagging events with `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP) as u32,
            u64: token,
        };
        // SAFETY: `ev` is a valid event struct for the call.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    pub fn remove(&self, fd: RawFd) {
        // SAFETY: removing an fd; an error means it was not registered.
        unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Waits for events; returns the tokens that fired.
    pub fn wait(&self, timeout: Option<Duration>, out: &mut Vec<u64>) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 32];
        let ms = timeout.map_or(-1, wait_ms);
        // SAFETY: `evs` has room for 32 events.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 32, ms) };
        out.clear();
        for ev in evs.iter().take(n.max(0) as usize) {
            out.push(ev.u64);
        }
    }
}

/// epoll_wait's timeout for `d`, in whole milliseconds rounded up: cut
/// down, a timer due in 0.6 ms became a wait of 0, and the progress thread
/// looped without sleeping until the timer was due (every 50 ms keepalive
/// of an idle connection cost it ~20 looks and system calls).
fn wait_ms(d: Duration) -> i32 {
    d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
}

#[cfg(test)]
mod wait_ms_tests {
    use super::*;

    #[test]
    fn a_timeout_under_a_millisecond_is_waited_for_not_spun() {
        assert_eq!(wait_ms(Duration::ZERO), 0);
        assert_eq!(wait_ms(Duration::from_nanos(1)), 1);
        assert_eq!(wait_ms(Duration::from_micros(600)), 1);
        assert_eq!(wait_ms(Duration::from_millis(49)), 49);
        assert_eq!(wait_ms(Duration::from_micros(49_001)), 50);
        assert_eq!(wait_ms(Duration::from_secs(u64::MAX)), i32::MAX);
    }
}
