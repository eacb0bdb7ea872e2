//! The C library's own socket calls, found with `dlsym(RTLD_NEXT, …)`:
//! every hook ends in one of these, and the library's own kernel I/O on a
//! program's socket uses them directly so it never re-enters a hook.

use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};
use std::sync::OnceLock;

pub struct Real {
    pub listen: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub connect: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int,
    pub accept: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int,
    pub accept4: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int,
    pub read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t,
    pub write: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t,
    pub readv: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t,
    pub writev: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t,
    pub recv: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t,
    pub send: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t,
    pub recvfrom: unsafe extern "C" fn(
        c_int,
        *mut c_void,
        size_t,
        c_int,
        *mut sockaddr,
        *mut socklen_t,
    ) -> ssize_t,
    pub sendto: unsafe extern "C" fn(
        c_int,
        *const c_void,
        size_t,
        c_int,
        *const sockaddr,
        socklen_t,
    ) -> ssize_t,
    pub recvmsg: unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t,
    pub sendmsg: unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t,
    pub close: unsafe extern "C" fn(c_int) -> c_int,
    pub shutdown: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub dup: unsafe extern "C" fn(c_int) -> c_int,
    pub dup2: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int,
    pub fcntl: unsafe extern "C" fn(c_int, c_int, libc::c_ulong) -> c_int,
    pub fcntl64: unsafe extern "C" fn(c_int, c_int, libc::c_ulong) -> c_int,
    pub ioctl: unsafe extern "C" fn(c_int, libc::c_ulong, *mut c_void) -> c_int,
    pub sendfile: unsafe extern "C" fn(c_int, c_int, *mut libc::off_t, size_t) -> ssize_t,
    pub sendmmsg: unsafe extern "C" fn(c_int, *mut libc::mmsghdr, libc::c_uint, c_int) -> c_int,
    pub recvmmsg: unsafe extern "C" fn(
        c_int,
        *mut libc::mmsghdr,
        libc::c_uint,
        c_int,
        *mut libc::timespec,
    ) -> c_int,
    pub poll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int,
    pub ppoll: unsafe extern "C" fn(
        *mut libc::pollfd,
        libc::nfds_t,
        *const libc::timespec,
        *const libc::sigset_t,
    ) -> c_int,
    pub select: unsafe extern "C" fn(
        c_int,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *mut libc::timeval,
    ) -> c_int,
    pub pselect: unsafe extern "C" fn(
        c_int,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *const libc::timespec,
        *const libc::sigset_t,
    ) -> c_int,
    pub epoll_ctl: unsafe extern "C" fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int,
    pub epoll_wait: unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int,
    pub epoll_pwait: unsafe extern "C" fn(
        c_int,
        *mut libc::epoll_event,
        c_int,
        c_int,
        *const libc::sigset_t,
    ) -> c_int,
    pub splice: unsafe extern "C" fn(
        c_int,
        *mut libc::loff_t,
        c_int,
        *mut libc::loff_t,
        size_t,
        libc::c_uint,
    ) -> ssize_t,
}

pub(crate) fn sym<T: Copy>(name: &std::ffi::CStr) -> T {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the next
    // definition after this library (the C library's).
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    assert!(!p.is_null(), "viarun: no {name:?} in the C library");
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: T is a function pointer type matching the C prototype of
    // `name` (the table above spells each one out).
    unsafe { std::mem::transmute_copy(&p) }
}

static REAL: OnceLock<Real> = OnceLock::new();

pub fn real() -> &'static Real {
    REAL.get_or_init(|| Real {
        listen: sym(c"listen"),
        connect: sym(c"connect"),
        accept: sym(c"accept"),
        accept4: sym(c"accept4"),
        read: sym(c"read"),
        write: sym(c"write"),
        readv: sym(c"readv"),
        writev: sym(c"writev"),
        recv: sym(c"recv"),
        send: sym(c"send"),
        recvfrom: sym(c"recvfrom"),
        sendto: sym(c"sendto"),
        recvmsg: sym(c"recvmsg"),
        sendmsg: sym(c"sendmsg"),
        close: sym(c"close"),
        shutdown: sym(c"shutdown"),
        dup: sym(c"dup"),
        dup2: sym(c"dup2"),
        dup3: sym(c"dup3"),
        fcntl: sym(c"fcntl"),
        fcntl64: sym(c"fcntl64"),
        ioctl: sym(c"ioctl"),
        sendfile: sym(c"sendfile"),
        sendmmsg: sym(c"sendmmsg"),
        recvmmsg: sym(c"recvmmsg"),
        splice: sym(c"splice"),
        poll: sym(c"poll"),
        ppoll: sym(c"ppoll"),
        select: sym(c"select"),
        pselect: sym(c"pselect"),
        epoll_ctl: sym(c"epoll_ctl"),
        epoll_wait: sym(c"epoll_wait"),
        epoll_pwait: sym(c"epoll_pwait"),
    })
}
