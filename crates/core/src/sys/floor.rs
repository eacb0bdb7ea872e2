//! Where the core keeps the descriptors it holds per connection.
//!
//! A program takes the lowest free descriptor numbers, and counts on its
//! own sockets staying below its limit (and below FD_SETSIZE for select).
//! A client of the core that shares the program's descriptor table (the
//! sockets preload, `viarun`) sets a *floor*: each descriptor the core
//! keeps for a connection's life (its liveness socket, a peer's eventfd)
//! is then moved to the floor or above, out of the program's way. No
//! floor (the default, 0): descriptors stay where the kernel put them.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

static FLOOR: AtomicI32 = AtomicI32::new(0);

/// Sets the floor (0: none). Descriptors already held stay where they are.
pub fn set_descriptor_floor(floor: i32) {
    FLOOR.store(floor.max(0), Ordering::Relaxed);
}

/// `fd`, moved to the floor or above when one is set and there is room
/// there; otherwise `fd` itself (a descriptor is never lost for want of
/// room up high).
pub fn lift(fd: OwnedFd) -> OwnedFd {
    let floor = FLOOR.load(Ordering::Relaxed);
    if floor == 0 || fd.as_raw_fd() >= floor {
        return fd;
    }
    // SAFETY: F_DUPFD_CLOEXEC of a descriptor we own; a failure (no room
    // at or above the floor, or the floor past the limit) leaves nothing.
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor) };
    if high < 0 {
        return fd;
    }
    // SAFETY: a fresh descriptor we own; `fd` is closed as it drops.
    unsafe { OwnedFd::from_raw_fd(high) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eventfd() -> OwnedFd {
        // SAFETY: a fresh eventfd, owned at once.
        unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_CLOEXEC)) }
    }

    #[test]
    fn lifts_to_the_floor_and_keeps_the_file() {
        set_descriptor_floor(0);
        let low = eventfd();
        let low_fd = low.as_raw_fd();
        assert_eq!(lift(low).as_raw_fd(), low_fd, "no floor: unmoved");
        let fd = eventfd();
        set_descriptor_floor(700);
        let high = lift(fd);
        set_descriptor_floor(0);
        assert!(high.as_raw_fd() >= 700, "moved to {}", high.as_raw_fd());
        // The same eventfd: a count written is read back.
        let one = 1u64.to_ne_bytes();
        let mut got = [0u8; 8];
        // SAFETY: 8-byte writes and reads on our eventfd.
        unsafe {
            assert_eq!(libc::write(high.as_raw_fd(), one.as_ptr().cast(), 8), 8);
            assert_eq!(libc::read(high.as_raw_fd(), got.as_mut_ptr().cast(), 8), 8);
        }
        assert_eq!(u64::from_ne_bytes(got), 1);
        // CLOEXEC kept.
        // SAFETY: F_GETFD on our descriptor.
        let flags = unsafe { libc::fcntl(high.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);

        // A floor past the limit leaves the descriptor where it is. (One
        // test: the floor is process-wide.)
        let fd = eventfd();
        let raw = fd.as_raw_fd();
        set_descriptor_floor(i32::MAX);
        let same = lift(fd);
        set_descriptor_floor(0);
        assert_eq!(same.as_raw_fd(), raw);
    }
}
