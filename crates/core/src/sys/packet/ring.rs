//! The memory-mapped receive rings of an AF_PACKET socket, two kinds:
//!
//! - TPACKET_V3 ([`RxPath::BlockRing`]): variable-size frames packed in
//!   blocks; the kernel hands a block over when it is full or when its
//!   retire timer (1 ms at least) fires. Few wake-ups under load, but a
//!   lone frame waits for the timer: measured 0.5 ms one-way on veth.
//! - TPACKET_V2 ([`RxPath::FrameRing`]): fixed slots, each handed over
//!   the moment its frame is written, so a busy-polling reader sees it at
//!   once; slots are sized for the interface MTU.
//!
//! Either way the reader walks the ring in order, hands each frame to the
//! caller in place (with the slot's own header bytes before it free as
//! headroom) and gives the slot or block back to the kernel.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{fence, Ordering};

use super::{setsockopt, InPlace, RxPath, SOL_PACKET};
use crate::sys::frames::{FrameError, ETH_HEADER_LEN};

const PACKET_RX_RING: libc::c_int = 5;
const PACKET_VERSION: libc::c_int = 10;
const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_KERNEL: u32 = 0;

/// Bytes mapped per ring when the caller names no depth: 4 MiB.
pub(super) const DEFAULT_RING_BYTES: usize = 4 << 20;
/// The most bytes a ring asks for, however deep the caller wants it.
pub(super) const MAX_RING_BYTES: usize = 64 << 20;
/// V3: blocks of 256 KiB retired after 1 ms (the kernel's smallest
/// timeout) when not full.
const BLOCK_SIZE: usize = 256 << 10;
/// V2: slots are packed into blocks of this size (a multiple of the page).
const V2_BLOCK: usize = 64 << 10;
/// struct tpacket_req's slot size must be a multiple of TPACKET_ALIGNMENT.
const TPACKET_ALIGNMENT: usize = 16;
const V3_FRAME_SIZE: usize = 2048;
const RETIRE_MS: u32 = 1;

/// Offsets in struct tpacket_block_desc (v1 header) and tpacket3_hdr.
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
const V3_NEXT: usize = 0;
const V3_SNAPLEN: usize = 12;
const V3_LEN: usize = 16;
const V3_MAC: usize = 24;
/// sizeof(struct tpacket3_hdr): what precedes the headroom handed out.
const V3_HDR_LEN: usize = 48;

/// Offsets in struct tpacket2_hdr and its size.
const V2_STATUS: usize = 0;
const V2_LEN: usize = 4;
const V2_SNAPLEN: usize = 8;
const V2_MAC: usize = 12;
const V2_HDR_LEN: usize = 32;

/// struct tpacket_req3 (V2 reads its first four fields as tpacket_req).
#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

/// #[repr(C)] struct tpacket_req.
#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

/// A mapped ring and where reading stands in it.
pub(super) struct Ring {
    base: *mut u8,
    len: usize,
    kind: Kind,
    /// Frames dropped: cut short, or offsets outside the slot.
    pub(super) dropped: u64,
}

/// Where V2 slots lie: blocks of `block` bytes, each holding `per_block`
/// whole slots of `size` bytes (a slot never straddles two blocks; the
/// rest of a block is unused), `slots` in all.
#[derive(Clone, Copy)]
struct Slots {
    size: usize,
    block: usize,
    per_block: usize,
    slots: usize,
}

impl Slots {
    /// The slot after `slot` (at `at`): its number and place.
    fn next(&self, slot: usize, at: usize) -> (usize, usize) {
        let slot = (slot + 1) % self.slots;
        let at = if slot == 0 {
            0
        } else if slot.is_multiple_of(self.per_block) {
            (slot / self.per_block) * self.block
        } else {
            at + self.size
        };
        (slot, at)
    }
}

enum Kind {
    /// V3: block being read, frames of it handed out, offset of the next.
    Block {
        block: usize,
        taken: u32,
        next: usize,
    },
    /// V2: slot to read next and its place in the mapping.
    Frame {
        slot: usize,
        at: usize,
        layout: Slots,
    },
}

