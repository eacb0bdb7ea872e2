//! Registered memory and protection tags.
//!
//! A memory handle is a 32-bit value that travels in descriptors and to
//! peers (for RDMA), so it must be unguessable: the low bits index a slot,
//! the high bits are a random tag drawn at registration. Lookups happen on
//! every posted segment, so they take no lock: a slot's handle word acts as
//! a sequence lock around its fields (see [`MemoryRegistry::lookup`]).
//!
//! Registered pages get MADV_DONTFORK (a child of fork() must not share
//! pages a peer may be writing into) and are mlocked when RLIMIT_MEMLOCK
//! allows (VipRegisterMem; a client of the core may ask for no lock,
//! `register_unlocked`); both are reference counted per page, so
//! overlapping registrations undo correctly.
//!
//! Once deregistration returns, openvia never touches the region again.
//! Every touch happens under the lock of the VI concerned, with the region
//! looked up in the same critical section; a descriptor that stays queued
//! past that section (a receive, a send not finished at post) holds a
//! *use* of the regions it names (its buffers and the region it lies in)
//! until its completion is written. Deregistration refuses while a use is
//! held; otherwise it closes the region to lookups, passes once through
//! every VI's lock (the `quiesce` callback), so every section that saw the
//! region has ended, and refuses after all (reopening it) if one of them
//! queued a descriptor meanwhile. A send finished within its post — the
//! common small one — takes no use at all.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{Result, ViaError};

/// A protection tag: VIs and memory must carry the same one to meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PtagId(pub u32);

/// Most regions one NIC can hold.
pub const MAX_REGIONS: usize = 4096;
const INDEX_BITS: u32 = 12;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
/// Largest single registration.
pub const MAX_REGISTER_BLOCK: u64 = 1 << 40;

const ATTR_RDMA_WRITE: u64 = 1 << 32;
const ATTR_RDMA_READ: u64 = 1 << 33;

/// A snapshot of one registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub handle: u32,
    pub addr: u64,
    pub len: u64,
    pub ptag: PtagId,
    pub rdma_write: bool,
    pub rdma_read: bool,
}

impl Region {
    /// Whether [addr, addr+len) lies inside this region.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        match addr.checked_add(len) {
            Some(end) => addr >= self.addr && end <= self.addr + self.len,
            None => false,
        }
    }
}

/// Deregistration has begun.
const CLOSING: u64 = 1 << 63;

// One slot per cache line: a use is added and released for every queued
// descriptor, and would otherwise disturb the lookups of the next slot.
#[derive(Default)]
#[repr(align(64))]
struct Slot {
    handle: AtomicU32,
    addr: AtomicU64,
    len: AtomicU64,
    /// ptag in the low 32 bits, RDMA enables above.
    attrs: AtomicU64,
    /// The handle this slot had last, so a re-registration never reuses it
    /// (a stale handle must miss).
    previous: AtomicU32,
    /// Queued descriptors naming the region, and [`CLOSING`].
    uses: AtomicU64,
}

/// Bookkeeping that only registration and deregistration touch.
struct Book {
    free: Vec<u32>,
    /// Registrations covering each page: DONTFORK/mlock are undone at zero.
    page_refs: HashMap<u64, u32, BuildHasherDefault<PageHasher>>,
    locked_bytes: u64,
    lock_limit: u64,
}

/// The registered memory of one NIC.
pub struct MemoryRegistry {
    slots: Box<[Slot]>,
    book: Mutex<Book>,
}

/// Hashes a page address with one multiplication. The book counts every
/// page of every registration (a connection of viarun's registers 3 MiB:
/// 770 pages, counted at registration and again at deregistration), and
/// the standard SipHash made that ~9 % of the CPU time of short
/// connections between hosts; the keys are our own addresses, not input
/// an attacker chooses.
#[derive(Default)]
struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, page: u64) {
        self.0 = (page >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

fn memlock_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return 0;
    }
    if r.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        r.rlim_cur
    }
}

impl Default for MemoryRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryRegistry {
    pub fn new() -> Self {
        let slots: Vec<Slot> = (0..MAX_REGIONS).map(|_| Slot::default()).collect();
        Self {
            slots: slots.into_boxed_slice(),
            book: Mutex::new(Book {
                // Slot 0 is never used, so no handle has index 0.
                free: (1..MAX_REGIONS as u32).rev().collect(),
                page_refs: HashMap::default(),
                locked_bytes: 0,
                lock_limit: memlock_limit(),
            }),
        }
    }

