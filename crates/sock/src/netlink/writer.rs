//! Writing on a link: a write is cut into messages of up to `CHUNK`
//! bytes, each copied into a free send slot and posted, with one doorbell
//! per write call; a writer out of slots takes back the sends already
//! done (first those the replies it read acknowledged, without a look at
//! the network), then waits. A close first waits until the peer holds
//! everything sent.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use openvia_core::spin::Window;
use openvia_core::vi::ViState;

use super::{
    handover, hung_up_both, lock, nap, NetLink, BELLED, CHUNK, DATA, FLUSH_LOOK, HDR, LINGER,
    SEND_SLOTS, SLICE, SPIN_CONTENDED_NS,
};
use crate::carried::copy_in;
use crate::kernel;

impl NetLink {
    pub(super) fn write_all(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32> {
        let pipe = |taken: usize| {
            if taken > 0 {
                return Ok(taken);
            }
            if !nosignal {
                // SAFETY: raising a signal in this thread, as the kernel would.
                unsafe { libc::raise(libc::SIGPIPE) };
            }
            Err(libc::EPIPE)
        };
        if let Some(s) = self.handed.get() {
            return s.write_from(fd, data, (0, 0), dontwait, nosignal);
        }
        if self.write_shut.load(Ordering::Acquire) {
            return pipe(0);
        }
        let total: usize = data.iter().map(|d| d.len()).sum();
        crate::link::wrote_to_network();
        let (mut taken, mut seg, mut off) = (0usize, 0usize, 0usize);
        // The VI is gone: if the peer handed the connection to the kernel
        // (its switch byte comes), so do we, and the rest goes there.
        let lost = |taken: usize, at: (usize, usize)| match self.follow_peer(fd) {
            Some(s) => match s.write_from(fd, data, at, dontwait, nosignal) {
                Ok(n) => Ok(taken + n),
                Err(_) if taken > 0 => Ok(taken),
                Err(e) => Err(e),
            },
            None => pipe(taken),
        };
        while taken < total {
            let mut st = lock(&self.state);
            // Taking completions runs the protocol: the acknowledgements
            // that came open its window, so what is posted now leaves now,
            // before its doorbell (a writer that looked only when out of
            // slots had its message held while the doorbell went). A
            // writer with few messages in flight (a request, a reply) has
            // an open window and skips that system call; so does one whose
            // sends the replies it read already acknowledged (`reap_at_hand`).
            if st.in_flight >= SEND_SLOTS / 4 && !self.reap_at_hand(&mut st) {
                self.reap(&mut st);
            } else if self.vi.state() == ViState::Error {
                st.broken = true;
            }
            if st.broken {
                drop(st);
                return lost(taken, (seg, off));
            }
            let Some(slot) = st.free.pop() else {
                drop(st);
                if dontwait || self.is_nonblocking() {
                    return if taken > 0 {
                        Ok(taken)
                    } else {
                        Err(libc::EAGAIN)
                    };
                }
                if hung_up_both(fd) {
                    return pipe(taken);
                }
                if handover::switch_ahead(fd) {
                    // The peer handed over; our VI has not heard yet.
                    return lost(taken, (seg, off));
                }
                nap(&self.vi, fd, 0, SLICE);
                continue;
            };
            let chunk_at = (seg, off);
            let n = (total - taken).min(CHUNK);
            // SAFETY: the free slot's buffer has CHUNK ≥ n bytes after its
            // header, ours until the slot is posted.
            let dst =
                unsafe { std::slice::from_raw_parts_mut(self.region.buffer_ptr(slot).add(HDR), n) };
            copy_in(data, &mut seg, &mut off, dst);
            let number = st.sent.wrapping_add(1);
            // One doorbell per call: on its last message, or on one after
            // which the call may stop or wait (no slot left: a reader that
            // sleeps in poll must see what came before it).
            let ring = taken + n == total || st.free.is_empty();
            let flags = if ring { BELLED } else { 0 };
            if !self.post_send(slot, DATA, flags, number, n) {
                st.free.push(slot);
                st.broken = true;
                drop(st);
                return lost(taken, chunk_at);
            }
            st.in_flight += 1;
            st.sent = number;
            st.slot_len[slot] = n;
            st.slot_number[slot] = number;
            if let Some(p) = &self.page {
                let acked = st.sent.wrapping_sub(st.in_flight as u32);
                p.note_sent(st.tx_acked, acked, number);
            }
            if ring {
                self.ringing.fetch_add(1, Ordering::AcqRel);
            }
            drop(st);
            taken += n;
            // Rung after the post: a reader woken by it finds the message.
            if ring {
                let rang = kernel::send_doorbell(fd, nosignal);
                self.ringing.fetch_sub(1, Ordering::AcqRel);
                if rang.is_err() {
                    return Ok(taken);
                }
            }
        }
        Ok(taken)
    }

    pub(super) fn flush_all(&self, fd: RawFd) {
        let start = Instant::now();
        // Short naps first: the acknowledgement usually comes within a
        // round trip, and the progress thread may take it off the VI's
        // socket before this nap sees it readable (then only the nap's
        // end looks again: a forking server's child, closing after its
        // answer, waited the whole 10 ms slice for an acknowledgement
        // that had come within 0.1 ms).
        let mut step = Duration::from_micros(50);
        // Looks without sleeping first, for about a round trip and the
        // peer's acknowledgement delay: a nap that the acknowledgement
        // should end is often ended by its timer instead (the progress
        // thread took the acknowledgement), 50 µs and the timer's slack
        // later, and a server's close waited ~90 µs more than the
        // acknowledgement took.
        let mut look = Window::new(FLUSH_LOOK, SPIN_CONTENDED_NS).start();
        while start.elapsed() < LINGER {
            {
                let mut st = lock(&self.state);
                self.reap(&mut st);
                if st.in_flight == 0 || st.broken {
                    return;
                }
            }
            if look.go_on_busy() {
                continue;
            }
            if hung_up_both(fd) {
                return;
            }
            nap(&self.vi, fd, 0, step);
            step = (step * 2).min(SLICE);
        }
    }
}
