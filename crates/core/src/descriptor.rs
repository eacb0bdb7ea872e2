//! VIA descriptors as they lie in the application's registered memory, and
//! their validation into a work request.
//!
//! A descriptor is a 32-byte control segment followed by `SegCount` 16-byte
//! segments (for RDMA the first is the remote address segment). The
//! provider reads it when it is posted and writes `Length`, `ImmediateData`
//! and finally `Status` back when it completes; programs may poll `Status`
//! directly, so it is stored last with release ordering.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::mem::{HeldUses, MemoryRegistry, PtagId};
use crate::sys::cma::Range;

/// Alignment every posted descriptor must have.
pub const DESCRIPTOR_ALIGNMENT: u64 = 64;
/// Most data segments one descriptor may carry.
pub const MAX_SEGMENTS: usize = 252;

pub mod control {
    pub const OP_SENDRECV: u16 = 0x0;
    pub const OP_RDMAWRITE: u16 = 0x1;
    pub const OP_RDMAREAD: u16 = 0x2;
    pub const OP_RESERVED: u16 = 0x3;
    pub const OP_MASK: u16 = 0x3;
    pub const IMMEDIATE: u16 = 0x4;
    pub const QFENCE: u16 = 0x8;
    pub const RESERVED: u16 = 0xFFF0;
}

pub mod status {
    pub const DONE: u32 = 0x1;
    pub const FORMAT_ERROR: u32 = 0x2;
    pub const PROTECTION_ERROR: u32 = 0x4;
    pub const LENGTH_ERROR: u32 = 0x8;
    pub const PARTIAL_ERROR: u32 = 0x10;
    pub const DESC_FLUSHED_ERROR: u32 = 0x20;
    pub const TRANSPORT_ERROR: u32 = 0x40;
    pub const RDMA_PROT_ERROR: u32 = 0x80;
    pub const REMOTE_DESC_ERROR: u32 = 0x100;
    pub const ERROR_MASK: u32 = 0x1FE;
    pub const OP_SEND: u32 = 0x0;
    pub const OP_RECEIVE: u32 = 0x10000;
    pub const OP_RDMA_WRITE: u32 = 0x20000;
    pub const OP_REMOTE_RDMA_WRITE: u32 = 0x30000;
    pub const OP_RDMA_READ: u32 = 0x40000;
    pub const OP_MASK: u32 = 0x70000;
    pub const IMMEDIATE: u32 = 0x80000;
}

/// `VIP_CONTROL_SEGMENT`.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ControlSegment {
    pub next: u64,
    pub next_handle: u32,
    pub seg_count: u16,
    pub control: u16,
    pub reserved: u32,
    pub immediate_data: u32,
    pub length: u32,
    pub status: u32,
}

/// `VIP_DATA_SEGMENT` (a local buffer) — also the shape of an address segment.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct DataSegment {
    pub data: u64,
    pub handle: u32,
    /// `Length` for a data segment, `Reserved` for an address segment.
    pub length: u32,
}

/// `VIP_DESCRIPTOR` with its two built-in segments.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Descriptor {
    pub cs: ControlSegment,
    pub ds: [DataSegment; 2],
}

const _: () = assert!(std::mem::size_of::<ControlSegment>() == 32);
const _: () = assert!(std::mem::size_of::<DataSegment>() == 16);
const _: () = assert!(std::mem::size_of::<Descriptor>() == 64);

/// A posted descriptor's address in the application's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescPtr(pub *mut Descriptor);

// SAFETY: a DescPtr is only dereferenced under the owning VI's lock, after
// the descriptor was validated to lie in registered memory of this process.
unsafe impl Send for DescPtr {}

impl DescPtr {
    fn cs(&self) -> *mut ControlSegment {
        // SAFETY: computing a field address does not dereference.
        unsafe { std::ptr::addr_of_mut!((*self.0).cs) }
    }

    /// Reads the control segment (the descriptor was validated at post).
    pub fn control(&self) -> (u16, u16, u32) {
        // SAFETY: validated registered memory of this process; volatile
        // because the application owns the memory and may look at it.
        unsafe {
            let cs = self.cs();
            (
                std::ptr::read_volatile(std::ptr::addr_of!((*cs).control)),
                std::ptr::read_volatile(std::ptr::addr_of!((*cs).seg_count)),
                std::ptr::read_volatile(std::ptr::addr_of!((*cs).immediate_data)),
            )
        }
    }

    /// Reads segment `i` (0-based, after the control segment).
    pub fn segment(&self, i: usize) -> DataSegment {
        // SAFETY: the caller validated that segment `i` lies in registered memory.
        unsafe {
            let base = (self.0 as *const u8).add(32 + 16 * i) as *const DataSegment;
            std::ptr::read_volatile(base)
        }
    }

    /// Clears the status word when the descriptor is posted.
    pub fn reset_status(&self) {
        self.status_word().store(0, Ordering::Relaxed);
    }

    /// Writes the completion: length, immediate data (if any), then status.
    pub fn complete(&self, length: u32, immediate: Option<u32>, status_bits: u32) {
        // SAFETY: validated registered memory; fields written before the
        // status word, which is released last.
        unsafe {
            let cs = self.cs();
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*cs).length), length);
            if let Some(imm) = immediate {
                std::ptr::write_volatile(std::ptr::addr_of_mut!((*cs).immediate_data), imm);
            }
        }
        self.status_word()
            .store(status_bits | status::DONE, Ordering::Release);
    }

    pub fn status(&self) -> u32 {
        self.status_word().load(Ordering::Acquire)
    }

    fn status_word(&self) -> &AtomicU32 {
        // SAFETY: the status field is a 4-byte aligned u32 inside validated
        // registered memory that outlives the posting.
        unsafe { AtomicU32::from_ptr(std::ptr::addr_of_mut!((*self.cs()).status)) }
    }
}

