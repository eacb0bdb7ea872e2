//! Record memfds of finished connections, kept for this process's next
//! connections: between hosts with their hand-over page and registered
//! memory (`netlink::spare`), for the next connection between hosts; on
//! one host bare, for the next record there (a memfd made, sized, mapped
//! and its first page faulted in, then unmapped and closed, at each end
//! of every connection).
//!
//! A kept memfd is close-on-exec and no longer reads as a record (its
//! magic is cleared), so a program exec'd meanwhile neither inherits nor
//! takes it up. The program may close its number (a loop closing every
//! descriptor) or put another file there: an entry is taken only while
//! the number still names the same memfd (its inode), else dropped
//! without touching the number. A forked child finds its parent's
//! entries in its copy of the pool and lets them go (`Spare`'s drop).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::Record;
use crate::kernel::inode;
use crate::netlink::spare::Spare;
use crate::real::real;

/// Entries kept at most: a server ending many connections at once gives
/// the rest back.
const POOL_MAX: usize = 4;

struct Pooled {
    fd: RawFd,
    inode: u64,
    record: *mut Record,
    spare: Option<Spare>,
    owner: u32,
}

// SAFETY: the record mapping is reached only by the thread that takes the
// entry out of the pool's mutex.
unsafe impl Send for Pooled {}

static POOL: Mutex<Vec<Pooled>> = Mutex::new(Vec::new());
/// Held by the tests that make records between hosts, so that one does
/// not take the memfds another counts on finding in the pool.
#[cfg(test)]
pub(crate) static POOL_TESTS: Mutex<()> = Mutex::new(());
/// Entries in the pool (their descriptors count against the room for
/// records: `room_for_a_record`).
static POOLED: AtomicUsize = AtomicUsize::new(0);

pub(super) fn count() -> usize {
    POOLED.load(Ordering::Relaxed)
}

/// Keeps record memfd `fd` (mapped at `record`), with `spare` between
/// hosts, for a later connection; gives the spare back (Err) when the pool
/// is full or the memfd cannot be made close-on-exec.
pub(super) fn put(
    fd: RawFd,
    record: *mut Record,
    spare: Option<Spare>,
) -> Result<(), Option<Spare>> {
    let Some(inode) = inode(fd) else {
        return Err(spare);
    };
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    forget_foreign(&mut pool);
    // SAFETY: our own descriptor.
    if pool.len() >= POOL_MAX || unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(spare);
    }
    // SAFETY: our mapping of the record, which no other process holds: not
    // a record any more.
    unsafe { std::ptr::addr_of_mut!((*record).magic).write_volatile(0) };
    pool.push(Pooled {
        fd,
        inode,
        record,
        spare,
        owner: crate::process::id(),
    });
    POOLED.store(pool.len(), Ordering::Relaxed);
    Ok(())
}

/// A kept memfd (no longer close-on-exec), its record mapping and spare:
/// one with a spare for a connection between hosts (`net`), a bare one
/// for a connection on this host.
pub(super) fn take(net: bool) -> Option<(RawFd, *mut Record, Option<Spare>)> {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    forget_foreign(&mut pool);
    let taken = loop {
        let i = pool.iter().rposition(|p| p.spare.is_some() == net)?;
        let p = pool.remove(i);
        // SAFETY: F_SETFD on the number only once it is known to still
        // name our memfd.
        if inode(p.fd) == Some(p.inode) && unsafe { libc::fcntl(p.fd, libc::F_SETFD, 0) } == 0 {
            break p;
        }
        // Closed or replaced by the program: the number is not ours.
        unmap_record(p.record);
        drop(p.spare);
    };
    POOLED.store(pool.len(), Ordering::Relaxed);
    Some((taken.fd, taken.record, taken.spare))
}

/// Entries of the process this one was forked from: their memfd numbers
/// are this process's copies (closed), the record and page mappings its
/// copies (unmapped), the registered memory not copied at all.
fn forget_foreign(pool: &mut Vec<Pooled>) {
    let me = crate::process::id();
    let mut i = 0;
    while i < pool.len() {
        if pool[i].owner == me {
            i += 1;
            continue;
        }
        let p = pool.swap_remove(i);
        // SAFETY: this process's copy of the parent's memfd.
        unsafe { (real().close)(p.fd) };
        unmap_record(p.record);
        // The child's copy: lets go of what is the child's alone.
        drop(p.spare);
    }
    POOLED.store(pool.len(), Ordering::Relaxed);
}

fn unmap_record(record: *mut Record) {
    // SAFETY: the record's own mapping, used by nothing once out of the
    // pool.
    unsafe { libc::munmap(record.cast(), std::mem::size_of::<Record>()) };
}
