//! splice(2) with a carried connection at one end. The kernel would move
//! its own socket's bytes (the doorbells, not the data), so the bytes go
//! through the connection's read or write and a bounce buffer instead.
//!
//! Nothing is taken from a pipe that the connection did not take: into a
//! connection, the pipe's bytes are first duplicated with tee(2) into a
//! private pipe of this thread, written, and only as many as the write
//! took are then read off the program's pipe. Out of a connection, no
//! more is read than the program's pipe has room for. A pipe read by
//! another thread at the same time may see its bytes split differently,
//! as it would with two readers of any pipe.

use std::cell::RefCell;

use libc::{c_int, c_uint, loff_t, size_t, ssize_t};

use crate::carried::Carried;
use crate::conn::{self, Route};
use crate::kernel::pipe_inode as inode;
use crate::link::SLOT_BYTES;
use crate::real::real;
use crate::{errno, guarded, result};

/// # Safety
/// The C prototype of splice(2).
#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    guarded(-1, || {
        let nonblock = flags & libc::SPLICE_F_NONBLOCK != 0;
        // The kernel's answers to offsets: a pipe has none (ESPIPE), a
        // socket cannot be read or written at one (EINVAL); the pipe's
        // side is asked first.
        match conn::route(fd_out) {
            Route::Via(_) if !off_in.is_null() => return result(Err(libc::ESPIPE)),
            Route::Via(_) if !off_out.is_null() => return result(Err(libc::EINVAL)),
            Route::Via(link) => {
                return result(into_connection(&*link, fd_in, fd_out, len, nonblock))
            }
            Route::Fail(e) => return result(Err(e)),
            Route::Kernel => {}
        }
        match conn::route(fd_in) {
            Route::Via(_) if !off_out.is_null() => result(Err(libc::ESPIPE)),
            Route::Via(_) if !off_in.is_null() => result(Err(libc::EINVAL)),
            Route::Via(link) => result(out_of_connection(&*link, fd_in, fd_out, len, nonblock)),
            Route::Fail(e) => result(Err(e)),
            Route::Kernel => (real().splice)(fd_in, off_in, fd_out, off_out, len, flags),
        }
    })
}

/// Pipe `pipe` → connection on `fd`.
fn into_connection(
    link: &dyn Carried,
    pipe: c_int,
    fd: c_int,
    len: usize,
    nonblock: bool,
) -> Result<usize, i32> {
    if !worth_a_call(pipe, len)? {
        return Ok(0);
    }
    // Wait for data, as splice would (only its flag makes it not wait).
    let avail = loop {
        let n = unread(pipe)?;
        if n > 0 {
            break n;
        }
        if nonblock {
            return Err(libc::EAGAIN);
        }
        if wait(pipe, libc::POLLIN)? & libc::POLLHUP != 0 && unread(pipe)? == 0 {
            return Ok(0); // no writer left: end of the pipe
        }
    };
    let want = len.min(avail).min(SLOT_BYTES);
    let mut buf = vec![0u8; want];
    let copied = duplicate(pipe, &mut buf)?;
    crate::room::answered(fd);
    let written = link.write(fd, &[&buf[..copied]], nonblock, false);
    // EAGAIN or a short count: the connection is full (see `via_write`).
    if matches!(written, Err(libc::EAGAIN)) || matches!(written, Ok(n) if n < copied) {
        crate::room::watch(fd);
    }
    let taken = written?;
    // Now take off the program's pipe exactly what the connection took.
    read_exact(pipe, &mut buf[..taken])?;
    Ok(taken)
}

/// Connection on `fd` → pipe `pipe`.
fn out_of_connection(
    link: &dyn Carried,
    fd: c_int,
    pipe: c_int,
    len: usize,
    nonblock: bool,
) -> Result<usize, i32> {
    if !worth_a_call(pipe, len)? {
        return Ok(0);
    }
    let room = loop {
        if wait_now(pipe, libc::POLLOUT)? & libc::POLLERR != 0 {
            // No reader: what a write to the pipe would say.
            // SAFETY: raising a signal in this thread, as the kernel would.
            unsafe { libc::raise(libc::SIGPIPE) };
            return Err(libc::EPIPE);
        }
        let room = capacity(pipe)?.saturating_sub(unread(pipe)?);
        if room > 0 {
            break room;
        }
        if nonblock {
            return Err(libc::EAGAIN);
        }
        wait(pipe, libc::POLLOUT)?;
    };
    let mut buf = vec![0u8; len.min(room).min(SLOT_BYTES)];
    let n = link.read(fd, &mut [&mut buf[..]], nonblock, false, false)?;
    write_all(pipe, &buf[..n])?;
    Ok(n)
}

/// Whether a splice of `len` bytes with a connection has anything to do:
/// the other end must be a pipe (EINVAL otherwise, as the kernel says of
/// two non-pipes), and zero bytes is done at once.
fn worth_a_call(pipe: c_int, len: usize) -> Result<bool, i32> {
    if inode(pipe).is_none() {
        return Err(libc::EINVAL);
    }
    Ok(len > 0)
}

