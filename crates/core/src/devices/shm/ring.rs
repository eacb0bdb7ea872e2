//! A single-producer, single-consumer record ring in shared memory.
//!
//! The producer owns its tail privately and learns how far the consumer got
//! from the consumer's `head` word only when it runs short of room (a cached
//! copy otherwise), so the two processes do not bounce a cache line per
//! message. The consumer learns of a new record by polling the stamp word at
//! its own head (see `openvia_wire::shm`). Records never wrap: a Pad record
//! fills the end of the ring instead.
//!
//! A ring's memory follows what is in flight, not its history: each time
//! the producer passes another [`WARM_BYTES`] of a lap it looks, before a
//! small record, whether the consumer has taken everything, and if so pads
//! to the end and starts the next lap at the beginning. Small-message
//! traffic (ping-pongs, requests) thus lives in the first few pages however
//! long it runs; larger messages walk the whole ring (see
//! [`EARLY_WRAP_MAX_RECORD`]), and the pages they touched beyond the warm
//! part are given back (hole punched in the shared file) at the next early
//! wrap, at most every [`RELEASE_INTERVAL_NS`] so streaming does not
//! refault its pages.

use std::sync::atomic::{AtomicU64, Ordering};

use openvia_wire::shm::{record_len, Op, RecordHeader, RecordKind, CORE, FLAG_WAKE, LINE};
use openvia_wire::WireError;

/// How far ahead of the tail the producer claims lines (bytes).
const PREFETCH_AHEAD: u64 = 2 * LINE as u64;
/// The part of the ring light traffic stays in (see the module text).
pub const WARM_BYTES: usize = 16 * 1024;
/// Only records up to this size restart a lap early. Larger ones walk the
/// whole ring, as before: rewriting lines the consumer has just read (and
/// still holds in its caches) measured 10–20% slower for 4–16 KiB
/// messages, where fresh lines cost nothing extra.
const EARLY_WRAP_MAX_RECORD: usize = 1024;
/// Least time between two releases of a ring's cold pages.
const RELEASE_INTERVAL_NS: u64 = 50_000_000;
const PAGE: usize = 4096;

/// The consumer-written words of one direction, on their own cache line.
#[repr(C, align(64))]
pub struct RingCtl {
    /// Bytes consumed so far (ring position of the consumer).
    pub head: AtomicU64,
    /// Messages fully delivered so far (for completions that wait on the peer).
    pub consumed: AtomicU64,
    /// Written by the producer (rarely): its position when it last gave
    /// cold pages back, which fault in again on the next lap.
    pub released: AtomicU64,
}

/// Where one direction's ring lies in a mapping.
#[derive(Clone, Copy)]
pub struct RingView {
    pub ctl: *const RingCtl,
    pub data: *mut u8,
    pub size: usize,
}

// SAFETY: the view points into a shared mapping that its owner (the channel)
// keeps alive; every access goes through atomics or is ordered by them.
unsafe impl Send for RingView {}

impl RingView {
    fn ctl(&self) -> &RingCtl {
        // SAFETY: `ctl` points at a RingCtl inside a live mapping.
        unsafe { &*self.ctl }
    }

    fn stamp(&self, pos: u64) -> &AtomicU64 {
        let off = (pos as usize) & (self.size - 1);
        // SAFETY: `off` is a multiple of 64 inside the data area, so the
        // word is in bounds and 8-byte aligned.
        unsafe { AtomicU64::from_ptr(self.data.add(off).cast()) }
    }

    /// Asks for the line at `pos` in exclusive state ahead of writing it:
    /// the consumer still holds it from the last lap, and taking it away is
    /// a cross-core round trip better started early than waited for.
    #[inline(always)]
    fn prefetch_for_write(&self, pos: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults; the address is inside the ring.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(
                self.line_ptr(pos) as *const i8,
            )
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = pos;
    }

    fn line_ptr(&self, pos: u64) -> *mut u8 {
        // SAFETY: in bounds, as for `stamp`.
        unsafe { self.data.add((pos as usize) & (self.size - 1)) }
    }
}

/// The writing end.
pub struct Producer {
    ring: RingView,
    tail: u64,
    cached_head: u64,
    /// Ring position at which to look for an early wrap next.
    next_wrap_check: u64,
    /// Highest offset written since the cold pages were last released.
    high_water: usize,
    /// When they were (CLOCK_MONOTONIC ns).
    released_at: u64,
    /// Keep the cold pages (while the consumer times the ring's pace, a
    /// page that faults in again would make the ring look slow).
    keep_pages: bool,
}

