//! The two halves of a shared copy (see `shm::shared_copy`): the receiver
//! pulling a CMA message with the sender's help, and the sender pushing
//! pieces of a message the receiver announced.

use super::ShmChannel;
use crate::devices::shm::shared_copy::{count_piece, pieces};
use crate::ranges::{self, Range};
use crate::sys::cma;

/// Spins between two looks at whether the sender is still there while
/// waiting for its last pieces.
const LIVENESS_EVERY: u32 = 1 << 12;
/// Waiting longer than this for the sender's last pieces, the receiver
/// naps `NAP_US` between looks.
const NAP_AFTER_NS: u64 = 1_000_000;
const NAP_US: u64 = 100;

/// The piece size for a transfer of `total` bytes: at least `least`
/// bytes, and large enough for at most `MOST_PIECES` pieces (each piece is
/// a system call and a walk of both page tables; eight keep both copiers
/// busy, and a preempted copier holds the other back by one piece). 0
/// when sharing is off.
fn piece_for(total: u64, least: u64) -> u64 {
    if least == 0 {
        return 0;
    }
    total
        .div_ceil(MOST_PIECES)
        .next_multiple_of(4096)
        .max(least)
}

const MOST_PIECES: u64 = 8;

impl ShmChannel {
    /// Receiver: copies message `seq` (`total` bytes) from the sender's
    /// `remote` ranges into our `local` ones, sharing the pieces with the
    /// sender when it can write into us and is running. Returns the bytes
    /// moved, as `cma::read_from` does; nothing of the sender's lands in
    /// `local` after this returns.
    pub(super) fn pull(
        &mut self,
        seq: u64,
        local: &[Range],
        remote: &[Range],
        total: u64,
    ) -> std::io::Result<u64> {
        let piece = piece_for(total, self.cfg.cma_piece as u64);
        // `cma`: the peer reaches our memory, so it can push pieces too.
        if piece == 0 || !self.cma || total < 2 * piece {
            return cma::read_from(self.peer_pid, local, remote);
        }
        self.copy_gen = self.copy_gen.wrapping_add(1).max(1);
        let gen = self.copy_gen;
        if !self.rx_copy.open(gen, seq, total, piece, local) {
            return cma::read_from(self.peer_pid, local, remote);
        }
        let n = pieces(total, piece);
        let mut error = None;
        while let Some(i) = self.rx_copy.claim(gen, n) {
            let off = i * piece;
            let len = piece.min(total - off);
            let got = cma::read_from(
                self.peer_pid,
                &ranges::slice(local, off, len),
                &ranges::slice(remote, off, len),
            );
            let ok = matches!(got, Ok(m) if m == len);
            if !ok && error.is_none() {
                error = Some(
                    got.err()
                        .unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EFAULT)),
                );
            }
            self.rx_copy.finish_piece(len, ok);
            count_piece(false);
        }
        // Wait for the pieces the sender claimed: it is copying them now.
        // A piece takes microseconds; a sender still not done after
        // `NAP_AFTER_NS` was descheduled or stopped, and is waited for in
        // naps rather than with a spinning CPU.
        let mut spins = 0u32;
        let mut since = None;
        while self.rx_copy.done() < total {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(LIVENESS_EVERY) {
                if crate::sys::poll::hung_up(self.sock.raw_fd()) {
                    // The sender is gone, and with it its copying.
                    error.get_or_insert_with(|| std::io::Error::from_raw_os_error(libc::ESRCH));
                    break;
                }
                let now = crate::sys::now_ns();
                let t0 = *since.get_or_insert(now);
                if now - t0 >= NAP_AFTER_NS {
                    std::thread::sleep(std::time::Duration::from_micros(NAP_US));
                } else {
                    std::thread::yield_now();
                }
            } else {
                std::hint::spin_loop();
            }
        }
        let failed = self.rx_copy.failed();
        self.rx_copy.close();
        match error {
            Some(e) => Err(e),
            None if failed => Err(std::io::Error::from_raw_os_error(libc::EFAULT)),
            None => Ok(total),
        }
    }

    /// Sender: pushes pieces of the CMA message the peer is pulling, if it
    /// is one of ours still in flight. Returns whether it copied anything.
    pub(super) fn help_peer_copy(&mut self) -> bool {
        let consumed = self.tx.consumed();
        while self.cma_sent.front().is_some_and(|(s, _)| *s <= consumed) {
            self.cma_sent.pop_front();
        }
        let Some(t) = self.tx_copy.peek() else {
            return false;
        };
        let Some((_, source)) = self.cma_sent.iter().find(|(s, _)| *s == t.seq) else {
            return false;
        };
        if !t.matches(ranges::total(source)) {
            return false;
        }
        let n = pieces(t.total, t.piece);
        let mut did = false;
        while let Some(i) = self.tx_copy.claim(t.gen(), n) {
            let (off, len) = t.piece_at(i);
            // The source is our posted send's validated memory, held until
            // the peer counts the message consumed; the destination is in
            // the peer's address space, which the kernel checks.
            let got = cma::write_to(
                self.peer_pid,
                &ranges::slice(source, off, len),
                &ranges::slice(&t.dst, off, len),
            );
            self.tx_copy
                .finish_piece(len, matches!(got, Ok(m) if m == len));
            count_piece(true);
            did = true;
        }
        did
    }
}
