//! The task's socket to its pvmd, seen as a lifeline. Stock libpvm learns
//! that its pvmd died from EOF on this socket, and from then on every call
//! fails with PvmSysErr. Here messages between local tasks go through the
//! pool, not the socket, so a task may go on for ever without reading it.
//! A watcher thread therefore sleeps in `poll` for the socket's hangup
//! only (POLLRDHUP: data arriving does not wake it); when the pvmd is gone
//! it marks the task and rings the task's pool doorbell, so a receive
//! asleep on it wakes and fails at once. Calls then only read a flag, and
//! a receive keeps its untimed sleep (a timed futex wait costs about 1 µs
//! per round trip on this VM). Writes to the socket never raise SIGPIPE
//! (a C task would die of it): they report EPIPE instead, which marks the
//! task too.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::pool::PoolHandle;

/// Whether the pvmd is still at the other end of the socket.
pub(super) struct Lifeline {
    gone: Arc<AtomicBool>,
    /// Closing it tells the watcher to stop; then it is joined.
    stop: Option<OwnedFd>,
    watcher: Option<JoinHandle<()>>,
    /// The process whose thread the watcher is: a forked child has none.
    owner: u32,
}

impl Lifeline {
    /// No watcher yet (during enrollment, which reads the socket itself).
    pub(super) fn unwatched() -> Lifeline {
        Lifeline {
            gone: Arc::new(AtomicBool::new(false)),
            stop: None,
            watcher: None,
            owner: std::process::id(),
        }
    }

    /// Starts watching `sock` for the pvmd's hangup; `home`'s doorbell is
    /// rung when it comes. If no thread can be had, calls still learn of
    /// the death from the socket when they use it.
    pub(super) fn watch(sock: &UnixStream, home: Option<PoolHandle>) -> Lifeline {
        let mut life = Lifeline::unwatched();
        let Ok(sock) = sock.try_clone() else {
            return life;
        };
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return life;
        }
        // SAFETY: fresh descriptors, owned from here on.
        let (stop_rd, stop_wr) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let gone = life.gone.clone();
        let spawned = openvia_core::sys::thread::spawn_quiet_from(
            std::thread::Builder::new()
                .name("pvmd-watch".into())
                .stack_size(64 * 1024),
            move || {
                if wait_hangup(&sock, &stop_rd) {
                    gone.store(true, Ordering::Release);
                    if let Some(h) = home {
                        h.pool.ring_bell(h.slot);
                    }
                }
            },
        );
        if let Ok(t) = spawned {
            life.stop = Some(stop_wr);
            life.watcher = Some(t);
        }
        life
    }

    pub(super) fn gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// The socket failed (EOF, EPIPE, a reset): the pvmd is gone for good.
    pub(super) fn cut(&self) {
        self.gone.store(true, Ordering::Release);
    }
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        // Closing the pipe's write end wakes the watcher's poll.
        self.stop = None;
        if let Some(t) = self.watcher.take() {
            if std::process::id() == self.owner {
                let _ = t.join();
            } else {
                // A fork of the task: the watcher is its parent's thread,
                // which this process must neither join nor detach.
                std::mem::forget(t);
            }
        }
    }
}

/// Sleeps until the peer of `sock` hangs up (true) or `stop` is closed
/// (false). Unread bytes the pvmd wrote before it died do not hide the
/// hangup: POLLRDHUP/POLLHUP are reported beside POLLIN.
fn wait_hangup(sock: &UnixStream, stop: &OwnedFd) -> bool {
    let hangup = libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL;
    loop {
        let mut p = [
            libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLRDHUP,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds; no timeout.
        let n = unsafe { libc::poll(p.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        if p[0].revents & hangup != 0 {
            return true;
        }
        if p[1].revents != 0 {
            return false;
        }
    }
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
    use std::time::{Duration, Instant};

    fn becomes_gone(life: &Lifeline) -> bool {
        let end = Instant::now() + Duration::from_secs(10);
        while !life.gone() && Instant::now() < end {
            std::thread::yield_now();
        }
        life.gone()
    }

    #[test]
    fn a_hangup_is_seen_even_with_unread_bytes_and_data_does_not_count() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let life = Lifeline::watch(&a, None);
        b.write_all(b"last words").unwrap();
        // The watcher must not take data for a hangup; it has no way to
        // say so but marking, so give it a moment to be wrong.
        std::thread::sleep(Duration::from_millis(50));
        assert!(!life.gone(), "data taken for a hangup");
        drop(b);
        assert!(becomes_gone(&life));
    }

    #[test]
    fn dropping_the_lifeline_stops_its_watcher() {
        let (a, _b) = UnixStream::pair().unwrap();
        let life = Lifeline::watch(&a, None);
        let start = Instant::now();
        drop(life);
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
