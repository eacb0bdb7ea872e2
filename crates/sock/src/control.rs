//! A connection's control page: one shared word per direction through
//! which writer and reader agree, without a system call, whether the
//! writer must ring the kernel doorbell for the message it just posted.
//!
//! The rule it keeps: outside the library's own calls, the program's
//! kernel socket holds a doorbell byte exactly while data is unread. So
//! poll/select/epoll on that socket stay correct for programs that never
//! call read, and a reader asleep in the kernel is woken. Only one byte
//! is ever outstanding per direction (`BELL`); the reader takes it when it
//! has used every message up.
//!
//! The saving: a reader blocked in read with nothing unread sets `TOKEN`
//! (with the room left in its buffer, `cap`) and spins. The writer's next
//! message, if it fits that room, takes the token instead of ringing: the
//! spinning reader picks it up and uses it up before it returns, so the
//! rule above still holds when it leaves. Before it sleeps the reader
//! takes its token back; if the writer took it first, a message is on its
//! way and the reader waits for it instead of sleeping. Every change is a
//! read-modify-write of the one word, so writer and reader cannot both
//! think the other will ring.
//!
//! After the page come the data rings, one per direction of `RING_BYTES`:
//! a writer copies a message's bytes (at most `SLOT_BYTES`) to the next
//! free place of its ring — right after the previous message, or at the
//! ring's start if it would not fit before the end — and the VI carries
//! only its length and place (8 bytes), so each byte is copied once into
//! shared memory and once out (as SDP's buffer-copy writes into the
//! peer's registered ring), and small messages lie packed, many to a
//! page. The reader publishes how many messages it has used up
//! (`consumed`); a writer whose ring is full sleeps on that word (a
//! futex) after raising `WAITING`.
//!
//! The whole is a memfd (4 KiB + 2 × 1 MiB, pages made as touched) made by the
//! acceptor and handed to the connector with the rendezvous answer
//! (`SCM_RIGHTS`, same user only); a forked child shares the mapping.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

const HEADER: usize = 4096;
/// Bytes of each direction's data ring.
pub const RING_BYTES: usize = 1 << 20;
const PAGE: usize = HEADER + 2 * RING_BYTES;
/// Offsets, within a direction's stride, of the consumed count and the
/// writer's waiting flag.
const CONSUMED: usize = 64;
const WAITING: usize = 68;
/// Bytes between the two directions' words (own cache lines).
const STRIDE: usize = 128;

/// A doorbell byte is in the kernel stream (or on its way there).
const BELL: u64 = 1;
/// The reader spins in read with nothing unread and room for `cap` bytes.
const TOKEN: u64 = 2;
/// The writer has shut down or closed: the reader must ask the kernel.
const SHUT: u64 = 4;
const CAP_SHIFT: u32 = 8;
const CAP_MASK: u64 = 0x00ff_ffff << CAP_SHIFT;
const POSTED_SHIFT: u32 = 32;

fn posted(s: u64) -> u32 {
    (s >> POSTED_SHIFT) as u32
}

fn cap(s: u64) -> usize {
    ((s & CAP_MASK) >> CAP_SHIFT) as usize
}

/// Which direction a side writes: the connector's writes are direction 0.
#[derive(Clone, Copy)]
pub enum Side {
    Connector,
    Acceptor,
}

pub struct Control {
    base: *mut u8,
}

// SAFETY: the page is only accessed through atomics.
unsafe impl Send for Control {}
// SAFETY: as above.
unsafe impl Sync for Control {}

