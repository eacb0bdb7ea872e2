//! Registered descriptor-and-buffer slots for clients of the core that
//! post one-segment messages from memory they own (PVM's links, viaip).
//!
//! Slot i is descriptor i and data buffer i, each in one registered,
//! 64-byte aligned region. The regions are deregistered when dropped; if
//! the core still holds a descriptor naming them (`VipDeregisterMem`
//! refuses), their memory is leaked rather than freed under it.

use crate::descriptor::{control, DataSegment, DescPtr, Descriptor};
use crate::error::Result;
use crate::mem::PtagId;
use crate::nic::Nic;

/// Bytes of one descriptor slot: a control segment and one data segment.
pub const DESC_SLOT: usize = 64;

/// Registered memory, 64-byte aligned, deregistered when dropped.
pub struct Region {
    nic: Nic,
    buf: Vec<u8>,
    base: usize,
    handle: u32,
}

impl Region {
    /// `len` bytes registered under `ptag`; `rdma_write` lets peers write
    /// into it.
    pub fn new(nic: &Nic, ptag: PtagId, len: usize, rdma_write: bool) -> Result<Region> {
        let buf = vec![0u8; len + 64];
        let base = (buf.as_ptr() as usize).next_multiple_of(64);
        let handle = nic.register_mem(base as u64, len as u64, ptag, rdma_write, false)?;
        Ok(Region {
            nic: nic.clone(),
            buf,
            base,
            handle,
        })
    }

    /// The memory handle of the registration.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Address of byte `off`.
    pub fn at(&self, off: usize) -> usize {
        debug_assert!(off < self.buf.len());
        self.base + off
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self
            .nic
            .deregister_mem(self.base as u64, self.handle)
            .is_err()
        {
            // Still named by a descriptor the core holds: the memory must
            // outlive it, so it is never freed.
            std::mem::forget(std::mem::take(&mut self.buf));
        }
    }
}

/// `n` slots of `size`-byte buffers.
pub struct Slots {
    descs: Region,
    data: Region,
    size: usize,
    n: usize,
}

impl Slots {
    pub fn new(nic: &Nic, ptag: PtagId, n: usize, size: usize, rdma_write: bool) -> Result<Slots> {
        Ok(Slots {
            descs: Region::new(nic, ptag, n * DESC_SLOT, rdma_write)?,
            data: Region::new(nic, ptag, n * size, rdma_write)?,
            size,
            n,
        })
    }

    /// How many slots.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Bytes of each slot's buffer.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The memory handle posts of these descriptors name.
    pub fn desc_handle(&self) -> u32 {
        self.descs.handle
    }

    /// Slot i's descriptor, as `Vi::post_send`/`post_recv` take it.
    pub fn desc(&self, i: usize) -> *mut Descriptor {
        self.descs.at(i * DESC_SLOT) as *mut Descriptor
    }

    /// The slot of a descriptor of ours the core handed back.
    pub fn index_of(&self, d: DescPtr) -> usize {
        (d.0 as usize - self.descs.base) / DESC_SLOT
    }

    pub fn data(&self, i: usize) -> *mut u8 {
        self.data.at(i * self.size) as *mut u8
    }

    /// Writes slot i's descriptor: one data segment of `len` bytes of its
    /// buffer, with `imm` as immediate data if given.
    pub fn prepare(&self, i: usize, len: usize, imm: Option<u32>) {
        assert!(i < self.n && len <= self.size, "slot {i}, {len} bytes");
        let d = self.desc(i);
        // SAFETY: slot i's descriptor lies in our registered region (i < n)
        // and is not posted now (the caller's slot bookkeeping); the slot
        // has room for the control segment and one data segment.
        unsafe {
            std::ptr::write_bytes(d as *mut u8, 0, DESC_SLOT);
            (*d).cs.seg_count = 1;
            (*d).cs.control = if imm.is_some() { control::IMMEDIATE } else { 0 };
            (*d).cs.immediate_data = imm.unwrap_or(0);
            (*d).ds[0] = DataSegment {
                data: self.data(i) as u64,
                handle: self.data.handle,
                length: len as u32,
            };
        }
    }
}
