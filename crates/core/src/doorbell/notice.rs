//! The notice ring: how a peer tells a NIC *which* VI it just gave work.
//!
//! A completion queue must not find its completions by looking at every
//! VI (that costs a cache miss per connection per poll). So, as a hardware
//! NIC writes CQ entries, the side that makes progress possible writes a
//! notice: after publishing a record (or a consumed count the other side
//! waits on) it pushes the receiving VI's *notice key* into the receiving
//! NIC's notice ring, which lives in the NIC's doorbell region that every
//! peer maps. A CQ poller pops keys and drives only the VIs they name.
//!
//! The ring is a bounded many-producer, many-consumer queue whose slots
//! are single words: the high half is a stamp (position + 1, so a slot
//! from an earlier lap never matches), the low half the key, and one
//! release store publishes both. As in the record rings, the consumer
//! writes nothing a producer reads per notice: producers claim positions
//! on `tail` (their own line), consumers on `head` (theirs), and a
//! producer looks at `head` only when its cached copy says the ring is
//! full. Producers are other processes, so nothing they write is trusted:
//! a key is only looked up, every loop is bounded, and a slot claimed but
//! never written (a producer killed in between) is skipped once it has
//! held the ring up for a while (`unstick`). A full ring sets `overflow`,
//! and the next poller drives every VI with a CQ once instead: notices can
//! be late, never lost.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Slots of the ring (a power of two).
pub const SLOTS: usize = 4096;
/// Bytes from the ring's control lines to the end of its slots.
pub const RING_BYTES: usize = 3 * 64 + SLOTS * 8;
/// Tries before a push or pop gives up (others keep winning the race).
const RETRIES: u32 = 64;

/// Control words, each on its own cache line; slots follow.
#[repr(C, align(64))]
pub struct NoticeCtl {
    tail: AtomicU64,
    _p0: [u64; 7],
    head: AtomicU64,
    _p1: [u64; 7],
    overflow: AtomicU32,
}

/// A notice ring inside a shared mapping.
#[derive(Clone, Copy)]
pub struct NoticeRing {
    ctl: *const NoticeCtl,
    slots: *const AtomicU64,
}

// SAFETY: the ring points into a shared mapping its owner keeps alive; all
// access goes through atomics.
unsafe impl Send for NoticeRing {}
// SAFETY: as above; every method takes &self and uses atomics only.
unsafe impl Sync for NoticeRing {}

fn stamp_of(slot: u64) -> u32 {
    (slot >> 32) as u32
}

fn slot_word(pos: u64, key: u32) -> u64 {
    ((pos.wrapping_add(1) as u32 as u64) << 32) | key as u64
}

impl NoticeRing {
    /// A view of the ring at `base` (64-byte aligned, `RING_BYTES` long,
    /// zeroed or written by a ring before).
    ///
    /// # Safety
    /// `base` must point to `RING_BYTES` bytes of a mapping that outlives
    /// every copy of the returned value.
    pub unsafe fn at(base: *mut u8) -> Self {
        debug_assert!((base as usize).is_multiple_of(64));
        Self {
            ctl: base as *const NoticeCtl,
            // SAFETY: the slots start after the three control lines, inside
            // the caller's RING_BYTES.
            slots: unsafe { base.add(3 * 64) } as *const AtomicU64,
        }
    }

    fn ctl(&self) -> &NoticeCtl {
        // SAFETY: `at`'s contract: a live mapping of RING_BYTES.
        unsafe { &*self.ctl }
    }

    fn slot(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: the index is masked into the SLOTS words after the
        // control lines; 8-byte aligned.
        unsafe { &*self.slots.add(pos as usize & (SLOTS - 1)) }
    }

