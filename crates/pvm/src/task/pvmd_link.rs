//! The task's socket to its pvmd, seen as a lifeline. Stock libpvm learns
//! that its pvmd died from EOF on this socket, and from then on every call
//! fails with PvmSysErr. Here messages between local tasks go through the
//! pool, not the socket, so a task may go on for ever without reading it:
//! calls therefore look at the socket for a hangup (at most every
//! [`CHECK_EVERY`], a `poll` with no wait), a blocked receive wakes at least
//! that often to look, and once the pvmd is known gone the task stays
//! marked so. Writes to the socket never raise SIGPIPE (a C task would die
//! of it): they report EPIPE instead, which marks the task too.

use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// How often a task looks for its pvmd's hangup: the bound on how late a
/// call, or a receive already blocked, learns that the pvmd died.
pub const CHECK_EVERY: Duration = Duration::from_millis(200);

/// Whether the pvmd is still at the other end of the socket.
#[derive(Debug)]
pub(super) struct Lifeline {
    gone: bool,
    next_check: Instant,
}

impl Lifeline {
    pub(super) fn new() -> Lifeline {
        Lifeline {
            gone: false,
            next_check: Instant::now() + CHECK_EVERY,
        }
    }

    pub(super) fn gone(&self) -> bool {
        self.gone
    }

    /// The socket failed (EOF, EPIPE, a reset): the pvmd is gone for good.
    pub(super) fn cut(&mut self) {
        self.gone = true;
    }

    /// False once the pvmd is known gone; looks at `sock` when the last look
    /// is older than [`CHECK_EVERY`] (or always, with `now_anyway`).
    pub(super) fn alive(&mut self, sock: &UnixStream, now_anyway: bool) -> bool {
        if self.gone {
            return false;
        }
        let now = Instant::now();
        if !now_anyway && now < self.next_check {
            return true;
        }
        self.next_check = now + CHECK_EVERY;
        if hung_up(sock) {
            self.gone = true;
        }
        !self.gone
    }

    /// When a blocked wait must wake next to look again.
    pub(super) fn next_look(&self, deadline: Option<Instant>) -> Instant {
        let look = Instant::now() + CHECK_EVERY;
        deadline.map_or(look, |d| d.min(look))
    }
}

/// True when the peer of a stream socket has closed it. Unread bytes the
/// pvmd wrote before it died do not hide the hangup: POLLHUP/POLLRDHUP are
/// reported beside POLLIN.
fn hung_up(sock: &UnixStream) -> bool {
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// The writing half of the socket: `send` with MSG_NOSIGNAL, so a dead
/// pvmd shows as an EPIPE error rather than a signal that kills the task.
pub(super) struct NoSigPipe(pub(super) UnixStream);

impl Write for NoSigPipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            // SAFETY: buf is valid for buf.len() bytes; the fd is ours.
            let n = unsafe {
                libc::send(
                    self.0.as_raw_fd(),
                    buf.as_ptr().cast(),
                    buf.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_peer_is_seen_at_once_even_with_unread_bytes() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut life = Lifeline::new();
        assert!(life.alive(&a, true));
        b.write_all(b"last words").unwrap();
        assert!(life.alive(&a, true), "unread bytes are not a hangup");
        drop(b);
        assert!(!life.alive(&a, true));
        assert!(!life.alive(&a, false), "gone stays gone");
    }
}
