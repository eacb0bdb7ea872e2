//! Buffered streams (stdio) on a carried connection.
//!
//! The C library's FILE streams read and write with its own internal
//! calls, which no preloaded hook sees: `fprintf` on an `fdopen`ed
//! socket, an inetd-style handler's `printf` on a socket put on its
//! stdout, bash's `echo hi >&3` (stdout moved onto the socket for one
//! builtin) put their bytes straight into the kernel stream, where the
//! peer's library expects only doorbells, and `fgets` read the doorbells
//! as data. So a stream on a connection this library tracks is made with
//! `fopencookie`, whose read and write go through this library's `read`
//! and `write` (and so over the VI, or the kernel, as the connection
//! decides):
//! - `fdopen` of such a socket returns one (`fileno` still names the
//!   socket);
//! - `stdin`, `stdout` and `stderr` are swapped for one while descriptor
//!   0, 1 or 2 names such a connection: at start (a program exec'd on the socket)
//!   and after each dup2/dup3 onto 0 or 1; the original stream comes back
//!   when the descriptor names something else again. What the swapped-in
//!   stdout holds is written out before the descriptor changes; input a
//!   swapped-in stdin read ahead is not handed back to the original.

use libc::{c_char, c_int, c_void, size_t, ssize_t, FILE};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::conn;
use crate::real::sym;

type ReadFn = unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t;
type WriteFn = unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t;
type SeekFn = unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int;
type CloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<ReadFn>,
    write: Option<WriteFn>,
    seek: Option<SeekFn>,
    close: Option<CloseFn>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

struct StdioFns {
    fdopen: unsafe extern "C" fn(c_int, *const c_char) -> *mut FILE,
    fileno: unsafe extern "C" fn(*mut FILE) -> c_int,
    fileno_unlocked: unsafe extern "C" fn(*mut FILE) -> c_int,
}

fn fns() -> &'static StdioFns {
    static FNS: OnceLock<StdioFns> = OnceLock::new();
    FNS.get_or_init(|| StdioFns {
        fdopen: sym(c"fdopen"),
        fileno: sym(c"fileno"),
        fileno_unlocked: sym(c"fileno_unlocked"),
    })
}

/// One stream of ours: the descriptor it reads and writes, and whether
/// closing the stream closes it (fdopen: yes; a swapped-in stdin or
/// stdout: no, the descriptor is the program's).
struct Cookie {
    fd: RawFd,
    owns_fd: bool,
    /// The stream, once made (forgotten at its close).
    file: *mut FILE,
}

/// Our streams and their descriptors, for `fileno` (no lock: a close
/// hook may run anywhere).
const MAX_STREAMS: usize = 64;
static STREAMS: [AtomicPtr<FILE>; MAX_STREAMS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_STREAMS];
static STREAM_FDS: [AtomicI32; MAX_STREAMS] = [const { AtomicI32::new(-1) }; MAX_STREAMS];
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The program's own stdin, stdout and stderr while ours stand in for
/// them.
static ORIGINAL: [AtomicPtr<FILE>; 3] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 3];
/// Ours standing in for stdin, stdout and stderr (null: none).
static STANDING_IN: [AtomicPtr<FILE>; 3] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 3];

fn note(f: *mut FILE, fd: RawFd) {
    for (s, d) in STREAMS.iter().zip(&STREAM_FDS) {
        if s.compare_exchange(std::ptr::null_mut(), f, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            d.store(fd, Ordering::Release);
            LIVE.fetch_add(1, Ordering::AcqRel);
            return;
        }
    }
}

fn forget(f: *mut FILE) {
    for s in &STREAMS {
        if s.compare_exchange(f, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            LIVE.fetch_sub(1, Ordering::AcqRel);
            return;
        }
    }
}

/// The descriptor of one of our streams.
fn fd_of(f: *mut FILE) -> Option<RawFd> {
    if f.is_null() || LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    STREAMS
        .iter()
        .zip(&STREAM_FDS)
        .find(|(s, _)| s.load(Ordering::Acquire) == f)
        .map(|(_, d)| d.load(Ordering::Acquire))
}

/// Whether any stream of ours exists (then exit flushes them first).
pub fn any() -> bool {
    LIVE.load(Ordering::Acquire) != 0
}

unsafe extern "C" fn cookie_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: `c` is the Cookie this stream was made with, alive until
    // its close; `buf` is the stream's buffer of `n` bytes.
    unsafe { crate::read((*(c as *const Cookie)).fd, buf.cast(), n) }
}

/// The C library takes a short write as an error: write all of it, as
/// its own file streams do.
unsafe extern "C" fn cookie_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // SAFETY: as in `cookie_read`.
    let fd = unsafe { (*(c as *const Cookie)).fd };
    let mut done = 0usize;
    while done < n {
        // SAFETY: the rest of the stream's `n` bytes.
        let k = unsafe { crate::write(fd, buf.add(done).cast(), n - done) };
        if k < 0 {
            if crate::errno() == libc::EINTR {
                continue;
            }
            return if done > 0 { done as ssize_t } else { -1 };
        }
        done += k as usize;
    }
    done as ssize_t
}

unsafe extern "C" fn cookie_seek(_c: *mut c_void, _at: *mut i64, _whence: c_int) -> c_int {
    crate::set_errno(libc::ESPIPE);
    -1
}

