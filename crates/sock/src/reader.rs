//! Reading a carried connection. Messages arrive in the VI's posted
//! receives; the control page says how many the peer has posted (so
//! "nothing unread" needs no system call) and whether a doorbell byte is
//! out. A blocking read with nothing unread offers a token and spins on
//! the page (and the VI, which keeps the device's progress thread off our
//! CPU) for up to `VIARUN_SPIN_US` (default 100 µs; it adapts, `waitspin`)
//! before it takes the token back
//! and sleeps in the kernel; whatever read used a message up last takes
//! the doorbell. So a reader that catches its messages spinning makes no
//! system call and costs its writer none (see `control`). A nonblocking
//! read with nothing unread holds the token while it asks the kernel
//! (below), so a program spinning on nonblocking reads gets most
//! messages without a doorbell too. A message announced but not yet
//! posted is waited for spinning briefly, then yielding the CPU: its
//! writer may need this one.
//!
//! The kernel is asked only when the peer shut down or closed (its page
//! word says so), when the VI broke, after a sleep, or when a nonblocking
//! read finds nothing unread: its stream then says EOF, ECONNRESET or
//! nothing yet.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, OnceLock};
use std::time::Duration;

use openvia_core::descriptor::{status, DescPtr};

use crate::carried::{copy_out, reader_turn};
use crate::control::RING_BYTES;
use crate::kernel::{self, Peek};
use crate::link::{Link, Rx, DOORBELL, SLOT_BYTES};
use crate::waitspin::{Looking, CLOCK_EVERY};

/// The longest spin of a wait on one host unless `VIARUN_SPIN_US` says
/// otherwise. 100 µs since the spin adapts and yields (`waitspin`): with
/// 50, four pgbench clients against four postgres workers on two CPUs ran
/// 23–25 k transactions a second, with 100 39–40 k, kernel TCP 38–39 k.
const DEFAULT_SPIN_US: u64 = 100;

/// How long a blocking read spins at most before it sleeps in the kernel.
pub(crate) fn spin_time() -> Duration {
    static SPIN: OnceLock<Duration> = OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = std::env::var("VIARUN_SPIN_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(DEFAULT_SPIN_US);
        Duration::from_micros(us)
    })
}

/// Looks at a message announced but not yet arrived before a read gives
/// its CPU away (sched_yield) between looks: its writer is between
/// announcing and posting it, and may be waiting for this very CPU.
const ANNOUNCED_SPIN: u32 = 128;
/// Yields between two asks whether the peer hung up while a message is
/// still announced and not arrived (a writer killed in that moment).
const ANNOUNCED_LOOK: u32 = 1024;

/// How long a MSG_PEEK|MSG_WAITALL short of data sleeps between looks.
const PEEK_NAP: Duration = Duration::from_micros(50);

/// How a spin with a token ended.
enum Spin {
    /// A message was announced (or the page or VI changed): look again.
    Changed,
    /// Nothing came within the spin time.
    TimedOut,
}

