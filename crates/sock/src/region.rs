//! The registered memory and VI of a carried connection, whichever device
//! carries it (`link` on one host, `netlink` between hosts): one anonymous
//! mapping registered with the NIC — a descriptor per slot (send slots,
//! then receive slots), then one buffer per slot — and the VI that posts
//! from it. Released by the process that made it, in the order that keeps
//! the device from ever touching the memory again: disconnect, destroy the
//! VI, deregister, unmap.
//!
//! A one-host link's region (anonymous memory) is kept registered when its
//! VI is destroyed, in a small pool of this process's, for the next link:
//! mapping, registering (pinning) and giving back the memory of each
//! short connection cost a sixth of setting one up (six system calls,
//! ~25 µs a side on the 2-vCPU box).

use std::sync::{Arc, Mutex};

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
    /// Anonymous memory under `ptag`, which may go to the pool.
    ptag: Option<PtagId>,
}

/// A region kept registered for a later link of the process `pid` (a
/// forked child finds its parent's entries, whose memory it does not have:
/// MADV_DONTFORK), on the NIC whose shared state is at `nic`.
struct Kept {
    base: usize,
    len: usize,
    handle: u32,
    ptag: PtagId,
    nic: usize,
    pid: u32,
}

/// Regions kept at most: a server closing many connections at once gives
/// the rest back.
const KEEP_MAX: usize = 8;

static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

fn nic_id(nic: &Nic) -> usize {
    Arc::as_ptr(nic.shared()) as usize
}

/// A kept region of `len` bytes under `ptag` on `nic`, if there is one.
fn take_kept(nic: &Nic, ptag: PtagId, len: usize) -> Option<(usize, u32)> {
    let pid = crate::process::id();
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    // Entries of the process we were forked from name memory we lack.
    kept.retain(|k| k.pid == pid);
    let i = kept
        .iter()
        .position(|k| k.nic == nic_id(nic) && k.ptag == ptag && k.len == len)?;
    let k = kept.swap_remove(i);
    Some((k.base, k.handle))
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
        let kept = match shared {
            None => take_kept(nic, ptag, len),
            Some(_) => None,
        };
        if let Some((base, handle)) = kept {
            let region = Region {
                base,
                len,
                handle,
                slots,
                buf_bytes,
                ptag: Some(ptag),
            };
            return match nic.create_vi(Region::attributes(reliability, buf_bytes, ptag), None, None)
            {
                Ok(vi) => Ok((region, vi)),
                Err(e) => {
                    region.give_back(nic);
                    Err(e)
                }
            };
        }
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
        // Not mlocked: the devices reach it through system calls, and
        // locking populated all of it (3 MiB, ~2 ms at each end of every
        // connection between hosts, whose memory is not kept for the next
        // link; a forking server paid it per request).
        let handle = match nic.register_mem_unlocked(base as u64, len as u64, ptag) {
            Ok(h) => h,
            Err(e) => {
                unmap();
                return Err(e);
            }
        };
        match nic.create_vi(Region::attributes(reliability, buf_bytes, ptag), None, None) {
            Ok(vi) => Ok((
                Region {
                    base,
                    len,
                    handle,
                    slots,
                    buf_bytes,
                    ptag: shared.is_none().then_some(ptag),
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

    fn attributes(reliability: u16, buf_bytes: usize, ptag: PtagId) -> ViAttributes {
        ViAttributes {
            reliability,
            max_transfer: buf_bytes as u64,
            ptag,
            rdma_write: false,
            rdma_read: false,
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

    /// Ends `vi` and keeps the memory for a later link (anonymous memory,
    /// once the VI is destroyed: nothing posted names it any more) or
    /// gives it back; for the process that made them.
    /// Moves the region out (its VI is kept: `link::reuse`), leaving one
    /// behind that owns nothing.
    pub(crate) fn take(&mut self) -> Region {
        std::mem::replace(
            self,
            Region {
                base: 0,
                len: 0,
                handle: 0,
                slots: 0,
                buf_bytes: 0,
                ptag: None,
            },
        )
    }

    pub(crate) fn release(&self, nic: &Nic, vi: &Arc<Vi>) {
        let destroyed = self.end_vi(nic, vi);
        if let (true, Some(ptag)) = (destroyed, self.ptag) {
            let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
            if kept.len() < KEEP_MAX {
                kept.push(Kept {
                    base: self.base,
                    len: self.len,
                    handle: self.handle,
                    ptag,
                    nic: nic_id(nic),
                    pid: crate::process::id(),
                });
                return;
            }
        }
        self.give_back(nic);
    }

    /// Ends `vi` and keeps the memory, registered and mapped, for a later
    /// VI of this process (`netlink::spare`): true once the VI is
    /// destroyed, after which the device never touches the memory again.
    pub(crate) fn end_vi(&self, nic: &Nic, vi: &Arc<Vi>) -> bool {
        let _ = vi.disconnect();
        nic.destroy_vi(vi).is_ok()
    }

    /// A new VI with `reliability` for memory kept from an earlier one
    /// (`end_vi`), on the NIC it is registered with under `ptag`.
    pub(crate) fn new_vi(
        &self,
        nic: &Nic,
        ptag: PtagId,
        reliability: u16,
    ) -> Result<Arc<Vi>, ViaError> {
        nic.create_vi(
            Region::attributes(reliability, self.buf_bytes, ptag),
            None,
            None,
        )
    }

    /// Deregisters and unmaps the memory.
    pub(crate) fn give_back(&self, nic: &Nic) {
        if nic.deregister_mem(self.base as u64, self.handle).is_ok() {
            // SAFETY: unmapping the mapping made in `open`, no longer
            // registered (the device never touches it again).
            unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{process_nic, Medium};
    use openvia_core::vi::reliability::RELIABLE_RECEPTION as R;

    #[test]
    fn a_released_region_is_kept_registered_for_the_next_link() {
        let (nic, ptag) = process_nic(Medium::Local).expect("shm NIC");
        // An unusual size, so that no other test's region is taken.
        let (slots, buf) = (3, 4096 + 64);
        let (a, vi) = Region::open(&nic, ptag, R, slots, buf, None).expect("region");
        let (base, handle) = (a.base, a.handle);
        a.release(&nic, &vi);
        let kept = |base: usize| KEPT.lock().unwrap().iter().any(|k| k.base == base);
        assert!(kept(base), "kept on release");
        let (b, vi2) = Region::open(&nic, ptag, R, slots, buf, None).expect("again");
        assert_eq!(
            (b.base, b.handle),
            (base, handle),
            "the kept region is reused"
        );
        // Still registered: the NIC knows the handle under our tag.
        let (tag, _, _) = nic.query_mem(b.base as u64, b.handle).expect("registered");
        assert_eq!(tag, ptag);
        b.release(&nic, &vi2);
        // Shared (memfd) regions are never kept.
        // SAFETY: a NUL-terminated name; valid flags.
        let fd = unsafe { libc::memfd_create(c"region-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        let len = Region::bytes(slots, buf);
        // SAFETY: sizing the memfd just made.
        assert_eq!(unsafe { libc::ftruncate(fd, len as libc::off_t) }, 0);
        let (c, vi3) = Region::open(&nic, ptag, R, slots, buf, Some((fd, 0))).expect("shared");
        assert_ne!(c.base, base, "a shared region maps its memfd");
        let c_base = c.base;
        c.release(&nic, &vi3);
        assert!(!kept(c_base), "the shared region was given back, not kept");
        // SAFETY: the memfd made above, unmapped by now.
        unsafe { libc::close(fd) };
    }
}
