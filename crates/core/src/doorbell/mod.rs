//! How one process wakes another without a system call on the fast path.
//!
//! Every NIC owns a small shared page (its *doorbell page*) that it hands to
//! each peer it connects to. A thread about to block registers in `waiters`
//! and sleeps on the `bell` futex; the progress thread, before it sleeps,
//! sets `armed` and waits on its eventfd. A peer that has just written
//! something (a record, a consumed count, ring space) reads both words —
//! one cache line that stays shared while nobody sleeps — and only enters
//! the kernel when someone actually waits.
//!
//! Between "publish" and "look at the other side's flag" both sides need a
//! store–load fence, so a wake-up is never lost: either the sleeper sees
//! the new data when it re-checks, or the writer sees the sleeper's flag.
//! The writer's fence is made free by membarrier(2) (see
//! `sys::membarrier`): the sleeper, about to block anyway, pays for both.
//!
//! After the page comes the NIC's notice ring (see `notice`): a peer that
//! rings for a VI whose queues feed a CQ first says which VI.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

pub mod notice;

use crate::sys::mapping::SharedMapping;
use crate::sys::poll::{signal_raw, EventFd};
use crate::sys::{futex, membarrier};
use notice::NoticeRing;

pub const PAGE_LEN: usize = 4096;
/// The bit of a notice key word that says the VI's CQ polls it anyway.
pub const WATCHED: u32 = 1 << 31;
/// The whole doorbell region: the page, then the notice ring.
pub const REGION_LEN: usize = PAGE_LEN + notice::RING_BYTES.next_multiple_of(PAGE_LEN);
const MAGIC: u64 = 0x4f56_4941_4442_454c; // "OVIADBEL"

#[repr(C, align(64))]
struct Page {
    magic: u64,
    _pad0: [u64; 7],
    bell: AtomicU32,
    waiters: AtomicU32,
    armed: AtomicU32,
    _pad1: [u32; 13],
    /// A random value peers read by CMA to learn whether CMA works.
    probe: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Page>() <= PAGE_LEN);

fn notices_of(m: &SharedMapping) -> NoticeRing {
    // SAFETY: the mapping is REGION_LEN bytes (checked at map time) and
    // outlives the view (its owner holds both).
    unsafe { NoticeRing::at(m.as_ptr().add(PAGE_LEN)) }
}

fn page(m: &SharedMapping) -> &Page {
    // SAFETY: the mapping is REGION_LEN >= PAGE_LEN bytes (made that size),
    // page-aligned, and Page is made of plain integers and atomics.
    unsafe { &*(m.as_ptr() as *const Page) }
}

/// Our own doorbell page and progress eventfd.
pub struct LocalDoorbell {
    map: SharedMapping,
    event: EventFd,
    /// The progress thread naps (deaf to sockets) while the program polls.
    napping: std::sync::atomic::AtomicBool,
    /// Threads blocked outside a Wait, in the kernel on descriptors of
    /// their own (`blocked_elsewhere`): not on the page, as nothing rings
    /// them through it.
    elsewhere: AtomicU32,
    /// Only threads of this process ring it (the network device has no
    /// shared-memory peers): plain fences then, no membarrier, whose IPIs
    /// to every CPU would be paid on every block for nothing.
    local_only: bool,
}

impl LocalDoorbell {
    pub fn new(local_only: bool) -> io::Result<Self> {
        if !local_only {
            membarrier::register();
        }
        let map = SharedMapping::create("openvia-doorbell", REGION_LEN)?;
        let p = page(&map);
        // SAFETY: freshly created and not yet shared; plain store.
        unsafe { std::ptr::write_volatile(std::ptr::addr_of!(p.magic) as *mut u64, MAGIC) };
        p.probe
            .store(crate::sys::random_u64() | 1, Ordering::Relaxed);
        Ok(Self {
            map,
            event: EventFd::new()?,
            napping: std::sync::atomic::AtomicBool::new(false),
            elsewhere: AtomicU32::new(0),
            local_only,
        })
    }

    /// The sleeping side's fence (see `local_only`).
    pub(crate) fn sleeper_fence(&self) {
        if self.local_only {
            std::sync::atomic::fence(Ordering::SeqCst);
        } else {
            membarrier::heavy();
        }
    }

