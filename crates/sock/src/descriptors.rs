//! The hooks that close, duplicate or reconfigure a descriptor: the
//! connection tables follow every name a connection has (dup and its
//! kin), see its last close, learn its O_NONBLOCK and answer FIONREAD
//! with the data; a stand-in stdio stream follows descriptors 0-2.

use libc::{c_int, c_void};

use crate::conn::Route;
use crate::real::real;
use crate::{closing, conn, guarded, process, set_errno, stdio};

/// # Safety
/// The C prototype of close(2).
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    guarded(-1, || {
        if openvia_core::transport_busy() {
            // The core closing a descriptor of its own (see data_hook).
            // SAFETY: the core's descriptor, closed as it asked.
            return unsafe { (crate::real::real().close)(fd) };
        }
        stdio::before_replacing(fd);
        let r = closing::close(fd);
        stdio::follow_std(fd);
        r
    })
}

/// # Safety
/// The C prototype of close_range(2).
#[no_mangle]
pub unsafe extern "C" fn close_range(
    first: libc::c_uint,
    last: libc::c_uint,
    flags: c_int,
) -> c_int {
    guarded(-1, || closing::close_range(first, last, flags))
}

/// # Safety
/// The C prototype of closefrom(3).
#[no_mangle]
pub unsafe extern "C" fn closefrom(first: c_int) {
    guarded((), || closing::closefrom(first))
}

/// Notes that `new` names what `old` does, unless this is a vfork child
/// (whose tables are its parent's; see `process`).
fn follow_dup(old: c_int, new: c_int) {
    if process::borrowing_parent_memory() {
        return;
    }
    // What `new` named before is closed.
    crate::epoll::closed(new);
    if conn::tracks(old) || conn::tracks(new) {
        conn::alias(old, new);
    }
}

/// # Safety
/// The C prototype of dup(2).
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    guarded(-1, || {
        let r = (real().dup)(fd);
        if r >= 0 {
            follow_dup(fd, r);
        }
        r
    })
}

/// # Safety
/// The C prototype of dup2(2).
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    guarded(-1, || {
        if old == new {
            return (real().dup2)(old, new);
        }
        stdio::before_replacing(new);
        let r = (real().dup2)(old, new);
        if r >= 0 {
            follow_dup(old, r);
            stdio::follow_std(r);
        }
        r
    })
}

/// # Safety
/// The C prototype of dup3(2).
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    guarded(-1, || {
        stdio::before_replacing(new);
        let r = (real().dup3)(old, new, flags);
        if r >= 0 {
            follow_dup(old, r);
            stdio::follow_std(r);
        }
        r
    })
}

/// fcntl and fcntl64 (which programs built with 64-bit file offsets
/// call, redis among them): duplicates are followed, O_NONBLOCK noted.
fn fcntl_with(
    call: unsafe extern "C" fn(c_int, c_int, libc::c_ulong) -> c_int,
    fd: c_int,
    cmd: c_int,
    arg: libc::c_ulong,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the program's own call, passed on unchanged.
        let r = unsafe { call(fd, cmd, arg) };
        if r >= 0 && (cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC) {
            follow_dup(fd, r);
        }
        if r >= 0 && cmd == libc::F_SETFL {
            if let Some(link) = conn::carried(fd) {
                link.set_nonblocking(arg as c_int & libc::O_NONBLOCK != 0);
            }
        }
        r
    })
}

/// # Safety
/// fcntl(2) with its optional argument as one machine word (as the
/// x86-64 and aarch64 calling conventions pass it).
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int {
    fcntl_with(real().fcntl, fd, cmd, arg)
}

/// # Safety
/// As fcntl above.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int {
    fcntl_with(real().fcntl64, fd, cmd, arg)
}

/// # Safety
/// ioctl(2) with its optional argument as one pointer (as the x86-64
/// and aarch64 calling conventions pass it); FIONBIO's is an int.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: libc::c_ulong, arg: *mut c_void) -> c_int {
    guarded(-1, || {
        if request == libc::FIONREAD && !arg.is_null() {
            // The kernel socket holds doorbells, not the data.
            match conn::route(fd) {
                Route::Kernel => {}
                Route::Via(link) => {
                    *(arg as *mut c_int) = link.unread(fd).min(c_int::MAX as usize) as c_int;
                    return 0;
                }
                Route::Fail(e) => {
                    set_errno(e);
                    return -1;
                }
            }
        }
        let r = (real().ioctl)(fd, request, arg);
        if r == 0 && request == libc::FIONBIO && !arg.is_null() {
            if let Some(link) = conn::carried(fd) {
                link.set_nonblocking(*(arg as *const c_int) != 0);
            }
        }
        r
    })
}