/// What a descriptor asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Send,
    RdmaWrite,
    RdmaRead,
}

/// A validated descriptor.
#[derive(Clone, Copy, Debug)]
pub struct WorkRequest {
    pub op: OpKind,
    pub immediate: Option<u32>,
    pub qfence: bool,
    /// RDMA: (address, memory handle) at the remote end.
    pub remote: Option<(u64, u32)>,
    pub total_len: u64,
}

/// Why a posted descriptor could not be accepted: the caller gets an error
/// return, nothing is queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostRefusal {
    /// Not 64-byte aligned, or not inside the region its handle names.
    BadDescriptor,
}

/// The control segment fields a post reads once: (Control, SegCount,
/// ImmediateData).
pub type ControlWords = (u16, u16, u32);

/// Checks that the descriptor at `ptr` lies in the region `handle` names,
/// with room for its segments, and belongs to `ptag`. Returns it with its
/// control words, read once.
#[inline]
pub fn check_placement(
    reg: &MemoryRegistry,
    ptr: *mut Descriptor,
    handle: u32,
    ptag: PtagId,
) -> Result<(DescPtr, ControlWords), PostRefusal> {
    let addr = ptr as u64;
    if ptr.is_null() || !addr.is_multiple_of(DESCRIPTOR_ALIGNMENT) {
        return Err(PostRefusal::BadDescriptor);
    }
    let region = reg.lookup(handle).ok_or(PostRefusal::BadDescriptor)?;
    if region.ptag != ptag || !region.contains(addr, 32) {
        return Err(PostRefusal::BadDescriptor);
    }
    let d = DescPtr(ptr);
    let words = d.control();
    let need = 32 + 16 * words.1 as u64;
    if !region.contains(addr, need) {
        return Err(PostRefusal::BadDescriptor);
    }
    Ok((d, words))
}

/// Validates a send-queue descriptor and collects its local ranges into
/// `local`, recording each region they lie in into `held`. On failure
/// returns the status error bits to complete it with, and `held` keeps
/// only what it had before.
#[inline]
pub fn parse_send(
    reg: &MemoryRegistry,
    held: &mut HeldUses,
    d: DescPtr,
    (control, seg_count, imm): ControlWords,
    ptag: PtagId,
    max_transfer: u64,
    local: &mut Vec<Range>,
) -> Result<WorkRequest, u32> {
    if control & control::RESERVED != 0 || seg_count as usize > MAX_SEGMENTS + 1 {
        return Err(status::FORMAT_ERROR);
    }
    let op = match control & control::OP_MASK {
        control::OP_SENDRECV => OpKind::Send,
        control::OP_RDMAWRITE => OpKind::RdmaWrite,
        control::OP_RDMAREAD => OpKind::RdmaRead,
        _ => return Err(status::FORMAT_ERROR),
    };
    let mut first_data = 0;
    let mut remote = None;
    if op != OpKind::Send {
        if seg_count == 0 {
            return Err(status::FORMAT_ERROR);
        }
        let a = d.segment(0);
        remote = Some((a.data, a.handle));
        first_data = 1;
    }
    if op == OpKind::RdmaRead && control & control::IMMEDIATE != 0 {
        return Err(status::FORMAT_ERROR);
    }
    let kept = held.count();
    let total = collect_ranges(reg, held, d, first_data, seg_count as usize, ptag, local)?;
    if total > max_transfer {
        held.release_after(reg, kept);
        return Err(status::LENGTH_ERROR);
    }
    Ok(WorkRequest {
        op,
        immediate: (control & control::IMMEDIATE != 0).then_some(imm),
        qfence: control & control::QFENCE != 0,
        remote,
        total_len: total,
    })
}

/// Validates a receive descriptor, recording regions as [`parse_send`]
/// does; returns its capacity in bytes.
#[inline]
pub fn parse_recv(
    reg: &MemoryRegistry,
    held: &mut HeldUses,
    d: DescPtr,
    (control, seg_count, _): ControlWords,
    ptag: PtagId,
    local: &mut Vec<Range>,
) -> Result<u64, u32> {
    if control & (control::RESERVED | control::OP_MASK) != 0 || seg_count as usize > MAX_SEGMENTS {
        return Err(status::FORMAT_ERROR);
    }
    collect_ranges(reg, held, d, 0, seg_count as usize, ptag, local)
}

// Always inlined: it is most of a post's work, and small.
#[inline(always)]
fn collect_ranges(
    reg: &MemoryRegistry,
    held: &mut HeldUses,
    d: DescPtr,
    from: usize,
    to: usize,
    ptag: PtagId,
    local: &mut Vec<Range>,
) -> Result<u64, u32> {
    local.clear();
    let kept = held.count();
    let mut total = 0u64;
    for i in from..to {
        let s = d.segment(i);
        if s.length == 0 {
            continue;
        }
        match held.take(reg, s.handle) {
            Some(r) if r.ptag == ptag && r.contains(s.data, s.length as u64) => {}
            _ => {
                held.release_after(reg, kept);
                return Err(status::PROTECTION_ERROR);
            }
        }
        total += s.length as u64;
        local.push(Range {
            addr: s.data,
            len: s.length as u64,
        });
    }
    Ok(total)
}