unsafe extern "C" fn cookie_close(c: *mut c_void) -> c_int {
    // SAFETY: the Cookie boxed in `open`, handed back once, at fclose.
    let cookie = unsafe { Box::from_raw(c as *mut Cookie) };
    forget(cookie.file);
    if cookie.owns_fd {
        // SAFETY: the stream's own descriptor, closed through our hook.
        unsafe { crate::descriptors::close(cookie.fd) }
    } else {
        0
    }
}

/// A stream of ours on `fd` (null, errno set, if the C library refused).
fn open(fd: RawFd, mode: *const c_char, owns_fd: bool) -> *mut FILE {
    let cookie = Box::into_raw(Box::new(Cookie {
        fd,
        owns_fd,
        file: std::ptr::null_mut(),
    }));
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    // SAFETY: a valid mode string (the program's, or ours) and a cookie
    // the stream owns from now on.
    let f = unsafe { fopencookie(cookie.cast(), mode, io) };
    if f.is_null() {
        // SAFETY: the stream was not made: the cookie is still ours.
        drop(unsafe { Box::from_raw(cookie) });
        return f;
    }
    // SAFETY: the stream is not used before we return it.
    unsafe { (*cookie).file = f };
    note(f, fd);
    f
}

/// Closes one of our streams (flushing it) without touching its
/// descriptor's owner: for a stand-in.
fn close_stand_in(f: *mut FILE) {
    forget(f);
    // SAFETY: a stream we made, which the program does not hold (it
    // holds `stdin`/`stdout`, which no longer name it).
    unsafe { libc::fclose(f) };
}

fn std_slot(which: usize) -> *mut *mut FILE {
    // Only the addresses of the C library's stream variables.
    match which {
        0 => std::ptr::addr_of_mut!(stdin),
        1 => std::ptr::addr_of_mut!(stdout),
        _ => std::ptr::addr_of_mut!(stderr),
    }
}

/// Before descriptor `fd` changes (a dup2/dup3 onto it, a close): what
/// our stand-in stdout holds goes out to the connection it was for.
pub fn before_replacing(fd: RawFd) {
    if fd == 1 || fd == 2 {
        let ours = STANDING_IN[fd as usize].load(Ordering::Acquire);
        if !ours.is_null() {
            // SAFETY: our live stand-in stream.
            unsafe { libc::fflush(ours) };
        }
    }
}

/// After descriptor `fd` (0, 1 or 2) changed, or at start: stdin, stdout
/// or stderr is ours exactly while `fd` names a connection this library
/// tracks.
pub fn follow_std(fd: RawFd) {
    if !(0..=2).contains(&fd) {
        return;
    }
    let which = fd as usize;
    let slot = std_slot(which);
    let ours = STANDING_IN[which].load(Ordering::Acquire);
    let tracked = conn::lookup(fd).is_some();
    // SAFETY: reading the C library's stream variable.
    let current = unsafe { slot.read() };
    if !ours.is_null() {
        if current != ours {
            // The program set the variable itself: it decides.
            STANDING_IN[which].store(std::ptr::null_mut(), Ordering::Release);
            close_stand_in(ours);
            return;
        }
        if tracked {
            return;
        }
        let original = ORIGINAL[which].swap(std::ptr::null_mut(), Ordering::AcqRel);
        STANDING_IN[which].store(std::ptr::null_mut(), Ordering::Release);
        // SAFETY: putting the program's own stream back.
        unsafe { slot.write(original) };
        close_stand_in(ours);
        return;
    }
    if !tracked || current.is_null() {
        return;
    }
    if which != 0 {
        // SAFETY: the program's stream: what it holds goes out first, to
        // the descriptor it was written for.
        unsafe { libc::fflush(current) };
    }
    let mode = if which == 0 { c"r" } else { c"w" };
    let f = open(fd, mode.as_ptr(), false);
    if f.is_null() {
        return;
    }
    if which == 2 {
        // stderr writes at once, as the C library's does.
        // SAFETY: our new stream, before any use.
        unsafe { libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0) };
    }
    ORIGINAL[which].store(current, Ordering::Release);
    STANDING_IN[which].store(f, Ordering::Release);
    // SAFETY: the C library's stream variable, now ours.
    unsafe { slot.write(f) };
}

/// # Safety
/// The C prototype of fdopen(3).
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    crate::guarded(std::ptr::null_mut(), || {
        if !mode.is_null() && conn::lookup(fd).is_some() {
            open(fd, mode, true)
        } else {
            // SAFETY: the program's call, passed on unchanged.
            unsafe { (fns().fdopen)(fd, mode) }
        }
    })
}

/// # Safety
/// The C prototype of fileno(3).
#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut FILE) -> c_int {
    match fd_of(f) {
        Some(fd) => fd,
        // SAFETY: the program's call, passed on unchanged.
        None => unsafe { (fns().fileno)(f) },
    }
}

/// # Safety
/// The C prototype of fileno_unlocked(3).
#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut FILE) -> c_int {
    match fd_of(f) {
        Some(fd) => fd,
        // SAFETY: the program's call, passed on unchanged.
        None => unsafe { (fns().fileno_unlocked)(f) },
    }
}

/// Finds the C library's calls (from the library's constructor).
pub fn init() {
    fns();
}

#[cfg(test)]
mod tests {
    use super::{fd_of, forget, note};

    #[test]
    fn streams_are_found_by_pointer_until_forgotten() {
        let f = 0x1000 as *mut libc::FILE;
        assert_eq!(fd_of(f), None);
        note(f, 7);
        assert_eq!(fd_of(f), Some(7));
        assert_eq!(fd_of(0x2000 as *mut libc::FILE), None);
        forget(f);
        assert_eq!(fd_of(f), None);
    }
}
