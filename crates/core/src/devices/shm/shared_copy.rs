//! One copy, two copiers: a large message that takes the CMA path is
//! moved by both processes at once, each copying disjoint pieces straight
//! from the sender's buffer into the posted one.
//!
//! The receiver, on reaching a CMA record, opens the slot of that ring
//! direction (one per direction in the connection's header page: the
//! receiver handles one message at a time) with its destination list, the
//! piece size and a fresh generation. Both sides then claim pieces from
//! one word holding (generation, next piece): the receiver pulls its
//! pieces with `process_vm_readv`, the sender — when it is running, in its
//! progress — pushes its pieces with `process_vm_writev`, and each adds the
//! bytes it moved to `done`. The receiver closes the slot once `done`
//! covers the whole message; until then its posted buffer stays in use
//! under its VI's lock, so nothing the sender writes can land after the
//! receive completed or after the memory was deregistered.
//!
//! A sender that is asleep or descheduled claims nothing and the receiver
//! copies everything itself, as the single-copier path did; one caught in
//! the middle of a piece delays the receiver by at most that piece. The
//! claim is a compare-and-swap on the generation and the index together,
//! so a sender that looked at an older transfer can never claim a piece
//! of a newer one.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::ranges::Range;

/// What this process's shared-memory channels did (for tests and
/// `viabench`: whether the two sides really share the copy, and how often
/// a slow ring sent a message by CMA instead).
static PULLED: AtomicU64 = AtomicU64::new(0);
static PUSHED: AtomicU64 = AtomicU64::new(0);
static DIVERTED: AtomicU64 = AtomicU64::new(0);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Pieces pulled as a receiver.
    pub pulled: u64,
    /// Pieces pushed as a sender.
    pub pushed: u64,
    /// Messages sent by CMA below `OPENVIA_CMA_MIN` because the receiver
    /// said the ring ran slow.
    pub diverted: u64,
}

pub fn stats() -> CopyStats {
    CopyStats {
        pulled: PULLED.load(Ordering::Relaxed),
        pushed: PUSHED.load(Ordering::Relaxed),
        diverted: DIVERTED.load(Ordering::Relaxed),
    }
}

/// Counts a piece moved by this process (`pushed`: as the sender).
pub fn count_piece(pushed: bool) {
    let c = if pushed { &PUSHED } else { &PULLED };
    c.fetch_add(1, Ordering::Relaxed);
}

/// Counts a message sent by CMA because the ring ran slow.
pub fn count_diverted() {
    DIVERTED.fetch_add(1, Ordering::Relaxed);
}

/// Bytes of one slot in the header page.
pub const SLOT_BYTES: usize = 1024;
const CLAIM: usize = 0;
const SEQ: usize = 1;
const TOTAL: usize = 2;
const PIECE: usize = 3;
const DONE: usize = 4;
const FAILED: usize = 5;
const N_DST: usize = 6;
/// Written by the receiver of this direction: 1 while the ring runs slow
/// (see `RingPace`), so the sender sends its larger messages by CMA.
const RING_SLOW: usize = 7;
const DST: usize = 8;
/// Most destination ranges a slot holds (a longer list is copied by the
/// receiver alone).
pub const MAX_DST: usize = (SLOT_BYTES / 8 - DST) / 2;

/// A view of one slot; valid while the connection region is mapped.
pub struct CopySlot {
    words: *const AtomicU64,
}

// SAFETY: the slot's words are atomics in a shared mapping that outlives
// the channel holding this view (the region is dropped after it).
unsafe impl Send for CopySlot {}

/// A transfer the slot announces, as the sender sees it.
pub struct OpenTransfer {
    claim: u64,
    pub seq: u64,
    pub total: u64,
    pub piece: u64,
    pub dst: Vec<Range>,
}

