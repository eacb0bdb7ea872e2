//! `syscall(2)`, the C library's door to any system call by number. libuv
//! (so Node.js) closes its descriptors with `syscall(SYS_close, fd)`, past
//! the `close` hook: the connection stayed in the table, its doorbells
//! unread made the kernel reset the socket, and the descriptor number,
//! once reused, still named the old connection (a server under viarun
//! between two namespaces reset every connection after the second such
//! close). Here `SYS_close` goes to the `close` hook; every other number
//! goes on to the C library unchanged.
//!
//! The C prototype is variadic. On the Linux ABIs we build for (x86-64
//! System V, AArch64) the integer arguments of a variadic call travel in
//! the same registers and stack slots as a plain call's, so this takes
//! the number and six integers (the most any system call has) and passes
//! them on. Nothing here may use a lock: the standard library's own
//! futex calls (and this library's) come through this function too.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::c_long;

type RawSyscall =
    unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;

/// The C library's `syscall`, found on first use (0: not yet). Resolved
/// without a lock: two threads racing store the same address.
static NEXT: AtomicUsize = AtomicUsize::new(0);

fn next() -> Option<RawSyscall> {
    let mut p = NEXT.load(Ordering::Acquire);
    if p == 0 {
        // SAFETY: dlsym with a constant NUL-terminated name; RTLD_NEXT
        // finds the definition after this library's (the C library's).
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"syscall".as_ptr()) } as usize;
        NEXT.store(p, Ordering::Release);
    }
    // SAFETY: a non-null address dlsym gave for `syscall`, whose integer
    // arguments this type passes as its variadic call would (see above).
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, RawSyscall>(p) })
}

/// # Safety
/// The C prototype of syscall(2), with the arguments as described above.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    number: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    if number == libc::SYS_close && !openvia_core::transport_busy() {
        // SAFETY: the program's descriptor, closed as it asked.
        return unsafe { crate::descriptors::close(a1 as libc::c_int) } as c_long;
    }
    match next() {
        // SAFETY: the caller's arguments, passed on as they came.
        Some(f) => unsafe { f(number, a1, a2, a3, a4, a5, a6) },
        None => {
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            -1
        }
    }
}