impl Producer {
    pub fn new(ring: RingView) -> Self {
        Self {
            ring,
            tail: 0,
            cached_head: 0,
            // Small rings are all warm.
            next_wrap_check: if ring.size >= 4 * WARM_BYTES {
                WARM_BYTES as u64
            } else {
                u64::MAX
            },
            high_water: 0,
            released_at: 0,
            keep_pages: false,
        }
    }

    /// Whether to keep the cold pages rather than give them back.
    pub fn set_keep_pages(&mut self, keep: bool) {
        self.keep_pages = keep;
    }

    /// Starts the next lap early, before a record of `len` bytes, if the
    /// consumer has taken everything and this lap is past its warm part.
    #[inline(always)]
    fn maybe_wrap_early(&mut self, len: usize) {
        if self.tail >= self.next_wrap_check && len <= EARLY_WRAP_MAX_RECORD {
            self.wrap_early(len);
        }
    }

    #[cold]
    fn wrap_early(&mut self, len: usize) {
        let size = self.ring.size;
        let off = (self.tail as usize) & (size - 1);
        let lap_start = self.tail - off as u64;
        self.high_water = self.high_water.max(off);
        if off < WARM_BYTES {
            // A wrap at the end came first.
            self.next_wrap_check = lap_start + WARM_BYTES as u64;
            return;
        }
        self.cached_head = self.ring.ctl().head.load(Ordering::Acquire);
        // After the pad, `off` bytes are free: the record must fit there
        // (else it would wait behind a pad the consumer has no reason to
        // look at).
        if self.cached_head != self.tail || len > off {
            // Still in flight: look again a warm part further.
            self.next_wrap_check = self.tail + WARM_BYTES as u64;
            return;
        }
        let mut pad = RecordHeader::new(RecordKind::Pad, Op::Send);
        pad.payload_len = (size - off - LINE) as u32;
        self.write_record(&pad, |_| {});
        self.next_wrap_check = self.tail + WARM_BYTES as u64;
        // The consumer has read everything before the pad, and reads
        // nothing else of this lap: its pages past the warm part, but for
        // the pad's own, go back (they fault in afresh if a burst needs
        // them again).
        let warm_end = (WARM_BYTES + EARLY_WRAP_MAX_RECORD).next_multiple_of(PAGE);
        let pad_page = off & !(PAGE - 1);
        let cold_end = self.high_water.max(off).next_multiple_of(PAGE).min(size);
        if cold_end <= pad_page + PAGE && pad_page <= warm_end {
            return;
        }
        let now = crate::sys::now_ns();
        if !self.keep_pages && now.saturating_sub(self.released_at) >= RELEASE_INTERVAL_NS {
            self.released_at = now;
            self.ring.ctl().released.store(self.tail, Ordering::Relaxed);
            self.high_water = off + LINE;
            self.release(warm_end, pad_page);
            self.release(pad_page + PAGE, cold_end);
        }
    }

    /// Gives the pages of `[from, to)` (offsets in the data area, page
    /// aligned) back to the kernel; no-op when empty.
    fn release(&self, from: usize, to: usize) {
        if to <= from {
            return;
        }
        // SAFETY: [from, to) lies inside the ring's data area, which starts
        // on a page; MADV_REMOVE on the shared file mapping frees those
        // pages for both processes, which then read zeros there (a stamp
        // never matches 0). The caller made sure nobody reads them before
        // they are written again.
        unsafe {
            libc::madvise(
                self.ring.data.add(from).cast(),
                to - from,
                libc::MADV_REMOVE,
            );
        }
    }

    /// The largest payload a single record can ever carry in this ring.
    pub fn max_payload(&self) -> usize {
        self.ring.size / 4 - LINE
    }

    fn free(&mut self, need: usize) -> bool {
        let size = self.ring.size as u64;
        if self.tail - self.cached_head + need as u64 <= size {
            return true;
        }
        self.cached_head = self.ring.ctl().head.load(Ordering::Acquire);
        self.tail - self.cached_head + need as u64 <= size
    }

