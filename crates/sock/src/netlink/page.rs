//! The hand-over page of a connection between hosts: shared memory (a
//! memfd) between the processes of one end, so that a process without the
//! VI can take the connection over once the VI's maker has handed it to
//! the kernel (`handover`). Nothing crosses the network through it.
//!
//! Layout: a 4 KiB header of words, then room for everything the VI may
//! hold unread at the hand-over (every receive buffer full), then the
//! link's registered memory (its descriptors and buffers, `Region`): a
//! program the maker becomes through an exec no hook sees (execl) finds
//! there what the VI had received and sent, and does the hand-over in
//! the maker's stead (`take_over`).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::{BUF, CHUNK, DATA, HDR, RECV_SLOTS, SEND_SLOTS};
use crate::region::{Region, DESC_BYTES};

const HEADER: usize = 4096;
/// Bytes the page can hold unread.
pub const ROOM: usize = RECV_SLOTS * CHUNK;
/// Where the link's registered memory starts (page-aligned).
pub const REGION_AT: usize = HEADER + ROOM;
const SLOTS: usize = SEND_SLOTS + RECV_SLOTS;
pub const LEN: usize = REGION_AT + Region::bytes(SLOTS, BUF).next_multiple_of(4096);
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
/// As AWAIT_SWITCH, for a hand-over done in the maker's stead: what is
/// left over is known only from the peer's count (the messages it saw
/// acknowledged lie complete in the receive buffers).
pub const DEAD_VI: u32 = 2;

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
    /// Kept by the maker as it goes, for `take_over`: bytes the program
    /// read off the VI, messages it used up, bytes into the next one;
    /// payload bytes the peer acknowledged, the last message it did, and
    /// the last message sent.
    used_bytes: AtomicU64,
    used_number: AtomicU32,
    taken: AtomicU32,
    tx_acked: AtomicU64,
    acked_number: AtomicU32,
    sent_number: AtomicU32,
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

    /// A fresh page at `at` (page-aligned) in the memfd `fd` of an exec
    /// record (`inherit`), which grows to hold it: every process holding
    /// the record reaches the page, also once this one has gone with its
    /// VI (a shell's second command on a descriptor its first one used).
    /// Keeps no copy of `fd` (the record holds it). The header is made
    /// new: the memfd may have served an earlier connection of the
    /// process that made the record (`spare`), whose page it still holds.
    pub fn create_in(fd: RawFd, at: usize) -> Option<Page> {
        // SAFETY: growing the caller's memfd (pages come as touched).
        if unsafe { libc::ftruncate(fd, (at + LEN) as libc::off_t) } != 0 {
            return None;
        }
        let page = Page::map_in(fd, at)?;
        page.renew();
        Some(page)
    }

    /// Makes a page kept from an earlier connection of this process
    /// (`spare`) as a fresh one: a header of zeros, as a new memfd's,
    /// owned by this process. Only where no other process holds it.
    pub fn renew(&self) {
        // SAFETY: the header's bytes in our mapping; nobody else holds the
        // page (its record was never shared: `spare`).
        unsafe { std::ptr::write_bytes(self.base, 0, HEADER) };
        self.header()
            .owner
            .store(crate::process::id(), Ordering::Release);
    }

    /// Maps the page at `at` in memfd `fd` (checked to end there), with no
    /// copy of the descriptor.
    pub fn map_in(fd: RawFd, at: usize) -> Option<Page> {
        let p = crate::kernel::map_memfd_at(fd, at, LEN)?;
        Some(Page {
            base: p,
            fd: AtomicI32::new(-1),
        })
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

    /// Asks the maker for a hand-over (if nobody has yet): true if this
    /// call asked.
    pub fn request(&self) -> bool {
        self.header()
            .state
            .compare_exchange(LIVE, REQUESTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
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
    /// page), `rx_total` every byte this end took off the VI; the peer's
    /// switch byte is still ahead in the stream.
    pub fn publish(&self, left: &[&[u8]], rx_total: u64) {
        // SAFETY: the left-over area, ROOM bytes after the header; nobody
        // reads it before HANDED is published below.
        let area = unsafe { std::slice::from_raw_parts_mut(self.base.add(HEADER), ROOM) };
        let at = crate::carried::copy_in(left, &mut 0, &mut 0, area);
        let h = self.header();
        h.left_len.store(at as u64, Ordering::Relaxed);
        h.left_read.store(0, Ordering::Relaxed);
        h.rx_total.store(rx_total, Ordering::Relaxed);
        h.read_mode.store(AWAIT_SWITCH, Ordering::Relaxed);
        h.skip.store(0, Ordering::Relaxed);
        h.state.store(HANDED, Ordering::Release);
    }

    /// A millisecond's pause if the state is still `seen` (a waiter for
    /// the hand-over looks again after it).
    pub fn pause_while(&self, seen: u32) {
        if self.state() == seen {
            std::thread::sleep(Duration::from_millis(1));
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

impl Page {
    /// The memfd's kept copy, still kept (the link maps its registered
    /// memory from it).
    pub fn kept_fd(&self) -> Option<RawFd> {
        let fd = self.fd.load(Ordering::Acquire);
        (fd >= 0).then_some(fd)
    }

    /// The maker: the program read up to here.
    pub fn note_read(&self, used_bytes: u64, used_number: u32, taken: usize) {
        let h = self.header();
        h.used_bytes.store(used_bytes, Ordering::Relaxed);
        h.used_number.store(used_number, Ordering::Relaxed);
        h.taken.store(taken as u32, Ordering::Relaxed);
    }

    /// The maker: the peer acknowledged up to here; `sent` went out last.
    pub fn note_sent(&self, tx_acked: u64, acked_number: u32, sent: u32) {
        let h = self.header();
        h.tx_acked.store(tx_acked, Ordering::Relaxed);
        h.acked_number.store(acked_number, Ordering::Relaxed);
        h.sent_number.store(sent, Ordering::Relaxed);
    }

    /// Message slot `i` of the link's memory (send slots, then receive
    /// slots): (kind, number, payload). A payload length past the buffer
    /// (the peer wrote it) gives None.
    fn slot(&self, i: usize) -> Option<(u8, u32, &[u8])> {
        let at = REGION_AT + SLOTS * DESC_BYTES + i * BUF;
        // SAFETY: slot i's buffer lies inside the mapping (LEN covers the
        // region); the VI that wrote it is gone.
        let b = unsafe { std::slice::from_raw_parts(self.base.add(at), BUF) };
        let number = u32::from_ne_bytes(b[4..8].try_into().ok()?);
        let len = u32::from_ne_bytes(b[8..12].try_into().ok()?) as usize;
        (len <= CHUNK).then(|| (b[0], number, &b[HDR..HDR + len]))
    }

    /// The payload of message `number` in the send (`send`) or receive
    /// slots.
    fn message(&self, send: bool, number: u32) -> Option<&[u8]> {
        let slots = if send {
            0..SEND_SLOTS
        } else {
            SEND_SLOTS..SLOTS
        };
        slots
            .filter_map(|i| self.slot(i))
            .find(|&(kind, n, _)| kind == DATA && n == number)
            .map(|(_, _, p)| p)
    }

    /// For a hand-over in the maker's stead: the payloads the peer did not
    /// see acknowledged, in order, and the count it did.
    pub fn unacked_sends(&self) -> Option<(u64, Vec<&[u8]>)> {
        let h = self.header();
        let acked = h.acked_number.load(Ordering::Acquire);
        let sent = h.sent_number.load(Ordering::Acquire);
        let mut out = Vec::new();
        let mut n = acked;
        while n != sent {
            n = n.wrapping_add(1);
            out.push(self.message(true, n)?);
        }
        Some((h.tx_acked.load(Ordering::Acquire), out))
    }

    /// Publishes a hand-over done in the maker's stead.
    pub fn publish_dead(&self) {
        let h = self.header();
        h.left_len.store(0, Ordering::Relaxed);
        h.left_read.store(0, Ordering::Relaxed);
        h.read_mode.store(DEAD_VI, Ordering::Relaxed);
        h.skip.store(0, Ordering::Relaxed);
        h.state.store(HANDED, Ordering::Release);
    }

    /// DEAD_VI, once the peer's count `acked` is read: the messages after
    /// what the program read, up to that count, become the left-overs;
    /// what the program read beyond it is to be dropped. False if a
    /// message is missing (the connection cannot go on).
    pub fn settle_dead(&self, acked: u64) -> bool {
        let h = self.header();
        let used = h.used_bytes.load(Ordering::Acquire);
        let mut number = h.used_number.load(Ordering::Acquire);
        let taken = h.taken.load(Ordering::Acquire) as u64;
        let mut start = used - taken.min(used);
        let mut at = 0usize;
        while start < acked {
            number = number.wrapping_add(1);
            let Some(p) = self.message(false, number) else {
                return false;
            };
            let end = start + p.len() as u64;
            if end > acked {
                break; // not acknowledged: the peer sends it again
            }
            let from = used.saturating_sub(start).min(p.len() as u64) as usize;
            let part = &p[from..];
            let n = part.len().min(ROOM - at);
            // SAFETY: inside the left-over area (bounded by ROOM), which
            // nobody reads before read_mode leaves DEAD_VI.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), self.base.add(HEADER + at), n) };
            at += n;
            start = end;
        }
        h.left_len.store(at as u64, Ordering::Relaxed);
        h.left_read.store(0, Ordering::Relaxed);
        self.set_raw(used.saturating_sub(acked));
        true
    }
}

pub use crate::process::alive;

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

    /// A page made where an earlier connection's page lies (a record's
    /// memfd kept for the next connection: `spare`) starts as a new one,
    /// not in the state the earlier one ended in.
    #[test]
    fn a_page_made_over_an_old_one_starts_fresh() {
        // SAFETY: a NUL-terminated name; valid flags.
        let fd = unsafe { libc::memfd_create(c"page-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        let old = Page::create_in(fd, 4096).expect("page");
        old.request();
        assert!(old.begin());
        old.publish(&[b"left over"], 9);
        drop(old);
        let new = Page::create_in(fd, 4096).expect("page again");
        assert_eq!(new.state(), LIVE);
        assert_eq!(new.left(), (0, 0));
        assert_eq!(new.rx_total(), 0);
        assert_eq!(new.owner(), crate::process::id());
        // SAFETY: the memfd made above.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn a_hand_over_is_begun_once_and_published() {
        let p = Page::create().expect("page");
        assert_eq!(p.state(), LIVE);
        p.request();
        assert_eq!(p.state(), REQUESTED);
        assert!(p.begin());
        assert!(!p.begin(), "a second hand-over must not start");
        p.publish(&[b"abc", b"de"], 9);
        assert_eq!(p.state(), HANDED);
        assert_eq!(p.left(), (0, 5));
        assert_eq!(p.left_bytes(1, 10), b"bcde");
        assert_eq!(p.rx_total(), 9);
        assert!(!p.plain());
        p.set_left_read(5);
        p.set_raw(0);
        assert!(p.plain());
    }

    /// Writes message `number` (payload `data`) into slot `i`, as a
    /// writer's `post_send` or the peer's device would.
    fn put(p: &Page, i: usize, number: u32, data: &[u8]) {
        let at = REGION_AT + SLOTS * DESC_BYTES + i * BUF;
        // SAFETY: slot i's buffer inside the test's own page.
        let b = unsafe { std::slice::from_raw_parts_mut(p.base.add(at), BUF) };
        b[0] = DATA;
        b[4..8].copy_from_slice(&number.to_ne_bytes());
        b[8..12].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        b[HDR..HDR + data.len()].copy_from_slice(data);
    }

    #[test]
    fn a_take_over_finds_the_unacknowledged_sends_in_order() {
        let p = Page::create().expect("page");
        put(&p, 5, 4, b"four");
        put(&p, 2, 3, b"three");
        put(&p, 0, 1, b"one");
        p.note_sent(8, 2, 4);
        let (acked, sends) = p.unacked_sends().expect("all there");
        assert_eq!(acked, 8);
        assert_eq!(sends, vec![&b"three"[..], &b"four"[..]]);
        p.note_sent(8, 2, 5);
        assert!(p.unacked_sends().is_none(), "message 5 is nowhere");
    }

    #[test]
    fn left_overs_after_a_take_over_stop_at_the_peers_count() {
        let p = Page::create().expect("page");
        // Read so far: messages 1-2 (10 bytes) and 2 bytes of message 3.
        put(&p, SEND_SLOTS + 7, 3, b"abcdef");
        put(&p, SEND_SLOTS, 4, b"ghij");
        put(&p, SEND_SLOTS + 3, 5, b"klm");
        p.note_read(12, 2, 2);
        // The peer saw 3 and 4 acknowledged (to byte 20), not 5.
        assert!(p.settle_dead(20));
        let (read, len) = p.left();
        assert_eq!(p.left_bytes(read, len as usize), b"cdefghij");
        assert_eq!(p.skip(), 0);
        // Its count behind what was read: the difference is dropped.
        p.note_read(12, 2, 2);
        assert!(p.settle_dead(9));
        assert_eq!(p.left(), (0, 0));
        assert_eq!(p.skip(), 3);
        // A message missing from the buffers cannot be made up.
        p.note_read(12, 2, 2);
        assert!(!p.settle_dead(30), "message 6 is nowhere");
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