impl Control {
    /// A fresh page and its memfd (the caller hands the fd on, then closes it).
    pub fn create() -> Option<(Control, RawFd)> {
        // SAFETY: a NUL-terminated name; the flags are valid.
        let fd = unsafe { libc::memfd_create(c"viarun-control".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: sizing the memfd just made.
        if unsafe { libc::ftruncate(fd, PAGE as libc::off_t) } != 0 {
            // SAFETY: closing the memfd just made.
            unsafe { libc::close(fd) };
            return None;
        }
        match Control::map(fd) {
            Some(c) => Some((c, fd)),
            None => {
                // SAFETY: as above.
                unsafe { libc::close(fd) };
                None
            }
        }
    }

    /// Maps a page received from the peer (checked to be of our size).
    pub fn map(fd: RawFd) -> Option<Control> {
        // SAFETY: fstat into our own struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_size != PAGE as libc::off_t {
            return None;
        }
        // SAFETY: a shared mapping of the whole (checked) file; owned by
        // the Control until Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        (p != libc::MAP_FAILED).then(|| Control { base: p.cast() })
    }

    fn word32(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: as in `word`; every offset used is 4-aligned, in the header.
        unsafe { &*(self.base.add(offset) as *const AtomicU32) }
    }

    /// The data ring `writer` writes into (RING_BYTES long).
    pub fn ring(&self, writer: Side) -> *mut u8 {
        // SAFETY: within the mapping: HEADER + dir * RING_BYTES, dir ≤ 1.
        unsafe { self.base.add(HEADER + tx_index(writer) * RING_BYTES) }
    }

    /// Messages of `writer`'s direction the reader has used up.
    pub fn consumed(&self, writer: Side) -> u32 {
        self.word32(tx_index(writer) * STRIDE + CONSUMED)
            .load(Ordering::Acquire)
    }

    /// Reader: one more message of `writer`'s direction used up; wakes the
    /// writer if it sleeps for room.
    pub fn used_up(&self, writer: Side) {
        let base = tx_index(writer) * STRIDE;
        let consumed = self.word32(base + CONSUMED);
        consumed.fetch_add(1, Ordering::SeqCst);
        if self.word32(base + WAITING).swap(0, Ordering::SeqCst) != 0 {
            futex(consumed, libc::FUTEX_WAKE, i32::MAX as u32, None);
        }
    }

    /// Writer that found its ring full with `seen` used up: sleeps
    /// (at most `limit`) until the reader uses one more up.
    pub fn wait_for_room(&self, writer: Side, seen: u32, limit: Duration) {
        let base = tx_index(writer) * STRIDE;
        let consumed = self.word32(base + CONSUMED);
        self.word32(base + WAITING).store(1, Ordering::SeqCst);
        if consumed.load(Ordering::SeqCst) == seen {
            futex(consumed, libc::FUTEX_WAIT, seen, Some(limit));
        }
    }

    fn word(&self, dir: usize) -> &AtomicU64 {
        // SAFETY: the page is PAGE bytes, mapped for our lifetime, and the
        // word is 8-aligned inside it; it is only accessed atomically.
        unsafe { &*(self.base.add(dir * STRIDE) as *const AtomicU64) }
    }

    /// The word this side writes into.
    pub fn tx(&self, side: Side) -> Direction<'_> {
        Direction(self.word(tx_index(side)))
    }

    /// The word this side reads from.
    pub fn rx(&self, side: Side) -> Direction<'_> {
        Direction(self.word(1 - tx_index(side)))
    }
}

fn tx_index(side: Side) -> usize {
    match side {
        Side::Connector => 0,
        Side::Acceptor => 1,
    }
}

/// The other end.
pub fn peer_of(side: Side) -> Side {
    match side {
        Side::Connector => Side::Acceptor,
        Side::Acceptor => Side::Connector,
    }
}

/// A shared (not process-private) futex call on `word`.
fn futex(word: &AtomicU32, op: i32, val: u32, limit: Option<Duration>) {
    let ts = limit.map(|d| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: a futex call on a 4-aligned word of the shared mapping,
    // with a timespec that lives across the call.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), op, val, tsp, 0, 0) };
}

impl Drop for Control {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `map`.
        unsafe { libc::munmap(self.base.cast(), PAGE) };
    }
}

/// What the reader sees of one direction.
pub struct Seen {
    pub posted: u32,
    pub bell: bool,
    pub token: bool,
    pub shut: bool,
}

/// One direction's word.
pub struct Direction<'a>(&'a AtomicU64);

