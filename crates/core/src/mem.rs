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
//! allows; both are reference counted per page, so overlapping
//! registrations undo correctly.

use std::collections::HashMap;
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

#[derive(Default)]
struct Slot {
    handle: AtomicU32,
    addr: AtomicU64,
    len: AtomicU64,
    /// ptag in the low 32 bits, RDMA enables above.
    attrs: AtomicU64,
    /// The handle this slot had last, so a re-registration never reuses it
    /// (a stale handle must miss).
    previous: AtomicU32,
}

/// Bookkeeping that only registration and deregistration touch.
struct Book {
    free: Vec<u32>,
    /// Registrations covering each page: DONTFORK/mlock are undone at zero.
    page_refs: HashMap<u64, u32>,
    locked_bytes: u64,
    lock_limit: u64,
}

/// The registered memory of one NIC.
pub struct MemoryRegistry {
    slots: Box<[Slot]>,
    book: Mutex<Book>,
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
                page_refs: HashMap::new(),
                locked_bytes: 0,
                lock_limit: memlock_limit(),
            }),
        }
    }

    /// Registers [addr, addr+len). Fails for a null, empty, wrapping or
    /// unmapped range.
    pub fn register(
        &self,
        addr: u64,
        len: u64,
        ptag: PtagId,
        rdma_write: bool,
        rdma_read: bool,
    ) -> Result<u32> {
        if addr == 0 || len == 0 || len > MAX_REGISTER_BLOCK || addr.checked_add(len).is_none() {
            return Err(ViaError::InvalidParameter("memory range"));
        }
        let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let index = book
            .free
            .pop()
            .ok_or(ViaError::Resource("memory regions"))?;
        if let Err(e) = pin_pages(&mut book, addr, len) {
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
        let attrs = ptag.0 as u64
            | if rdma_write { ATTR_RDMA_WRITE } else { 0 }
            | if rdma_read { ATTR_RDMA_READ } else { 0 };
        slot.attrs.store(attrs, Ordering::Relaxed);
        slot.handle.store(handle, Ordering::Release);
        Ok(handle)
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
    pub fn deregister(&self, addr: u64, handle: u32) -> Result<()> {
        let region = self
            .lookup(handle)
            .ok_or(ViaError::InvalidParameter("memory handle"))?;
        if region.addr != addr {
            return Err(ViaError::InvalidParameter("address does not match handle"));
        }
        let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &self.slots[(handle & INDEX_MASK) as usize];
        if slot
            .handle
            .compare_exchange(handle, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return Err(ViaError::InvalidParameter("memory handle"));
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
                let _ = self.deregister(s.addr.load(Ordering::Relaxed), h);
            }
        }
    }
}

fn page_span(addr: u64, len: u64) -> (u64, u64) {
    let ps = page_size();
    let start = addr & !(ps - 1);
    let end = (addr + len).div_ceil(ps) * ps;
    (start, end)
}

fn pin_pages(book: &mut Book, addr: u64, len: u64) -> Result<()> {
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
    if book.locked_bytes.saturating_add(new_bytes) <= book.lock_limit {
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
    let mut p = start;
    while p < end {
        if let Some(r) = book.page_refs.get_mut(&p) {
            *r -= 1;
            if *r == 0 {
                book.page_refs.remove(&p);
                // SAFETY: the page is no longer registered anywhere: restore
                // fork behaviour and unlock it (errors mean it was not locked).
                unsafe {
                    libc::madvise(
                        p as usize as *mut libc::c_void,
                        ps as usize,
                        libc::MADV_DOFORK,
                    );
                    if libc::munlock(p as usize as *const libc::c_void, ps as usize) == 0 {
                        book.locked_bytes = book.locked_bytes.saturating_sub(ps);
                    }
                }
            }
        }
        p += ps;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(reg.deregister(a + 1, h).is_err());
        reg.deregister(a, h).unwrap();
        assert!(reg.lookup(h).is_none(), "stale handle misses");
        assert!(reg.deregister(a, h).is_err());
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
            reg.deregister(a, h).unwrap();
            assert!(reg.lookup(h).is_none());
            last = h;
        }
    }
}
