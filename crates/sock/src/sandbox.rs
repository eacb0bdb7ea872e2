//! A process that puts itself under a seccomp filter. Such a filter
//! allows the program's own system calls and kills the process at any
//! other (OpenSSH's pre-authentication child: read, write, poll and a
//! few more, after `chroot` and a change of user), so the library may
//! make none of its own on a connection from then on: no peek, no
//! `fcntl`, no `sendmsg` with flags. The filter goes in through `prctl`
//! (`PR_SET_SECCOMP`), which is hooked here: right before it, every
//! connection the process holds is made plain kernel TCP
//! (`conn::plain_before_sandbox`). A filter set with the raw `seccomp`
//! system call (libseccomp) is not seen.

use libc::{c_int, c_ulong};
use std::sync::OnceLock;

type PrctlFn = unsafe extern "C" fn(c_int, ...) -> c_int;

fn real_prctl() -> PrctlFn {
    static REAL: OnceLock<PrctlFn> = OnceLock::new();
    *REAL.get_or_init(|| crate::real::sym(c"prctl"))
}

/// # Safety
/// The C prototype of prctl(2): an option and up to four more arguments,
/// all passed on as unsigned longs (what the C library's own does).
#[no_mangle]
pub unsafe extern "C" fn prctl(
    option: c_int,
    arg2: c_ulong,
    arg3: c_ulong,
    arg4: c_ulong,
    arg5: c_ulong,
) -> c_int {
    if option == libc::PR_SET_SECCOMP {
        crate::guarded((), crate::conn::plain_before_sandbox);
    }
    real_prctl()(option, arg2, arg3, arg4, arg5)
}
