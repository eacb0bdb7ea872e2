//! What a program's close, close_range and closefrom leave open.
//!
//! A program about to exec often closes every descriptor but those it
//! hands on: Python's subprocess by default (`close_fds=True`, with
//! close_range in the vfork child), OpenSSH with closefrom, daemons with a
//! loop of close. That would drop the exec record of an unused connection
//! (inherit.rs) whose socket it does hand on, and the new program could
//! not take the connection up while its peer waited for good. So a
//! record's descriptors stay open while its socket stays open on a
//! descriptor outside those being closed, and the call reports success;
//! a record whose socket goes too is closed as asked.
//!
//! These run in vfork children too (in the parent's memory, beside its
//! other threads): nothing here allocates or takes a lock, and the
//! connection tables are changed only by a process of its own.

use libc::c_int;
use std::os::fd::RawFd;

use crate::conn;
use crate::inherit::{self, HeldRecord};
use crate::kernel::socket_inode;
use crate::process;
use crate::real::real;

/// Whether the record descriptor `fd` must stay open although the
/// program closes it (its socket is open on another descriptor).
fn keeps_alone(fd: RawFd) -> bool {
    inherit::find_held(|r| r.record_fd == fd || r.aux_fd == fd)
        .is_some_and(|r| socket_open_outside(r.socket_inode, fd as u32, fd as u32))
}

/// close(2) for the program: a tracked socket is forgotten, a record
/// descriptor whose socket lives on is kept.
pub fn close(fd: c_int) -> c_int {
    // (The getpid of the vfork check only for descriptors we know: most
    // closes are of others, and pay nothing here.)
    if inherit::is_held(fd) {
        if keeps_alone(fd) {
            return 0;
        }
        if !process::borrowing_parent_memory() {
            inherit::closed_by_program(fd);
        }
    }
    if conn::tracks(fd) && !process::borrowing_parent_memory() {
        conn::forget(fd);
    }
    if !process::borrowing_parent_memory() {
        crate::epoll::closed(fd);
    }
    // SAFETY: the program's own descriptor, closed as it asked.
    unsafe { (real().close)(fd) }
}

/// close_range(2) for the program: the range is closed (or marked
/// close-on-exec, as `flags` say) around the record descriptors kept.
pub fn close_range(first: u32, last: u32, flags: c_int) -> c_int {
    if first > last {
        return fail(libc::EINVAL);
    }
    let mut kept = [u32::MAX; 2 * inherit::MAX_HELD];
    let mut n = 0;
    let own_memory = !process::borrowing_parent_memory();
    inherit::find_held(|r| {
        let inside = |fd: RawFd| fd >= 0 && (first..=last).contains(&(fd as u32));
        if !inside(r.record_fd) && !inside(r.aux_fd) {
            return false;
        }
        if socket_open_outside(r.socket_inode, first, last) {
            for fd in [r.record_fd, r.aux_fd] {
                if inside(fd) {
                    kept[n] = fd as u32;
                    n += 1;
                }
            }
        } else if own_memory && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
            forget_record(r);
        }
        false // every record is visited
    });
    let kept = &mut kept[..n];
    kept.sort_unstable();
    // The pieces between the kept descriptors, each closed as asked.
    let mut from = first;
    for &k in kept.iter() {
        if k > from {
            let r = raw_close_range(from, k - 1, flags);
            if r != 0 {
                return r;
            }
        }
        from = k + 1; // k is a descriptor: below u32::MAX
    }
    let r = if from <= last {
        raw_close_range(from, last, flags)
    } else {
        0
    };
    if r == 0 && own_memory && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        crate::epoll::closed_range(
            first.min(i32::MAX as u32) as RawFd,
            last.min(i32::MAX as u32) as RawFd,
        );
        let end = (last as usize).min(conn::MAX_FD - 1);
        for fd in first as usize..=end {
            if conn::tracks(fd as RawFd) && !kept.contains(&(fd as u32)) {
                conn::forget(fd as RawFd);
            }
        }
    }
    r
}

/// closefrom(3) for the program: close_range to the end, or, where the
/// kernel has no close_range, each open descriptor from `first` on.
pub fn closefrom(first: c_int) {
    let first = first.max(0) as u32;
    if close_range(first, u32::MAX, 0) == 0 {
        return;
    }
    let mut open = [0 as RawFd; 256];
    loop {
        let n = open_descriptors(&mut open, first);
        for &fd in &open[..n] {
            close(fd);
        }
        if n < open.len() {
            return;
        }
    }
}

fn forget_record(r: &HeldRecord) {
    inherit::closed_by_program(r.record_fd);
    if r.aux_fd >= 0 {
        inherit::closed_by_program(r.aux_fd);
    }
}

fn raw_close_range(first: u32, last: u32, flags: c_int) -> c_int {
    // SAFETY: the close_range system call on the program's descriptors,
    // as it asked; no memory is passed.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) };
    r as c_int
}

fn fail(errno: c_int) -> c_int {
    crate::set_errno(errno);
    -1
}

/// Whether a descriptor outside `first..=last` names the socket `inode`.
fn socket_open_outside(inode: u64, first: u32, last: u32) -> bool {
    let mut open = [0 as RawFd; 256];
    let mut from = 0;
    loop {
        let n = open_descriptors(&mut open, from);
        let found = open[..n]
            .iter()
            .any(|&fd| !(first..=last).contains(&(fd as u32)) && socket_inode(fd) == Some(inode));
        if found {
            return true;
        }
        if n < open.len() {
            return false;
        }
        from = open[n - 1] as u32 + 1;
    }
}