impl Link {
    /// read/recv into `out`: Ok(0) at EOF. `dontwait`: the call asked not
    /// to block (else the socket's mode decides, asked only when there is
    /// nothing to read). `peek` leaves the data; `all` waits for the whole
    /// of `out` (MSG_WAITALL).
    pub fn read(
        &self,
        fd: RawFd,
        out: &mut [&mut [u8]],
        dontwait: bool,
        peek: bool,
        all: bool,
    ) -> Result<usize, i32> {
        crate::epoll::stamp_mine();
        let nonblocking = || dontwait || self.is_nonblocking();
        let mut rx = reader_turn(&self.rx, nonblocking)?;
        let mut nonblock = None;
        let want: usize = out.iter().map(|o| o.len()).sum();
        if want == 0 {
            return Ok(0);
        }
        // Processes that share the socket after a switch read through the
        // page; this lock keeps them from taking the same bytes as we do.
        let Some(lock) = self.lock_reader(nonblocking()) else {
            return Err(libc::EAGAIN);
        };
        // Another process read since our last read: the connection was
        // switched, and our VI's messages are stale (no word is loaded
        // here: the peer writes it with every message).
        let mut switched = self.consumed_on_page() != rx.consumed;
        let mut got = 0usize;
        let (mut seg, mut off) = (0usize, 0usize);
        // Set after a sleep, or when the page or VI says so: the kernel
        // stream has the last word.
        let mut ask_kernel = false;
        // Looks at an announced message not arrived yet; whether this call
        // asked the kernel already.
        let (mut waits, mut asked) = (0u32, false);
        loop {
            if switched {
                // Handed back to the kernel (here or by another process):
                // the rest through the page and the kernel stream.
                drop(lock);
                rx.current = None;
                rx.later.clear();
                return self.read_switched(fd, out, (seg, off), got, nonblocking(), peek, all);
            }
            if let Some((place, len, taken)) = rx.current {
                // Copy what this message has (a peek takes from one message).
                let mut at = taken;
                // SAFETY: the ring holds the message's `len` bytes at `place`,
                // which its writer leaves alone until we use it up.
                let rest = unsafe {
                    std::slice::from_raw_parts(self.data_in(place).add(at), len.saturating_sub(at))
                };
                let n = copy_out(rest, out, &mut seg, &mut off);
                at += n;
                got += n;
                if peek {
                    got += self.peek_later(
                        fd,
                        &mut rx,
                        out,
                        (seg, off),
                        want - got,
                        all && !nonblocking(),
                    );
                    self.bell_visible(fd, &mut rx);
                    return Ok(got);
                }
                if at == len {
                    rx.current = None;
                    rx.consumed = rx.consumed.wrapping_add(1);
                    if taken > 0 {
                        self.publish_taken(0);
                    }
                    self.used_up();
                } else {
                    rx.current = Some((place, len, at));
                    self.publish_taken(at);
                }
                if got == want {
                    return Ok(self.leave(fd, &mut rx, got));
                }
                if !all {
                    // Like the kernel, hand over what has already arrived
                    // (fewer calls for a reader with a large buffer).
                    if rx.current.is_none() {
                        rx.current = rx.later.pop_front().map(|(p, l)| (p, l, 0));
                    }
                    if rx.current.is_none() {
                        if let Some(m) = self.next_arrived() {
                            rx.current = m;
                        }
                    }
                    if rx.current.is_none() {
                        return Ok(self.leave(fd, &mut rx, got));
                    }
                }
                continue;
            }
            if let Some((place, len)) = rx.later.pop_front() {
                rx.current = Some((place, len, 0));
                continue;
            }
            if let Some(arrived) = self.next_arrived() {
                match arrived {
                    Some(m) => {
                        rx.current = Some(m);
                        continue;
                    }
                    // A flushed receive (the peer is gone) is no message.
                    None => ask_kernel = true,
                }
            }
            let seen = self.rx_word().seen();
            if seen.switched {
                switched = true;
                continue;
            }
            let broken = self.broken();
            if seen.posted != rx.consumed && !broken && !ask_kernel {
                // Announced: its writer is posting it.
                waits += 1;
                if waits <= ANNOUNCED_SPIN {
                    std::hint::spin_loop();
                    continue;
                }
                if waits % ANNOUNCED_LOOK == 0 && kernel::peer_hung_up(fd) {
                    // Its writer died before posting it (a close flushes
                    // first): the write never returned; the stream ends.
                    return Ok(got);
                }
                // SAFETY: sched_yield takes nothing and cannot fail.
                unsafe { libc::sched_yield() };
                continue;
            }
            // Nothing unread.
            if got > 0 && !all {
                return Ok(self.leave(fd, &mut rx, got));
            }
            if seen.bell && seen.posted == rx.consumed {
                self.take_bell(fd, &mut rx);
                continue;
            }
            if seen.shut || broken || ask_kernel {
                match kernel::peek_state(fd) {
                    Peek::Eof => return Ok(got),
                    Peek::Error(e) => return if got > 0 { Ok(got) } else { Err(e) },
                    Peek::Byte(b) => {
                        let now = self.rx_word().seen();
                        if now.switched {
                            switched = true;
                            continue;
                        }
                        if b != DOORBELL || !now.bell {
                            // Not ours: the stream cannot be followed.
                            return Err(libc::EIO);
                        }
                        ask_kernel = false;
                        continue;
                    }
                    Peek::Empty if *nonblock.get_or_insert_with(nonblocking) => {
                        return if got > 0 { Ok(got) } else { Err(libc::EAGAIN) };
                    }
                    Peek::Empty => {
                        kernel::wait_readable(fd);
                        continue;
                    }
                }
            }
            // A blocking read spins with the token out (below); a
            // nonblocking one holds it while it asks the kernel.
            let token = !peek && self.rx_word().offer_token(rx.consumed, want - got);
            if *nonblock.get_or_insert_with(nonblocking) {
                // Nothing unread: the kernel says whether the stream ended
                // (a killed peer sets no SHUT, and its VI may not show it
                // yet). Asked at every such read, not every n-th: an
                // edge-triggered reader gets one wake-up for the FIN and
                // must then read EOF, not EAGAIN. The token stands while
                // the kernel is asked, so a message that comes meanwhile
                // needs no doorbell: a reader spinning on nonblocking reads
                // is then answered without one, most of the time.
                let look = (got == 0 && !asked).then(|| kernel::peek_state(fd));
                asked = true;
                if token && !self.rx_word().revoke_token() {
                    // A message took it: it is on its way, read it.
                    continue;
                }
                match look {
                    Some(Peek::Eof) => return Ok(0),
                    Some(Peek::Error(e)) => return Err(e),
                    // A doorbell (or not ours): sorted out above.
                    Some(Peek::Byte(_)) => {
                        ask_kernel = true;
                        continue;
                    }
                    _ => return if got > 0 { Ok(got) } else { Err(libc::EAGAIN) },
                }
            }
            if !token {
                if peek {
                    // A peek must not take a token (it leaves the message
                    // unread): the writer rings, the kernel wakes us. A
                    // token an epoll wait let stand comes back first (if
                    // a message took it, it is on its way).
                    if self.rx_word().seen().token && !self.rx_word().revoke_token() {
                        continue;
                    }
                    kernel::wait_readable(fd);
                    ask_kernel = true;
                }
                continue;
            }
            let mut look = rx.spin.start();
            let spin = self.spin(&mut rx, &mut look);
            if self.rx_word().revoke_token() && matches!(spin, Spin::TimedOut) {
                // No message took the token: from now on the writer rings.
                kernel::wait_readable(fd);
                ask_kernel = true;
            }
            // A wait that outlasted the window, or whose spin found its
            // CPU taken, shrinks the next one (`waitspin`).
            rx.spin.settle(&look);
        }
    }