impl CopySlot {
    /// # Safety
    /// `base` points at `SLOT_BYTES` 8-byte aligned bytes of a shared
    /// mapping that outlives the view, touched only as atomics.
    pub unsafe fn new(base: *mut u8) -> Self {
        Self {
            words: base.cast::<AtomicU64>(),
        }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < SLOT_BYTES / 8);
        // SAFETY: inside the slot (see `new`).
        unsafe { &*self.words.add(i) }
    }

    /// Receiver: announces a transfer of `total` bytes into `dst` in pieces
    /// of `piece` bytes. False (nothing announced) when `dst` has more
    /// ranges than a slot holds.
    pub fn open(&self, gen: u32, seq: u64, total: u64, piece: u64, dst: &[Range]) -> bool {
        debug_assert!(gen != 0 && piece > 0);
        if dst.len() > MAX_DST {
            return false;
        }
        self.word(SEQ).store(seq, Ordering::Relaxed);
        self.word(TOTAL).store(total, Ordering::Relaxed);
        self.word(PIECE).store(piece, Ordering::Relaxed);
        self.word(DONE).store(0, Ordering::Relaxed);
        self.word(FAILED).store(0, Ordering::Relaxed);
        self.word(N_DST).store(dst.len() as u64, Ordering::Relaxed);
        for (i, r) in dst.iter().enumerate() {
            self.word(DST + 2 * i).store(r.addr, Ordering::Relaxed);
            self.word(DST + 2 * i + 1).store(r.len, Ordering::Relaxed);
        }
        // Everything above is visible to whoever sees the generation.
        self.word(CLAIM)
            .store((gen as u64) << 32, Ordering::Release);
        true
    }

    /// Whether a transfer is announced (a cheap look for `has_work`).
    #[inline]
    pub fn is_open(&self) -> bool {
        self.word(CLAIM).load(Ordering::Relaxed) >> 32 != 0
    }

    /// Sender: the transfer the slot announces now, if it has a piece
    /// left to claim. (A sender polls this while the receiver copies its
    /// last pieces: that look reads four words and allocates nothing.)
    pub fn peek(&self) -> Option<OpenTransfer> {
        let claim = self.word(CLAIM).load(Ordering::Acquire);
        if claim >> 32 == 0 {
            return None;
        }
        let total = self.word(TOTAL).load(Ordering::Relaxed);
        let piece = self.word(PIECE).load(Ordering::Relaxed);
        if claim & 0xffff_ffff >= pieces(total, piece) {
            return None;
        }
        let n = (self.word(N_DST).load(Ordering::Relaxed) as usize).min(MAX_DST);
        let dst = (0..n)
            .map(|i| Range {
                addr: self.word(DST + 2 * i).load(Ordering::Relaxed),
                len: self.word(DST + 2 * i + 1).load(Ordering::Relaxed),
            })
            .collect();
        Some(OpenTransfer {
            claim,
            seq: self.word(SEQ).load(Ordering::Relaxed),
            total,
            piece,
            dst,
        })
    }

    /// Claims the next piece of generation `gen` (of `pieces` in all):
    /// its index, or None when every piece is taken or the slot moved on.
    pub fn claim(&self, gen: u32, pieces: u64) -> Option<u64> {
        let w = self.word(CLAIM);
        let mut cur = w.load(Ordering::Acquire);
        loop {
            if cur >> 32 != gen as u64 {
                return None;
            }
            let next = cur & 0xffff_ffff;
            if next >= pieces {
                return None;
            }
            match w.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(next),
                Err(now) => cur = now,
            }
        }
    }

    /// Records a piece of `len` bytes as moved (or failed).
    pub fn finish_piece(&self, len: u64, ok: bool) {
        if !ok {
            self.word(FAILED).store(1, Ordering::Relaxed);
        }
        // Release: the piece's bytes come before the count that covers them.
        self.word(DONE).fetch_add(len, Ordering::Release);
    }

    /// Bytes moved so far by both sides.
    pub fn done(&self) -> u64 {
        self.word(DONE).load(Ordering::Acquire)
    }

    pub fn failed(&self) -> bool {
        self.word(FAILED).load(Ordering::Relaxed) != 0
    }

    /// Receiver: ends the transfer (no piece of it can be claimed after).
    pub fn close(&self) {
        self.word(CLAIM).store(0, Ordering::Release);
    }

    /// Receiver: tells the sender whether the ring runs slow.
    pub fn set_ring_slow(&self, slow: bool) {
        self.word(RING_SLOW).store(slow as u64, Ordering::Relaxed);
    }

    /// Sender: whether the receiver said the ring runs slow.
    #[inline]
    pub fn ring_slow(&self) -> bool {
        self.word(RING_SLOW).load(Ordering::Relaxed) != 0
    }
}

/// The receiver's judgement of how fast the ring moves larger messages.
///
/// The ring's two overlapped copies win only while the two processes'
/// cores share a cache: where a cache line takes long to cross (cores far
/// apart, a VM whose vCPUs moved, a peer descheduled mid-message) a message
/// crawls through it at a few GB/s while one shared CMA copy keeps its
/// speed (docs/shm.md, "Why the figures jump"). The receiver times each
/// message that streamed through the ring, from its first record to its
/// last byte placed; after `VOTES` slow ones in a row it tells the sender
/// to send by CMA, after `VOTES` fast ones it withdraws that. While CMA is
/// asked for, the sender still sends one message in `PROBE_EVERY` through
/// the ring, so the judgement follows the machine back.
pub struct RingPace {
    /// Bytes per µs below which a message counts as slow (0: never).
    slow_below: u64,
    /// Consecutive messages that contradicted the current judgement.
    against: u32,
    slow: bool,
}

