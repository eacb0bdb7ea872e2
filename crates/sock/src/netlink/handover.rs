//! Handing a connection between hosts back to the kernel, so that a
//! process without the VI can use it: a child forked after the first use,
//! a program exec'd on the socket. The VI's maker does it (on request, at
//! its exec, at its last close or exit after a fork), and so does an end
//! that sees its peer did:
//! - it waits for its writers' doorbells, puts the switch byte `S` into
//!   its kernel stream, ends the VI, then sends the number of payload
//!   bytes the peer acknowledged (8 bytes, little-endian) and, raw, every
//!   message the peer did not acknowledge, in order;
//! - it takes what arrived on the VI and leaves whatever is unread in the
//!   end's page (`page`), with the number of bytes it took off the VI in
//!   all; a reader (`switched`) hands that out first, then drops the
//!   peer's doorbells up to its switch byte, reads the peer's count and
//!   drops as many raw bytes as it had already taken beyond it (an
//!   acknowledgement lost on the way makes the peer send again what we
//!   have): nothing is lost or read twice.
//!
//! An end learns that its peer switched from the switch byte in its
//! kernel stream, where only doorbells stood before.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::page;

mod bell;
use super::switched::NetSwitched;
use super::{lock, NetLink, State, HDR};
use crate::control::SWITCH_BYTE;
use crate::link::{DOORBELL, HELLO};
use crate::real::real;

/// Links this process made and still has.
static LINKS: AtomicIsize = AtomicIsize::new(0);
static WATCHING: AtomicBool = AtomicBool::new(false);
/// How long an end whose VI failed looks for its peer's switch byte or
/// its end before it hands over by itself.
const PEER_SWITCH_WAIT: Duration = Duration::from_millis(100);

pub fn count_link(delta: isize) {
    if LINKS.fetch_add(delta, Ordering::AcqRel) + delta > 0 {
        start_watcher();
    }
}

/// The watcher is looking through the connections (holding their locks).
static SCANNING: AtomicBool = AtomicBool::new(false);
/// A fork is under way: the watcher does not look.
static FORKING: AtomicBool = AtomicBool::new(false);

/// Before a fork: waits until the watcher holds no lock (a child would
/// inherit it locked, and its first call on that connection would wait
/// for good: compat fork-close between hosts hung 1 run in 100 beside
/// three CPU hogs), and keeps it from taking one until `after_fork`.
pub fn before_fork() {
    FORKING.store(true, Ordering::SeqCst);
    while SCANNING.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
}

/// After a fork, in the parent and the child.
pub fn after_fork() {
    FORKING.store(false, Ordering::SeqCst);
}

/// In a child just forked: the watcher (and its bell) was our parent's.
pub fn forked_child() {
    bell::forked_child();
    WATCHING.store(false, Ordering::Release);
    super::linger::forked_child();
    after_fork();
}

/// One look through the connections, unless a fork is under way.
fn scan() -> bool {
    if FORKING.load(Ordering::SeqCst) {
        return false;
    }
    SCANNING.store(true, Ordering::SeqCst);
    let served = !FORKING.load(Ordering::SeqCst) && crate::conn::serve_requests();
    SCANNING.store(false, Ordering::SeqCst);
    served
}

/// From the first link on (and again after a fork): a thread that hands
/// a connection over when a process without the VI asks (the maker may
/// be busy elsewhere, or wait for that very process, as a shell waits
/// for `cat`; a vfork, as Python's subprocess makes, runs no fork
/// handler that could start it later). An asker rings its bell (`ring`)
/// and the thread looks at once; it also looks every millisecond after a
/// request, backing off to a second while none comes (to 50 ms if it has
/// no bell: a second thread of its kind holds the name), so an asker
/// whose ring was lost is still served. Before the bell it looked
/// twenty times a second for good.
pub fn start_watcher() {
    if LINKS.load(Ordering::Acquire) <= 0 || WATCHING.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = openvia_core::sys::thread::spawn_quiet("viarun-handover", || {
        let bell = bell::open();
        let idle = if bell.is_some() {
            bell::IDLE_LOOK
        } else {
            Duration::from_millis(50)
        };
        let mut pause = idle;
        loop {
            match &bell {
                Some(b) => b.wait(pause),
                None => std::thread::sleep(pause),
            }
            pause = if scan() {
                Duration::from_millis(1)
            } else {
                (pause * 2).min(idle)
            };
        }
    });
    if spawned.is_err() {
        WATCHING.store(false, Ordering::Release);
    }
}

