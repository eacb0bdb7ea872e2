//! Thin wrappers over the Linux system calls the core needs.
//!
//! Everything that touches libc lives here, so the rest of the core reads as
//! plain Rust: shared mappings of a memfd, futexes on shared words, Unix
//! sequenced-packet sockets that carry file descriptors, cross-memory copies
//! (CMA), eventfd/epoll, a random source for unguessable handles, and the
//! raw-frame links of the Ethernet device (`frames`; AF_XDP in `xdp` with
//! its ring and UMEM code in `xsk_ring` and its XDP program in `bpf`).

pub mod bpf;
pub mod cma;
pub mod floor;
pub mod frames;
pub mod futex;
pub mod mapping;
pub mod membarrier;
pub mod net;
pub mod packet;
pub mod poll;
pub mod process;
pub mod seqpacket;
pub mod thread;
pub mod xdp;
mod xsk_ring;

use std::io;

/// Fills `buf` from the kernel's random source (getrandom never blocks after boot).
pub fn random_bytes(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // getrandom cannot fail on a supported kernel with valid arguments;
            // fall back to mixing the clock so handles still differ.
            let t = now_ns();
            for (i, b) in buf[filled..].iter_mut().enumerate() {
                *b = (t >> ((i % 8) * 8)) as u8 ^ (i as u8).wrapping_mul(151);
            }
            return;
        }
    }
}

/// A random 64-bit value.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    random_bytes(&mut b);
    u64::from_ne_bytes(b)
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling process's id.
pub fn pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// The calling process's real user id.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// Converts a libc return value into an `io::Result`.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A hint to the CPU that we are spinning.
#[inline(always)]
pub fn cpu_relax() {
    std::hint::spin_loop();
}

/// Threads of this process (from /proc; 0 if unknown).
fn thread_count() -> usize {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is the
    // first, num_threads the 18th.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(17)?.parse().ok())
        .unwrap_or(0)
}

/// Grows this process's file-descriptor table to hold `n` descriptors
/// (at most the soft RLIMIT_NOFILE) before they are needed.
///
/// The kernel grows the table by doubling, and in a process with more than
/// one thread every growth waits for an RCU grace period (20–35 ms
/// measured): a connect that happened to open the 64th, 128th, ...
/// descriptor stalled that long. Growing it while the process has one
/// thread costs no such wait and moves it out of every connect. A process
/// that already has threads is left alone: there the growth would cost the
/// wait now, even for a program that never opens many connections (a PVM
/// task), and it will pay it only if it does. The table never shrinks.
pub fn reserve_fds(n: usize) {
    if thread_count() != 1 {
        return;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    let want = (n as u64).min(lim.rlim_cur);
    if want < 2 {
        return;
    }
    // SAFETY: F_DUPFD_CLOEXEC of stdin-or-any open descriptor returns a new
    // descriptor >= want-1 (growing the table) or fails; we close what we
    // got and touch nothing else. /dev/null is opened if 0 is not open.
    unsafe {
        let mut src = 0;
        let mut opened = -1;
        if libc::fcntl(0, libc::F_GETFD) < 0 {
            opened = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            src = opened;
        }
        if src >= 0 {
            let fd = libc::fcntl(src, libc::F_DUPFD_CLOEXEC, (want - 1) as libc::c_int);
            if fd >= 0 {
                libc::close(fd);
            }
        }
        if opened >= 0 {
            libc::close(opened);
        }
    }
}