    /// Room for a record with `payload` bytes right now (including a pad
    /// record if it would cross the end).
    pub fn can_push(&mut self, payload: usize) -> bool {
        self.can_push_record(record_len(payload))
    }

    fn can_push_record(&mut self, len: usize) -> bool {
        let off = (self.tail as usize) & (self.ring.size - 1);
        let need = if off + len > self.ring.size {
            self.ring.size - off + len
        } else {
            len
        };
        self.free(need)
    }

    /// How many payload bytes fit in one record right now (0 if none).
    pub fn room(&mut self) -> usize {
        let size = self.ring.size;
        self.cached_head = self.ring.ctl().head.load(Ordering::Acquire);
        let used = (self.tail - self.cached_head) as usize;
        let off = (self.tail as usize) & (size - 1);
        let to_end = size - off;
        let free = size - used;
        // Either the record fits before the end, or it goes after a pad.
        let contiguous = if free >= to_end {
            to_end.max(free - to_end)
        } else {
            free
        };
        contiguous.saturating_sub(LINE).min(self.max_payload())
    }

    /// Writes a record whose payload is produced by `fill` into the given
    /// slice. Returns false (and writes nothing) if there is no room.
    pub fn push(&mut self, hdr: &RecordHeader, fill: impl FnOnce(&mut [u8])) -> bool {
        let len = hdr.record_len();
        self.maybe_wrap_early(len);
        if !self.can_push_record(len) {
            return false;
        }
        let off = (self.tail as usize) & (self.ring.size - 1);
        // Past half full the producer may soon wait for space: ask the
        // consumer to wake it when it frees some.
        let mut hdr = *hdr;
        if (self.tail - self.cached_head) as usize + len > self.ring.size / 2 {
            hdr.flags |= FLAG_WAKE;
        }
        let hdr = &hdr;
        if off + len > self.ring.size {
            self.high_water = self.ring.size;
            let pad_payload = self.ring.size - off - LINE;
            let mut pad = RecordHeader::new(RecordKind::Pad, openvia_wire::shm::Op::Send);
            pad.payload_len = pad_payload as u32;
            self.write_record(&pad, |_| {});
        }
        self.write_record(hdr, fill);
        true
    }

    /// Writes a whole message as one compact data record (a `First` of
    /// `op` carrying all `len` bytes), without building a header value
    /// first. False if there is no room.
    #[inline]
    pub fn push_data(
        &mut self,
        op: Op,
        flags: u8,
        len: u32,
        immediate: u32,
        seq: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        let rec = (CORE + len as usize).div_ceil(LINE) * LINE;
        self.maybe_wrap_early(rec);
        let off = (self.tail as usize) & (self.ring.size - 1);
        if off + rec > self.ring.size || !self.can_push_record(rec) {
            // Wrapping or full: the general path pads or queues.
            return false;
        }
        let mut flags = flags;
        if (self.tail - self.cached_head) as usize + rec > self.ring.size / 2 {
            flags |= FLAG_WAKE;
        }
        let p = self.ring.line_ptr(self.tail);
        // SAFETY: [tail, tail+rec) is reserved and inside the data area; the
        // fields match the layout documented in openvia_wire::shm; the
        // consumer reads nothing before the stamp is released.
        unsafe {
            *p.add(8) = RecordKind::First as u8;
            *p.add(9) = op as u8;
            *p.add(10) = flags;
            *p.add(11) = 0;
            std::ptr::write_unaligned(p.add(12) as *mut u32, len);
            std::ptr::write_unaligned(p.add(16) as *mut u32, len);
            std::ptr::write_unaligned(p.add(20) as *mut u32, immediate);
            std::ptr::write_unaligned(p.add(24) as *mut u64, seq);
            if len > 0 {
                fill(std::slice::from_raw_parts_mut(p.add(CORE), len as usize));
            }
        }
        self.ring
            .stamp(self.tail)
            .store(self.tail + 1, Ordering::Release);
        self.tail += rec as u64;
        self.ring.prefetch_for_write(self.tail + PREFETCH_AHEAD);
        true
    }