// SAFETY: the ring is a private mapping of its link, used only through
// `&mut PacketLink`; nothing in it is tied to a thread.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base` is the mapping made in `map`, of `len` bytes.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Sets up and maps the ring of `rx` (a ring path) for frames of up to
/// `mtu` payload bytes: `bytes` of it, within [`MAX_RING_BYTES`]. A ring
/// the kernel cannot allocate is asked for again at half the size, down
/// to [`DEFAULT_RING_BYTES`].
pub(super) fn map(fd: RawFd, rx: RxPath, mtu: usize, bytes: usize) -> Result<Ring, FrameError> {
    let mut bytes = bytes.min(MAX_RING_BYTES);
    loop {
        match map_sized(fd, rx, mtu, bytes) {
            Err(FrameError::Io(e))
                if e.raw_os_error() == Some(libc::ENOMEM) && bytes > DEFAULT_RING_BYTES =>
            {
                bytes = (bytes / 2).max(DEFAULT_RING_BYTES);
            }
            r => return r,
        }
    }
}

/// The V2 slot size for frames of up to `mtu` payload bytes: the slot
/// header and address (~80 bytes), the Ethernet header and the payload.
pub(super) fn slot_size(mtu: usize) -> usize {
    (128 + ETH_HEADER_LEN + mtu).next_multiple_of(TPACKET_ALIGNMENT)
}

fn map_sized(fd: RawFd, rx: RxPath, mtu: usize, bytes: usize) -> Result<Ring, FrameError> {
    let (kind, len) = match rx {
        RxPath::BlockRing => {
            setsockopt(fd, SOL_PACKET, PACKET_VERSION, &TPACKET_V3)?;
            let blocks = (bytes / BLOCK_SIZE).max(2);
            let req = TpacketReq3 {
                block_size: BLOCK_SIZE as u32,
                block_nr: (blocks) as u32,
                frame_size: V3_FRAME_SIZE as u32,
                frame_nr: (blocks * BLOCK_SIZE / V3_FRAME_SIZE) as u32,
                retire_blk_tov: RETIRE_MS,
                sizeof_priv: 0,
                feature_req_word: 0,
            };
            setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req)?;
            let kind = Kind::Block {
                block: 0,
                taken: 0,
                next: 0,
            };
            (kind, blocks * BLOCK_SIZE)
        }
        RxPath::FrameRing => {
            setsockopt(fd, SOL_PACKET, PACKET_VERSION, &TPACKET_V2)?;
            // Slots sized to the frame, not to a power of two (at MTU
            // 9000 that would waste 44 %), packed whole into blocks.
            let size = slot_size(mtu);
            let block = size.next_multiple_of(page_size()).max(V2_BLOCK);
            let per_block = block / size;
            let blocks = (bytes / block).max(1);
            let req = TpacketReq {
                block_size: block as u32,
                block_nr: blocks as u32,
                frame_size: size as u32,
                frame_nr: (blocks * per_block) as u32,
            };
            setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req)?;
            let kind = Kind::Frame {
                slot: 0,
                at: 0,
                layout: Slots {
                    size,
                    block,
                    per_block,
                    slots: blocks * per_block,
                },
            };
            (kind, blocks * block)
        }
        RxPath::Copy => return Err(FrameError::Unsupported("no ring on the copy path")),
    };
    // SAFETY: maps the ring the kernel just allocated for `fd`, shared,
    // at an address of the kernel's choosing.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error().into());
    }
    Ok(Ring {
        base: base.cast(),
        len,
        kind,
        dropped: 0,
    })
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096).max(4096)
}

fn word(b: &[u8], at: usize) -> u32 {
    // SAFETY: `at + 4 <= b.len()` (the slice index checks it), and a
    // volatile read sees the kernel's latest store.
    unsafe { std::ptr::read_volatile(b[at..at + 4].as_ptr().cast::<u32>()) }
}

fn set_word(b: &mut [u8], at: usize, v: u32) {
    // SAFETY: as in `word`; status words are 4-byte aligned in the ring.
    unsafe { std::ptr::write_volatile(b[at..at + 4].as_mut_ptr().cast::<u32>(), v) }
}

fn half(b: &[u8], at: usize) -> usize {
    u16::from_ne_bytes([b[at], b[at + 1]]) as usize
}

/// Hands the frame at `b[hdr_len..]` (Ethernet header at `mac`, `snaplen`
/// of its `len` bytes in the slot) to `each` with the bytes after the
/// slot header as headroom; false if it was cut short (a frame larger
/// than the slot: the MTU grew after the ring was sized) or the kernel's
/// offsets do not fit the slot.
fn hand_over(
    b: &mut [u8],
    hdr_len: usize,
    mac: usize,
    (snaplen, len): (usize, usize),
    each: &mut InPlace<'_>,
) -> bool {
    if snaplen != len || mac < hdr_len || mac + snaplen > b.len() || snaplen < ETH_HEADER_LEN {
        return false;
    }
    let frame = &mut b[hdr_len..mac + snaplen];
    let eth = mac - hdr_len;
    let mut src = [0u8; 6];
    src.copy_from_slice(&frame[eth + 6..eth + 12]);
    each(src, frame, eth + ETH_HEADER_LEN, snaplen - ETH_HEADER_LEN);
    true
}

