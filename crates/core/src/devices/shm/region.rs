//! The shared region of one connection: a header page with the two rings'
//! consumer words, then the two rings' data. The server creates it at
//! accept time and passes the memfd to the client; ring 0 carries client →
//! server, ring 1 server → client. Each side also writes its VI's notice
//! key there (see `notice`) before the other side can send, for the other
//! side to push when it rings; and one shared-copy slot per direction (see
//! `shared_copy`).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::ring::{RingCtl, RingView};
use super::shared_copy::{CopySlot, SLOT_BYTES};
use crate::sys::mapping::SharedMapping;

const MAGIC: u64 = 0x4f56_4941_5245_474e; // "OVIAREGN"
const HEADER: usize = 4096;
const CTL0: usize = 64;
const CTL1: usize = 128;
/// Notice keys of the client's and the server's VI (written once, at setup).
const KEY_CLIENT: usize = 192;
const KEY_SERVER: usize = 196;
/// The shared-copy slots of ring 0 and ring 1 (see `shared_copy`).
const COPY_SLOT0: usize = 1024;
const COPY_SLOT1: usize = COPY_SLOT0 + SLOT_BYTES;
const _: () = assert!(COPY_SLOT1 + SLOT_BYTES <= HEADER);

pub struct ConnRegion {
    map: SharedMapping,
    ring_bytes: usize,
}

/// Bytes a region with rings of `ring_bytes` occupies.
pub fn region_len(ring_bytes: usize) -> usize {
    HEADER + 2 * ring_bytes
}

impl ConnRegion {
    /// Creates a fresh region (server side).
    pub fn create(ring_bytes: usize) -> io::Result<Self> {
        assert!(ring_bytes.is_power_of_two() && ring_bytes >= 4096);
        let map = SharedMapping::create("openvia-conn", region_len(ring_bytes))?;
        let r = Self { map, ring_bytes };
        r.word(0).store(MAGIC, Ordering::Relaxed);
        r.word(8).store(ring_bytes as u64, Ordering::Release);
        Ok(r)
    }

    /// Maps a region received from the server (client side), checking that
    /// it is what the server announced.
    pub fn open(fd: OwnedFd, ring_bytes: usize) -> io::Result<Self> {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "bad connection region");
        if !ring_bytes.is_power_of_two() || !(4096..=1 << 28).contains(&ring_bytes) {
            return Err(bad());
        }
        let mut map = SharedMapping::map(fd, region_len(ring_bytes))?;
        // The client never hands the region on.
        map.close_fd();
        let r = Self { map, ring_bytes };
        if r.word(0).load(Ordering::Relaxed) != MAGIC
            || r.word(8).load(Ordering::Acquire) != ring_bytes as u64
        {
            return Err(bad());
        }
        Ok(r)
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= HEADER && off.is_multiple_of(8));
        // SAFETY: inside the header page of a live mapping, 8-byte aligned.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(off).cast()) }
    }

    fn key(&self, of_client: bool) -> &AtomicU32 {
        let off = if of_client { KEY_CLIENT } else { KEY_SERVER };
        // SAFETY: inside the header page of a live mapping, 4-byte aligned.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(off).cast()) }
    }

    /// Publishes our VI's notice key (before the peer may send to it).
    pub fn set_own_key(&self, is_client: bool, key: u32) {
        self.key(is_client).store(key, Ordering::Release);
    }

    /// The word holding the other side's notice key (`is_client`: we are
    /// the client); valid while the region is.
    pub fn peer_key(&self, is_client: bool) -> *const AtomicU32 {
        self.key(!is_client)
    }

    fn view(&self, ring: usize) -> RingView {
        let ctl_off = if ring == 0 { CTL0 } else { CTL1 };
        // SAFETY: offsets inside the mapping (region_len covers both rings).
        unsafe {
            RingView {
                ctl: self.map.as_ptr().add(ctl_off) as *const RingCtl,
                data: self.map.as_ptr().add(HEADER + ring * self.ring_bytes),
                size: self.ring_bytes,
            }
        }
    }

    /// (transmit ring, receive ring) for one side.
    pub fn rings(&self, is_client: bool) -> (RingView, RingView) {
        if is_client {
            (self.view(0), self.view(1))
        } else {
            (self.view(1), self.view(0))
        }
    }

    fn copy_slot(&self, ring: usize) -> CopySlot {
        let off = if ring == 0 { COPY_SLOT0 } else { COPY_SLOT1 };
        // SAFETY: the slot lies inside the header page of the mapping,
        // 8-byte aligned, and is only touched as atomics; the channel
        // holding the view drops it before the region.
        unsafe { CopySlot::new(self.map.as_ptr().add(off)) }
    }

    /// (slot of our transmit ring, slot of our receive ring) for one side:
    /// we help in the first and open the second.
    pub fn copy_slots(&self, is_client: bool) -> (CopySlot, CopySlot) {
        if is_client {
            (self.copy_slot(0), self.copy_slot(1))
        } else {
            (self.copy_slot(1), self.copy_slot(0))
        }
    }

    /// The memfd, for the server to send; None once closed.
    pub fn fd(&self) -> Option<&OwnedFd> {
        self.map.fd()
    }

    /// Closes the memfd once the client has it (the mapping stays).
    pub fn close_fd(&mut self) {
        self.map.close_fd();
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn ring_bytes(&self) -> usize {
        self.ring_bytes
    }
}
