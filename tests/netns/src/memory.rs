//! Registered memory for descriptors and data, descriptor building, and
//! the byte pattern every transfer is checked against. The pattern mixes
//! the byte's offset with a per-message key, so a shifted, repeated,
//! truncated or foreign segment shows up as a wrong byte.

use openvia_core::descriptor::{DataSegment, Descriptor};
use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;

/// Room reserved for each descriptor (control segment + up to 6 data
/// segments), a multiple of the 64-byte alignment VIPL requires.
pub const DESC_SLOT: usize = 128;

/// 64-byte aligned, registered memory: `descs` descriptor slots, then data.
pub struct Arena {
    _buf: Vec<u8>,
    base: usize,
    data_base: usize,
    len: usize,
    pub handle: u32,
}

impl Arena {
    pub fn new(nic: &Nic, ptag: PtagId, descs: usize, data_len: usize) -> Self {
        let desc_bytes = descs * DESC_SLOT;
        let len = desc_bytes + data_len;
        let buf = vec![0u8; len + 64];
        let base = (buf.as_ptr() as usize + 63) & !63;
        let handle = nic
            .register_mem(base as u64, len as u64, ptag, true, true)
            .expect("register arena");
        Arena {
            _buf: buf,
            base,
            data_base: base + desc_bytes,
            len,
            handle,
        }
    }

    pub fn desc(&self, i: usize) -> *mut Descriptor {
        let p = self.base + i * DESC_SLOT;
        assert!(p + DESC_SLOT <= self.data_base, "descriptor slot {i}");
        p as *mut Descriptor
    }

    /// The data area from `off` for `len` bytes. Shared `self` because the
    /// VI writes this memory behind Rust's back anyway (it is registered);
    /// the tests touch a region only while no transfer uses it.
    #[allow(clippy::mut_from_ref)]
    pub fn data(&self, off: usize, len: usize) -> &mut [u8] {
        assert!(self.data_base + off + len <= self.base + self.len);
        // SAFETY: inside the arena, which lives as long as `self`; callers
        // never hold two overlapping slices across a transfer.
        unsafe { std::slice::from_raw_parts_mut((self.data_base + off) as *mut u8, len) }
    }

    pub fn addr(&self, off: usize) -> u64 {
        (self.data_base + off) as u64
    }
}

impl Arena {
    /// Fills descriptor slot `i`: control bits, data segments (address,
    /// handle, length) and immediate data; status cleared.
    pub fn set_desc(&self, i: usize, ctl: u16, segs: &[(u64, u32, u32)], imm: u32) {
        assert!(segs.len() <= (DESC_SLOT - 32) / 16);
        let d = self.desc(i);
        // SAFETY: `d` is slot `i` of this arena (checked by `desc`), with
        // room for the control segment and the data segments.
        unsafe {
            std::ptr::write_bytes(d as *mut u8, 0, DESC_SLOT);
            (*d).cs.control = ctl;
            (*d).cs.seg_count = segs.len() as u16;
            (*d).cs.immediate_data = imm;
            let base = (d as *mut u8).add(32) as *mut DataSegment;
            for (k, &(a, h, l)) in segs.iter().enumerate() {
                *base.add(k) = DataSegment {
                    data: a,
                    handle: h,
                    length: l,
                };
            }
        }
    }

    /// (status, length, immediate) of a completed descriptor, which must
    /// be one of this arena's slots.
    pub fn result_of(&self, d: *mut Descriptor) -> (u32, u32, u32) {
        let p = d as usize;
        assert!(
            p >= self.base && p < self.data_base && (p - self.base).is_multiple_of(DESC_SLOT),
            "completion {d:?} is not a descriptor slot of this arena"
        );
        let slot = self.desc((p - self.base) / DESC_SLOT);
        // SAFETY: a slot of this arena that the VI handed back as
        // complete, so it no longer writes it.
        unsafe {
            (
                (*slot).cs.status,
                (*slot).cs.length,
                (*slot).cs.immediate_data,
            )
        }
    }
}

/// Byte `i` of message `key`.
pub fn pattern_byte(key: u32, i: usize) -> u8 {
    let x = (i as u64 ^ ((key as u64) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8
}

pub fn fill(buf: &mut [u8], key: u32) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(key, i);
    }
}

/// The offset of the first wrong byte, if any.
pub fn first_mismatch(buf: &[u8], key: u32) -> Option<usize> {
    buf.iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern_byte(key, i))
        .map(|(i, _)| i)
}