    pub fn page_fd(&self) -> &OwnedFd {
        self.map
            .fd()
            .expect("our own doorbell page keeps its memfd (never closed)")
    }

    /// The notice ring peers write for our VIs.
    pub fn notices(&self) -> NoticeRing {
        notices_of(&self.map)
    }

    pub fn event(&self) -> &EventFd {
        &self.event
    }

    /// Address and value of the CMA probe word, for the handshake.
    pub fn probe(&self) -> (u64, u64) {
        let p = page(&self.map);
        (
            std::ptr::addr_of!(p.probe) as u64,
            p.probe.load(Ordering::Relaxed),
        )
    }

    /// Wakes blocked threads of this process (after local progress).
    pub fn ring_local(&self) {
        if self.local_only {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
        ring(page(&self.map), self.event.fd().as_raw_fd());
    }

    /// Blocks the calling thread until rung or `timeout`, unless `ready()`
    /// already holds after registering as a waiter.
    pub fn block(&self, timeout: Duration, ready: impl FnOnce() -> bool) {
        let p = page(&self.map);
        p.waiters.fetch_add(1, Ordering::SeqCst);
        // The program stops polling: the progress thread must watch
        // everything again (hang-ups, timers) instead of napping.
        if self.napping.load(Ordering::SeqCst) {
            self.event.signal();
        }
        self.sleeper_fence();
        let seen = p.bell.load(Ordering::SeqCst);
        if !ready() {
            futex::wait(&p.bell, seen, Some(timeout));
        }
        p.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// The progress thread starts or ends a nap.
    pub fn napping(&self, on: bool) {
        self.napping.store(on, Ordering::SeqCst);
    }

    /// Whether a thread of this process is blocked, in a Wait or
    /// elsewhere (`blocked_elsewhere`).
    pub fn has_waiters(&self) -> bool {
        page(&self.map).waiters.load(Ordering::SeqCst) != 0
            || self.elsewhere.load(Ordering::SeqCst) != 0
    }

    /// A thread stops polling to block outside a Wait: as for `block`, the
    /// progress thread must serve every VI's timers again instead of
    /// napping. Counted until `unblocked_elsewhere`.
    pub fn blocked_elsewhere(&self) {
        self.elsewhere.fetch_add(1, Ordering::SeqCst);
        if self.napping.load(Ordering::SeqCst) {
            self.event.signal();
        }
    }

    pub fn unblocked_elsewhere(&self) {
        self.elsewhere.fetch_sub(1, Ordering::SeqCst);
    }

    /// The progress thread announces that it is about to sleep.
    pub fn arm(&self) {
        page(&self.map).armed.store(1, Ordering::SeqCst);
        self.sleeper_fence();
    }

    pub fn disarm(&self) {
        page(&self.map).armed.store(0, Ordering::Relaxed);
    }
}

/// A peer process's doorbell page and progress eventfd, mapped once however
/// many connections lead to that process: each connection brings its own
/// copies of both descriptors, and keeping them all would cost a process
/// with hundreds of connections hundreds of descriptors (and mappings).
struct PeerBell {
    map: SharedMapping,
    event: OwnedFd,
    /// The last CMA probe of this peer: (pid, address, value) → reached.
    /// Every connection to the peer probes the same word of this page.
    probed: Mutex<Option<(i32, u64, u64, bool)>>,
}

/// A doorbell page's (device, inode): a memfd's inode is not reused while
/// our mapping keeps the file alive.
type PageId = (u64, u64);

/// The peer doorbells mapped now.
static PEER_BELLS: Mutex<Option<HashMap<PageId, Weak<PeerBell>>>> = Mutex::new(None);

impl PeerBell {
    /// The doorbell behind `page_fd` (and its `event`), shared with other
    /// connections to the same peer process; the descriptors are closed
    /// when a mapping of that page exists already.
    fn shared(page_fd: OwnedFd, event: OwnedFd) -> io::Result<Arc<Self>> {
        // SAFETY: fstat writes into a zeroed stat struct we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `page_fd` is a valid descriptor, `st` a valid out-pointer.
        if unsafe { libc::fstat(page_fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let key = (st.st_dev, st.st_ino);
        let mut bells = PEER_BELLS.lock().unwrap_or_else(|e| e.into_inner());
        let bells = bells.get_or_insert_with(HashMap::new);
        if let Some(bell) = bells.get(&key).and_then(Weak::upgrade) {
            return Ok(bell);
        }
        let mut map = SharedMapping::map(page_fd, REGION_LEN)?;
        if page(&map).magic != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a doorbell page",
            ));
        }
        map.close_fd();
        let event = crate::sys::floor::lift(event);
        let bell = Arc::new(Self {
            map,
            event,
            probed: Mutex::new(None),
        });
        bells.retain(|_, b| b.strong_count() > 0);
        bells.insert(key, Arc::downgrade(&bell));
        Ok(bell)
    }
}

/// A peer's doorbell page, mapped from the descriptor it sent us.
pub struct PeerDoorbell {
    bell: Arc<PeerBell>,
    notices: NoticeRing,
    /// The peer VI's notice key, in the connection region (0: its VI has
    /// no CQ, no notice needed; with [`WATCHED`]: its CQ polls it anyway).
    /// Null until the channel sets it.
    key: *const AtomicU32,
    /// Our own VI's key word in the same region (for [`WATCHED`]).
    own_key: *const AtomicU32,
    /// How far the peer's CQ pollers got, as last seen.
    notice_head: std::cell::Cell<u64>,
}

// SAFETY: `key` points into the connection region, which the channel owning
// this doorbell keeps mapped for as long as the doorbell lives; it is only
// read atomically.
unsafe impl Send for PeerDoorbell {}

impl PeerDoorbell {
    pub fn map(page_fd: OwnedFd, event: OwnedFd) -> io::Result<Self> {
        let bell = PeerBell::shared(page_fd, event)?;
        let notices = notices_of(&bell.map);
        Ok(Self {
            bell,
            notices,
            key: std::ptr::null(),
            own_key: std::ptr::null(),
            notice_head: std::cell::Cell::new(0),
        })
    }

