//! The link as the library's calls see any carried connection
//! (`carried::Carried`): reads, writes and readiness through the ring and
//! the control page, and what a switch to the kernel hands over.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Link;
use crate::control::peer_of;
use crate::kernel;

/// How long a close or shutdown looks for the reader to take the last
/// messages before its FIN waits aside (`acknowledged_soon`).
const ACKNOWLEDGED_LOOK: std::time::Duration = std::time::Duration::from_micros(100);

impl crate::carried::Carried for Link {
    fn read(
        &self,
        fd: RawFd,
        out: &mut [&mut [u8]],
        dontwait: bool,
        peek: bool,
        all: bool,
    ) -> Result<usize, i32> {
        Link::read(self, fd, out, dontwait, peek, all)
    }
    fn write(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32> {
        Link::write(self, fd, data, dontwait, nosignal)
    }
    fn flush(&self) {
        Link::flush(self)
    }
    fn shut(&self) {
        Link::shut(self)
    }
    fn close_writes(&self) {
        Link::close_writes(self)
    }
    fn unacknowledged(&self) -> bool {
        Link::unacknowledged(self)
    }
    fn acknowledged_soon(&self) -> bool {
        // The reader takes the messages when it runs: give it the CPU a
        // few times (a two-CPU box has none spare) before the wait goes
        // aside, where the FIN waits for the linger thread's next look.
        let start = std::time::Instant::now();
        loop {
            if !Link::unacknowledged(self) {
                return true;
            }
            if start.elapsed() >= ACKNOWLEDGED_LOOK {
                return false;
            }
            std::thread::yield_now();
        }
    }
    fn set_nonblocking(&self, on: bool) {
        Link::set_nonblocking(self, on)
    }
    fn owner_pid(&self) -> u32 {
        self.owner_pid
    }
    fn unread(&self, fd: RawFd) -> usize {
        if self.rx_word().seen().switched {
            return crate::switched::unread(&self.control, self.side, fd);
        }
        Link::unread(self)
    }
    fn writable(&self) -> bool {
        self.tx_word().seen().switched || Link::writable(self)
    }
    fn takes_poll_tokens(&self) -> bool {
        // Once handed back to the kernel, no message takes a token.
        !self.rx_word().seen().switched
    }
    fn ready_in_user_space(&self) -> bool {
        // Only unread messages: an end (FIN, reset) shows in the kernel,
        // and once switched, so does everything (a page flag that stays
        // set would say readable for good, and a nonblocking read EAGAIN).
        let s = self.rx_word().seen();
        !s.switched && s.posted != self.consumed_on_page()
    }
    fn offer_poll_token(&self) -> bool {
        self.rx_word()
            .offer_token(self.consumed_on_page(), usize::MAX)
    }
    fn poll_token_stands(&self) -> bool {
        let s = self.rx_word().seen();
        s.token && !s.shut && !s.switched
    }
    fn revoke_poll_token(&self) -> bool {
        self.rx_word().revoke_token()
    }
    fn stamp_looked(&self, now_us: u64) {
        self.control.set_looked(peer_of(self.side), now_us);
    }
    fn let_token_stand(&self) {
        self.standing.store(true, Ordering::Relaxed);
    }
    fn ring_late(&self, fd: RawFd, page: usize) -> bool {
        if page != self.page_id() {
            return false;
        }
        if self.tx_word().ring_late() {
            // A dead peer: its error shows at the next call.
            let _ = kernel::send_doorbell(fd, true);
            self.tx_word().rang();
        }
        true
    }
    fn wait_room(&self, _fd: RawFd, limit: std::time::Duration) {
        let used = self.control.consumed(self.side);
        if !Link::writable(self) && !self.tx_word().seen().switched {
            crate::unrung::ring_all();
            self.control.wait_for_room(self.side, used, limit);
        }
    }
    fn hand_over(&self, fd: RawFd, always: bool) {
        let shared = self.shared.load(Ordering::Relaxed);
        if always || shared || crate::process::forks() != self.forks {
            crate::switched::switch(&self.control, self.side);
        }
        if self.rx_word().seen().switched {
            crate::switched::drain(&self.control, self.side, fd);
        }
    }
    fn let_go(&self, _fd: RawFd) {
        crate::switched::switch(&self.control, self.side);
    }
    fn go_bare(&self, fd: RawFd) -> bool {
        crate::switched::bare_over(&self.control, self.side, fd)
    }
    fn switched(&self, fd: RawFd) -> Option<Arc<dyn crate::carried::Carried>> {
        Some(Arc::new(crate::switched::Switched::new(
            self.control.clone(),
            self.side,
            fd,
            self.record.clone(),
        )))
    }
}