    /// Appends `key`; on a full ring sets the overflow flag instead (the
    /// reader then looks at every VI). `cached_head` is the producer's
    /// private copy of the consumers' position.
    #[inline]
    pub fn push(&self, key: u32, cached_head: &mut u64) {
        let ctl = self.ctl();
        for _ in 0..RETRIES {
            let pos = ctl.tail.load(Ordering::Relaxed);
            // Signed: a head read after `pos` may have passed it (others
            // pushed and popped meanwhile); then the CAS below fails and
            // the loop rereads, rather than calling the ring full.
            if pos.wrapping_sub(*cached_head) as i64 >= SLOTS as i64 {
                *cached_head = ctl.head.load(Ordering::Acquire);
                if pos.wrapping_sub(*cached_head) as i64 >= SLOTS as i64 {
                    break;
                }
            }
            if ctl
                .tail
                .compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                self.slot(pos).store(slot_word(pos, key), Ordering::Release);
                return;
            }
        }
        self.set_overflow();
    }

    #[cold]
    fn set_overflow(&self) {
        if self.ctl().overflow.load(Ordering::Relaxed) == 0 {
            self.ctl().overflow.store(1, Ordering::Release);
        }
    }

    /// Whether a notice (or an overflow) may be waiting: the head slot's
    /// line and the flag.
    #[inline]
    pub fn ready(&self) -> bool {
        let head = self.ctl().head.load(Ordering::Relaxed);
        stamp_of(self.slot(head).load(Ordering::Acquire)) == head.wrapping_add(1) as u32
            || self.ctl().overflow.load(Ordering::Relaxed) != 0
    }

    /// Takes the oldest key, if any.
    #[inline]
    pub fn pop(&self) -> Option<u32> {
        let ctl = self.ctl();
        for _ in 0..RETRIES {
            let head = ctl.head.load(Ordering::Acquire);
            let word = self.slot(head).load(Ordering::Acquire);
            if stamp_of(word) != head.wrapping_add(1) as u32 {
                return None;
            }
            // Producers cannot reuse the slot before head moves past it,
            // so winning the race for `head` means `word` is ours.
            if ctl
                .head
                .compare_exchange_weak(
                    head,
                    head.wrapping_add(1),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return Some(word as u32);
            }
        }
        None
    }

    /// Notices pushed so far (tests).
    #[cfg(test)]
    pub fn pushed(&self) -> u64 {
        self.ctl().tail.load(Ordering::Relaxed)
    }

    /// Whether notices were dropped since the last call (clears the flag).
    pub fn take_overflow(&self) -> bool {
        let o = &self.ctl().overflow;
        o.load(Ordering::Relaxed) != 0 && o.swap(0, Ordering::Acquire) != 0
    }

    /// Called now and then by an idle consumer with the head it saw last
    /// time: a slot claimed but still unwritten at the same head since
    /// then (its producer died or was preempted for that long) is skipped,
    /// with the overflow flag set so nothing it stood for is missed.
    pub fn unstick(&self, last_head: &mut u64) {
        let ctl = self.ctl();
        let head = ctl.head.load(Ordering::Acquire);
        let stuck = head == *last_head
            && ctl.tail.load(Ordering::Relaxed) != head
            && stamp_of(self.slot(head).load(Ordering::Acquire)) != head.wrapping_add(1) as u32;
        if stuck
            && ctl
                .head
                .compare_exchange(
                    head,
                    head.wrapping_add(1),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            self.set_overflow();
        }
        *last_head = ctl.head.load(Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    struct Mem {
        _buf: Vec<u64>,
        ring: NoticeRing,
    }

    fn ring() -> Mem {
        let mut buf = vec![0u64; RING_BYTES / 8 + 16];
        let base = (buf.as_mut_ptr() as usize).next_multiple_of(64) as *mut u8;
        // SAFETY: `buf` holds RING_BYTES from the aligned base and lives
        // as long as `Mem`.
        let ring = unsafe { NoticeRing::at(base) };
        Mem { _buf: buf, ring }
    }

    #[test]
    fn keys_come_out_in_order_and_full_sets_overflow() {
        let m = ring();
        let mut cached = 0;
        for round in 0..3u32 {
            for k in 0..SLOTS as u32 {
                m.ring.push(round * 100_000 + k + 1, &mut cached);
            }
            assert!(!m.ring.take_overflow());
            m.ring.push(7, &mut cached);
            assert!(m.ring.take_overflow(), "a push into a full ring is flagged");
            for k in 0..SLOTS as u32 {
                assert_eq!(m.ring.pop(), Some(round * 100_000 + k + 1));
            }
            assert_eq!(m.ring.pop(), None);
        }
    }

    #[test]
    fn a_claimed_but_unwritten_slot_is_skipped_when_stuck() {
        let m = ring();
        let mut cached = 0;
        // A producer claims position 0 and dies before writing it.
        m.ring.ctl().tail.store(1, Ordering::Relaxed);
        m.ring.push(5, &mut cached);
        assert_eq!(m.ring.pop(), None, "position 0 holds the ring up");
        let mut last = u64::MAX;
        m.ring.unstick(&mut last);
        assert_eq!(m.ring.pop(), None, "not skipped at the first look");
        m.ring.unstick(&mut last);
        assert!(m.ring.take_overflow(), "skipping sets the overflow flag");
        assert_eq!(m.ring.pop(), Some(5));
        m.ring.unstick(&mut last);
        m.ring.unstick(&mut last);
        assert!(!m.ring.take_overflow(), "an empty ring is not stuck");
    }

    #[test]
    fn hostile_slots_and_words_never_loop() {
        let m = ring();
        let mut cached = 0;
        let mut x: u64 = 0x9e37_79b9;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            m.ring.slot(x).store(x.rotate_left(17), Ordering::Relaxed);
            if x.is_multiple_of(7) {
                m.ring.ctl().head.store(x >> 3, Ordering::Relaxed);
            }
            if x.is_multiple_of(11) {
                m.ring.ctl().tail.store(x >> 5, Ordering::Relaxed);
            }
            m.ring.push(x as u32, &mut cached);
            let _ = m.ring.pop();
            let _ = m.ring.ready();
        }
    }

    /// Producers on several threads, consumers on several threads: every
    /// key is seen exactly once, and each producer's keys in its order.
    #[test]
    fn threads_deliver_every_key_once_in_order() {
        const PRODUCERS: u32 = 3;
        const PER: u32 = 200_000;
        let m = Arc::new(ring());
        struct Shared(Arc<Mem>);
        // SAFETY: the ring is only touched through atomics.
        unsafe impl Send for Shared {}
        unsafe impl Sync for Shared {}
        let done = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let s = Shared(m.clone());
                std::thread::spawn(move || {
                    let s = s;
                    let mut i = 0;
                    let mut cached = 0;
                    while i < PER {
                        // Push only when there is room, so none overflow:
                        // the test checks delivery, not the fallback.
                        if !s.0.ring.take_overflow() {
                            s.0.ring.push(p << 24 | (i + 1), &mut cached);
                            i += 1;
                        } else {
                            panic!("overflow with at most 3 × 64 in flight");
                        }
                        // Head first: a tail read later is never behind it,
                        // while a head read after the tail may have passed it.
                        loop {
                            let head = s.0.ring.ctl().head.load(Ordering::Acquire);
                            let tail = s.0.ring.ctl().tail.load(Ordering::Acquire);
                            if tail.wrapping_sub(head) <= 64 {
                                break;
                            }
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let s = Shared(m.clone());
                let done = done.clone();
                std::thread::spawn(move || {
                    let s = s;
                    let mut seen = Vec::new();
                    loop {
                        match s.0.ring.pop() {
                            Some(k) => seen.push(k),
                            None if done.load(Ordering::Acquire) && !s.0.ring.ready() => break,
                            None => std::hint::spin_loop(),
                        }
                    }
                    seen
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        done.store(true, Ordering::Release);
        let mut all = Vec::new();
        for c in consumers {
            let seen = c.join().unwrap();
            // Within one consumer, a producer's keys rise.
            let mut mine = [0u32; PRODUCERS as usize];
            for k in &seen {
                let (p, i) = ((k >> 24) as usize, k & 0xff_ffff);
                assert!(i > mine[p], "producer {p}: key {i} after {}", mine[p]);
                mine[p] = i;
            }
            all.extend(seen);
        }
        let total = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), total, "a key delivered twice");
        assert_eq!(total, (PRODUCERS * PER) as usize, "a key lost");
    }
}
