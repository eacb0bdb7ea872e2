//! EPVM's global pool: one shared-memory segment per host (a memfd made by
//! the pvmd and handed to every task over its socket), cut into 8 KiB
//! pages. Its info region holds the page map, who holds each message, the
//! waiters for pages and one message-head ring per task, all guarded by a
//! lock that a dead holder cannot wedge (the lock word is the holder's pid,
//! and a waiter that finds the pid gone takes the lock over and repairs the
//! page map from the hold counts, which are always written last).
//!
//! A message body is one contiguous run of pages, so every process reads
//! it in place at the same offset of its own mapping. Each process that may
//! touch a run (a task's buffer, or a message queued to a task) counts as a
//! hold of that task's slot; a run is free when no slot holds it, so the
//! pvmd reclaims everything a dead task held by clearing its slot.

mod alloc;
pub mod body;
pub mod inbound;
pub mod mailbox;

pub use alloc::first_fit;
pub use body::{Body, PackOut, PoolHandle};
pub use mailbox::{Desc, PostError};

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Page size of the buffer area (the paper's 8 KB).
pub const PAGE: usize = 8192;
/// Tasks per host that get a slot (a ring and holds); others use the socket.
pub const MAX_SLOTS: usize = 32;
/// Message heads a task's ring can hold before senders wait.
pub const RING: usize = 1024;
/// Default pool size; `OPENVIA_PVM_POOL_MB` overrides (0 disables the pool).
pub const DEFAULT_POOL_MB: usize = 64;
/// Environment variable giving the pool size in MiB.
pub const ENV_POOL_MB: &str = "OPENVIA_PVM_POOL_MB";

const MAGIC: u64 = 0x6f70_7669_6150_564d; // "opviaPVM"

/// One message head in a ring.
#[repr(C)]
pub(crate) struct RingEntry {
    src: AtomicI32,
    tag: AtomicI32,
    ctx: AtomicI32,
    enc: AtomicI32,
    start: AtomicU32,
    pages: AtomicU32,
    len: AtomicU64,
}

/// A task's slot: identity, its message ring, doorbells and its page wait.
#[repr(C)]
pub(crate) struct Slot {
    /// Tid of the task owning the slot, 0 when free or dead.
    tid: AtomicI32,
    pid: AtomicI32,
    head: AtomicU32,
    tail: AtomicU32,
    /// Bumped on every arrival (ring or socket): the receiver's futex.
    bell: AtomicU32,
    /// Bumped by the pvmd when it wrote to the task's socket.
    sock_bell: AtomicU32,
    sleeping: AtomicU32,
    /// Threads besides the receiver that sleep on `bell` (the task's
    /// pvm_getfds bridge): while any, a ring wakes every sleeper.
    watchers: AtomicU32,
    /// Pages this slot waits for (0: not waiting) and its arrival order.
    wait_pages: AtomicU32,
    wait_ticket: AtomicU64,
    /// Start page + 1 of a run granted to the waiter, 0 if none.
    grant: AtomicU32,
    /// Futex the page waiter sleeps on.
    wake: AtomicU32,
    ring: [RingEntry; RING],
}

#[repr(C)]
struct Header {
    magic: AtomicU64,
    /// Shape of this layout: a library and a pvmd built from different
    /// versions must not share a pool (see [`layout_id`]).
    layout_id: AtomicU64,
    npages: AtomicU32,
    /// Pid of the lock holder, 0 when free.
    lock: AtomicU32,
    free_pages: AtomicU32,
    rover: AtomicU32,
    next_ticket: AtomicU64,
    waiters: AtomicU32,
    /// Times any task had to queue for pages (a statistic).
    waits: AtomicU64,
    slots: [Slot; MAX_SLOTS],
}

/// Identifies the info region's layout.
fn layout_id() -> u64 {
    let parts = [
        std::mem::size_of::<Header>(),
        std::mem::size_of::<Slot>(),
        RING,
        MAX_SLOTS,
        PAGE,
    ];
    parts.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &p| {
        (h ^ p as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn align_page(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

/// Offsets of the regions for a pool of `npages` pages.
#[derive(Debug, Clone, Copy)]
struct Layout {
    used: usize,
    run_len: usize,
    holds: usize,
    data: usize,
    total: usize,
}

impl Layout {
    fn new(npages: usize) -> Layout {
        let used = std::mem::size_of::<Header>();
        let run_len = (used + npages + 7) & !7;
        let holds = run_len + npages * 4;
        let data = align_page(holds + npages * MAX_SLOTS);
        Layout {
            used,
            run_len,
            holds,
            data,
            total: data + npages * PAGE,
        }
    }
}

/// A mapping of the pool.
pub struct Pool {
    base: *mut u8,
    npages: usize,
    layout: Layout,
    fd: OwnedFd,
    /// This process's doorbell polling window (see mailbox::wait_bell).
    spin: std::sync::Mutex<crate::spin::Window>,
    /// The window of waits for a message from a task of another host
    /// (`Pool::wait_bell`): three times the limit, and grown back after
    /// a wait that came within it.
    remote_spin: std::sync::Mutex<crate::spin::Window>,
}

// SAFETY: the mapping is shared memory accessed only through atomics (the
// info region) or through runs a hold makes exclusive (the buffer area).
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what map() mapped.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.layout.total) };
    }
}

/// Pool size in pages from the environment (None: pool disabled).
pub fn pages_from_env() -> Option<usize> {
    let mb = std::env::var(ENV_POOL_MB)
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(DEFAULT_POOL_MB);
    (mb > 0).then_some(mb * 1024 * 1024 / PAGE)
}

impl Pool {
    /// Makes a fresh pool of `npages` pages (the pvmd does this once).
    pub fn create(npages: usize) -> io::Result<Pool> {
        let layout = Layout::new(npages);
        // SAFETY: the name is a valid C string; flags are plain ints.
        let fd = unsafe { libc::memfd_create(c"openvia-pvm-pool".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: resizing our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), layout.total as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let pool = Pool::map(fd, npages, layout)?;
        let h = pool.header();
        h.npages.store(npages as u32, Ordering::Relaxed);
        h.free_pages.store(npages as u32, Ordering::Relaxed);
        h.layout_id.store(layout_id(), Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(pool)
    }

    /// Maps a pool received from the pvmd.
    pub fn attach(fd: OwnedFd) -> io::Result<Pool> {
        // SAFETY: fstat fills the struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and out pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let size = st.st_size as usize;
        let first = Layout::new(0);
        if size < first.total {
            return Err(io::Error::other("pool too small"));
        }
        // Header first, to learn the page count; then the whole pool.
        let probe = Pool::map(fd, 0, first)?;
        let npages = probe.header().npages.load(Ordering::Acquire) as usize;
        let ok = probe.header().magic.load(Ordering::Acquire) == MAGIC
            && probe.header().layout_id.load(Ordering::Relaxed) == layout_id();
        let fd = probe.fd.try_clone()?;
        drop(probe);
        let layout = Layout::new(npages);
        if !ok || layout.total != size {
            return Err(io::Error::other("not an openvia PVM pool"));
        }
        Pool::map(fd, npages, layout)
    }

    fn map(fd: OwnedFd, npages: usize, layout: Layout) -> io::Result<Pool> {
        // SAFETY: a shared mapping of our memfd, checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Pool {
            base: p as *mut u8,
            npages,
            layout,
            fd,
            remote_spin: std::sync::Mutex::new(crate::spin::Window::new(
                crate::spin::remote_limit(),
                crate::spin::TASK_CONTENDED_NS,
            )),
            spin: std::sync::Mutex::new(crate::spin::Window::new(
                crate::spin::limit(),
                crate::spin::TASK_CONTENDED_NS,
            )),
        })
    }

    /// The memfd, to pass to tasks.
    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    pub fn npages(&self) -> usize {
        self.npages
    }

    /// Pages currently free.
    pub fn free_pages(&self) -> usize {
        self.header().free_pages.load(Ordering::Acquire) as usize
    }

    /// How many times a task has queued for pages since the pool was made.
    pub fn waits(&self) -> u64 {
        self.header().waits.load(Ordering::Relaxed)
    }

    fn header(&self) -> &Header {
        // SAFETY: the header sits at the start of the mapping, is made of
        // atomics only, and lives as long as the mapping (self).
        unsafe { &*(self.base as *const Header) }
    }

    pub(crate) fn slot(&self, i: usize) -> &Slot {
        &self.header().slots[i]
    }

    fn used(&self, page: usize) -> &AtomicU8 {
        debug_assert!(page < self.npages);
        // SAFETY: within the used[] array of npages bytes.
        unsafe { &*(self.base.add(self.layout.used + page) as *const AtomicU8) }
    }

    fn run_len(&self, page: usize) -> &AtomicU32 {
        debug_assert!(page < self.npages);
        // SAFETY: within the 8-aligned run_len[] array of npages u32s.
        unsafe { &*(self.base.add(self.layout.run_len + page * 4) as *const AtomicU32) }
    }

    fn holds(&self, page: usize, slot: usize) -> &AtomicU8 {
        debug_assert!(page < self.npages && slot < MAX_SLOTS);
        // SAFETY: within the holds[] array of npages * MAX_SLOTS bytes.
        unsafe { &*(self.base.add(self.layout.holds + page * MAX_SLOTS + slot) as *const AtomicU8) }
    }

    /// Address of a page in this mapping.
    pub(crate) fn page_ptr(&self, page: u32) -> *mut u8 {
        debug_assert!((page as usize) < self.npages);
        // SAFETY: inside the buffer area.
        unsafe { self.base.add(self.layout.data + page as usize * PAGE) }
    }

    /// Tid of a slot's owner (0: free or dead).
    pub fn slot_tid(&self, i: usize) -> i32 {
        self.slot(i).tid.load(Ordering::Acquire)
    }

    /// Which slot belongs to `tid`, by a scan of the slot table.
    pub fn find_slot(&self, tid: i32) -> Option<usize> {
        (0..MAX_SLOTS).find(|&i| tid != 0 && self.slot_tid(i) == tid)
    }
}
