//! The same socket calls under the other names the C library gives them.
//! A program built with `_FILE_OFFSET_BITS=64` (most distribution
//! packages: nginx among them) calls `sendfile64`, one built with
//! `_FORTIFY_SOURCE` calls `__recvfrom_chk` where the buffer's size is
//! known, and a few programs batch with `sendmmsg`/`recvmmsg`. Each would
//! reach the kernel socket of a carried connection past the hooks, and
//! put file data among its doorbells or read doorbells as data. Here they
//! end in the hooks (`sendfile`, `recvfrom`, `sendmsg`, `recvmsg`), and
//! on a connection the kernel carries in the C library's own call.

use libc::{c_int, c_uint, c_void, mmsghdr, size_t, sockaddr, socklen_t, ssize_t};

use crate::real::real;
use crate::{conn, guarded, result, Route};

/// # Safety
/// The C prototype of sendfile64 (on LP64 the same as sendfile's: off64_t
/// is off_t).
#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    input: c_int,
    offset: *mut libc::off64_t,
    count: size_t,
) -> ssize_t {
    crate::sendfile(out, input, offset.cast(), count)
}

/// # Safety
/// The C prototype of glibc's fortified recvfrom.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    _buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    crate::recvfrom(fd, buf, n, flags, addr, alen)
}

/// # Safety
/// The C prototype of sendmmsg(2). On a carried connection each message
/// is one `sendmsg`; the count sent so far is returned at the first
/// error (the error itself when it is the first message's), as the
/// kernel does.
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
) -> c_int {
    guarded(-1, || match conn::route(fd) {
        Route::Kernel => (real().sendmmsg)(fd, msgs, vlen, flags),
        Route::Fail(e) => result(Err(e)) as c_int,
        Route::Via(_) => {
            let mut done: c_uint = 0;
            while done < vlen {
                let m = &mut *msgs.add(done as usize);
                let n = crate::sendmsg(fd, &m.msg_hdr, flags);
                if n < 0 {
                    break;
                }
                m.msg_len = n as c_uint;
                done += 1;
            }
            if done == 0 && vlen > 0 {
                -1
            } else {
                done as c_int
            }
        }
    })
}

/// # Safety
/// The C prototype of recvmmsg(2). On a carried connection the first
/// message is one `recvmsg` as the flags ask (blocking or not), the
/// others only what is there already (as with `MSG_WAITFORONE`: on a
/// stream, waiting to fill every message would hold bytes that came);
/// `timeout` is not applied there.
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut libc::timespec,
) -> c_int {
    guarded(-1, || match conn::route(fd) {
        Route::Kernel => (real().recvmmsg)(fd, msgs, vlen, flags, timeout),
        Route::Fail(e) => result(Err(e)) as c_int,
        Route::Via(_) => {
            let first = flags & !libc::MSG_WAITFORONE;
            let mut done: c_uint = 0;
            while done < vlen {
                let m = &mut *msgs.add(done as usize);
                let f = if done == 0 {
                    first
                } else {
                    first | libc::MSG_DONTWAIT
                };
                let n = crate::recvmsg(fd, &mut m.msg_hdr, f);
                if n < 0 {
                    break;
                }
                m.msg_len = n as c_uint;
                done += 1;
                if n == 0 {
                    break; // EOF: nothing follows
                }
            }
            if done == 0 && vlen > 0 {
                -1
            } else {
                done as c_int
            }
        }
    })
}
