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
//! think the other will ring. A waiter in epoll, poll or select may leave
//! its token standing after it returns (`spinwait::report`): a message
//! that takes such a token sets `UNRUNG` until the reader has used every
//! message up, and its writer rings late for it if the reader stops
//! looking (`unrung`).
//!
//! After the page come the data rings, one per direction of `RING_BYTES`:
//! a writer copies a message's bytes (at most `SLOT_BYTES`) to the next
//! free place of its ring — right after the previous message, or at the
//! ring's start if it would not fit before the end or if nothing is
//! unread (`link/tx.rs`) — and the VI carries
//! only its length and place (8 bytes), so each byte is copied once into
//! shared memory and once out (as SDP's buffer-copy writes into the
//! peer's registered ring), and small messages lie packed, many to a
//! page. The reader publishes how many messages it has used up
//! (`consumed`); a writer whose ring is full sleeps on that word (a
//! futex) after raising `WAITING`.
//!
//! The whole is a memfd (8 KiB + 2 × 1 MiB, pages made as touched) made by the
//! acceptor and handed to the connector with the rendezvous answer
//! (`SCM_RIGHTS`, same user only); a forked child shares the mapping.
//!
//! Handing the stream back to the kernel (`switched`): each message's
//! place and length also go into a table on the page, so any process that
//! maps it — a forked child, a program exec'd on the socket — can read
//! what is still unread without the VI, under a lock word shared by every
//! process of the reading side. The word's `SWITCH` stops new messages,
//! and `CLAIM`/`RAW` make one process of the writing side put the switch
//! byte `S` into the kernel stream after its last doorbell (`WRITING`
//! covers a doorbell on its way).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::process::alive;

/// The words (first 4 KiB), then the message tables (one per direction).
const HEADER: usize = 8192;
const TABLES: usize = 4096;
/// Entries of a direction's message table: a writer never has more
/// messages unread than this.
pub const TABLE_LEN: u32 = 256;
/// Bytes of each direction's data ring.
pub const RING_BYTES: usize = 1 << 20;
const PAGE: usize = HEADER + 2 * RING_BYTES;
/// Offsets, within a direction's stride, of the consumed count and the
/// writer's waiting flag.
const CONSUMED: usize = 64;
const WAITING: usize = 68;
/// The reading side's own cache line per direction (only readers touch
/// it, so taking its lock costs a reader no transfer): the lock (the pid
/// holding it, 0 for none), the bytes taken of the first unread message,
/// and whether the switch byte was read off the kernel.
const READER_LINES: usize = 1024;
const READ_LOCK: usize = 0;
const TAKEN: usize = 4;
const RAW_READ: usize = 8;
/// When a process of the reading side last looked at this direction in a
/// wait (CLOCK_MONOTONIC, µs; stamped at most every `LOOK_STAMP_US`).
const LOOKED: usize = 16;
/// Bytes between the two directions' words (own cache lines).
const STRIDE: usize = 128;
/// Each side's hello word (`say_hello`, `go_bare`), a cache line apiece.
const HELLOS: usize = 2048;
/// The side said (or is saying) its hello on the kernel stream.
const HELLO_SAID: u32 = 1;
/// A process of the side went bare (exec'd a program without the
/// library) before the side said hello: it never will.
const HELLO_BARE: u32 = 2;
/// The other side went bare: this side must not say hello.
const HELLO_BARRED: u32 = 4;
/// Within a side's hello line: its reader asks it to send again, raw
/// after its switch byte, what the reader did not use up (`ask_rewind`).
const REWIND: usize = 4;
/// Within the acceptor's hello line: its VI listener is up, so the
/// connector may ask (`listening_word`).
const LISTENING: usize = 8;
/// Within a side's hello line: the pid of the side's process that uses
/// the connection (the acceptor's is first the one that made the page).
const USER_PID: usize = 12;
/// Within a side's hello line: the VI pair it offers to take up again
/// (`link::reuse`).
const REUSE_OFFER: usize = 24;
/// Within the acceptor's hello line: where the ends stand on the offer.
const REUSE_STATE: usize = 16;
/// `listening_word`: the acceptor's VI listener is up.
pub const LISTENING_FRESH: u32 = 1;