/// Bytes waiting in a pipe.
fn unread(pipe: c_int) -> Result<usize, i32> {
    let mut n: c_int = 0;
    // SAFETY: FIONREAD writes one int; the real ioctl (a pipe is never ours).
    let r = unsafe { (real().ioctl)(pipe, libc::FIONREAD, (&mut n as *mut c_int).cast()) };
    if r < 0 {
        return Err(errno());
    }
    Ok(n.max(0) as usize)
}

/// A pipe's size in bytes.
fn capacity(pipe: c_int) -> Result<usize, i32> {
    // SAFETY: F_GETPIPE_SZ takes no argument.
    let r = unsafe { libc::fcntl(pipe, libc::F_GETPIPE_SZ) };
    if r < 0 {
        return Err(errno());
    }
    Ok(r as usize)
}

/// Waits until `fd` has `events` (or an error or hang-up); its revents.
fn wait(fd: c_int, events: i16) -> Result<i16, i32> {
    poll_one(fd, events, -1)
}

/// `fd`'s revents for `events` now, without waiting.
fn wait_now(fd: c_int, events: i16) -> Result<i16, i32> {
    poll_one(fd, events, 0)
}

fn poll_one(fd: c_int, events: i16, timeout_ms: c_int) -> Result<i16, i32> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: one pollfd of our own.
        let r = unsafe { (crate::real::real().poll)(&mut p, 1, timeout_ms) };
        if r >= 0 {
            return Ok(p.revents);
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

fn read_exact(pipe: c_int, mut buf: &mut [u8]) -> Result<(), i32> {
    while !buf.is_empty() {
        // SAFETY: reading into our own buffer; the real read (a pipe).
        let r = unsafe { (real().read)(pipe, buf.as_mut_ptr().cast(), buf.len()) };
        match r {
            0 => return Err(libc::EIO), // fewer than tee(2) saw: another reader
            r if r > 0 => buf = &mut buf[r as usize..],
            _ if errno() == libc::EINTR => {}
            _ if errno() == libc::EAGAIN => {
                wait(pipe, libc::POLLIN)?;
            }
            _ => return Err(errno()),
        }
    }
    Ok(())
}

fn write_all(pipe: c_int, mut buf: &[u8]) -> Result<(), i32> {
    while !buf.is_empty() {
        // SAFETY: writing from our own buffer; the real write (a pipe).
        let r = unsafe { (real().write)(pipe, buf.as_ptr().cast(), buf.len()) };
        match r {
            r if r > 0 => buf = &buf[r as usize..],
            _ if errno() == libc::EINTR => {}
            _ if errno() == libc::EAGAIN => {
                wait(pipe, libc::POLLOUT)?;
            }
            _ => return Err(errno()),
        }
    }
    Ok(())
}

/// Copies the first `buf.len()` bytes (or fewer) of `pipe` into `buf`
/// without taking them off it: tee(2) into this thread's private pipe,
/// then a read of that. The bytes copied.
fn duplicate(pipe: c_int, buf: &mut [u8]) -> Result<usize, i32> {
    let (r, w) = scratch()?;
    // SAFETY: tee between two pipes, no memory passed.
    let n = unsafe { libc::tee(pipe, w, buf.len(), libc::SPLICE_F_NONBLOCK) };
    if n < 0 {
        return Err(errno());
    }
    read_exact(r, &mut buf[..n as usize])?;
    Ok(n as usize)
}

/// A pipe of this thread's own, made on first use: its two ends and
/// their inode numbers.
struct Scratch {
    r: c_int,
    w: c_int,
    ino: (u64, u64),
}

impl Scratch {
    /// Whether the two numbers still name this pipe: a program that
    /// closed its descriptors (a daemon closing all of them) may have
    /// reused them, and then they are the program's, left alone.
    fn still_ours(&self) -> bool {
        (inode(self.r), inode(self.w)) == (Some(self.ino.0), Some(self.ino.1))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.still_ours() {
            // SAFETY: closing our own two descriptors at thread exit.
            unsafe {
                (real().close)(self.r);
                (real().close)(self.w);
            }
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

/// The private pipe's (read end, write end), made anew when the old one
/// is gone or no longer ours.
fn scratch() -> Result<(c_int, c_int), i32> {
    SCRATCH.with(|cell| {
        let mut cur = cell.borrow_mut();
        if let Some(s) = cur.as_ref().filter(|s| s.still_ours()) {
            return Ok((s.r, s.w));
        }
        if let Some(old) = cur.take() {
            // Not ours any more: forget it without closing anything.
            std::mem::forget(old);
        }
        let mut fds = [0 as c_int; 2];
        // SAFETY: pipe2 fills two ints of ours.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(errno());
        }
        let (Some(ir), Some(iw)) = (inode(fds[0]), inode(fds[1])) else {
            return Err(libc::EIO);
        };
        // Room for a whole chunk, so that tee copies one whole.
        // SAFETY: F_SETPIPE_SZ with a size; failing only means smaller copies.
        unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, SLOT_BYTES as c_int) };
        let s = Scratch {
            r: fds[0],
            w: fds[1],
            ino: (ir, iw),
        };
        let ends = (s.r, s.w);
        *cur = Some(s);
        Ok(ends)
    })
}