/// Asks process `owner`'s watcher to look now (see `start_watcher`).
pub fn ring(owner: u32) {
    bell::ring(owner);
}

/// Up to 64 bytes waiting in the kernel stream, not taken: -1 with errno
/// EAGAIN when none wait. A pending error (a reset) is not looked at
/// here: a receive would take it, and the reader must get it (-1 with
/// errno ECONNRESET instead).
fn peek(fd: RawFd, buf: &mut [u8; 64]) -> isize {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd of ours.
    unsafe { (crate::real::real().poll)(&mut p, 1, 0) };
    if p.revents & libc::POLLERR != 0 {
        crate::set_errno(libc::ECONNRESET);
        return -1;
    }
    if p.revents & libc::POLLIN == 0 {
        crate::set_errno(libc::EAGAIN);
        return -1;
    }
    // SAFETY: up to 64 bytes into our own buffer.
    unsafe {
        (real().recv)(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    }
}

/// Whether the peer's switch byte (anything but doorbells) waits in the
/// kernel stream.
pub fn switch_ahead(fd: RawFd) -> bool {
    let mut buf = [0u8; 64];
    let n = peek(fd, &mut buf);
    n > 0
        && buf[..n as usize]
            .iter()
            .any(|&b| b != DOORBELL && b != HELLO)
}

/// What the kernel stream says of a peer whose VI failed us.
enum Peer {
    /// Its switch byte is there.
    Switched,
    /// EOF, a hang-up or an error: the connection ended.
    Gone,
    /// Nothing within the wait, and the socket lives.
    Quiet,
}

/// Waits up to `limit` for the peer's switch byte, or the end.
fn await_switch(fd: RawFd, limit: Duration) -> Peer {
    let start = Instant::now();
    loop {
        if switch_ahead(fd) {
            return Peer::Switched;
        }
        let mut buf = [0u8; 64];
        let n = peek(fd, &mut buf);
        if n == 0 || (n < 0 && crate::kernel::errno() != libc::EAGAIN) {
            return Peer::Gone;
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        };
        let left = limit.saturating_sub(start.elapsed());
        // SAFETY: one pollfd of ours.
        unsafe { (crate::real::real().poll)(&mut p, 1, left.as_millis().min(10) as libc::c_int) };
        if p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 && !switch_ahead(fd) {
            return Peer::Gone;
        }
        if left.is_zero() {
            return Peer::Quiet;
        }
    }
}

/// Sends all of `bytes`, waiting for room (the socket may be nonblocking).
/// Sends what the hand-over queued now, whatever the program's Nagle
/// setting: the switch byte and the count go in two writes (the VI ends
/// between them), and with Nagle on the second waited for the first's
/// acknowledgement, which the peer delays by 40 ms (each connection a
/// client closed after a spawn then took ~44 ms to hand over at the
/// peer). Setting TCP_NODELAY pushes what is queued; the program's own
/// setting is put back.
pub(super) fn push_now(fd: RawFd) {
    let mut on: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let one: libc::c_int = 1;
    // SAFETY: getsockopt/setsockopt of one int on the connection's socket.
    unsafe {
        if libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&mut on as *mut libc::c_int).cast(),
            &mut len,
        ) != 0
            || on != 0
        {
            return;
        }
        let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            size,
        );
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&on as *const libc::c_int).cast(),
            size,
        );
    }
}

