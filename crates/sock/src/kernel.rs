//! The library's own single-byte I/O on a program's kernel TCP socket
//! (hellos and doorbells), done with the real calls and correct whether
//! the program made the socket blocking or not.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::real::real;

pub fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// What the next byte of the kernel stream is, without taking it.
pub enum Peek {
    Byte(u8),
    Empty,
    Eof,
    Error(i32),
}

pub fn peek_state(fd: RawFd) -> Peek {
    let mut b = 0u8;
    // SAFETY: one byte into our own variable.
    let n = unsafe {
        (real().recv)(
            fd,
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        1 => Peek::Byte(b),
        0 => Peek::Eof,
        _ => match errno() {
            libc::EAGAIN | libc::EINTR => Peek::Empty,
            e => Peek::Error(e),
        },
    }
}

/// Blocks until `fd` is readable (data, EOF or error).
pub fn wait_readable(fd: RawFd) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd of ours.
    crate::unrung::sleep_ms(-1, |ms| unsafe {
        (crate::real::real().poll)(&mut p, 1, ms)
    });
}

/// Whether `fd` becomes readable (data, EOF or error) within `limit`.
pub fn readable_within(fd: RawFd, limit: std::time::Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd of ours.
    unsafe { (real().poll)(&mut p, 1, limit.as_millis() as i32) == 1 }
}

/// Whether the peer has closed or reset its end.
pub fn peer_hung_up(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd of ours.
    unsafe { (crate::real::real().poll)(&mut p, 1, 0) };
    p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Takes the next byte, waiting for it.
pub fn take_byte(fd: RawFd) -> Result<u8, i32> {
    loop {
        let mut b = 0u8;
        // SAFETY: one byte into our own variable.
        let n = unsafe { (real().recv)(fd, (&mut b as *mut u8).cast(), 1, libc::MSG_DONTWAIT) };
        match n {
            1 => return Ok(b),
            0 => return Err(0),
            _ => match errno() {
                libc::EAGAIN | libc::EINTR => wait_readable(fd),
                e => return Err(e),
            },
        }
    }
}

/// Sends one byte, waiting for room (the stream is fresh: there is room).
pub fn send_byte(fd: RawFd, b: u8) -> Result<(), i32> {
    loop {
        // SAFETY: one byte from our own variable.
        let n = unsafe { (real().send)(fd, (&b as *const u8).cast(), 1, libc::MSG_NOSIGNAL) };
        if n == 1 {
            return Ok(());
        }
        match errno() {
            libc::EINTR => {}
            libc::EAGAIN => wait_writable(fd),
            e => return Err(e),
        }
    }
}

/// One byte off the stream, waiting for it at most `limit` (None: it did
/// not come, or the stream ended or failed). Allocates nothing: exec
/// hooks use it in vfork children.
pub fn take_byte_within(fd: RawFd, limit: std::time::Duration) -> Option<u8> {
    take_if_within(fd, |_| true, limit)
}

/// Takes the next byte if `wanted` says so, waiting for a byte at most
/// `limit` (zero: only what is there now); a byte not wanted stays in the
/// stream. None: no byte came, a byte not wanted heads the stream, or
/// the stream ended or failed. Allocates nothing (exec hooks).
pub fn take_if_within(
    fd: RawFd,
    wanted: impl Fn(u8) -> bool,
    limit: std::time::Duration,
) -> Option<u8> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        match peek_state(fd) {
            Peek::Byte(b) if wanted(b) => {
                // SAFETY: one byte into our own variable; the peek saw it.
                let mut got = 0u8;
                let n = unsafe {
                    (real().recv)(fd, (&mut got as *mut u8).cast(), 1, libc::MSG_DONTWAIT)
                };
                return (n == 1).then_some(got);
            }
            Peek::Empty => {}
            _ => return None,
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd of ours. Rounded up: a wait of 0 ms while
        // time is left would spin.
        unsafe { (real().poll)(&mut p, 1, left.as_millis().max(1) as i32) };
    }
}

pub fn wait_writable(fd: RawFd) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one pollfd of ours.
    crate::unrung::sleep_ms(-1, |ms| unsafe {
        (crate::real::real().poll)(&mut p, 1, ms)
    });
}

/// The doorbell: one byte, with the program's choice about SIGPIPE. At
/// most one is outstanding, so there is room even on a nonblocking socket.
pub fn send_doorbell(fd: RawFd, nosignal: bool) -> Result<(), i32> {
    let flags = if nosignal { libc::MSG_NOSIGNAL } else { 0 };
    let b = crate::link::DOORBELL;
    loop {
        // SAFETY: one byte from our own variable.
        let n =
            unsafe { (real().send)(fd, (&b as *const u8).cast(), 1, flags | libc::MSG_DONTWAIT) };
        if n == 1 {
            return Ok(());
        }
        match errno() {
            libc::EINTR => {}
            libc::EAGAIN => wait_writable(fd),
            e => return Err(e),
        }
    }
}