    /// Spins while our token stands and nothing changes, for `look`'s
    /// window.
    fn spin(&self, rx: &mut MutexGuard<'_, Rx>, look: &mut Looking) -> Spin {
        let mut turns = 0u32;
        loop {
            let seen = self.rx_word().seen();
            if !seen.token || seen.posted != rx.consumed || seen.shut || seen.switched {
                return Spin::Changed;
            }
            // Polling the VI keeps the device's progress thread asleep and
            // takes a message the moment it lands.
            if let Some(m) = self.next_arrived() {
                rx.current = m;
                return Spin::Changed;
            }
            // The clock every few looks: a look is quick, and a message
            // should be seen within a few tens of nanoseconds.
            turns = turns.wrapping_add(1);
            if turns % CLOCK_EVERY == 0 {
                if self.broken() {
                    return Spin::Changed;
                }
                if !look.go_on() {
                    return Spin::TimedOut;
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Before a read returns: if every message is used up, the doorbell
    /// (if out) is taken, so the socket is readable exactly while data is
    /// unread.
    fn leave(&self, fd: RawFd, rx: &mut MutexGuard<'_, Rx>, got: usize) -> usize {
        if rx.current.is_none() {
            self.take_bell(fd, rx);
            if self.standing.load(Ordering::Relaxed) && rx.later.is_empty() {
                // Waited for in epoll: the token stands again (fails if
                // something came meanwhile).
                self.rx_word().offer_token(rx.consumed, usize::MAX);
            }
        }
        if rx.current.is_some() || self.rx_word().seen().posted != rx.consumed {
            self.bell_visible(fd, rx);
        }
        got
    }

    /// Data stays unread: waits until the doorbell the writer rang for it
    /// is in the socket (loopback can hand the byte over a moment after
    /// the writer's send returned), so a poll right after sees it. Once
    /// seen, the byte stays until this reader takes it (no one else
    /// does), so a stream whose reader never catches up asks once.
    fn bell_visible(&self, fd: RawFd, rx: &mut Rx) {
        if rx.bell_in_socket || !self.rx_word().seen().bell {
            return;
        }
        if matches!(kernel::peek_state(fd), Peek::Empty) {
            kernel::wait_readable(fd);
        }
        rx.bell_in_socket = true;
    }

    /// Takes the doorbell byte if the page says one is out and nothing is
    /// unread (the writer may be just writing it: take_byte waits).
    fn take_bell(&self, fd: RawFd, rx: &mut Rx) {
        if self.rx_word().clear_bell(rx.consumed) {
            // EOF or an error here: the peer died writing it; the next
            // read hears that from the kernel.
            let _ = kernel::take_byte(fd);
            rx.bell_in_socket = false;
        }
    }

    /// A completed receive as (place in the data ring, length, 0), its
    /// receive posted again; None if it failed or names bytes outside the
    /// ring.
    /// FIONREAD: the rest of the message being read, or of the next one
    /// arrived (taken off the VI for the next read).
    pub fn unread(&self) -> usize {
        let Ok(mut rx) = reader_turn(&self.rx, || true) else {
            return 0;
        };
        self.take_arrived(&mut rx);
        let current = rx
            .current
            .map_or(0, |(_, len, taken)| len.saturating_sub(taken));
        current + rx.later.iter().map(|&(_, len)| len).sum::<usize>()
    }

    /// Takes every message the VI completed into `later` (a flushed
    /// receive is no message: the next read finds the VI broken and asks
    /// the kernel).
    fn take_arrived(&self, rx: &mut Rx) {
        while let Some(arrived) = self.next_arrived() {
            if let Some((place, len, _)) = arrived {
                rx.later.push_back((place, len));
            }
        }
    }

    /// A peek past the message being read: copies from the messages after
    /// it, from `at` (segment, offset) of `out` on, at most `room` bytes,
    /// and leaves them unread. With MSG_WAITALL (`wait_all`) it waits for
    /// more until `room` is filled or the stream ends, napping (a peek
    /// takes no token, and the doorbell already in the socket would wake
    /// a sleep at once). How many bytes it copied.
    fn peek_later(
        &self,
        fd: RawFd,
        rx: &mut Rx,
        out: &mut [&mut [u8]],
        at: (usize, usize),
        room: usize,
        wait_all: bool,
    ) -> usize {
        let (mut seg, mut off) = at;
        let (mut got, mut copied) = (0usize, 0usize);
        let mut naps = 0u32;
        loop {
            self.take_arrived(rx);
            for &(place, len) in rx.later.iter().skip(copied) {
                if got == room {
                    break;
                }
                // SAFETY: as for the message being read: the ring holds
                // its `len` bytes at `place` until we use it up.
                let src = unsafe { std::slice::from_raw_parts(self.data_in(place), len) };
                got += copy_out(src, out, &mut seg, &mut off);
                copied += 1;
            }
            if got == room || !wait_all || self.broken() || self.rx_word().seen().shut {
                return got;
            }
            naps += 1;
            if naps % 64 == 0 && kernel::peer_hung_up(fd) {
                return got;
            }
            std::thread::sleep(PEEK_NAP);
        }
    }

    /// The next message the VI completed: None if none did, Some(None)
    /// for a flushed or malformed receive. A message of the VI's earlier
    /// connection (`link::reuse`: another generation) is dropped on the
    /// way, its receive posted again.
    fn next_arrived(&self) -> Option<Option<(usize, usize, usize)>> {
        loop {
            let d = self.vi.recv_done().ok()?;
            match self.completed(d) {
                Completed::Stale => continue,
                Completed::Message(m) => return Some(Some(m)),
                Completed::Failed => return Some(None),
            }
        }
    }

    fn completed(&self, d: DescPtr) -> Completed {
        let st = d.status();
        let j = self.recv_slot_of(d);
        // SAFETY: the descriptor is ours and completed.
        let (got, generation) = unsafe { ((*d.0).cs.length as usize, (*d.0).cs.immediate_data) };
        if st & status::ERROR_MASK != 0 || got < 8 {
            return Completed::Failed;
        }
        if st & status::IMMEDIATE == 0 || generation != self.generation {
            return match self.post_recv(j) {
                Ok(()) => Completed::Stale,
                Err(_) => Completed::Failed,
            };
        }
        let buf = self.recv_buffer(j);
        // SAFETY: the receive buffer holds at least the 8 bytes it got.
        let (len, place) = unsafe {
            (
                std::ptr::read_unaligned(buf as *const u32) as usize,
                std::ptr::read_unaligned((buf + 4) as *const u32) as usize,
            )
        };
        if self.post_recv(j).is_err() {
            return Completed::Failed;
        }
        // The peer's words, bounds-checked.
        if len <= SLOT_BYTES && place + len <= RING_BYTES {
            Completed::Message((place, len, 0))
        } else {
            Completed::Failed
        }
    }
}

/// What a completed receive held.
enum Completed {
    /// A message of this connection: (place, length, 0 taken).
    Message((usize, usize, usize)),
    /// A message of the VI's earlier connection, dropped.
    Stale,
    /// A flushed receive (the peer is gone) or malformed words.
    Failed,
}
