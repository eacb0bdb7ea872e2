//! The four rings of an AF_XDP socket and its UMEM, the only unsafe part
//! of the AF_XDP link.
//!
//! Each ring is a power-of-two array of descriptors shared with the
//! kernel, with a producer and a consumer index that only grow (wrapping
//! at 2^32). One side owns each index: we produce into the fill and TX
//! rings and consume from the RX and completion rings. The owner publishes
//! its index with a release store after writing (or reading) the
//! descriptors, and reads the other side's index with an acquire load
//! before touching them, the ordering libxdp's `xsk.h` uses. The UMEM is
//! the page-aligned anonymous memory the frames live in; descriptors name
//! frames by their offset in it, checked against its size before use.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// One mapping (a ring or the UMEM), unmapped on drop.
struct Mapped {
    ptr: *mut u8,
    len: usize,
}

impl Mapped {
    /// Maps `len` bytes of `fd` at `offset` shared, or anonymous memory
    /// when `fd` is None.
    fn new(fd: Option<RawFd>, len: usize, offset: u64) -> io::Result<Mapped> {
        let (flags, fd) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
            ),
        };
        // SAFETY: the kernel picks the address; a fresh mapping aliases
        // nothing of ours.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapped {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; no reference
        // into the mapping outlives its owner.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Where a ring's parts lie in its mapping (`struct xdp_ring_offset`).
#[derive(Clone, Copy, Debug)]
pub struct RingOffsets {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// A ring of `T` descriptors (`xdp_desc` for RX/TX, `u64` frame address for
/// fill/completion) shared with the kernel.
pub struct Ring<T: Copy> {
    map: Mapped,
    offs: RingOffsets,
    mask: u32,
    /// Our copies of the two indices: ours is exact, the kernel's the last
    /// value read.
    local: u32,
    remote: u32,
    _t: std::marker::PhantomData<T>,
}

// SAFETY: the ring is owned by one link, used from one thread at a time;
// the kernel side is synchronised through the atomic indices.
unsafe impl<T: Copy> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries at page offset `pgoff` of socket
    /// `fd`; `we_produce` for the fill and TX rings.
    pub fn map(
        fd: RawFd,
        pgoff: u64,
        size: u32,
        offs: RingOffsets,
        we_produce: bool,
    ) -> io::Result<Self> {
        assert!(size.is_power_of_two());
        let len = offs.desc as usize + size as usize * std::mem::size_of::<T>();
        let map = Mapped::new(Some(fd), len, pgoff)?;
        let mut ring = Ring {
            map,
            offs,
            mask: size - 1,
            local: 0,
            remote: 0,
            _t: std::marker::PhantomData,
        };
        // A fresh ring starts at whatever the kernel set (0 in practice).
        let (ours, theirs) = if we_produce {
            (offs.producer, offs.consumer)
        } else {
            (offs.consumer, offs.producer)
        };
        ring.local = ring.index(ours).load(Ordering::Acquire);
        ring.remote = ring.index(theirs).load(Ordering::Acquire);
        Ok(ring)
    }

    fn index(&self, at: u64) -> &AtomicU32 {
        // SAFETY: the kernel's offsets put each 4-byte-aligned index inside
        // the mapping, which lives as long as `self`.
        unsafe { &*(self.map.ptr.add(at as usize) as *const AtomicU32) }
    }

    fn slot(&self, idx: u32) -> *mut T {
        // SAFETY: `idx & mask` < size, and the descriptor array of `size`
        // entries starts at `desc` inside the mapping.
        unsafe {
            self.map
                .ptr
                .add(self.offs.desc as usize)
                .cast::<T>()
                .add((idx & self.mask) as usize)
        }
    }

    /// The kernel asks to be woken (XDP_RING_NEED_WAKEUP in the flags).
    pub fn needs_wakeup(&self) -> bool {
        self.index(self.offs.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // ---- our side produces (fill, TX) ----

    /// Free entries we may produce into now.
    pub fn free(&mut self) -> u32 {
        // Acquire: the kernel finished reading the entries it consumed.
        self.remote = self.index(self.offs.consumer).load(Ordering::Acquire);
        self.mask + 1 - self.local.wrapping_sub(self.remote)
    }

    /// Writes the `i`-th entry after those already published (i < free()).
    pub fn put(&mut self, i: u32, value: T) {
        debug_assert!(i < self.mask + 1 - self.local.wrapping_sub(self.remote));
        // SAFETY: the entry is free (the kernel consumed it), so it is ours
        // to write until we publish it.
        unsafe { self.slot(self.local.wrapping_add(i)).write_volatile(value) };
    }

    /// Publishes `n` written entries to the kernel.
    pub fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // Release: the descriptors are written before the kernel sees them.
        self.index(self.offs.producer)
            .store(self.local, Ordering::Release);
    }

    /// Entries we produced that the kernel has not consumed yet.
    pub fn pending(&mut self) -> u32 {
        self.remote = self.index(self.offs.consumer).load(Ordering::Acquire);
        self.local.wrapping_sub(self.remote)
    }

    // ---- the kernel produces (RX, completion) ----

    /// Entries waiting for us.
    pub fn available(&mut self) -> u32 {
        // Acquire: the kernel's descriptor writes are visible to us.
        self.remote = self.index(self.offs.producer).load(Ordering::Acquire);
        self.remote.wrapping_sub(self.local)
    }

    /// Reads the `i`-th waiting entry (i < available()).
    pub fn get(&self, i: u32) -> T {
        debug_assert!(i < self.remote.wrapping_sub(self.local));
        // SAFETY: the kernel published this entry and will not touch it
        // until we release it.
        unsafe { self.slot(self.local.wrapping_add(i)).read_volatile() }
    }

    /// Gives `n` read entries back to the kernel.
    pub fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // Release: our reads of the entries happen before the kernel reuses them.
        self.index(self.offs.consumer)
            .store(self.local, Ordering::Release);
    }
}

/// The memory frames live in: `frames` frames of `frame_size` bytes.
pub struct Umem {
    map: Mapped,
    frame_size: usize,
}

// SAFETY: plain memory owned by one link; the kernel writes only frames
// we handed it in the fill ring, which we do not read until RX returns them.
unsafe impl Send for Umem {}

impl Umem {
    /// Page-aligned anonymous memory for `frames` frames.
    pub fn new(frames: usize, frame_size: usize) -> io::Result<Umem> {
        Ok(Umem {
            map: Mapped::new(None, frames * frame_size, 0)?,
            frame_size,
        })
    }

    pub fn addr(&self) -> u64 {
        self.map.ptr as u64
    }

    pub fn len(&self) -> usize {
        self.map.len
    }

    /// The bytes at UMEM offset `addr`, `len` long, if they lie within one frame.
    pub fn frame(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let start = addr as usize;
        let frame_end = (start / self.frame_size + 1) * self.frame_size;
        if start >= self.map.len || start + len > frame_end {
            return None;
        }
        // SAFETY: [start, start+len) lies in one frame inside the mapping;
        // the kernel gave it to us through RX and will not write it until
        // we return it through the fill ring.
        Some(unsafe { std::slice::from_raw_parts(self.map.ptr.add(start), len) })
    }

    /// The whole frame at `addr` (frame-aligned) for writing.
    pub fn frame_mut(&mut self, addr: u64) -> &mut [u8] {
        let start = addr as usize;
        assert!(start.is_multiple_of(self.frame_size) && start < self.map.len);
        // SAFETY: a frame inside the mapping that is ours (free for TX: not
        // in any ring), borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr.add(start), self.frame_size) }
    }
}