/// Calls `f(fd, inode)` for each socket open here without close-on-exec
/// (what an exec keeps), in descriptor order, until `f` says stop
/// (false). Allocates nothing: exec hooks may run in a vfork child.
pub(crate) fn each_kept_socket(mut f: impl FnMut(RawFd, u64) -> bool) {
    let mut open = [0 as RawFd; 256];
    let mut from = 0u32;
    loop {
        let n = open_descriptors(&mut open, from);
        for &fd in &open[..n] {
            let Some(ino) = socket_inode(fd) else {
                continue;
            };
            // SAFETY: F_GETFD on an open descriptor of ours.
            let flags = unsafe { (real().fcntl)(fd, libc::F_GETFD, 0) };
            if flags < 0 || flags & libc::FD_CLOEXEC != 0 {
                continue;
            }
            if !f(fd, ino) {
                return;
            }
        }
        if n < open.len() {
            return;
        }
        from = open[n - 1] as u32 + 1;
    }
}

/// Fills `out` with this process's open descriptors of at least `from`,
/// in increasing order, and says how many; `out.len()` means there may be
/// more (ask again from the last one plus one). Read from /proc/self/fd
/// with getdents64 into a stack buffer: no allocation.
pub(crate) fn open_descriptors(out: &mut [RawFd], from: u32) -> usize {
    #[repr(C, align(8))]
    struct Entries([u8; 4096]);
    // SAFETY: opening a directory by a NUL-terminated name.
    let dir = unsafe {
        libc::open(
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return 0;
    }
    let mut n = 0;
    let mut buf = Entries([0; 4096]);
    loop {
        // SAFETY: getdents64 writes at most buf's length into it.
        let got =
            unsafe { libc::syscall(libc::SYS_getdents64, dir, buf.0.as_mut_ptr(), buf.0.len()) };
        if got <= 0 {
            break;
        }
        for fd in dirent_numbers(&buf.0[..got as usize]) {
            if fd != dir && fd as u32 >= from {
                insert_sorted(out, &mut n, fd);
            }
        }
    }
    // SAFETY: the directory we opened.
    unsafe { (real().close)(dir) };
    n
}

/// Keeps the `out.len()` smallest descriptors seen, sorted.
fn insert_sorted(out: &mut [RawFd], n: &mut usize, fd: RawFd) {
    let at = out[..*n].partition_point(|&x| x < fd);
    if at == out.len() {
        return;
    }
    let end = (*n + 1).min(out.len());
    out.copy_within(at..end - 1, at + 1);
    out[at] = fd;
    *n = end;
}

/// The numeric names in a buffer of `linux_dirent64` records (d_ino 8
/// bytes, d_off 8, d_reclen 2, d_type 1, then the NUL-terminated name);
/// a record that does not fit ends the walk.
fn dirent_numbers(buf: &[u8]) -> impl Iterator<Item = RawFd> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || loop {
        let head = buf.get(at..at + 19)?;
        let len = u16::from_ne_bytes([head[16], head[17]]) as usize;
        let rec = buf.get(at..at.checked_add(len)?).filter(|_| len > 19)?;
        at += len;
        let name = &rec[19..];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if let Some(fd) = std::str::from_utf8(name).ok().and_then(|s| s.parse().ok()) {
            return Some(fd);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirent(name: &str) -> Vec<u8> {
        let len = (19 + name.len() + 1).next_multiple_of(8);
        let mut r = vec![0u8; len];
        r[16..18].copy_from_slice(&(len as u16).to_ne_bytes());
        r[19..19 + name.len()].copy_from_slice(name.as_bytes());
        r
    }

    #[test]
    fn numbers_are_read_from_directory_records_and_a_short_record_ends_the_walk() {
        let mut buf = [dirent("."), dirent(".."), dirent("0"), dirent("17")].concat();
        assert_eq!(dirent_numbers(&buf).collect::<Vec<_>>(), vec![0, 17]);
        // A record claiming more than is there, or less than its header.
        buf.extend_from_slice(&[0u8; 16]);
        assert_eq!(dirent_numbers(&buf).count(), 2);
        let mut bad = dirent("5");
        bad[16..18].copy_from_slice(&3u16.to_ne_bytes());
        assert_eq!(dirent_numbers(&bad).count(), 0);
        assert_eq!(dirent_numbers(&[]).count(), 0);
    }

    #[test]
    fn the_smallest_descriptors_are_kept_in_order() {
        let mut out = [0; 3];
        let mut n = 0;
        for fd in [9, 4, 7, 1, 8, 2] {
            insert_sorted(&mut out, &mut n, fd);
        }
        assert_eq!((n, out), (3, [1, 2, 4]));
    }

    #[test]
    fn this_process_descriptors_are_listed_from_a_number_on() {
        let mut sv = [0; 2];
        // SAFETY: socketpair fills two ints of ours.
        assert_eq!(
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) },
            0
        );
        let mut open = [0; 1024];
        let n = open_descriptors(&mut open, sv[0] as u32);
        assert!(open[..n].contains(&sv[0]) && open[..n].contains(&sv[1]));
        assert!(open[..n].iter().all(|&fd| fd >= sv[0]));
        let ino = socket_inode(sv[0]).unwrap();
        assert!(socket_open_outside(ino, sv[1] as u32, sv[1] as u32));
        assert!(!socket_open_outside(ino, sv[0] as u32, sv[0] as u32));
        for fd in sv {
            // SAFETY: closing our sockets.
            unsafe { libc::close(fd) };
        }
    }
}