impl Ring {
    fn bytes(&mut self, at: usize, len: usize) -> &mut [u8] {
        assert!(at + len <= self.len);
        // SAFETY: inside the mapping (checked above), borrowed mutably
        // through `&mut self`, so no other slice of it is alive.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(at), len) }
    }

    /// Whether a frame waits (no system call).
    pub(super) fn ready(&self) -> bool {
        let at = match self.kind {
            Kind::Block { block, .. } => block * BLOCK_SIZE + BLOCK_STATUS,
            Kind::Frame { at, .. } => at + V2_STATUS,
        };
        assert!(at + 4 <= self.len);
        // SAFETY: an aligned status word inside the mapping (checked
        // above), read volatile as the kernel may be writing it.
        let status = unsafe { std::ptr::read_volatile(self.base.add(at).cast::<u32>()) };
        status & TP_STATUS_USER != 0
    }

    /// Takes up to `max` frames; returns how many.
    pub(super) fn recv(&mut self, max: usize, each: &mut InPlace<'_>) -> usize {
        match self.kind {
            Kind::Block { .. } => self.recv_blocks(max, each),
            Kind::Frame { .. } => self.recv_slots(max, each),
        }
    }

    fn recv_slots(&mut self, max: usize, each: &mut InPlace<'_>) -> usize {
        let Kind::Frame {
            mut slot,
            mut at,
            layout,
        } = self.kind
        else {
            return 0;
        };
        let (mut n, mut dropped) = (0, 0);
        while n < max {
            let b = self.bytes(at, layout.size);
            if word(b, V2_STATUS) & TP_STATUS_USER == 0 {
                break;
            }
            // Acquire: the kernel's writes of the slot precede its status.
            fence(Ordering::Acquire);
            let lens = (word(b, V2_SNAPLEN) as usize, word(b, V2_LEN) as usize);
            if hand_over(b, V2_HDR_LEN, half(b, V2_MAC), lens, each) {
                n += 1;
            } else {
                dropped += 1;
            }
            // Release: our reads of the slot precede handing it back.
            fence(Ordering::Release);
            set_word(b, V2_STATUS, TP_STATUS_KERNEL);
            (slot, at) = layout.next(slot, at);
        }
        self.kind = Kind::Frame { slot, at, layout };
        self.dropped += dropped;
        n
    }

    fn recv_blocks(&mut self, max: usize, each: &mut InPlace<'_>) -> usize {
        let Kind::Block {
            mut block,
            mut taken,
            mut next,
        } = self.kind
        else {
            return 0;
        };
        let blocks = self.len / BLOCK_SIZE;
        let (mut n, mut dropped) = (0, 0);
        while n < max {
            let b = self.bytes(block * BLOCK_SIZE, BLOCK_SIZE);
            if word(b, BLOCK_STATUS) & TP_STATUS_USER == 0 {
                break;
            }
            fence(Ordering::Acquire);
            let count = word(b, BLOCK_NUM_PKTS);
            if taken == 0 {
                next = word(b, BLOCK_FIRST_PKT) as usize;
            }
            while taken < count && n < max {
                let at = next;
                // Kernel-written offsets, checked all the same.
                if at + V3_HDR_LEN > BLOCK_SIZE {
                    taken = count;
                    break;
                }
                let step = word(b, at + V3_NEXT) as usize;
                let lens = (
                    word(b, at + V3_SNAPLEN) as usize,
                    word(b, at + V3_LEN) as usize,
                );
                let mac = half(b, at + V3_MAC);
                taken += 1;
                next = at + step;
                if hand_over(&mut b[at..], V3_HDR_LEN, mac, lens, each) {
                    n += 1;
                } else {
                    dropped += 1;
                }
            }
            if taken >= count {
                fence(Ordering::Release);
                set_word(b, BLOCK_STATUS, TP_STATUS_KERNEL);
                block = (block + 1) % blocks;
                taken = 0;
            }
        }
        self.kind = Kind::Block { block, taken, next };
        self.dropped += dropped;
        n
    }
}