/// Doorbells go out at once (TCP_NODELAY). A carried connection's kernel
/// stream holds only doorbells; where replies need none (their reader
/// spins, `epoll`), doorbells flow one way, and with Nagle on a second
/// one waits for the first one's ACK, which the other end delays by up to
/// 40 ms when it has nothing to send back.
pub fn no_delay(fd: RawFd) {
    let on: libc::c_int = 1;
    // SAFETY: an int option from our own variable.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Whether the program made `fd` non-blocking.
pub fn is_nonblocking(fd: RawFd) -> bool {
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { (real().fcntl)(fd, libc::F_GETFL, 0) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// The inode number of `fd` and its file type (`S_IFMT` bits): what lets
/// a descriptor number kept across calls be checked to still name the
/// same object (a program may close it and reuse the number). One fstat,
/// no allocation (vfork children call it).
fn inode_and_type(fd: RawFd) -> Option<(u64, libc::mode_t)> {
    // SAFETY: fstat into our own zeroed struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_ino, st.st_mode & libc::S_IFMT))
}

/// The inode number of `fd`, whatever it is.
pub fn inode(fd: RawFd) -> Option<u64> {
    inode_and_type(fd).map(|(ino, _)| ino)
}

/// The inode number of `fd` if it is a socket.
pub fn socket_inode(fd: RawFd) -> Option<u64> {
    inode_and_type(fd).and_then(|(ino, t)| (t == libc::S_IFSOCK).then_some(ino))
}

/// The inode number of `fd` if it is a pipe.
pub fn pipe_inode(fd: RawFd) -> Option<u64> {
    inode_and_type(fd).and_then(|(ino, t)| (t == libc::S_IFIFO).then_some(ino))
}

/// The soft limit on descriptors (None if unknown), asked of the kernel
/// at most every `LIMIT_FRESH_NS`: setting a connection up asked it
/// several times at each end (a system call each: 2,593 for 200
/// connections of `conn_rate.py`, 835 now), and it changes only when the
/// program sets it (or the library: `forget_descriptor_limit`). A limit
/// the program lowered a moment before is seen that much later: a
/// descriptor the library then puts at its floor finds no room there and
/// goes low (`dup_high`).
pub fn descriptor_limit() -> Option<u64> {
    let now = openvia_core::sys::now_ns();
    let cached = LIMIT.load(Ordering::Acquire);
    if cached != 0 && now.saturating_sub(LIMIT_ASKED_NS.load(Ordering::Relaxed)) < LIMIT_FRESH_NS {
        return Some(cached - 1);
    }
    // SAFETY: getrlimit into our own struct.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let limit =
        (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some(r.rlim_cur);
    if let Some(l) = limit.filter(|&l| l < u64::MAX) {
        LIMIT_ASKED_NS.store(now, Ordering::Relaxed);
        LIMIT.store(l + 1, Ordering::Release);
    }
    limit
}

/// The library changed the limit: the next `descriptor_limit` asks.
pub fn forget_descriptor_limit() {
    LIMIT.store(0, Ordering::Release);
}

/// The soft limit last asked, plus one (0: none), and when it was asked.
static LIMIT: AtomicU64 = AtomicU64::new(0);
static LIMIT_ASKED_NS: AtomicU64 = AtomicU64::new(0);
const LIMIT_FRESH_NS: u64 = 10_000_000;

/// A copy of `fd` for the library to keep (close-on-exec or not), at the
/// library's floor (`fdroom`: the program's original limit, or the upper
/// half of the table) where there is room, else at the lowest free
/// number; -1 if none can be made. The program takes the
/// lowest free numbers: the library's copies below would push its own
/// up (past FD_SETSIZE for a program using select with a few hundred
/// connections, where kernel TCP stays below).
pub fn dup_high(fd: RawFd, cloexec: bool) -> RawFd {
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    let base = descriptor_limit().map_or(0, |l| crate::fdroom::floor(l).min(i32::MAX as u64));
    // SAFETY: F_DUPFD(_CLOEXEC) of a descriptor the caller holds.
    let d = unsafe { (crate::real::real().fcntl)(fd, cmd, base) };
    if d >= 0 || base == 0 {
        return d;
    }
    // SAFETY: as above, anywhere.
    unsafe { (crate::real::real().fcntl)(fd, cmd, 0) }
}

/// Maps memfd `fd` shared, if it is exactly `len` bytes long (a page a
/// peer or a parent handed us: checked before use). The caller owns the
/// mapping.
pub fn map_memfd(fd: RawFd, len: usize) -> Option<*mut u8> {
    map_memfd_at(fd, 0, len)
}

/// As [`map_memfd`], `len` bytes from `at` (page-aligned) of a memfd that
/// ends there.
pub fn map_memfd_at(fd: RawFd, at: usize, len: usize) -> Option<*mut u8> {
    // SAFETY: fstat into our own struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_size != (at + len) as libc::off_t {
        return None;
    }
    // SAFETY: a shared mapping of the file's (checked) last `len` bytes,
    // handed to the caller.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            at as libc::off_t,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}