/// A doorbell byte is in the kernel stream (or on its way there).
const BELL: u64 = 1;
/// The reader spins in read with nothing unread and room for `cap` bytes.
const TOKEN: u64 = 2;
/// The writer has shut down or closed: the reader must ask the kernel.
const SHUT: u64 = 4;
/// The stream goes back to the kernel: no new message in this direction.
const SWITCH: u64 = 8;
/// The switch byte is in the kernel stream: raw writes may follow it.
const RAW: u64 = 16;
/// A process of the writing side is sending the switch byte.
const CLAIM: u64 = 32;
/// A writer rang and its doorbell byte is on its way.
const WRITING: u64 = 64;
/// A message took the reader's token (no doorbell), and the reader has
/// not used every message up since: the writer may ring late for it
/// (`ring_late`).
const UNRUNG: u64 = 128;
/// The byte that ends the doorbells in a kernel stream.
pub const SWITCH_BYTE: u8 = b'S';
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
    /// A close-on-exec copy of the memfd, kept until the connection's
    /// exec record takes it (`take_fd`); -1 for none.
    fd: AtomicI32,
    /// This process's: a message of ours took the reader's token and the
    /// connection is in `unrung`'s list (so that it is listed once).
    pub(crate) noted: std::sync::atomic::AtomicBool,
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
        let p = crate::kernel::map_memfd(fd, PAGE)?;
        Some(Control {
            base: p,
            fd: AtomicI32::new(keep_copy(fd)),
            noted: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The kept copy of the memfd, now the caller's to close (None if
    /// none was kept or it was taken).
    pub fn take_fd(&self) -> Option<RawFd> {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        (fd >= 0).then_some(fd)
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

    fn entry(&self, writer: Side, index: u32) -> &AtomicU64 {
        let at =
            TABLES + tx_index(writer) * (TABLE_LEN as usize * 8) + (index % TABLE_LEN) as usize * 8;
        // SAFETY: inside the header's table part, 8-aligned; atomics only.
        unsafe { &*(self.base.add(at) as *const AtomicU64) }
    }

    /// Writer, before announcing its message number `index`: where it
    /// lies in the ring, so a process without the VI can read it.
    pub fn set_entry(&self, writer: Side, index: u32, place: usize, len: usize) {
        let v = ((place as u64) << 32) | len as u64;
        self.entry(writer, index).store(v, Ordering::Release);
    }

    /// The (place, length) the writer put for message `index`, unchecked.
    pub fn entry_of(&self, writer: Side, index: u32) -> (usize, usize) {
        let v = self.entry(writer, index).load(Ordering::Acquire);
        ((v >> 32) as usize, (v & 0xffff_ffff) as usize)
    }

    /// Reader: bytes already taken of the first unread message.
    pub fn taken(&self, writer: Side) -> u32 {
        self.word32(READER_LINES + tx_index(writer) * 64 + TAKEN)
            .load(Ordering::Acquire)
    }

    pub fn set_taken(&self, writer: Side, n: u32) {
        self.word32(READER_LINES + tx_index(writer) * 64 + TAKEN)
            .store(n, Ordering::Release);
    }

    /// Reader after a switch: messages used up are `consumed` now.
    pub fn set_consumed(&self, writer: Side, consumed: u32) {
        self.word32(tx_index(writer) * STRIDE + CONSUMED)
            .store(consumed, Ordering::SeqCst);
    }

    /// Reader in a wait: stamps `writer`'s direction as looked at, at
    /// `now_us` (`spinwait::now_us`), so that its writer rings no late
    /// doorbell while the reader goes on looking (`unrung`).
    pub fn set_looked(&self, writer: Side, now_us: u64) {
        self.word64(READER_LINES + tx_index(writer) * 64 + LOOKED)
            .store(now_us, Ordering::Release);
    }

    /// When a reader last looked at `writer`'s direction (µs, 0: never).
    pub fn looked(&self, writer: Side) -> u64 {
        self.word64(READER_LINES + tx_index(writer) * 64 + LOOKED)
            .load(Ordering::Acquire)
    }

    fn word64(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: as in `word`; the offset is 8-aligned, in the header.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    /// Whether the switch byte of `writer`'s stream was read.
    pub fn raw_read(&self, writer: Side) -> bool {
        self.word32(READER_LINES + tx_index(writer) * 64 + RAW_READ)
            .load(Ordering::Acquire)
            != 0
    }

    pub fn set_raw_read(&self, writer: Side) {
        self.word32(READER_LINES + tx_index(writer) * 64 + RAW_READ)
            .store(1, Ordering::Release);
    }

    /// The reading side's lock on `writer`'s direction, shared by every
    /// process that reads the connection: taken around each read that
    /// uses messages up, so two processes never take the same bytes.
    /// Waits while another live process holds it; `nonblocking`: gives up
    /// (None) after about 200 µs.
    pub fn lock_reader(&self, writer: Side, nonblocking: bool) -> Option<ReaderLock<'_>> {
        let word = self.word32(READER_LINES + tx_index(writer) * 64 + READ_LOCK);
        let me = crate::process::id();
        let start = std::time::Instant::now();
        let mut turns = 0u32;
        loop {
            let holder = word.load(Ordering::Acquire);
            let free = holder == 0 || (turns % 1024 == 1023 && !alive(holder));
            if free
                && word
                    .compare_exchange(holder, me, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return Some(ReaderLock(word));
            }
            turns = turns.wrapping_add(1);
            if turns < 64 {
                std::hint::spin_loop();
                continue;
            }
            if nonblocking && start.elapsed() > Duration::from_micros(200) {
                return None;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Wakes every writer asleep for room (a switch: they must look).
    pub fn wake_writers(&self) {
        for dir in 0..2 {
            futex(
                self.word32(dir * STRIDE + CONSUMED),
                libc::FUTEX_WAKE,
                i32::MAX as u32,
                None,
            );
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

    fn hello_word(&self, side: Side) -> &AtomicU32 {
        self.word32(HELLOS + tx_index(side) * 64)
    }

    /// Set by the acceptor once its VI listener is up (futex-woken): the
    /// connector sleeps on it instead of asking again and again while the
    /// acceptor has not come to its first use (`link::meet`).
    pub fn listening_word(&self) -> &AtomicU32 {
        self.word32(HELLOS + tx_index(Side::Acceptor) * 64 + LISTENING)
    }

    /// `side`'s process that uses the connection (0: not known yet).
    pub fn user_pid(&self, side: Side) -> u32 {
        self.word32(HELLOS + tx_index(side) * 64 + USER_PID)
            .load(Ordering::Acquire)
    }

    /// Process `pid` uses the connection on `side` (or, before either
    /// end's first use, answered or asked for it).
    pub fn note_user(&self, side: Side, pid: u32) {
        self.word32(HELLOS + tx_index(side) * 64 + USER_PID)
            .store(pid, Ordering::Release);
    }

    /// The VI pair `side` offers to take up again (`link::reuse`).
    pub fn reuse_offer(&self, side: Side) -> &AtomicU64 {
        self.word64(HELLOS + tx_index(side) * 64 + REUSE_OFFER)
    }

    /// Where the two ends stand on taking a kept VI up (`link::reuse`).
    pub fn reuse_word(&self) -> &AtomicU32 {
        self.word32(HELLOS + tx_index(Side::Acceptor) * 64 + REUSE_STATE)
    }

    /// Before `side` says hello at its first use: false if a process of
    /// either side went bare first, and the connection stays on the kernel
    /// (no byte of ours may then enter the stream).
    pub fn say_hello(&self, side: Side) -> bool {
        self.hello_word(side)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w & (HELLO_BARE | HELLO_BARRED) == 0).then_some(w | HELLO_SAID)
            })
            .is_ok()
    }

    /// A process of `side` is about to exec a bare program on the
    /// connection, which neither side used yet: from now on both sides
    /// keep it on the kernel. None if `side` said hello already (its byte
    /// is in the peer's stream: too late); else whether the peer said
    /// its hello, which then heads our kernel stream (or is on its way)
    /// and must be taken off before the bare program reads.
    pub fn go_bare(&self, side: Side) -> Option<PeerHello> {
        self.hello_word(side)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w & HELLO_SAID == 0).then_some(w | HELLO_BARE)
            })
            .ok()?;
        let peer = self
            .hello_word(peer_of(side))
            .fetch_or(HELLO_BARRED, Ordering::AcqRel);
        Some(if peer & HELLO_SAID != 0 {
            PeerHello::Said
        } else {
            PeerHello::Never
        })
    }

    /// The reading side of `writer`'s direction, about to hand the stream
    /// to a program that reads the kernel only, asks `writer` to send
    /// what it has not used up again, raw right after its switch byte
    /// (`switched::raw_tx`): that program cannot read the ring.
    pub fn ask_rewind(&self, writer: Side) {
        self.word32(HELLOS + tx_index(writer) * 64 + REWIND)
            .store(1, Ordering::Release);
    }

    /// Whether `writer` was asked to send its unread messages again.
    pub fn rewind_asked(&self, writer: Side) -> bool {
        self.word32(HELLOS + tx_index(writer) * 64 + REWIND)
            .load(Ordering::Acquire)
            != 0
    }

    /// Whether the connection stays on the kernel for `side`: a process
    /// of either side went bare.
    pub fn stays_on_kernel(&self, side: Side) -> bool {
        self.hello_word(side).load(Ordering::Acquire) & (HELLO_BARE | HELLO_BARRED) != 0
    }
}

/// What `go_bare` found of the peer's hello.
#[derive(Debug, PartialEq, Eq)]
pub enum PeerHello {
    /// Said: one byte to take off our kernel stream.
    Said,
    /// Never to be said.
    Never,
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

/// A held reader lock (`Control::lock_reader`).
pub struct ReaderLock<'a>(&'a AtomicU32);

impl Drop for ReaderLock<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
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

/// A close-on-exec copy of `fd` for a record to take (`take_fd`), kept
/// where the library keeps its descriptors (`kernel::dup_high`); -1 if
/// none can be made. Whether a connection is carried at all, with room
/// for its record, is decided before (`inherit::room_for_a_record`).
fn keep_copy(fd: RawFd) -> RawFd {
    crate::kernel::dup_high(fd, true)
}

impl Drop for Control {
    fn drop(&mut self) {
        if let Some(fd) = self.take_fd() {
            // SAFETY: our own copy of the memfd.
            unsafe { (crate::real::real().close)(fd) };
        }
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
    /// The stream is going back to the kernel (see the module's text).
    pub switched: bool,
}

/// What [`Direction::announce`] asks of the writer.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Announced {
    /// Ring the doorbell.
    Ring,
    /// A doorbell is out already: nothing to do.
    BellOut,
    /// The message took the reader's token: no doorbell now, but a late
    /// one if it is still unread when the writer sleeps (`ring_late`).
    TookToken,
}

/// See [`Direction::claim`].
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    Mine,
    Done,
    Wait,
}

