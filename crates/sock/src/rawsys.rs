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
//!
//! `_exit` and `_Exit` end a process past every exit handler (Python's
//! `os._exit` in a forking server's child, right after its shutdown and
//! close): what a close or shutdown left waiting aside for the peer's
//! acknowledgements (`netlink::acknowledged_later`) would go with it and
//! the peer read a reset. They wait for that first, as the close did in
//! the call before.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::c_long;

type RawSyscall =
    unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;

/// The C library's `syscall` and `_exit`, found on first use (0: not
/// yet).
static NEXT: AtomicUsize = AtomicUsize::new(0);
static NEXT_EXIT: AtomicUsize = AtomicUsize::new(0);

/// The C library's definition of `name` (after this library's), kept in
/// `slot`; 0 if none. Without a lock: two threads racing store the same
/// address, and a vfork child may call it.
fn resolved(slot: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let mut p = slot.load(Ordering::Acquire);
    if p == 0 {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the
        // definition after this library's (the C library's).
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        slot.store(p, Ordering::Release);
    }
    p
}

fn next() -> Option<RawSyscall> {
    let p = resolved(&NEXT, c"syscall");
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

/// # Safety
/// The C prototype of `_exit` (see the module's text).
#[no_mangle]
pub unsafe extern "C" fn _exit(status: libc::c_int) -> ! {
    // (Not in a vfork child, which runs in its parent's memory: what
    // lingers there is the parent's.)
    if !openvia_core::transport_busy() && !crate::process::borrowing_parent_memory() {
        let _ = std::panic::catch_unwind(crate::netlink::wait_acknowledgements);
    }
    let p = resolved(&NEXT_EXIT, c"_exit");
    if p != 0 {
        // SAFETY: the address dlsym gave for `_exit`, of this type.
        let real: unsafe extern "C" fn(libc::c_int) -> ! = unsafe { std::mem::transmute(p) };
        unsafe { real(status) }
    }
    // SAFETY: the system call itself, if the C library's was not found.
    unsafe { libc::syscall(libc::SYS_exit_group, status as c_long) };
    unreachable!("exit_group returned")
}

/// # Safety
/// As `_exit`.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: libc::c_int) -> ! {
    unsafe { _exit(status) }
}