    fn write_record(&mut self, hdr: &RecordHeader, fill: impl FnOnce(&mut [u8])) {
        let mut line = [0u8; LINE];
        hdr.emit(&mut line);
        let p = self.ring.line_ptr(self.tail);
        let payload = hdr.payload_len as usize;
        let off = hdr.payload_offset();
        // SAFETY: `can_push_record` reserved [tail, tail+record_len) which
        // lies inside the data area without wrapping; the consumer does not
        // read it until the stamp below is released.
        unsafe {
            std::ptr::copy_nonoverlapping(line.as_ptr().add(8), p.add(8), off - 8);
            if payload > 0 {
                fill(std::slice::from_raw_parts_mut(p.add(off), payload));
            }
        }
        self.ring
            .stamp(self.tail)
            .store(self.tail + 1, Ordering::Release);
        self.tail += hdr.record_len() as u64;
        self.ring.prefetch_for_write(self.tail + PREFETCH_AHEAD);
    }

    /// Messages the consumer has fully delivered.
    pub fn consumed(&self) -> u64 {
        self.ring.ctl().consumed.load(Ordering::Acquire)
    }
}

/// The reading end.
pub struct Consumer {
    ring: RingView,
    head: u64,
    delivered: u64,
}

/// A record visible at the consumer's head.
pub struct Peeked {
    pub header: RecordHeader,
    payload: *const u8,
}

impl Peeked {
    /// The record's payload, valid until [`Consumer::advance`].
    pub fn payload(&self) -> &[u8] {
        // SAFETY: `peek` checked that the payload lies inside the data area;
        // the producer does not rewrite it before the consumer advances.
        unsafe { std::slice::from_raw_parts(self.payload, self.header.payload_len as usize) }
    }
}

impl Consumer {
    pub fn new(ring: RingView) -> Self {
        Self {
            ring,
            head: 0,
            delivered: 0,
        }
    }

    /// Whether the consumer has gone round the whole ring since its pages
    /// were last given back (or first used), so none faults in any more.
    pub fn pages_settled(&self) -> bool {
        let released = self.ring.ctl().released.load(Ordering::Relaxed);
        self.head >= released + self.ring.size as u64
    }

    /// Whether a record is waiting (one load of the stamp word).
    #[inline]
    pub fn ready(&self) -> bool {
        self.ring.stamp(self.head).load(Ordering::Acquire) == self.head + 1
    }

    /// The record at the head, skipping pads; Err if the producer wrote
    /// something malformed.
    pub fn peek(&mut self) -> Result<Option<Peeked>, WireError> {
        loop {
            if !self.ready() {
                return Ok(None);
            }
            let p = self.ring.line_ptr(self.head);
            let mut line = [0u8; LINE];
            // SAFETY: the stamp was released after the header was written;
            // the line is inside the data area.
            unsafe { std::ptr::copy_nonoverlapping(p, line.as_mut_ptr(), LINE) };
            let header = RecordHeader::parse(&line, self.ring.size - LINE)?;
            let off = (self.head as usize) & (self.ring.size - 1);
            if off + header.record_len() > self.ring.size {
                return Err(WireError::OutOfRange {
                    what: "record crosses ring end",
                    value: header.payload_len as u64,
                });
            }
            if header.kind == RecordKind::Pad {
                self.advance_by(header.record_len());
                continue;
            }
            return Ok(Some(Peeked {
                header,
                // SAFETY: within the data area, checked just above.
                payload: unsafe { p.add(header.payload_offset()) },
            }));
        }
    }

    /// Releases the record last peeked. Returns whether the producer
    /// asked to be woken once it is consumed.
    pub fn advance(&mut self, peeked: &Peeked) -> bool {
        self.advance_by(peeked.header.record_len());
        peeked.header.flags & FLAG_WAKE != 0
    }

    fn advance_by(&mut self, len: usize) {
        self.head += len as u64;
        self.ring.ctl().head.store(self.head, Ordering::Release);
    }

    /// Counts one more message delivered and publishes it to the producer.
    pub fn message_delivered(&mut self) {
        self.delivered += 1;
        self.ring
            .ctl()
            .consumed
            .store(self.delivered, Ordering::Release);
    }
}

