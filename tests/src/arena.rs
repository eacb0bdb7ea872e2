//! Registered memory for one side of a test: a page-aligned block holding
//! descriptor slots followed by a data area, and the helpers that write
//! descriptors into it and read their completion back.
//!
//! Descriptors and data live in one region so one memory handle covers
//! both, as most VIA programs do it.

use std::alloc::{alloc_zeroed, dealloc, Layout};

use openvia_core::descriptor::{DataSegment, DescPtr, Descriptor};
use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;

/// Bytes of one descriptor slot: the control segment and up to six segments.
pub const DESC_SLOT: usize = 128;
/// Most segments a slot has room for.
pub const SLOT_SEGMENTS: usize = (DESC_SLOT - 32) / 16;

/// A registered block: `slots` descriptor slots, then `data_len` bytes.
pub struct Arena {
    base: *mut u8,
    layout: Layout,
    slots: usize,
    data_len: usize,
    pub handle: u32,
}

// SAFETY: the block is plain heap memory owned by the arena; which thread
// touches which bytes is decided by descriptor ownership in the tests (a
// posted descriptor and its buffers belong to the provider until done).
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// Allocates and registers a block with the given RDMA rights.
    pub fn new(
        nic: &Nic,
        ptag: PtagId,
        slots: usize,
        data_len: usize,
        rdma_write: bool,
        rdma_read: bool,
    ) -> Arena {
        let len = (slots * DESC_SLOT + data_len).max(4096);
        let layout = Layout::from_size_align(len, 4096).expect("arena layout");
        // SAFETY: `layout` has a non-zero size.
        let base = unsafe { alloc_zeroed(layout) };
        assert!(!base.is_null(), "out of memory for a {len}-byte arena");
        let handle = nic
            .register_mem(base as u64, len as u64, ptag, rdma_write, rdma_read)
            .expect("register memory");
        Arena {
            base,
            layout,
            slots,
            data_len,
            handle,
        }
    }

    /// Descriptor slot `i` (64-byte aligned).
    pub fn desc(&self, i: usize) -> *mut Descriptor {
        assert!(i < self.slots, "descriptor slot {i} of {}", self.slots);
        // SAFETY: inside the block.
        unsafe { self.base.add(i * DESC_SLOT) as *mut Descriptor }
    }

    /// Address of data byte `off` (as the descriptor's segments carry it).
    pub fn addr(&self, off: usize) -> u64 {
        assert!(
            off <= self.data_len,
            "data offset {off} of {}",
            self.data_len
        );
        self.base as u64 + (self.slots * DESC_SLOT + off) as u64
    }

    /// Writes descriptor slot `slot`: control bits, segments (for RDMA
    /// the first is the remote address segment) and immediate data. The
    /// slot must not be posted.
    pub fn set_desc(&self, slot: usize, control: u16, segs: &[Seg], immediate: u32) {
        assert!(segs.len() <= SLOT_SEGMENTS, "{} segments", segs.len());
        let d = self.desc(slot);
        // SAFETY: `d` is a slot of this arena with room for SLOT_SEGMENTS
        // segments; the caller owns it (not posted).
        unsafe {
            std::ptr::write_bytes(d as *mut u8, 0, DESC_SLOT);
            (*d).cs.control = control;
            (*d).cs.seg_count = segs.len() as u16;
            (*d).cs.immediate_data = immediate;
            let first = (d as *mut u8).add(32) as *mut DataSegment;
            for (i, &(data, handle, length)) in segs.iter().enumerate() {
                first.add(i).write(DataSegment {
                    data,
                    handle,
                    length,
                });
            }
        }
    }

    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// The data bytes `off..off + len`.
    ///
    /// # Safety
    /// No posted descriptor may be writing these bytes while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes(&self, off: usize, len: usize) -> &mut [u8] {
        assert!(off + len <= self.data_len, "data range {off}+{len}");
        std::slice::from_raw_parts_mut(self.addr(off) as *mut u8, len)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout. The registration
        // goes when the NIC does; the tests drop arenas only after their
        // VIs stopped using them.
        unsafe { dealloc(self.base, self.layout) };
    }
}

/// One local buffer of a descriptor: (address, memory handle, length).
pub type Seg = (u64, u32, u32);

/// A completed descriptor's (status, length, immediate data).
pub fn completion(d: DescPtr) -> (u32, u32, u32) {
    let p = d.0;
    // SAFETY: a DescPtr handed back by the provider names a descriptor it
    // validated at post time and has completed (its status was written
    // last, with release ordering); volatile because the provider writes
    // it behind the compiler's back.
    unsafe {
        (
            std::ptr::read_volatile(std::ptr::addr_of!((*p).cs.status)),
            std::ptr::read_volatile(std::ptr::addr_of!((*p).cs.length)),
            std::ptr::read_volatile(std::ptr::addr_of!((*p).cs.immediate_data)),
        )
    }
}

/// Splits `len` bytes into `parts` pieces at uneven points (zero-length
/// pieces included when `len` is small): gather and scatter lists that do
/// not line up with each other.
pub fn uneven_split(len: usize, parts: usize, salt: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(parts);
    let mut left = len;
    for i in 0..parts {
        let piece = if i + 1 == parts {
            left
        } else {
            (left * (2 + (salt + i) % 3) / 7).min(left)
        };
        out.push(piece);
        left -= piece;
    }
    out
}

/// Places pieces of `lens` bytes one after another from data offset
/// `start + misalign`, `gap` bytes apart (so gathered buffers are never
/// contiguous); returns (offset, length) per piece.
pub fn spread(start: usize, lens: &[usize], misalign: usize, gap: usize) -> Vec<(usize, usize)> {
    let mut off = start + misalign;
    lens.iter()
        .map(|&len| {
            let piece = (off, len);
            off += len + gap;
            piece
        })
        .collect()
}

impl Arena {
    /// Descriptor segments for pieces of this arena's data area.
    pub fn segs(&self, pieces: &[(usize, usize)]) -> Vec<Seg> {
        pieces
            .iter()
            .map(|&(off, len)| (self.addr(off), self.handle, len as u32))
            .collect()
    }

    /// Writes `data` across the pieces, in order.
    ///
    /// # Safety
    /// No posted descriptor may be using these bytes.
    pub unsafe fn write_pieces(&self, pieces: &[(usize, usize)], data: &[u8]) {
        let mut at = 0;
        for &(off, len) in pieces {
            let n = len.min(data.len() - at);
            self.bytes(off, n).copy_from_slice(&data[at..at + n]);
            at += n;
        }
        assert_eq!(at, data.len(), "pieces too small for the data");
    }

    /// Reads the first `n` bytes held by the pieces, in order.
    ///
    /// # Safety
    /// No posted descriptor may be writing these bytes.
    pub unsafe fn read_pieces(&self, pieces: &[(usize, usize)], n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        for &(off, len) in pieces {
            let take = len.min(n - out.len());
            out.extend_from_slice(self.bytes(off, take));
        }
        assert_eq!(out.len(), n, "pieces hold fewer bytes than asked");
        out
    }
}