    /// Whether we reach the peer's memory by CMA: `probe`'s answer for
    /// this peer process's probe word (`pid`, `addr`, `value`), asked once
    /// for all the connections to it (a probe is a system call and a page
    /// walk in the middle of each handshake).
    pub fn reaches(&self, pid: i32, addr: u64, value: u64, probe: impl FnOnce() -> bool) -> bool {
        let mut last = self.bell.probed.lock().unwrap_or_else(|e| e.into_inner());
        match *last {
            Some((p, a, v, reached)) if (p, a, v) == (pid, addr, value) => reached,
            _ => {
                let reached = probe();
                *last = Some((pid, addr, value, reached));
                reached
            }
        }
    }

    /// Where the peer VI's notice key and our own lie.
    ///
    /// # Safety
    /// Both must stay valid for as long as this doorbell lives.
    pub unsafe fn set_notice_keys(&mut self, peer: *const AtomicU32, own: *const AtomicU32) {
        self.key = peer;
        self.own_key = own;
    }

    /// Tells the peer whether our CQ polls our VI on every look anyway
    /// (then it pushes no notices for it). Turning it off is only safe
    /// followed by a fence on our side ([`LocalDoorbell::sleeper_fence`])
    /// and a look at the VI: a peer may have skipped a notice just before.
    pub fn set_watched(&self, on: bool) {
        if self.own_key.is_null() {
            return;
        }
        // SAFETY: see `set_notice_keys`.
        let k = unsafe { &*self.own_key };
        if on {
            k.fetch_or(WATCHED, Ordering::Relaxed);
        } else {
            k.fetch_and(!WATCHED, Ordering::SeqCst);
        }
    }

