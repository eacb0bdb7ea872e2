//! The hand-over page of a connection between hosts: shared memory (a
//! memfd) between the processes of one end, so that a process without the
//! VI can take the connection over once the VI's maker has handed it to
//! the kernel (`handover`). Nothing crosses the network through it.
//!
//! Layout: a 4 KiB header of words, then room for everything the VI may
//! hold unread at the hand-over (every receive buffer full).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::{CHUNK, RECV_SLOTS};

const HEADER: usize = 4096;
/// Bytes the page can hold unread.
pub const ROOM: usize = RECV_SLOTS * CHUNK;
const LEN: usize = HEADER + ROOM;
const NAME: &std::ffi::CStr = c"viarun-netpage";
/// How `/proc/self/fd/N` names such a memfd.
pub const LINK_PREFIX: &str = "/memfd:viarun-netpage";

/// `state`: the VI carries the connection.
pub const LIVE: u32 = 0;
/// A process without the VI asks its maker to hand it over.
pub const REQUESTED: u32 = 1;
/// The maker is handing it over.
pub const HANDING: u32 = 2;
/// On the kernel: the page holds what the VI had unread.
pub const HANDED: u32 = 3;

/// `read_mode`: the peer's switch byte (and its offset) is still ahead in
/// the kernel stream, behind doorbells.
pub const AWAIT_SWITCH: u32 = 0;
/// Everything in the kernel stream is data (after `skip` bytes).
pub const RAW: u32 = 1;

#[repr(C)]
struct Header {
    state: AtomicU32,
    /// The process holding the reading side (0: none).
    lock: AtomicU32,
    /// The VI's maker, which does the hand-over.
    owner: AtomicU32,
    read_mode: AtomicU32,
    /// Bytes this end took off the VI in all, left over ones included.
    rx_total: AtomicU64,
    /// Bytes left over at the hand-over, and how many were read since.
    left_len: AtomicU64,
    left_read: AtomicU64,
    /// Raw bytes still to drop: the peer sends again what it did not see
    /// acknowledged, some of which we had.
    skip: AtomicU64,
}

pub struct Page {
    base: *mut u8,
    /// The memfd while a record may want a copy (-1 once taken).
    fd: AtomicI32,
}

// SAFETY: the header is reached only through atomics; the area is written
// by the owner before it publishes HANDED and read under the page lock.
unsafe impl Send for Page {}
// SAFETY: as above.
unsafe impl Sync for Page {}