/// One direction's word.
pub struct Direction<'a>(&'a AtomicU64);

impl Direction<'_> {
    fn update(&self, f: impl Fn(u64) -> Option<u64>) -> Result<u64, u64> {
        self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, f)
    }

    /// Writer, before posting a message of `len` bytes: whether it must
    /// ring the doorbell (one byte on the kernel socket; then `rang`
    /// after it). None: the stream is switching to the kernel, and the
    /// message is not announced.
    pub fn announce(&self, len: usize) -> Option<Announced> {
        let old = self
            .update(|s| {
                if s & SWITCH != 0 {
                    return None;
                }
                let mut n = s.wrapping_add(1 << POSTED_SHIFT) & !(TOKEN | CAP_MASK);
                let took_token = s & TOKEN != 0 && len <= cap(s);
                if took_token {
                    n |= UNRUNG;
                } else {
                    n |= BELL;
                    if s & BELL == 0 {
                        n |= WRITING;
                    }
                }
                Some(n)
            })
            .ok()?;
        Some(if old & TOKEN != 0 && len <= cap(old) {
            Announced::TookToken
        } else if old & BELL == 0 {
            Announced::Ring
        } else {
            Announced::BellOut
        })
    }

    /// Writer, before it sleeps: if a message took the reader's token and
    /// is still unread, rings for it after all (true: send the byte, then
    /// `rang`), so that a reader that sleeps in the kernel without looking
    /// at the page (another process, a wait we do not see) is woken. The
    /// reader's token may stand between its waits (`epoll`), so a message
    /// that takes it is not always read at once.
    /// Writer: a message that took the reader's token is still unread
    /// (a late ring may be due).
    pub fn unrung(&self) -> bool {
        self.0.load(Ordering::Acquire) & UNRUNG != 0
    }

    pub fn ring_late(&self) -> bool {
        self.update(|s| {
            (s & UNRUNG != 0 && s & (BELL | SWITCH | SHUT) == 0)
                .then_some((s | BELL | WRITING) & !UNRUNG)
        })
        .is_ok()
    }

    /// Writer: the doorbell byte `announce` asked for is sent (or failed).
    pub fn rang(&self) {
        self.0.fetch_and(!WRITING, Ordering::AcqRel);
    }

    /// No new message in this direction from now on.
    pub fn switch(&self) {
        self.0.fetch_or(SWITCH, Ordering::AcqRel);
    }

    /// Whether the switch byte is in the kernel stream.
    pub fn raw(&self) -> bool {
        self.0.load(Ordering::Acquire) & RAW != 0
    }

    /// Who sends the switch byte: this caller (`Claim::Mine`: send it,
    /// then `set_raw`), nobody any more (`Done`), or someone later
    /// (`Wait`: a doorbell or another process's switch byte is on its way).
    pub fn claim(&self) -> Claim {
        let r = self
            .update(|s| (s & (RAW | CLAIM | WRITING) == 0 && s & SWITCH != 0).then_some(s | CLAIM));
        match r {
            Ok(_) => Claim::Mine,
            Err(s) if s & RAW != 0 => Claim::Done,
            Err(_) => Claim::Wait,
        }
    }

    pub fn set_raw(&self) {
        self.0.fetch_or(RAW, Ordering::AcqRel);
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
            switched: s & SWITCH != 0,
        }
    }

    /// Reader with `consumed` messages used up and room for `room` bytes:
    /// sets its token if nothing is unread and no doorbell is out (a
    /// token that stands already gets the new room).
    pub fn offer_token(&self, consumed: u32, room: usize) -> bool {
        let room = room.min((CAP_MASK >> CAP_SHIFT) as usize) as u64;
        let now = self.0.load(Ordering::Acquire);
        if now & TOKEN != 0 && posted(now) == consumed && cap(now) as u64 == room {
            // Standing already, as asked: no write to a line the writer
            // shares (a busy epoll set offers on every member at each wait).
            return true;
        }
        self.update(|s| {
            (posted(s) == consumed && s & BELL == 0)
                .then_some((s | TOKEN | (room << CAP_SHIFT)) & !UNRUNG)
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
    /// doorbell flag if it is set and nothing new came (and `UNRUNG`: no
    /// late ring is due). True when the caller must now take the doorbell
    /// byte from the kernel socket.
    pub fn clear_bell(&self, consumed: u32) -> bool {
        self.update(|s| {
            (posted(s) == consumed && s & (BELL | UNRUNG) != 0).then_some(s & !(BELL | UNRUNG))
        })
        .is_ok_and(|old| old & BELL != 0)
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

    /// An end about to exec a program without the library on a
    /// connection nobody used keeps it on the kernel for both sides: the
    /// peer says no hello from then on, and one it said already is
    /// reported (to be taken off the stream); too late once its own side
    /// said hello.
    #[test]
    fn an_end_that_goes_bare_keeps_both_sides_on_the_kernel() {
        let c = page();
        assert!(!c.stays_on_kernel(Side::Connector));
        assert_eq!(c.go_bare(Side::Acceptor), Some(PeerHello::Never));
        assert!(!c.say_hello(Side::Connector), "the peer may not say hello");
        assert!(!c.say_hello(Side::Acceptor), "nor another process of ours");
        assert!(c.stays_on_kernel(Side::Connector) && c.stays_on_kernel(Side::Acceptor));

        let c = page();
        assert!(c.say_hello(Side::Connector));
        assert_eq!(
            c.go_bare(Side::Acceptor),
            Some(PeerHello::Said),
            "its hello heads our stream"
        );
        assert!(
            c.stays_on_kernel(Side::Connector),
            "its meet ends on the kernel"
        );

        let c = page();
        assert!(c.say_hello(Side::Acceptor));
        assert_eq!(
            c.go_bare(Side::Acceptor),
            None,
            "our hello is out: too late"
        );
        assert!(!c.stays_on_kernel(Side::Connector));
        assert!(c.say_hello(Side::Connector));
    }

    #[test]
    fn rings_once_until_the_reader_drains() {
        let c = page();
        let (w, r) = (c.tx(Side::Connector), c.rx(Side::Acceptor));
        assert!(
            w.announce(10) == Some(Announced::Ring),
            "first message rings"
        );
        assert!(
            w.announce(10) == Some(Announced::BellOut),
            "a second while the bell is out does not"
        );
        assert!(!r.clear_bell(1), "one message still unread");
        assert!(r.clear_bell(2));
        assert!(
            w.announce(10) == Some(Announced::Ring),
            "after the reader took the bell, ring again"
        );
    }

    #[test]
    fn token_saves_the_bell_only_for_a_message_that_fits() {
        let c = page();
        let (w, r) = (c.tx(Side::Acceptor), c.rx(Side::Connector));
        assert!(r.offer_token(0, 100));
        assert!(
            w.announce(100) == Some(Announced::TookToken),
            "fits: the spinning reader takes it"
        );
        assert!(!r.revoke_token(), "the writer took the token");
        assert!(w.announce(1) == Some(Announced::Ring), "the next one rings");
        assert!(!r.offer_token(1, 100), "unread data: no token");
        assert!(r.clear_bell(2));
        assert!(r.offer_token(2, 100));
        assert!(
            w.announce(101) == Some(Announced::Ring),
            "too big for the reader's room: ring"
        );
        assert!(!r.revoke_token());
        assert!(r.seen().bell);
    }

    #[test]
    fn revoked_token_means_the_writer_rings() {
        let c = page();
        let (w, r) = (c.tx(Side::Connector), c.rx(Side::Acceptor));
        assert!(r.offer_token(0, 100));
        assert!(r.revoke_token());
        assert!(w.announce(1) == Some(Announced::Ring));
    }

    /// A message that took a token the reader let stand is rung for late
    /// while it is unread, and not once the reader has used it up.
    #[test]
    fn a_late_ring_only_for_a_message_still_unread() {
        let c = page();
        let (w, r) = (c.tx(Side::Connector), c.rx(Side::Acceptor));
        assert!(!w.ring_late(), "nothing took a token");
        assert!(r.offer_token(0, usize::MAX));
        assert_eq!(w.announce(8), Some(Announced::TookToken));
        assert!(w.ring_late(), "unread: ring after all");
        assert!(!w.ring_late(), "once");
        assert!(r.seen().bell);
        w.rang();
        assert!(r.clear_bell(1), "the reader takes the late byte");

        assert!(r.offer_token(1, usize::MAX));
        assert_eq!(w.announce(8), Some(Announced::TookToken));
        assert!(!r.clear_bell(1), "unread: not yet");
        assert!(!r.clear_bell(2), "used up, no byte to take");
        assert!(!w.ring_late(), "used up: no late ring");
        assert!(!r.seen().bell);
    }

    #[test]
    fn racing_writer_and_reader_never_lose_a_wakeup() {
        // Whenever more is unread than the one message a taken token
        // covers, the bell is out: a reader leaving then stays readable.
        let c = std::sync::Arc::new(page());
        let n = 200_000u32;
        let w = {
            let c = c.clone();
            std::thread::spawn(move || {
                (0..n)
                    .filter(|_| c.tx(Side::Connector).announce(1) == Some(Announced::Ring))
                    .count()
            })
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

    #[test]
    fn after_a_switch_nothing_is_announced_and_one_process_sends_the_byte() {
        let c = page();
        let w = c.tx(Side::Connector);
        assert_eq!(
            w.announce(5),
            Some(Announced::Ring),
            "rang: its doorbell is on its way"
        );
        w.switch();
        assert_eq!(w.announce(5), None, "no message after the switch");
        assert_eq!(w.claim(), Claim::Wait, "the doorbell is not sent yet");
        w.rang();
        assert_eq!(w.claim(), Claim::Mine);
        assert_eq!(w.claim(), Claim::Wait, "the claimer is sending it");
        assert!(!w.raw());
        w.set_raw();
        assert_eq!(w.claim(), Claim::Done);
        assert!(c.rx(Side::Acceptor).seen().switched);
    }

    #[test]
    fn the_reader_lock_is_held_by_one_at_a_time() {
        let c = page();
        let held = c.lock_reader(Side::Acceptor, false).expect("free");
        assert!(
            c.lock_reader(Side::Acceptor, true).is_none(),
            "a nonblocking reader gives up"
        );
        assert!(
            c.lock_reader(Side::Connector, true).is_some(),
            "the other direction's is its own"
        );
        drop(held);
        assert!(c.lock_reader(Side::Acceptor, true).is_some());
    }

    #[test]
    fn message_entries_round_trip_and_wrap_at_the_table_length() {
        let c = page();
        c.set_entry(Side::Acceptor, 3, RING_BYTES - 10, 10);
        assert_eq!(c.entry_of(Side::Acceptor, 3), (RING_BYTES - 10, 10));
        assert_eq!(
            c.entry_of(Side::Acceptor, 3 + TABLE_LEN),
            (RING_BYTES - 10, 10)
        );
        assert_eq!(c.entry_of(Side::Connector, 3), (0, 0), "directions apart");
    }
}