/// Messages in a row that change the judgement.
const VOTES: u32 = 2;
/// While the ring is judged slow, one in this many diverted messages
/// still goes through the ring.
pub const PROBE_EVERY: u64 = 16;

impl RingPace {
    /// `slow_below_gbps`: GB/s below which a message counts as slow.
    pub fn new(slow_below_gbps: u64) -> Self {
        Self {
            slow_below: slow_below_gbps.saturating_mul(1000),
            against: 0,
            slow: false,
        }
    }

    /// Takes one message of `bytes` that took `ns`; returns the new
    /// judgement when it changed.
    pub fn observe(&mut self, bytes: u64, ns: u64) -> Option<bool> {
        if self.slow_below == 0 {
            return None;
        }
        // bytes per µs = GB/s × 1000
        let rate = bytes.saturating_mul(1000) / ns.max(1);
        let slow = rate < self.slow_below;
        if slow == self.slow {
            self.against = 0;
            return None;
        }
        self.against += 1;
        if self.against < VOTES {
            return None;
        }
        self.against = 0;
        self.slow = slow;
        Some(slow)
    }
}

impl OpenTransfer {
    /// The generation this view was taken at.
    pub fn gen(&self) -> u32 {
        (self.claim >> 32) as u32
    }

    /// Whether the sender may push pieces of this transfer for its message
    /// of `source_len` bytes: the slot is written by the other process, and
    /// a claim made on anything but the message sent would move the wrong
    /// bytes.
    pub fn matches(&self, source_len: u64) -> bool {
        self.piece != 0
            && self.total == source_len
            && self
                .dst
                .iter()
                .try_fold(0u64, |sum, r| sum.checked_add(r.len))
                .is_some_and(|room| room >= self.total)
    }

    /// (offset, length) of piece `i` (`i` below `pieces(total, piece)`).
    pub fn piece_at(&self, i: u64) -> (u64, u64) {
        let off = i * self.piece;
        (off, self.piece.min(self.total - off))
    }
}

/// Reads `data` as a slot's contents, as a sender would find them after
/// the other process wrote anything there, and claims what it offers:
/// nothing may panic, overflow or reach past the message. For the fuzz
/// target `shm_copy_slot` and the tests. Returns the pieces claimed.
pub fn fuzz_slot(data: &[u8], source_len: u64) -> u64 {
    let mem: Vec<AtomicU64> = (0..SLOT_BYTES / 8)
        .map(|i| {
            let mut w = [0u8; 8];
            for (k, b) in w.iter_mut().enumerate() {
                *b = data.get(i * 8 + k).copied().unwrap_or(0);
            }
            AtomicU64::new(u64::from_le_bytes(w))
        })
        .collect();
    // SAFETY: the vector holds SLOT_BYTES of atomics and outlives the view.
    let slot = unsafe { CopySlot::new(mem.as_ptr() as *mut u8) };
    let Some(t) = slot.peek() else {
        return 0;
    };
    assert!(t.dst.len() <= MAX_DST);
    if !t.matches(source_len) {
        return 0;
    }
    let n = pieces(t.total, t.piece);
    let mut claimed = 0;
    let mut covered = 0u64;
    while let Some(i) = slot.claim(t.gen(), n) {
        let (off, len) = t.piece_at(i);
        assert!(off + len <= t.total && len > 0);
        covered += len;
        claimed += 1;
    }
    // Claims start wherever the slot's index stood, so they cover at most
    // the message.
    assert!(covered <= t.total);
    claimed
}

