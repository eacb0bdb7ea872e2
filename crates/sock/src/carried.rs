//! What a connection carried over openvia offers the hooks, whichever
//! device carries it: the one-host link over the shared-memory device
//! (`link`, `reader`) or the link between hosts over the network device
//! (`netlink`).

use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard, TryLockError};

/// A reader's turn on a connection whose reads `m` serializes: another
/// thread may be reading (and sleeping there), so a read that must not
/// block (`nonblocking`, asked only then) gets EAGAIN instead of waiting.
pub fn reader_turn<T>(
    m: &Mutex<T>,
    nonblocking: impl FnOnce() -> bool,
) -> Result<MutexGuard<'_, T>, i32> {
    match m.try_lock() {
        Ok(g) => Ok(g),
        Err(TryLockError::Poisoned(e)) => Ok(e.into_inner()),
        Err(TryLockError::WouldBlock) if nonblocking() => Err(libc::EAGAIN),
        Err(TryLockError::WouldBlock) => Ok(m.lock().unwrap_or_else(|e| e.into_inner())),
    }
}

pub trait Carried: Send + Sync {
    /// read/recv into `out`: Ok(0) at EOF. `dontwait`: the call asked not
    /// to block; `peek` leaves the data; `all` waits for the whole of `out`.
    fn read(
        &self,
        fd: RawFd,
        out: &mut [&mut [u8]],
        dontwait: bool,
        peek: bool,
        all: bool,
    ) -> Result<usize, i32>;
    /// write/send: Ok(bytes taken) or Err(errno); `nosignal`: no SIGPIPE.
    fn write(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32>;
    /// Waits (bounded) until the peer holds everything sent.
    fn flush(&self);
    /// After flush, before the kernel's FIN.
    fn shut(&self);
    /// The program changed the socket's O_NONBLOCK.
    fn set_nonblocking(&self, on: bool);
    /// The process that made the link (only it may use it).
    fn owner_pid(&self) -> u32;
    /// Bytes a read would get now without waiting, as FIONREAD asks:
    /// every byte arrived and unread; 0 when nothing did, or another
    /// thread is reading.
    fn unread(&self, fd: RawFd) -> usize;
    /// Whether a nonblocking write would now take something (or fail at
    /// once on a broken connection) instead of saying EAGAIN.
    fn writable(&self) -> bool;
    /// Sleeps until the reader makes room (or something else happens on
    /// the link), at most `limit`; at once if there is room.
    fn wait_room(&self, fd: RawFd, limit: std::time::Duration);
    /// Whether this link takes the tokens of `spinwait` now (epoll, poll
    /// and select waiters spin only on links that do; the others, and a
    /// link handed back to the kernel, are left to the kernel).
    fn takes_poll_tokens(&self) -> bool {
        false
    }
    /// Whether the peer is on another host and rings a doorbell on the
    /// kernel socket for every message (none is taken by a token): a
    /// kernel wait on the socket is then exact, and an epoll waiter may
    /// look at the kernel for a while before it sleeps (`epoll::wait`).
    fn rung_from_another_host(&self) -> bool {
        false
    }
    /// For epoll and poll (`spinwait`): whether a message is unread that
    /// the page shows (arrived or announced). Ends, and everything once
    /// the connection went back to the kernel, show in the kernel.
    fn ready_in_user_space(&self) -> bool {
        false
    }
    /// For epoll: offers the writer a token, so that its next message
    /// rings no doorbell (the waiter looks at the page). False if none was
    /// offered (something unread, a doorbell out, another token there).
    fn offer_poll_token(&self) -> bool {
        false
    }
    /// Whether the token offered is still there (no message took it).
    fn poll_token_stands(&self) -> bool {
        false
    }
    /// Takes the token back: true if it was still there; false if a
    /// message took it (it is on its way, with no doorbell).
    fn revoke_poll_token(&self) -> bool {
        true
    }
    /// A wait looked at this connection's page at `now_us`
    /// (`spinwait::now_us`): its writer rings no late doorbell meanwhile.
    fn stamp_looked(&self, _now_us: u64) {}
    /// An epoll wait lets this connection's token stand until its next
    /// wait: a read that uses every message up offers it again.
    fn let_token_stand(&self) {}
    /// If this is the connection of page `page` (`unrung`): rings late on
    /// `fd` for a message that took the reader's token and is unread;
    /// true. False for another connection.
    fn ring_late(&self, _fd: RawFd, _page: usize) -> bool {
        false
    }
    /// For a process that did not make the link (a child forked after
    /// its first use): the connection handed back to the kernel, usable
    /// here (`switched`); None where that cannot be done.
    fn switched(&self, _fd: RawFd) -> Option<std::sync::Arc<dyn Carried>> {
        None
    }
    /// Before this process lets the connection go (its last close, exit,
    /// exec): hands it to the kernel if another process may go on using
    /// the socket (`always`: an exec, whose new program may), so that the
    /// peer does not lose it with our VI.
    fn hand_over(&self, _fd: RawFd, _always: bool) {}
    /// At the last close, before `hand_over`: on one host the connection
    /// is switched, so that the peer reads what it has not yet through
    /// the page and our close need not wait for its VI to take our
    /// messages (`flush`: an event loop's close waited as long as its
    /// peer took to run).
    fn let_go(&self, _fd: RawFd) {}
    /// Messages sent that the peer has not acknowledged yet (between
    /// hosts: a close waits for them, else they could be lost with our
    /// VI).
    fn unacknowledged(&self) -> bool {
        false
    }
    /// Whether everything sent is acknowledged, looking for up to about a
    /// round trip (between hosts) before saying no: a close or shutdown
    /// that waits aside for the rest sends its FIN only at the waiting
    /// thread's next look, a millisecond later.
    fn acknowledged_soon(&self) -> bool {
        !self.unacknowledged()
    }
    /// shutdown(SHUT_WR) whose FIN waits aside (`acknowledged_soon` said
    /// no): writes say EPIPE from now on; `shut` follows with the FIN.
    fn close_writes(&self) {}
    /// At the last close, after `hand_over`: what the peer still sends
    /// for the hand-over is taken off the socket (`netlink::linger`), so
    /// that closing does not reset the connection.
    fn linger(&self, _fd: RawFd) {}
    /// For the process that made the link: if a process without it asked
    /// for the connection (between hosts), hand it over now. Whether one
    /// asked.
    fn serve_request(&self, _fd: RawFd) -> bool {
        false
    }
    /// Right before a program without the library is exec'd on the
    /// socket (it reads and writes the kernel only): hands the stream to
    /// the kernel so that the next byte that program reads is the peer's
    /// next data, and its writes reach the peer as data. Whether that
    /// could be done (else the program cannot use the connection).
    fn go_bare(&self, _fd: RawFd) -> bool {
        false
    }
    /// Right before this process puts itself under a seccomp filter
    /// (`sandbox`), where `go_bare` cannot be done (between hosts, a
    /// connection already carried): the connection handed to the kernel
    /// and its stream moved on to plain data, what we had not read held
    /// in memory, so that from now on its calls need no system call of
    /// the library's. None where that cannot be done in time.
    fn settle_for_sandbox(&self, _fd: RawFd) -> Option<std::sync::Arc<dyn Carried>> {
        None
    }
    /// Its reads and writes are the kernel socket's from now on: the
    /// table may say kernel.
    fn is_plain(&self) -> bool {
        false
    }
    /// Its writes are the kernel socket's (the program's own call does
    /// them), while reads may still have bytes to hand out first.
    fn kernel_writes(&self) -> bool {
        false
    }
}

/// Copies from `src` into the program's buffers `out` at the cursor
/// (`seg`, `off`), which it moves on, until `src` or `out` is used up;
/// the bytes copied. Both links' reads hand messages over through it.
pub(crate) fn copy_out(
    src: &[u8],
    out: &mut [&mut [u8]],
    seg: &mut usize,
    off: &mut usize,
) -> usize {
    let mut at = 0;
    while at < src.len() && *seg < out.len() {
        let n = (src.len() - at).min(out[*seg].len() - *off);
        out[*seg][*off..*off + n].copy_from_slice(&src[at..at + n]);
        at += n;
        *off += n;
        if *off == out[*seg].len() {
            *seg += 1;
            *off = 0;
        }
    }
    at
}

/// Copies from the program's buffers `data` at the cursor (`seg`, `off`),
/// which it moves on, into `dst` until `dst` or `data` is used up; the
/// bytes copied. Both links' writes gather a message through it.
pub(crate) fn copy_in(data: &[&[u8]], seg: &mut usize, off: &mut usize, dst: &mut [u8]) -> usize {
    let mut at = 0;
    while at < dst.len() && *seg < data.len() {
        let n = (data[*seg].len() - *off).min(dst.len() - at);
        dst[at..at + n].copy_from_slice(&data[*seg][*off..*off + n]);
        at += n;
        *off += n;
        if *off == data[*seg].len() {
            *seg += 1;
            *off = 0;
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::{copy_in, copy_out};

    #[test]
    fn gathers_across_buffers_and_stops_when_the_message_is_full() {
        let data: [&[u8]; 3] = [b"ab", b"", b"cde"];
        let (mut seg, mut off) = (0, 0);
        let mut dst = [0u8; 4];
        assert_eq!(copy_in(&data, &mut seg, &mut off, &mut dst), 4);
        assert_eq!((&dst, seg, off), (b"abcd", 2, 2));
        let mut rest = [0u8; 4];
        assert_eq!(copy_in(&data, &mut seg, &mut off, &mut rest), 1);
        assert_eq!((rest[0], seg, off), (b'e', 3, 0));
    }

    #[test]
    fn copies_across_buffers_and_stops_when_they_are_full() {
        let (mut a, mut b) = ([0u8; 3], [0u8; 2]);
        let (mut seg, mut off) = (0, 0);
        {
            let mut out: [&mut [u8]; 2] = [&mut a, &mut b];
            assert_eq!(copy_out(b"abcd", &mut out, &mut seg, &mut off), 4);
            assert_eq!((seg, off), (1, 1));
            assert_eq!(copy_out(b"xyz", &mut out, &mut seg, &mut off), 1);
            assert_eq!((seg, off), (2, 0));
            assert_eq!(copy_out(b"q", &mut out, &mut seg, &mut off), 0);
        }
        assert_eq!((&a, &b), (b"abc", b"dx"));
    }
}
