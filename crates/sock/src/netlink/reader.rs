//! Reading a connection carried between hosts (see `netlink`): what has
//! arrived is copied out of the receive buffers, which are posted again;
//! the doorbells of the messages used up are taken from the kernel socket;
//! with nothing unread a blocking read spins briefly on the VI and then
//! sleeps on the kernel socket, and the kernel says when the stream ended.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use openvia_core::spin::{Spin, Window};

use super::{
    bytes_in, handover, lock, nap, NetLink, State, DOORBELL_FIRST, HDR, SLICE, SPIN_CONTENDED_NS,
};
use crate::carried::{copy_out, reader_turn, Carried};
use crate::kernel::{self, Peek};

/// How long a read looks for a doorbell it knows is on its way before
/// it sleeps for it (`doorbell_look`).
const DOORBELL_LOOK: Duration = Duration::from_micros(50);

/// The look for a doorbell on its way: the writer rang it right after
/// posting its message, which travels on the VI's socket and usually
/// wins, so the doorbell is microseconds behind. A read looks for it
/// (without giving the CPU away; the spin ends early if its CPU was
/// taken, `openvia_core::spin`) for `DOORBELL_LOOK` before it sleeps in
/// poll: a sleep there cost a reader a halted CPU's wake-up per message
/// (sockperf --nonblocked between hosts, busy-polling: ~20 µs one way
/// against the kernel's 4-6 µs).
fn doorbell_look() -> Spin {
    Window::new(DOORBELL_LOOK, SPIN_CONTENDED_NS).start()
}

/// One wait for the doorbell `look` is for: a look, or once the look is
/// over, a sleep until the socket is readable.
fn doorbell_wait(fd: RawFd, look: &mut Spin) {
    if !look.go_on_busy() {
        let _blocked = crate::link::network_blocked();
        kernel::wait_readable(fd)
    }
}

impl NetLink {
    /// Copies what has arrived into `out` from `*got` on; uses messages up
    /// (a peek does not). Whether a peek copied.
    fn copy_out(&self, st: &mut State, out: &mut [&mut [u8]], got: &mut usize, peek: bool) -> bool {
        let want: usize = out.iter().map(|o| o.len()).sum();
        let (mut seg, mut off) = (0usize, 0usize);
        let mut skip = *got;
        while skip > 0 && seg < out.len() {
            let k = skip.min(out[seg].len());
            skip -= k;
            off = k;
            if off == out[seg].len() {
                seg += 1;
                off = 0;
            }
        }
        // A peek copies from every message that has arrived, using none up.
        let mut peeked = 0usize;
        while *got < want {
            let Some(front) = st.arrived.get(peeked) else {
                break;
            };
            if front.number != st.consumed.wrapping_add(1 + peeked as u32) {
                // Numbers follow one another on a reliable VI; one out of
                // order is not read (the peer does not follow the protocol).
                st.broken = true;
                break;
            }
            let (slot, len, belled) = (front.slot, front.len, front.belled);
            let mut at = if peeked == 0 { st.taken } else { 0 };
            // SAFETY: the receive buffer holds the message's `len` bytes
            // after its header; it stays ours until posted again.
            let rest = unsafe {
                std::slice::from_raw_parts(
                    self.region.buffer_ptr(slot).add(HDR + at),
                    len.saturating_sub(at),
                )
            };
            let k = copy_out(rest, out, &mut seg, &mut off);
            at += k;
            *got += k;
            if peek {
                peeked += 1;
                continue;
            }
            st.used += k as u64;
            if at < len {
                st.taken = at;
                break;
            }
            st.arrived.pop_front();
            st.taken = 0;
            st.consumed = st.consumed.wrapping_add(1);
            crate::link::read_from_network();
            if belled {
                st.owed += 1;
            }
            if self.post_recv(slot).is_err() {
                st.broken = true;
            }
        }
        if !peek {
            if let Some(p) = &self.page {
                p.note_read(st.used, st.consumed, st.taken);
            }
        }
        peek && peeked > 0
    }