impl Page {
    /// A fresh page for a connection this process makes the VI of.
    pub fn create() -> Option<Page> {
        // SAFETY: a NUL-terminated name; valid flags.
        let fd = unsafe { libc::memfd_create(NAME.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: sizing the memfd just made (pages come as touched).
        let page = if unsafe { libc::ftruncate(fd, LEN as libc::off_t) } == 0 {
            Page::map(fd)
        } else {
            None
        };
        if let Some(p) = &page {
            p.header()
                .owner
                .store(crate::process::id(), Ordering::Release);
        }
        // SAFETY: the memfd made above; `map` kept its own copy.
        unsafe { libc::close(fd) };
        page
    }

    /// Maps the page in memfd `fd` (checked to be of our size); keeps a
    /// copy of the descriptor for a record.
    pub fn map(fd: RawFd) -> Option<Page> {
        let p = crate::kernel::map_memfd(fd, LEN)?;
        // SAFETY: F_DUPFD_CLOEXEC of the caller's descriptor.
        let copy = unsafe { (crate::real::real().fcntl)(fd, libc::F_DUPFD_CLOEXEC, 0) };
        Some(Page {
            base: p,
            fd: AtomicI32::new(copy),
        })
    }

    /// The kept copy of the memfd, now the caller's to close.
    pub fn take_fd(&self) -> Option<RawFd> {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        (fd >= 0).then_some(fd)
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with the header, 4096-aligned, and
        // lives as long as `self`.
        unsafe { &*(self.base as *const Header) }
    }

    pub fn state(&self) -> u32 {
        self.header().state.load(Ordering::Acquire)
    }

    /// Asks the maker for a hand-over (if nobody has yet).
    pub fn request(&self) {
        let _ = self.header().state.compare_exchange(
            LIVE,
            REQUESTED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// The maker starts the hand-over: false if it already happened (or
    /// is under way in another thread).
    pub fn begin(&self) -> bool {
        let s = &self.header().state;
        [LIVE, REQUESTED].into_iter().any(|from| {
            s.compare_exchange(from, HANDING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    pub fn owner(&self) -> u32 {
        self.header().owner.load(Ordering::Acquire)
    }

    /// The maker, done: `left` is what the VI had unread (copied into the
    /// page), `rx_total` every byte this end took off the VI.
    pub fn publish(&self, left: &[&[u8]], rx_total: u64, mode: u32, skip: u64) {
        let mut at = 0usize;
        for part in left {
            let n = part.len().min(ROOM - at);
            // SAFETY: inside the area (bounded by ROOM above); nobody reads
            // it before HANDED is published below.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), self.base.add(HEADER + at), n) };
            at += n;
        }
        let h = self.header();
        h.left_len.store(at as u64, Ordering::Relaxed);
        h.left_read.store(0, Ordering::Relaxed);
        h.rx_total.store(rx_total, Ordering::Relaxed);
        h.read_mode.store(mode, Ordering::Relaxed);
        h.skip.store(skip, Ordering::Relaxed);
        h.state.store(HANDED, Ordering::Release);
    }

    /// Waits (bounded by `limit`) until the state is no longer `seen`.
    pub fn wait_change(&self, seen: u32, limit: Duration) {
        if self.state() == seen {
            std::thread::sleep(limit.min(Duration::from_millis(1)));
        }
    }

    pub fn left(&self) -> (u64, u64) {
        let h = self.header();
        (
            h.left_read.load(Ordering::Acquire),
            h.left_len.load(Ordering::Acquire),
        )
    }

    /// Left-over bytes from `from` on (at most `n`).
    pub fn left_bytes(&self, from: u64, n: usize) -> &[u8] {
        let (_, len) = self.left();
        let from = (from.min(len)) as usize;
        let n = n.min(len as usize - from);
        // SAFETY: inside the area written before HANDED was published.
        unsafe { std::slice::from_raw_parts(self.base.add(HEADER + from), n) }
    }

    pub fn set_left_read(&self, v: u64) {
        self.header().left_read.store(v, Ordering::Release);
    }

    pub fn read_mode(&self) -> u32 {
        self.header().read_mode.load(Ordering::Acquire)
    }

    pub fn rx_total(&self) -> u64 {
        self.header().rx_total.load(Ordering::Acquire)
    }

    pub fn skip(&self) -> u64 {
        self.header().skip.load(Ordering::Acquire)
    }

    pub fn set_raw(&self, skip: u64) {
        let h = self.header();
        h.skip.store(skip, Ordering::Release);
        h.read_mode.store(RAW, Ordering::Release);
    }

    pub fn set_skip(&self, skip: u64) {
        self.header().skip.store(skip, Ordering::Release);
    }

    /// Whether nothing but raw data is left: no left-overs, no switch
    /// byte ahead, nothing to drop (then reads need no lock).
    pub fn plain(&self) -> bool {
        let (read, len) = self.left();
        read == len && self.read_mode() == RAW && self.skip() == 0
    }

    /// The reading side's lock, across processes (held briefly: never
    /// across a wait). A holder that died is taken over. None if
    /// `nonblocking` and another process holds it.
    pub fn lock(&self, nonblocking: bool) -> Option<PageLock<'_>> {
        let me = crate::process::id();
        let lock = &self.header().lock;
        loop {
            match lock.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(PageLock { page: self }),
                Err(holder) if holder == me => return Some(PageLock { page: self }),
                Err(holder) if !alive(holder) => {
                    let _ = lock.compare_exchange(holder, 0, Ordering::AcqRel, Ordering::Acquire);
                }
                Err(_) if nonblocking => return None,
                Err(_) => std::thread::sleep(Duration::from_micros(50)),
            }
        }
    }
}

/// Whether process `pid` still exists.
pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 || crate::kernel::errno() == libc::EPERM }
}

pub struct PageLock<'a> {
    page: &'a Page,
}

impl Drop for PageLock<'_> {
    fn drop(&mut self) {
        self.page.header().lock.store(0, Ordering::Release);
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unused once the Page goes.
        unsafe { libc::munmap(self.base.cast(), LEN) };
        if let Some(fd) = self.take_fd() {
            // SAFETY: our own copy of the memfd.
            unsafe { (crate::real::real().close)(fd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_over_is_begun_once_and_published() {
        let p = Page::create().expect("page");
        assert_eq!(p.state(), LIVE);
        p.request();
        assert_eq!(p.state(), REQUESTED);
        assert!(p.begin());
        assert!(!p.begin(), "a second hand-over must not start");
        p.publish(&[b"abc", b"de"], 9, AWAIT_SWITCH, 0);
        assert_eq!(p.state(), HANDED);
        assert_eq!(p.left(), (0, 5));
        assert_eq!(p.left_bytes(1, 10), b"bcde");
        assert_eq!(p.rx_total(), 9);
        assert!(!p.plain());
        p.set_left_read(5);
        p.set_raw(0);
        assert!(p.plain());
    }

    #[test]
    fn a_second_mapping_sees_the_same_page() {
        let p = Page::create().expect("page");
        let fd = p.take_fd().expect("kept copy");
        let q = Page::map(fd).expect("map");
        // SAFETY: the copy taken above.
        unsafe { libc::close(fd) };
        p.request();
        assert_eq!(q.state(), REQUESTED);
        let _held = p.lock(false).expect("lock");
        assert_eq!(q.owner(), crate::process::id());
    }
}