    /// Registers [addr, addr+len), its pages locked where RLIMIT_MEMLOCK
    /// allows. Fails for a null, empty, wrapping or unmapped range.
    pub fn register(
        &self,
        addr: u64,
        len: u64,
        ptag: PtagId,
        rdma_write: bool,
        rdma_read: bool,
    ) -> Result<u32> {
        let attrs = ptag.0 as u64
            | if rdma_write { ATTR_RDMA_WRITE } else { 0 }
            | if rdma_read { ATTR_RDMA_READ } else { 0 };
        self.add(addr, len, attrs, true)
    }

    /// As [`MemoryRegistry::register`] for memory no RDMA names, its pages
    /// not locked. Nothing here needs them resident — the devices reach
    /// registered memory through system calls (send, recv, CMA), which
    /// fault pages in — so a client that registers memory per short
    /// connection leaves them unlocked: locking populates every page
    /// (3 MiB: ~2 ms on the 2-vCPU box).
    pub fn register_unlocked(&self, addr: u64, len: u64, ptag: PtagId) -> Result<u32> {
        self.add(addr, len, ptag.0 as u64, false)
    }

    /// A registration with attribute word `attrs`; `lock`: mlock its pages.
    fn add(&self, addr: u64, len: u64, attrs: u64, lock: bool) -> Result<u32> {
        if addr == 0 || len == 0 || len > MAX_REGISTER_BLOCK || addr.checked_add(len).is_none() {
            return Err(ViaError::InvalidParameter("memory range"));
        }
        let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let index = book
            .free
            .pop()
            .ok_or(ViaError::Resource("memory regions"))?;
        if let Err(e) = pin_pages(&mut book, addr, len, lock) {
            book.free.push(index);
            return Err(e);
        }
        let slot = &self.slots[index as usize];
        let previous = slot.previous.load(Ordering::Relaxed);
        let mut handle = 0u32;
        while handle & !INDEX_MASK == 0 || handle == previous {
            handle = ((crate::sys::random_u64() as u32) & !INDEX_MASK) | index;
        }
        slot.previous.store(handle, Ordering::Relaxed);
        slot.addr.store(addr, Ordering::Relaxed);
        slot.len.store(len, Ordering::Relaxed);
        slot.attrs.store(attrs, Ordering::Relaxed);
        // Clear only the flag: the count is zero (deregistration succeeds
        // only then), except after the NIC's forced clear, whose late
        // releases must still balance.
        slot.uses.fetch_and(!CLOSING, Ordering::Relaxed);
        slot.handle.store(handle, Ordering::Release);
        Ok(handle)
    }