pub(super) fn send_all(fd: RawFd, bytes: &[u8]) -> Result<(), i32> {
    let mut at = 0;
    while at < bytes.len() {
        // SAFETY: the rest of our own buffer.
        let n = unsafe {
            (real().send)(
                fd,
                bytes[at..].as_ptr().cast(),
                bytes.len() - at,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            at += n as usize;
            continue;
        }
        match crate::kernel::errno() {
            libc::EINTR => {}
            libc::EAGAIN => {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one pollfd of ours.
                unsafe { (crate::real::real().poll)(&mut p, 1, -1) };
            }
            e => return Err(e),
        }
    }
    Ok(())
}

impl NetLink {
    /// The VI failed, or the peer's switch byte came: unless the kernel
    /// says the connection ended (a peer that closed or died; looked at
    /// for up to `PEER_SWITCH_WAIT`, as its FIN may trail its VI's end),
    /// hand ours over too. Without the peer's switch byte that is ours to
    /// start: its VI may have gone with an exec no hook saw, and the
    /// program it became does its part when it uses the connection.
    pub(super) fn follow_peer(&self, fd: RawFd) -> Option<Arc<NetSwitched>> {
        if let Some(s) = self.handed.get() {
            return Some(s.clone());
        }
        match await_switch(fd, PEER_SWITCH_WAIT) {
            Peer::Gone => None,
            Peer::Switched | Peer::Quiet => self.hand_over_now(fd).ok(),
        }
    }

    /// Hands the connection to the kernel (see the module text); every
    /// process of this end then goes on through the page.
    pub(super) fn hand_over_now(&self, fd: RawFd) -> Result<Arc<NetSwitched>, i32> {
        if let Some(s) = self.handed.get() {
            return Ok(s.clone());
        }
        let page = self.page.clone().ok_or(libc::EIO)?;
        let mut st = lock(&self.state);
        if let Some(s) = self.handed.get() {
            return Ok(s.clone());
        }
        if !page.begin() && page.state() == page::HANDED {
            // A process sharing our memory already did (a vfork child).
            let s = Arc::new(NetSwitched::new(page, self.record.clone()));
            return Ok(self.handed.get_or_init(|| s).clone());
        }
        // Our switch byte follows every doorbell: writers between their
        // post and their doorbell finish first (none can start: we hold
        // the state).
        let start = Instant::now();
        while self.ringing.load(Ordering::Acquire) != 0 && start.elapsed() < Duration::from_secs(1)
        {
            std::thread::yield_now();
        }
        let sent = send_all(fd, &[SWITCH_BYTE]);
        let _ = self.vi.disconnect();
        self.reap(&mut st);
        self.pump(&mut st);
        st.broken = true;
        if sent.is_ok() {
            let _ = send_all(fd, &st.tx_acked.to_le_bytes());
            let _ = self.send_unacked(fd, &mut st);
            push_now(fd);
        }
        let left = self.left_over(&st);
        page.publish(&left, st.rx_total);
        drop(st);
        let s = Arc::new(NetSwitched::new(page, self.record.clone()));
        Ok(self.handed.get_or_init(|| s).clone())
    }

    /// Sends raw, in order, the messages the peer did not acknowledge.
    fn send_unacked(&self, fd: RawFd, st: &mut State) -> Result<(), i32> {
        let mut slots = std::mem::take(&mut st.unacked);
        // In flight are the numbers up to `sent`: counted from `sent + 1`
        // (wrapping) they sort in the order they were posted.
        let from = st.sent.wrapping_add(1);
        slots.sort_by_key(|&s| st.slot_number[s].wrapping_sub(from));
        for slot in slots {
            let len = st.slot_len[slot];
            // SAFETY: the slot's buffer holds its message's `len` payload
            // bytes after the header; the slot stays ours (never posted
            // again).
            let payload =
                unsafe { std::slice::from_raw_parts(self.region.buffer_ptr(slot).add(HDR), len) };
            send_all(fd, payload)?;
        }
        Ok(())
    }

    /// What arrived and is unread, in order, as slices of the receive
    /// buffers.
    fn left_over<'a>(&'a self, st: &State) -> Vec<&'a [u8]> {
        let mut out = Vec::new();
        let mut next = st.consumed.wrapping_add(1);
        for (k, a) in st.arrived.iter().enumerate() {
            if a.number != next {
                break; // not in order: nothing after it is ours to give
            }
            next = next.wrapping_add(1);
            let from = if k == 0 { st.taken.min(a.len) } else { 0 };
            // SAFETY: the receive buffer holds the message's `len` bytes
            // after its header; the VI is ended, nothing writes there.
            out.push(unsafe {
                std::slice::from_raw_parts(
                    self.region.buffer_ptr(a.slot).add(HDR + from),
                    a.len - from,
                )
            });
        }
        out
    }
}
