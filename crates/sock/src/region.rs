//! The registered memory and VI of a carried connection, whichever device
//! carries it (`link` on one host, `netlink` between hosts): one anonymous
//! mapping registered with the NIC — a descriptor per slot (send slots,
//! then receive slots), then one buffer per slot — and the VI that posts
//! from it. Released by the process that made it, in the order that keeps
//! the device from ever touching the memory again: disconnect, destroy the
//! VI, deregister, unmap.

use std::sync::Arc;

use openvia_core::descriptor::{DescPtr, Descriptor};
use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::vi::{Vi, ViAttributes};
use openvia_core::ViaError;

/// Bytes of a descriptor slot.
pub(crate) const DESC_BYTES: usize = 128;

/// Mapped, registered memory: `slots` descriptors, then `slots` buffers of
/// `buf_bytes`.
pub(crate) struct Region {
    pub(crate) base: usize,
    len: usize,
    pub(crate) handle: u32,
    slots: usize,
    buf_bytes: usize,
}

impl Region {
    /// Maps and registers the memory for `slots` slots of `buf_bytes`, and
    /// makes a VI with `reliability` whose transfers are at most a buffer.
    /// `shared`: the memory is that of memfd `fd` from `offset` on
    /// (page-aligned, at least `bytes(slots, buf_bytes)` long), mapped
    /// shared, so that a program this process becomes by exec can still
    /// read what the VI left there; otherwise anonymous and private.
    pub(crate) fn open(
        nic: &Nic,
        ptag: PtagId,
        reliability: u16,
        slots: usize,
        buf_bytes: usize,
        shared: Option<(std::os::fd::RawFd, usize)>,
    ) -> Result<(Region, Arc<Vi>), ViaError> {
        let len = Region::bytes(slots, buf_bytes);
        let (flags, fd, offset) = match shared {
            Some((fd, offset)) => (libc::MAP_SHARED, fd, offset as libc::off_t),
            None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0),
        };
        // SAFETY: a mapping owned by the region until `release` (of the
        // caller's memfd, which covers it, or anonymous).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ViaError::Resource("memory"));
        }
        let base = p as usize;
        let unmap = || {
            // SAFETY: the mapping just made, not registered (any more).
            unsafe { libc::munmap(p, len) };
        };
        let handle = match nic.register_mem(base as u64, len as u64, ptag, false, false) {
            Ok(h) => h,
            Err(e) => {
                unmap();
                return Err(e);
            }
        };
        let attrs = ViAttributes {
            reliability,
            max_transfer: buf_bytes as u64,
            ptag,
            rdma_write: false,
            rdma_read: false,
        };
        match nic.create_vi(attrs, None, None) {
            Ok(vi) => Ok((
                Region {
                    base,
                    len,
                    handle,
                    slots,
                    buf_bytes,
                },
                vi,
            )),
            Err(e) => {
                let _ = nic.deregister_mem(base as u64, handle);
                unmap();
                Err(e)
            }
        }
    }

    /// Bytes a region of `slots` slots of `buf_bytes` maps.
    pub(crate) const fn bytes(slots: usize, buf_bytes: usize) -> usize {
        slots * (DESC_BYTES + buf_bytes)
    }

    pub(crate) fn desc(&self, i: usize) -> DescPtr {
        DescPtr((self.base + i * DESC_BYTES) as *mut Descriptor)
    }
    pub(crate) fn slot_of(&self, d: DescPtr) -> usize {
        (d.0 as usize - self.base) / DESC_BYTES
    }
    /// The address of slot `i`'s buffer.
    pub(crate) fn buffer(&self, i: usize) -> usize {
        self.base + self.slots * DESC_BYTES + i * self.buf_bytes
    }

    /// Slot `i`'s buffer as a pointer.
    pub(crate) fn buffer_ptr(&self, i: usize) -> *mut u8 {
        self.buffer(i) as *mut u8
    }

    /// Ends `vi` and gives the memory back; for the process that made them.
    pub(crate) fn release(&self, nic: &Nic, vi: &Arc<Vi>) {
        let _ = vi.disconnect();
        let _ = nic.destroy_vi(vi);
        if nic.deregister_mem(self.base as u64, self.handle).is_ok() {
            // SAFETY: unmapping the mapping made in `open`, no longer
            // registered (the device never touches it again).
            unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        }
    }
}