    /// Adds a use of the registration `handle`, which the caller looked up
    /// in its current critical section of a VI's lock (see the module
    /// text: a deregistration that began meanwhile sees it and refuses).
    #[inline]
    pub fn add_use(&self, handle: u32) {
        if let Some(slot) = self.slots.get((handle & INDEX_MASK) as usize) {
            slot.uses.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Gives back a use added with [`add_use`](Self::add_use).
    #[inline]
    pub fn release_use(&self, handle: u32) {
        if let Some(slot) = self.slots.get((handle & INDEX_MASK) as usize) {
            slot.uses.fetch_sub(1, Ordering::Release);
        }
    }

    /// Uses held of the slot of `handle`.
    pub fn uses_of(&self, handle: u32) -> u64 {
        self.slots
            .get((handle & INDEX_MASK) as usize)
            .map_or(0, |s| s.uses.load(Ordering::Acquire) & !CLOSING)
    }

    /// Finds a registration by handle without taking a lock.
    #[inline]
    pub fn lookup(&self, handle: u32) -> Option<Region> {
        let slot = self.slots.get((handle & INDEX_MASK) as usize)?;
        if handle == 0 || slot.handle.load(Ordering::Acquire) != handle {
            return None;
        }
        let addr = slot.addr.load(Ordering::Relaxed);
        let len = slot.len.load(Ordering::Relaxed);
        let attrs = slot.attrs.load(Ordering::Relaxed);
        // The fields were read between two equal loads of the handle word,
        // so they belong to this registration (a change would have rewritten
        // the handle with a fresh random tag).
        fence(Ordering::Acquire);
        if slot.handle.load(Ordering::Relaxed) != handle {
            return None;
        }
        Some(Region {
            handle,
            addr,
            len,
            ptag: PtagId(attrs as u32),
            rdma_write: attrs & ATTR_RDMA_WRITE != 0,
            rdma_read: attrs & ATTR_RDMA_READ != 0,
        })
    }

    /// Removes a registration; `addr` must be the registered start.
    /// Refused (`InvalidState`) while a queued descriptor names the region.
    /// `quiesce` must return only once every critical section of a VI's
    /// lock that began before it was called has ended (each VI's lock taken
    /// once).
    pub fn deregister(&self, addr: u64, handle: u32, quiesce: &dyn Fn()) -> Result<()> {
        self.remove(addr, handle, Some(quiesce))
    }

    fn remove(&self, addr: u64, handle: u32, quiesce: Option<&dyn Fn()>) -> Result<()> {
        let region = self
            .lookup(handle)
            .ok_or(ViaError::InvalidParameter("memory handle"))?;
        if region.addr != addr {
            return Err(ViaError::InvalidParameter("address does not match handle"));
        }
        let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &self.slots[(handle & INDEX_MASK) as usize];
        if slot.handle.load(Ordering::Acquire) != handle {
            return Err(ViaError::InvalidParameter("memory handle"));
        }
        let in_use = || ViaError::InvalidState("memory region in use by a posted descriptor");
        if let Some(quiesce) = quiesce {
            // A completion is written, then its uses released, in one
            // critical section: a program that saw the status may call us
            // before the release; let those sections end first.
            if slot.uses.load(Ordering::Acquire) != 0 {
                quiesce();
            }
            if slot
                .uses
                .compare_exchange(0, CLOSING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return Err(in_use());
            }
        } else {
            // Closing the NIC: its VIs are gone or idle, nothing will run.
            slot.uses.fetch_or(CLOSING, Ordering::AcqRel);
        }
        // Under the book lock the handle cannot change.
        slot.handle.store(0, Ordering::SeqCst);
        if let Some(quiesce) = quiesce {
            // Every section that saw the handle ends: a peer's RDMA copy,
            // a post that queued a descriptor naming the region (its use
            // shows now).
            quiesce();
            if slot.uses.load(Ordering::Acquire) & !CLOSING != 0 {
                slot.uses.fetch_and(!CLOSING, Ordering::AcqRel);
                slot.handle.store(handle, Ordering::Release);
                return Err(in_use());
            }
        }
        unpin_pages(&mut book, region.addr, region.len);
        book.free.push(handle & INDEX_MASK);
        Ok(())
    }

    /// Changes the attributes of a registration in place.
    pub fn set_attributes(
        &self,
        addr: u64,
        handle: u32,
        ptag: PtagId,
        rdma_write: bool,
        rdma_read: bool,
    ) -> Result<()> {
        let region = self
            .lookup(handle)
            .ok_or(ViaError::InvalidParameter("memory handle"))?;
        if region.addr != addr {
            return Err(ViaError::InvalidParameter("address does not match handle"));
        }
        let _book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &self.slots[(handle & INDEX_MASK) as usize];
        let attrs = ptag.0 as u64
            | if rdma_write { ATTR_RDMA_WRITE } else { 0 }
            | if rdma_read { ATTR_RDMA_READ } else { 0 };
        // Readers compare the handle word around their reads: clear it while
        // the attributes change, then restore it.
        slot.handle.store(0, Ordering::Release);
        fence(Ordering::SeqCst);
        slot.attrs.store(attrs, Ordering::Relaxed);
        slot.handle.store(handle, Ordering::Release);
        Ok(())
    }

    /// Whether any live registration carries `ptag`.
    pub fn uses_ptag(&self, ptag: PtagId) -> bool {
        self.slots.iter().any(|s| {
            s.handle.load(Ordering::Acquire) != 0
                && s.attrs.load(Ordering::Relaxed) as u32 == ptag.0
        })
    }

    /// Drops every registration (NIC close).
    pub fn clear(&self) {
        for s in self.slots.iter() {
            let h = s.handle.load(Ordering::Acquire);
            if h != 0 {
                let _ = self.remove(s.addr.load(Ordering::Relaxed), h, None);
            }
        }
    }
}

/// The regions one posted descriptor names (see the module text): the
/// region it lies in first, then each other region its segments name,
/// once. Recorded while the descriptor is checked; a use of each is added
/// only when it stays queued ([`commit`](Self::commit)), and given back
/// when its completion is written. Small: it travels in every queue entry.
#[derive(Default)]
pub struct HeldUses {
    inline: [u32; 3],
    n: u8,
    committed: bool,
    /// Regions past the inline ones (a descriptor naming more than three:
    /// rare, so grown one at a time).
    more: Option<Box<[u32]>>,
}

impl HeldUses {
    /// Records the region a descriptor lies in.
    #[inline]
    pub fn with(handle: u32) -> Self {
        Self {
            inline: [handle, 0, 0],
            n: 1,
            committed: false,
            more: None,
        }
    }

    /// How many regions are recorded.
    #[inline]
    pub fn count(&self) -> usize {
        self.n as usize + self.more.as_ref().map_or(0, |m| m.len())
    }

    /// Looks `handle` up and records it (once). Before [`commit`](Self::commit).
    #[inline]
    pub fn take(&mut self, reg: &MemoryRegistry, handle: u32) -> Option<Region> {
        let r = reg.lookup(handle)?;
        // Most often the buffer shares the descriptor's registration.
        if self.inline[0] != handle {
            self.record(handle);
        }
        Some(r)
    }

    fn record(&mut self, handle: u32) {
        if self.inline[..self.n as usize].contains(&handle) {
            return;
        }
        if (self.n as usize) < self.inline.len() {
            self.inline[self.n as usize] = handle;
            self.n += 1;
            return;
        }
        let more = self.more.take().unwrap_or_default();
        if more.contains(&handle) {
            self.more = Some(more);
        } else {
            let mut grown = more.into_vec();
            grown.push(handle);
            self.more = Some(grown.into_boxed_slice());
        }
    }

    fn handles(&self) -> impl Iterator<Item = u32> + '_ {
        self.inline[..self.n as usize]
            .iter()
            .chain(self.more.iter().flat_map(|m| m.iter()))
            .copied()
    }

    /// Adds a use of every recorded region: the descriptor stays queued
    /// after this critical section.
    #[inline]
    pub fn commit(&mut self, reg: &MemoryRegistry) {
        for h in self.handles() {
            reg.add_use(h);
        }
        self.committed = true;
    }

    /// Forgets every region but the first `keep` (giving back their uses).
    pub fn release_after(&mut self, reg: &MemoryRegistry, keep: usize) {
        if let Some(more) = self.more.take() {
            let mut more = more.into_vec();
            while self.n as usize + more.len() > keep {
                match more.pop() {
                    Some(h) if self.committed => reg.release_use(h),
                    Some(_) => {}
                    None => break,
                }
            }
            if !more.is_empty() {
                self.more = Some(more.into_boxed_slice());
            }
        }
        while self.n as usize > keep {
            self.n -= 1;
            if self.committed {
                reg.release_use(self.inline[self.n as usize]);
            }
        }
    }

    /// Gives back every use (the descriptor is complete, or abandoned).
    /// Nothing to do for one that never stayed queued.
    #[inline(always)]
    pub fn release(&mut self, reg: &MemoryRegistry) {
        if self.committed {
            self.release_committed(reg);
        }
    }

    #[inline(never)]
    fn release_committed(&mut self, reg: &MemoryRegistry) {
        self.release_after(reg, 0);
        self.committed = false;
    }
}

fn page_span(addr: u64, len: u64) -> (u64, u64) {
    let ps = page_size();
    let start = addr & !(ps - 1);
    let end = (addr + len).div_ceil(ps) * ps;
    (start, end)
}

fn pin_pages(book: &mut Book, addr: u64, len: u64, lock: bool) -> Result<()> {
    let ps = page_size();
    let (start, end) = page_span(addr, len);
    // SAFETY: madvise only changes how the kernel treats these pages at
    // fork(); it fails with ENOMEM if any page is not mapped, which is how we
    // refuse to register memory that does not exist.
    let rc = unsafe {
        libc::madvise(
            start as usize as *mut libc::c_void,
            (end - start) as usize,
            libc::MADV_DONTFORK,
        )
    };
    if rc != 0 {
        // Undo nothing: pages already registered stay advised; new ones in
        // the range may have been advised and are released below.
        release_advice(book, start, end, ps);
        return Err(ViaError::InvalidParameter("memory not mapped"));
    }
    let mut new_bytes = 0;
    let mut p = start;
    while p < end {
        let r = book.page_refs.entry(p).or_insert(0);
        *r += 1;
        if *r == 1 {
            new_bytes += ps;
        }
        p += ps;
    }
    if lock && book.locked_bytes.saturating_add(new_bytes) <= book.lock_limit {
        // SAFETY: locking mapped pages we just checked; failure is harmless
        // (locking is a best effort, never required).
        if unsafe {
            libc::mlock(
                start as usize as *const libc::c_void,
                (end - start) as usize,
            )
        } == 0
        {
            book.locked_bytes += new_bytes;
        }
    }
    Ok(())
}

/// Gives back DONTFORK on pages of [start,end) that no registration holds.
fn release_advice(book: &Book, start: u64, end: u64, ps: u64) {
    let mut p = start;
    while p < end {
        if !book.page_refs.contains_key(&p) {
            // SAFETY: restoring the default fork behaviour of a page.
            unsafe {
                libc::madvise(
                    p as usize as *mut libc::c_void,
                    ps as usize,
                    libc::MADV_DOFORK,
                )
            };
        }
        p += ps;
    }
}

fn unpin_pages(book: &mut Book, addr: u64, len: u64) {
    let ps = page_size();
    let (start, end) = page_span(addr, len);
    // Pages no registration holds any more, as runs of neighbours: one
    // madvise and one munlock per run, not per page (a connection's
    // buffers end as one run of a dozen pages).
    let mut run: Option<(u64, u64)> = None;
    let mut p = start;
    while p < end {
        let freed = match book.page_refs.get_mut(&p) {
            Some(r) => {
                *r -= 1;
                *r == 0
            }
            None => false,
        };
        if freed {
            book.page_refs.remove(&p);
            run = match run {
                Some((from, to)) if to == p => Some((from, p + ps)),
                other => {
                    if let Some((from, to)) = other {
                        release_pages(book, from, to);
                    }
                    Some((p, p + ps))
                }
            };
        }
        p += ps;
    }
    if let Some((from, to)) = run {
        release_pages(book, from, to);
    }
}

/// [from, to) is no longer registered anywhere: restores its fork
/// behaviour and unlocks it.
fn release_pages(book: &mut Book, from: u64, to: u64) {
    let len = (to - from) as usize;
    // SAFETY: pages of ours that no registration holds: restoring the
    // default fork behaviour and unlocking them (an error means they were
    // not locked, or not mapped any more: nothing to undo).
    unsafe {
        libc::madvise(from as usize as *mut libc::c_void, len, libc::MADV_DOFORK);
        if libc::munlock(from as usize as *const libc::c_void, len) == 0 {
            book.locked_bytes = book.locked_bytes.saturating_sub(len as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registration asked not to lock leaves its pages unlocked (and
    /// unpopulated); the default one locks them where the limit allows.
    #[test]
    fn a_registration_locks_only_when_asked() {
        let reg = MemoryRegistry::new();
        let buf = vec![0u8; 64 * 1024];
        let a = buf.as_ptr() as u64;
        reg.register_unlocked(a, 64 * 1024, PtagId(1)).unwrap();
        assert_eq!(reg.book.lock().unwrap().locked_bytes, 0);
        let other = vec![0u8; 64 * 1024];
        let b = other.as_ptr() as u64;
        reg.register(b, 64 * 1024, PtagId(1), false, false).unwrap();
        let book = reg.book.lock().unwrap();
        if book.lock_limit >= 128 * 1024 {
            assert!(
                book.locked_bytes >= 64 * 1024,
                "locked {}",
                book.locked_bytes
            );
        }
    }

    #[test]
    fn register_lookup_deregister() {
        let reg = MemoryRegistry::new();
        let buf = vec![0u8; 10_000];
        let a = buf.as_ptr() as u64;
        let h = reg.register(a, 10_000, PtagId(3), true, false).unwrap();
        let r = reg.lookup(h).unwrap();
        assert!(r.contains(a, 10_000));
        assert!(r.contains(a + 9_999, 1));
        assert!(!r.contains(a + 9_999, 2));
        assert!(!r.contains(a - 1, 1));
        assert!(!r.contains(u64::MAX, 2));
        assert_eq!(r.ptag, PtagId(3));
        assert!(r.rdma_write && !r.rdma_read);
        assert!(reg.lookup(h ^ 0x1000).is_none(), "a guessed tag misses");
        assert!(reg.deregister(a + 1, h, &|| {}).is_err());
        reg.deregister(a, h, &|| {}).unwrap();
        assert!(reg.lookup(h).is_none(), "stale handle misses");
        assert!(reg.deregister(a, h, &|| {}).is_err());
    }

    /// Overlapping registrations keep their shared pages pinned until the
    /// last goes; then every page is released (in runs) and the locked
    /// count is back where it was.
    #[test]
    fn pages_are_released_when_their_last_registration_goes() {
        let reg = MemoryRegistry::new();
        let ps = page_size() as usize;
        let buf = vec![0u8; 8 * ps];
        let a = (buf.as_ptr() as u64).div_ceil(ps as u64) * ps as u64;
        let locked = || reg.book.lock().unwrap().locked_bytes;
        let before = locked();
        let h1 = reg
            .register(a, 4 * ps as u64, PtagId(1), false, false)
            .unwrap();
        let h2 = reg
            .register(a + 2 * ps as u64, 4 * ps as u64, PtagId(1), false, false)
            .unwrap();
        assert_eq!(reg.book.lock().unwrap().page_refs.len(), 6);
        reg.deregister(a, h1, &|| {}).unwrap();
        assert_eq!(
            reg.book.lock().unwrap().page_refs.len(),
            4,
            "the shared pages stay"
        );
        reg.deregister(a + 2 * ps as u64, h2, &|| {}).unwrap();
        assert!(reg.book.lock().unwrap().page_refs.is_empty());
        assert_eq!(locked(), before);
    }

    #[test]
    fn refuses_bad_ranges() {
        let reg = MemoryRegistry::new();
        assert!(reg.register(0, 10, PtagId(1), false, false).is_err());
        let x = 5u64;
        assert!(reg
            .register(&x as *const u64 as u64, 0, PtagId(1), false, false)
            .is_err());
        assert!(reg
            .register(u64::MAX - 4, 10, PtagId(1), false, false)
            .is_err());
        // An unmapped range (the zero page region is never mapped).
        assert!(reg.register(4096, 4096, PtagId(1), false, false).is_err());
    }

    #[test]
    fn handles_differ_and_slots_reuse() {
        let reg = MemoryRegistry::new();
        let buf = [0u8; 64];
        let a = buf.as_ptr() as u64;
        let mut last = 0;
        for _ in 0..1000 {
            let h = reg.register(a, 64, PtagId(1), false, false).unwrap();
            assert_ne!(h, last, "a slot reused its previous handle");
            reg.deregister(a, h, &|| {}).unwrap();
            assert!(reg.lookup(h).is_none());
            last = h;
        }
    }

    #[test]
    fn uses_keep_regions_registered_until_released() {
        let reg = MemoryRegistry::new();
        let bufs: Vec<Vec<u8>> = (0..5).map(|_| vec![0u8; 64]).collect();
        let at = |k: usize| bufs[k].as_ptr() as u64;
        let hs: Vec<u32> = (0..5)
            .map(|k| reg.register(at(k), 64, PtagId(1), false, false).unwrap())
            .collect();
        let held = std::cell::RefCell::new(HeldUses::with(hs[0]));
        // Five regions, each named twice: recorded once each, past the
        // inline ones; no use until committed.
        for &h in hs.iter().chain(&hs) {
            assert!(held.borrow_mut().take(&reg, h).is_some());
        }
        assert_eq!(held.borrow().count(), 5);
        assert_eq!(reg.uses_of(hs[4]), 0);
        held.borrow_mut().commit(&reg);
        for (k, &h) in hs.iter().enumerate() {
            assert_eq!(reg.uses_of(h), 1);
            assert!(matches!(
                reg.deregister(at(k), h, &|| {}),
                Err(ViaError::InvalidState(_))
            ));
        }
        held.borrow_mut().release_after(&reg, 1);
        assert_eq!(held.borrow().count(), 1);
        for (k, &h) in hs.iter().enumerate().skip(1) {
            reg.deregister(at(k), h, &|| {}).unwrap();
        }
        // A completion that ends while deregistration waits lets it through.
        reg.deregister(at(0), hs[0], &|| held.borrow_mut().release(&reg))
            .unwrap();
        assert!(reg.lookup(hs[0]).is_none());
        // A descriptor queued by a post that saw the region before it was
        // closed (its use shows only after the pass through the VIs' locks):
        // refused, and the region is open again.
        let h = reg.register(at(1), 64, PtagId(1), false, false).unwrap();
        let late = std::cell::Cell::new(false);
        let r = reg.deregister(at(1), h, &|| {
            if !late.replace(true) {
                reg.add_use(h);
            }
        });
        assert!(matches!(r, Err(ViaError::InvalidState(_))));
        assert!(reg.lookup(h).is_some(), "reopened");
        reg.release_use(h);
        reg.deregister(at(1), h, &|| {}).unwrap();
    }
}