impl Direction<'_> {
    fn update(&self, f: impl Fn(u64) -> Option<u64>) -> Result<u64, u64> {
        self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, f)
    }

    /// Writer, after posting a message of `len` bytes: whether it must
    /// ring the doorbell (one byte on the kernel socket).
    pub fn announce(&self, len: usize) -> bool {
        let old = self
            .update(|s| {
                let mut n = s.wrapping_add(1 << POSTED_SHIFT) & !(TOKEN | CAP_MASK);
                if !(s & TOKEN != 0 && len <= cap(s)) {
                    n |= BELL;
                }
                Some(n)
            })
            .unwrap_or_else(|s| s);
        let took_token = old & TOKEN != 0 && len <= cap(old);
        !took_token && old & BELL == 0
    }

    /// Writer: from now on the reader asks the kernel (FIN or close).
    pub fn shut(&self) {
        self.0.fetch_or(SHUT, Ordering::AcqRel);
    }

    pub fn seen(&self) -> Seen {
        let s = self.0.load(Ordering::Acquire);
        Seen {
            posted: posted(s),
            bell: s & BELL != 0,
            token: s & TOKEN != 0,
            shut: s & SHUT != 0,
        }
    }

    /// Reader with `consumed` messages used up and room for `room` bytes:
    /// sets its token if nothing is unread and no doorbell is out.
    pub fn offer_token(&self, consumed: u32, room: usize) -> bool {
        let room = room.min((CAP_MASK >> CAP_SHIFT) as usize) as u64;
        self.update(|s| {
            (posted(s) == consumed && s & (BELL | TOKEN) == 0)
                .then_some(s | TOKEN | (room << CAP_SHIFT))
        })
        .is_ok()
    }

    /// Reader: takes its token back. True if it was still there (no
    /// message took it); false if the writer took it (a message is coming).
    pub fn revoke_token(&self) -> bool {
        self.update(|s| (s & TOKEN != 0).then_some(s & !(TOKEN | CAP_MASK)))
            .is_ok()
    }

    /// Reader that has used up every message (`consumed`): clears the
    /// doorbell flag if it is set and nothing new came. True when the
    /// caller must now take the doorbell byte from the kernel socket.
    pub fn clear_bell(&self, consumed: u32) -> bool {
        self.update(|s| (posted(s) == consumed && s & BELL != 0).then_some(s & !BELL))
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Control {
        let (c, fd) = Control::create().expect("memfd");
        // SAFETY: closing the memfd the test just made.
        unsafe { libc::close(fd) };
        c
    }

    #[test]
    fn rings_once_until_the_reader_drains() {
        let c = page();
        let (w, r) = (c.tx(Side::Connector), c.rx(Side::Acceptor));
        assert!(w.announce(10), "first message rings");
        assert!(!w.announce(10), "a second while the bell is out does not");
        assert!(!r.clear_bell(1), "one message still unread");
        assert!(r.clear_bell(2));
        assert!(w.announce(10), "after the reader took the bell, ring again");
    }

    #[test]
    fn token_saves_the_bell_only_for_a_message_that_fits() {
        let c = page();
        let (w, r) = (c.tx(Side::Acceptor), c.rx(Side::Connector));
        assert!(r.offer_token(0, 100));
        assert!(!w.announce(100), "fits: the spinning reader takes it");
        assert!(!r.revoke_token(), "the writer took the token");
        assert!(w.announce(1), "the next one rings");
        assert!(!r.offer_token(1, 100), "unread data: no token");
        assert!(r.clear_bell(2));
        assert!(r.offer_token(2, 100));
        assert!(w.announce(101), "too big for the reader's room: ring");
        assert!(!r.revoke_token());
        assert!(r.seen().bell);
    }

    #[test]
    fn revoked_token_means_the_writer_rings() {
        let c = page();
        let (w, r) = (c.tx(Side::Connector), c.rx(Side::Acceptor));
        assert!(r.offer_token(0, 100));
        assert!(r.revoke_token());
        assert!(w.announce(1));
    }

    #[test]
    fn racing_writer_and_reader_never_lose_a_wakeup() {
        // Whenever more is unread than the one message a taken token
        // covers, the bell is out: a reader leaving then stays readable.
        let c = std::sync::Arc::new(page());
        let n = 200_000u32;
        let w = {
            let c = c.clone();
            std::thread::spawn(move || (0..n).filter(|_| c.tx(Side::Connector).announce(1)).count())
        };
        let r = c.rx(Side::Acceptor);
        let (mut consumed, mut bells_taken, mut unbelled) = (0u32, 0usize, 0u32);
        while consumed < n {
            let s = r.seen();
            if s.posted != consumed {
                assert!(
                    s.bell || s.posted.wrapping_sub(consumed) <= unbelled,
                    "unread without a bell"
                );
                consumed += 1;
                unbelled = unbelled.saturating_sub(1);
                continue;
            }
            if r.clear_bell(consumed) {
                bells_taken += 1;
                continue;
            }
            if r.offer_token(consumed, 1) {
                while r.seen().token {
                    std::hint::spin_loop();
                }
                if !r.revoke_token() && r.seen().posted != consumed {
                    unbelled = 1;
                }
            }
        }
        let rings = w.join().expect("writer");
        if r.clear_bell(n) {
            bells_taken += 1;
        }
        assert_eq!(rings, bells_taken, "every ring is taken once");
        assert!(!r.seen().bell);
    }
}