/// Walks a 4 KiB ring made of `data` (every line stamped as if written),
/// as a consumer facing a hostile producer would; for fuzzing and tests.
/// Returns how many records were accepted.
pub fn fuzz_consume(data: &[u8]) -> usize {
    const SIZE: usize = 4096;
    let mut mem = vec![0u64; (SIZE + 2 * LINE) / 8];
    let base = ((mem.as_mut_ptr() as usize + LINE - 1) & !(LINE - 1)) as *mut u8;
    // SAFETY: `mem` holds, from the aligned `base`, LINE bytes of control
    // words then SIZE bytes of ring; the copy stays inside it.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), base.add(LINE), data.len().min(SIZE));
    }
    let view = RingView {
        ctl: base as *const RingCtl,
        // SAFETY: inside `mem`, as above.
        data: unsafe { base.add(LINE) },
        size: SIZE,
    };
    for pos in (0..SIZE as u64).step_by(LINE) {
        view.stamp(pos).store(pos + 1, Ordering::Relaxed);
    }
    let mut c = Consumer::new(view);
    let mut accepted = 0;
    // Stamps only match during the first lap.
    while let Ok(Some(pk)) = c.peek() {
        let p = pk.payload();
        assert!(p.as_ptr() as usize >= view.data as usize);
        assert!(p.as_ptr() as usize + p.len() <= view.data as usize + SIZE);
        c.advance(&pk);
        accepted += 1;
        if c.head >= SIZE as u64 {
            break;
        }
    }
    accepted
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TestRing {
        _mem: Vec<u64>,
        view: RingView,
    }

    fn ring(size: usize) -> TestRing {
        let mut mem = vec![0u64; (size + 64) / 8 + 8];
        let base = mem.as_mut_ptr() as usize;
        let aligned = (base + 63) & !63;
        let ctl = aligned as *const RingCtl;
        let data = (aligned + 64) as *mut u8;
        TestRing {
            view: RingView { ctl, data, size },
            _mem: mem,
        }
    }

    #[test]
    fn wraps_with_pad_and_keeps_order() {
        let r = ring(4096);
        let mut p = Producer::new(r.view);
        let mut c = Consumer::new(r.view);
        let mut next_in = 0u32;
        let mut next_out = 0u32;
        for round in 0..2000u32 {
            let len = ((round * 37) % 900) as usize;
            let mut h = RecordHeader::new(RecordKind::First, Op::Send);
            h.payload_len = len as u32;
            h.total_len = len as u64;
            h.msg_seq = next_in as u64;
            let seq = next_in;
            if p.push(&h, |buf| {
                buf.iter_mut()
                    .enumerate()
                    .for_each(|(i, b)| *b = (i as u32 ^ seq) as u8)
            }) {
                next_in += 1;
            }
            // Drain sometimes, so the ring fills and wraps.
            if round % 3 == 0 {
                while let Some(pk) = c.peek().unwrap() {
                    assert_eq!(pk.header.msg_seq, next_out as u64);
                    for (i, b) in pk.payload().iter().enumerate() {
                        assert_eq!(*b, (i as u32 ^ next_out) as u8);
                    }
                    c.advance(&pk);
                    next_out += 1;
                }
            }
        }
        assert!(next_in > 1000);
    }

    #[test]
    fn hostile_ring_contents_never_escape() {
        let mut x: u64 = 0x1234_5678;
        let mut buf = vec![0u8; 4096];
        for round in 0..3000 {
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            // Make many lines plausible headers so deeper paths run.
            for line in buf.chunks_mut(LINE) {
                line[8] = (line[8] % 5) + 1;
                line[9] %= 4;
                line[10] &= 0x7;
                if round % 2 == 0 {
                    line[12..16].copy_from_slice(&((x as u32) % 5000).to_ne_bytes());
                }
            }
            fuzz_consume(&buf);
        }
    }

    /// A payload from `seed`, its first 8 bytes a checksum of the rest.
    fn fill_checked(seed: u64, buf: &mut [u8]) {
        let mut sum = 0u64;
        for (k, b) in buf[8..].iter_mut().enumerate() {
            *b = (seed >> (k % 8 * 8)) as u8 ^ k as u8;
            sum = sum.wrapping_mul(31).wrapping_add(*b as u64);
        }
        buf[..8].copy_from_slice(&sum.to_ne_bytes());
    }

    /// Takes `n` records in order from `view`, checking every checksum.
    fn consume_checked(view: RingView, n: u64) {
        let mut c = Consumer::new(view);
        let mut got = 0u64;
        while got < n {
            match c.peek().unwrap() {
                Some(pk) => {
                    assert_eq!(pk.header.msg_seq, got);
                    let p = pk.payload();
                    let mut sum = 0u64;
                    for b in &p[8..] {
                        sum = sum.wrapping_mul(31).wrapping_add(*b as u64);
                    }
                    assert_eq!(sum.to_ne_bytes(), p[..8], "record {got} corrupted");
                    c.advance(&pk);
                    got += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
    }

    #[test]
    fn threads_stream_checksummed_records() {
        // One producer and one consumer thread on a small ring, so it wraps
        // constantly; every payload carries a checksum of its contents.
        let r = ring(16 * 1024);
        let view = r.view;
        struct SendView(RingView);
        // SAFETY: the test keeps `r` alive until both threads are joined.
        unsafe impl Send for SendView {}
        let pv = SendView(view);
        let n = 200_000u64;
        let producer = std::thread::spawn(move || {
            let pv = pv;
            let mut p = Producer::new(pv.0);
            let mut x: u64 = 99;
            let mut i = 0;
            while i < n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let len = 8 + (x % 700) as usize;
                let mut h = RecordHeader::new(RecordKind::First, Op::Send);
                h.payload_len = len as u32;
                h.total_len = len as u64;
                h.msg_seq = i;
                let seed = x;
                while !p.push(&h, |buf| fill_checked(seed, buf)) {
                    std::hint::spin_loop();
                }
                i += 1;
            }
        });
        consume_checked(view, n);
        producer.join().unwrap();
    }

    #[test]
    fn light_traffic_stays_in_the_warm_part() {
        let r = ring(1 << 20);
        let mut p = Producer::new(r.view);
        let mut c = Consumer::new(r.view);
        let base = r.view.data as usize;
        for i in 0..100_000u64 {
            let len = (i % 40) as u32;
            assert!(p.push_data(Op::Send, 0, len, 0, i, |b| b.fill(i as u8)));
            let pk = c.peek().unwrap().expect("record");
            assert_eq!(pk.header.msg_seq, i);
            assert!(pk.payload().iter().all(|&b| b == i as u8));
            let off = pk.payload().as_ptr() as usize - base;
            assert!(
                off < WARM_BYTES + 2 * LINE,
                "record {i} at offset {off}: the lap did not restart"
            );
            c.advance(&pk);
        }
    }

    #[test]
    fn bursts_and_pauses_keep_records_whole_and_in_order() {
        // Bursts fill the ring, pauses let it drain so early wraps happen
        // in between; every payload is checksummed.
        let r = ring(256 * 1024);
        let view = r.view;
        struct SendView(RingView);
        // SAFETY: the test keeps `r` alive until both threads are joined.
        unsafe impl Send for SendView {}
        let pv = SendView(view);
        let n = 40_000u64;
        let producer = std::thread::spawn(move || {
            let pv = pv;
            let mut p = Producer::new(pv.0);
            let mut x: u64 = 7;
            for i in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let len = if (i / 500) % 2 == 0 {
                    8 + (x % 16000)
                } else {
                    8 + (x % 40)
                } as usize;
                let seed = x;
                let fill = |buf: &mut [u8]| fill_checked(seed, buf);
                if i % 3 == 0 {
                    let mut h = RecordHeader::new(RecordKind::First, Op::Send);
                    h.payload_len = len as u32;
                    h.total_len = len as u64;
                    h.msg_seq = i;
                    while !p.push(&h, fill) {
                        std::hint::spin_loop();
                    }
                } else {
                    while !p.push_data(Op::Send, 0, len as u32, 0, i, fill) {
                        let mut h = RecordHeader::new(RecordKind::First, Op::Send);
                        h.payload_len = len as u32;
                        h.total_len = len as u64;
                        h.msg_seq = i;
                        if p.push(&h, fill) {
                            break;
                        }
                        std::hint::spin_loop();
                    }
                }
                if i % 97 == 0 {
                    // A pause: the consumer catches up.
                    while p.ring.ctl().head.load(Ordering::Acquire) != p.tail {
                        std::hint::spin_loop();
                    }
                }
            }
        });
        consume_checked(view, n);
        producer.join().unwrap();
    }

    #[test]
    fn refuses_when_full() {
        let r = ring(4096);
        let mut p = Producer::new(r.view);
        let mut h = RecordHeader::new(RecordKind::First, Op::Send);
        h.payload_len = 960;
        h.total_len = 960;
        let mut n = 0;
        while p.push(&h, |_| {}) {
            n += 1;
        }
        assert_eq!(n, 4);
        assert_eq!(p.room(), 0);
    }
}