    /// Tells the peer's CQ pollers which VI has work, then wakes the peer
    /// if anyone there sleeps. Call after publishing.
    #[inline]
    pub fn ring(&self) {
        // Our record is published before the key's WATCHED bit is read
        // (the peer clears it, fences, then looks: see `set_watched`).
        membarrier::light();
        if !self.key.is_null() {
            // SAFETY: see `set_notice_keys`.
            let key = unsafe { &*self.key }.load(Ordering::Relaxed);
            if key != 0 && key & WATCHED == 0 {
                let mut head = self.notice_head.get();
                self.notices.push(key, &mut head);
                self.notice_head.set(head);
            }
        }
        ring(page(&self.bell.map), self.bell.event.as_raw_fd());
    }
}

#[inline(always)]
fn ring(p: &Page, event_fd: i32) {
    membarrier::light();
    if p.waiters.load(Ordering::Relaxed) != 0 || p.armed.load(Ordering::Relaxed) != 0 {
        ring_slow(p, event_fd);
    }
}

#[cold]
fn ring_slow(p: &Page, event_fd: i32) {
    if p.waiters.load(Ordering::Relaxed) != 0 {
        p.bell.fetch_add(1, Ordering::SeqCst);
        futex::wake_all(&p.bell);
    }
    if p.armed.load(Ordering::Relaxed) != 0 && p.armed.swap(0, Ordering::SeqCst) != 0 {
        signal_raw(event_fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copies(local: &LocalDoorbell) -> (OwnedFd, OwnedFd) {
        (
            local.page_fd().try_clone().unwrap(),
            local.event().fd().try_clone().unwrap(),
        )
    }

    /// (device, inode) of what `fd` names, if open.
    fn file_of(fd: i32) -> Option<PageId> {
        // SAFETY: fstat into a zeroed struct we own; a closed number fails.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    }

    /// Every connection to one peer process brings copies of its doorbell
    /// page and eventfd: one mapping and one eventfd are kept for all, the
    /// page's descriptor for none, so a process with hundreds of
    /// connections does not hold hundreds of each.
    #[test]
    fn connections_to_one_peer_share_its_doorbell() {
        let local = LocalDoorbell::new(false).unwrap();
        let page_id = file_of(local.page_fd().as_raw_fd()).unwrap();
        // (Other tests' threads may take a closed number again: a number
        // counts as ours only while it still names the page.)
        let names_page = |fd| file_of(fd) == Some(page_id);
        let (page1, event1) = copies(&local);
        let page1_fd = page1.as_raw_fd();
        let first = PeerDoorbell::map(page1, event1).unwrap();
        assert!(
            !names_page(page1_fd),
            "the page's descriptor is closed once mapped"
        );
        let (page2, event2) = copies(&local);
        let page2_fd = page2.as_raw_fd();
        let second = PeerDoorbell::map(page2, event2).unwrap();
        assert!(
            Arc::ptr_eq(&first.bell, &second.bell),
            "one doorbell for both"
        );
        assert!(!names_page(page2_fd));
        // Ringing through the shared one wakes the peer's progress thread.
        local.arm();
        second.ring();
        let mut count = [0u8; 8];
        // SAFETY: an 8-byte read from our nonblocking eventfd.
        let n = unsafe { libc::read(local.event().fd().as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        assert_eq!(n, 8, "rung");
        let shared = Arc::downgrade(&first.bell);
        drop((first, second));
        assert!(shared.upgrade().is_none(), "gone with its last connection");
        // The next connection maps it afresh.
        let (page3, event3) = copies(&local);
        let third = PeerDoorbell::map(page3, event3).unwrap();
        assert_eq!(page(&third.bell.map).magic, MAGIC);
    }

    /// The CMA probe of a peer process is asked once for all connections
    /// to it, again for another process (pid) or probe word.
    #[test]
    fn a_peers_probe_is_asked_once() {
        let local = LocalDoorbell::new(false).unwrap();
        let (page, event) = copies(&local);
        let peer = PeerDoorbell::map(page, event).unwrap();
        let asked = std::cell::Cell::new(0);
        let probe = |answer| {
            asked.set(asked.get() + 1);
            answer
        };
        assert!(peer.reaches(10, 0x1000, 7, || probe(true)));
        assert!(
            peer.reaches(10, 0x1000, 7, || probe(false)),
            "the first answer holds"
        );
        assert_eq!(asked.get(), 1);
        assert!(
            !peer.reaches(11, 0x1000, 7, || probe(false)),
            "another process"
        );
        assert!(peer.reaches(11, 0x2000, 7, || probe(true)), "another word");
        assert_eq!(asked.get(), 3);
    }

    #[test]
    fn a_page_that_is_no_doorbell_is_refused() {
        let other = SharedMapping::create("not-a-doorbell", REGION_LEN).unwrap();
        let page = other.fd().unwrap().try_clone().unwrap();
        let event = EventFd::new().unwrap().fd().try_clone().unwrap();
        assert!(PeerDoorbell::map(page, event).is_err());
    }
}