/// Pieces a transfer of `total` bytes is cut into.
pub fn pieces(total: u64, piece: u64) -> u64 {
    total.div_ceil(piece.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_memory() -> Vec<AtomicU64> {
        (0..SLOT_BYTES / 8).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn claims_are_unique_and_end_with_the_generation() {
        let mem = slot_memory();
        // SAFETY: the vector holds SLOT_BYTES of atomics and outlives the view.
        let slot = unsafe { CopySlot::new(mem.as_ptr() as *mut u8) };
        assert!(slot.peek().is_none());
        let dst = [Range {
            addr: 4096,
            len: 10 << 20,
        }];
        assert!(slot.open(7, 3, 10 << 20, 1 << 20, &dst));
        let t = slot.peek().unwrap();
        assert_eq!(
            (t.gen(), t.seq, t.total, t.piece),
            (7, 3, 10 << 20, 1 << 20)
        );
        assert_eq!(t.dst, dst);
        let n = pieces(t.total, t.piece);
        assert_eq!(n, 10);
        let got: Vec<u64> = std::iter::from_fn(|| slot.claim(7, n)).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        // Open, but nothing left to claim: the sender's look ends there.
        assert!(slot.peek().is_none());
        // A stale generation claims nothing, even with pieces left.
        assert!(slot.open(8, 4, 4 << 20, 1 << 20, &dst));
        assert_eq!(slot.claim(7, n), None);
        assert_eq!(slot.claim(8, 4), Some(0));
        slot.close();
        assert_eq!(slot.claim(8, 4), None);
        assert!(slot.peek().is_none());
    }

    #[test]
    fn pace_changes_after_votes_in_a_row() {
        let mut p = RingPace::new(6);
        // 64 KiB in 2 µs: 32 GB/s; in 20 µs: 3.3 GB/s.
        let (fast, slow) = (2_000, 20_000);
        assert_eq!(p.observe(65_536, fast), None);
        assert_eq!(p.observe(65_536, slow), None);
        assert_eq!(
            p.observe(65_536, fast),
            None,
            "one slow message is not enough"
        );
        assert_eq!(p.observe(65_536, slow), None);
        assert_eq!(p.observe(65_536, slow), Some(true));
        assert_eq!(p.observe(65_536, slow), None);
        assert_eq!(p.observe(65_536, fast), None);
        assert_eq!(p.observe(65_536, fast), Some(false));
        let mut off = RingPace::new(0);
        assert_eq!(off.observe(65_536, u64::MAX), None);
        assert_eq!(off.observe(65_536, u64::MAX), None);
    }

    /// The fuzz target's body over deterministic pseudo-random slots (and
    /// slots that offer a whole message), so CI runs it too.
    #[test]
    fn hostile_slots_are_read_safely() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut claimed = 0;
        for round in 0..20_000 {
            let mut data = vec![0u8; SLOT_BYTES];
            for b in data.iter_mut() {
                *b = next() as u8;
            }
            // Often a plausible transfer: small counts, a matching total.
            let total = next() % (64 << 20) + 1;
            if round % 2 == 0 {
                let words: [u64; 7] = [
                    ((next() % 5) << 32) | (next() % 4),
                    next(),
                    total,
                    next() % (total + 2),
                    next(),
                    next() % 2,
                    next() % 4,
                ];
                for (i, w) in words.iter().enumerate() {
                    data[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
                }
                data[DST * 8 + 8..DST * 8 + 16].copy_from_slice(&total.to_le_bytes());
            }
            claimed += fuzz_slot(&data, total);
        }
        assert!(claimed > 0, "no slot offered anything to claim");
    }

    #[test]
    fn too_many_destination_ranges_are_refused() {
        let mem = slot_memory();
        // SAFETY: as above.
        let slot = unsafe { CopySlot::new(mem.as_ptr() as *mut u8) };
        let dst = vec![Range { addr: 0, len: 1 }; MAX_DST + 1];
        assert!(!slot.open(1, 1, dst.len() as u64, 1, &dst));
        assert!(slot.peek().is_none());
    }

    /// Two threads claim pieces of many transfers concurrently: every
    /// piece is taken exactly once and `done` adds up.
    #[test]
    fn concurrent_claims_cover_each_piece_once() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let mem: Arc<Vec<AtomicU64>> = Arc::new(slot_memory());
        let stop = Arc::new(AtomicBool::new(false));
        let helper = {
            let (mem, stop) = (mem.clone(), stop.clone());
            std::thread::spawn(move || {
                // SAFETY: as above; the Arc keeps the memory alive.
                let slot = unsafe { CopySlot::new(mem.as_ptr() as *mut u8) };
                let mut taken = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(t) = slot.peek() {
                        let n = pieces(t.total, t.piece);
                        while let Some(i) = slot.claim(t.gen(), n) {
                            let len = t.piece.min(t.total - i * t.piece);
                            slot.finish_piece(len, true);
                            taken += 1;
                        }
                    }
                }
                taken
            })
        };
        // SAFETY: as above.
        let slot = unsafe { CopySlot::new(mem.as_ptr() as *mut u8) };
        let dst = [Range {
            addr: 0,
            len: 1 << 30,
        }];
        let mut mine = 0u64;
        let mut all = 0u64;
        for gen in 1..=2000u32 {
            let total = 1000 + gen as u64 * 37;
            let piece = 64;
            assert!(slot.open(gen, gen as u64, total, piece, &dst));
            let n = pieces(total, piece);
            while let Some(i) = slot.claim(gen, n) {
                slot.finish_piece(piece.min(total - i * piece), true);
                mine += 1;
            }
            while slot.done() != total {
                std::hint::spin_loop();
            }
            assert!(!slot.failed());
            slot.close();
            all += n;
        }
        stop.store(true, Ordering::Relaxed);
        let theirs = helper.join().unwrap();
        assert_eq!(mine + theirs, all);
    }
}