    /// Before a read returns: takes the doorbell bytes of the messages it
    /// used up, and, if data stays unread, waits until the socket shows it
    /// (so that a poll after the read says readable exactly while data is
    /// unread).
    fn leave(&self, fd: RawFd, got: usize) -> usize {
        let (mut owed, unread) = {
            let mut st = lock(&self.state);
            (std::mem::take(&mut st.owed), !st.arrived.is_empty())
        };
        if self.handed.get().is_some() {
            // Handed over meanwhile: the page's reader drops the doorbells.
            return got;
        }
        let mut buf = [0u8; 64];
        let mut look = doorbell_look();
        while owed > 0 {
            let k = (owed as usize).min(buf.len());
            // SAFETY: up to 64 bytes into our own buffer.
            let n = unsafe {
                (crate::real::real().recv)(fd, buf.as_mut_ptr().cast(), k, libc::MSG_DONTWAIT)
            };
            match n {
                n if n > 0 => owed -= n as u32,
                // EOF or reset: the writer died after posting; the next read hears it.
                0 => break,
                _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) => {
                    doorbell_wait(fd, &mut look)
                }
                _ => break,
            }
        }
        if unread && bytes_in(fd) == 0 {
            let mut look = doorbell_look();
            while bytes_in(fd) == 0 && !kernel::peer_hung_up(fd) {
                doorbell_wait(fd, &mut look);
            }
        }
        got
    }

    /// What the kernel says of a stream with nothing left to read: Some(end)
    /// for EOF or an error, None while it lives.
    fn ended(&self, fd: RawFd, got: usize) -> Option<Result<usize, i32>> {
        let end = match kernel::peek_state(fd) {
            Peek::Eof => Ok(got),
            Peek::Error(e) if got == 0 => Err(e),
            Peek::Error(_) => Ok(got),
            // A doorbell for a message on its way; or, from a peer that
            // hung up meanwhile, for one that will never come.
            Peek::Byte(_) if kernel::peer_hung_up(fd) => {
                std::thread::sleep(Duration::from_millis(1));
                Ok(got)
            }
            _ => return None,
        };
        // What the peer sent before it closed may still wait for a receive
        // posted just now (acknowledged, held by the device until there
        // was room): that comes first. (Without this look, compat
        // `threads` between hosts once lost its last 4 KiB.)
        let mut st = lock(&self.state);
        self.pump(&mut st);
        st.arrived.is_empty().then_some(end)
    }

    pub(super) fn read_some(
        &self,
        fd: RawFd,
        out: &mut [&mut [u8]],
        dontwait: bool,
        peek: bool,
        all: bool,
    ) -> Result<usize, i32> {
        let nonblocking = || dontwait || self.is_nonblocking();
        let _reading = reader_turn(&self.reading, nonblocking)?;
        let want: usize = out.iter().map(|o| o.len()).sum();
        if want == 0 {
            return Ok(0);
        }
        let mut got = 0usize;
        loop {
            if let Some(s) = self.handed.get() {
                return if got > 0 {
                    Ok(got)
                } else {
                    s.read(fd, out, dontwait, peek, all)
                };
            }
            let broken = {
                let mut st = lock(&self.state);
                self.pump_for(&mut st, want - got);
                if self.copy_out(&mut st, out, &mut got, peek) {
                    let broken = st.broken;
                    drop(st);
                    if got < want && all && !nonblocking() && !broken && !kernel::peer_hung_up(fd) {
                        // MSG_PEEK|MSG_WAITALL short of data: wait for
                        // more (asleep on the VI's socket), then copy
                        // again from the start.
                        got = 0;
                        nap(&self.vi, fd, 0, SLICE);
                        continue;
                    }
                    if got > 0 {
                        self.leave(fd, 0);
                    }
                    return Ok(got);
                }
                st.broken
            };
            if got == want || (got > 0 && !all) {
                return Ok(self.leave(fd, got));
            }
            if broken {
                // The VI is gone: handed over by the peer (its switch
                // byte comes), or the kernel says how the stream ended.
                if self.follow_peer(fd).is_some() {
                    continue;
                }
                self.leave(fd, 0);
                let start = Instant::now();
                while start.elapsed() < Duration::from_secs(1) {
                    if let Some(end) = self.ended(fd, got) {
                        return end;
                    }
                    std::thread::sleep(SLICE);
                }
                return Err(libc::ECONNRESET);
            }
            if nonblocking() {
                let waiting = bytes_in(fd);
                if got == 0 && waiting > 0 && handover::switch_ahead(fd) {
                    // Not a doorbell: the peer handed over.
                    let _ = self.hand_over_now(fd);
                    continue;
                }
                if let Some(end) = self.ended(fd, got) {
                    return end;
                }
                if got == 0 && waiting > 0 {
                    // A doorbell is there and its message is not: the two
                    // travel on different sockets, and the doorbell can
                    // win (or the message waits in the writer's window).
                    // It was posted before it rang: wait for it, asleep on
                    // the VI's socket (a reader told "readable" must get
                    // data; spinning here took the CPU its writer needed).
                    nap(&self.vi, fd, 0, DOORBELL_FIRST);
                    continue;
                }
                return if got > 0 { Ok(got) } else { Err(libc::EAGAIN) };
            }
            if let Some(end) = self.wait_for_data(fd, got) {
                return end;
            }
        }
    }

    /// Spins on the VI for the link's spin window (`VIARUN_NET_SPIN_US`,
    /// adaptive), then sleeps in poll on the kernel socket (the message's
    /// doorbell wakes it), until a message arrives (None) or the kernel
    /// says the stream ended.
    fn wait_for_data(&self, fd: RawFd, got: usize) -> Option<Result<usize, i32>> {
        let mut look = lock(&self.spin).start();
        let mut spinning = true;
        loop {
            {
                let mut st = lock(&self.state);
                self.pump(&mut st);
                if !st.arrived.is_empty() || st.broken {
                    drop(st);
                    lock(&self.spin).settle(&look);
                    return None;
                }
            }
            // Each look is a system call (the VI's socket). The spin
            // yields between looks only once the CPUs look crowded by
            // this host's own processes (`waitspin`), and not while a
            // CPU-bound one is about.
            if spinning && look.go_on() {
                continue;
            }
            spinning = false;
            let waiting = bytes_in(fd);
            if waiting > 0 && handover::switch_ahead(fd) {
                // Not a doorbell: the peer handed over.
                let _ = self.hand_over_now(fd);
                return None;
            }
            if let Some(end) = self.ended(fd, got) {
                return Some(end);
            }
            if waiting == 0 {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one pollfd of ours.
                unsafe { (crate::real::real().poll)(&mut p, 1, SLICE.as_millis() as libc::c_int) };
            } else {
                // Its doorbell came first: the message is on its way.
                nap(&self.vi, fd, 0, DOORBELL_FIRST);
            }
        }
    }
}
