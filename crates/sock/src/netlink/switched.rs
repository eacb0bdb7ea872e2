//! A connection between hosts handed back to the kernel (`handover`), as
//! every process of this end uses it from then on: reads hand out what
//! the VI had unread (from the page), then drop the peer's doorbells up to
//! its switch byte, read its acknowledged count and drop the raw bytes we
//! already had; after that, and for every write, the kernel socket is the
//! connection. A process without the VI that uses the connection first
//! asks the VI's maker for the hand-over and waits for it.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::page::{self, Page};
use crate::carried::{copy_out, Carried};
use crate::control::SWITCH_BYTE;
use crate::inherit::Inherit;
use crate::kernel;
use crate::link::{DOORBELL, HELLO};
use crate::real::real;

pub struct NetSwitched {
    page: Arc<Page>,
    /// Seen HANDED (no need to look again).
    ready: AtomicBool,
    /// Held while the connection is used here: a further exec finds it.
    _record: Option<Arc<Inherit>>,
}

/// Where `settle_stream` left the stream.
enum Settled {
    /// Plain data next (or EOF, or an error: a receive reports them).
    Raw,
    /// Left-overs came to be: look again.
    Look,
    /// Nothing to go on yet: wait for the kernel socket.
    Wait,
}

/// What the start of the kernel stream says, before the peer's count.
enum Ahead {
    /// Only doorbells (how many): the switch byte is still to come.
    Doorbells(usize),
    /// Doorbells, the switch byte and the count: (bytes to take, count).
    Switch(usize, u64),
    /// The switch byte is there, its count not yet whole.
    Partial,
    /// Something that is neither: the stream is not ours to read.
    Garbage,
}

fn scan(bytes: &[u8]) -> Ahead {
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            DOORBELL | HELLO => continue,
            SWITCH_BYTE => {
                let Some(count) = bytes.get(i + 1..i + 9) else {
                    return Ahead::Partial;
                };
                let mut c = [0u8; 8];
                c.copy_from_slice(count);
                return Ahead::Switch(i + 9, u64::from_le_bytes(c));
            }
            _ => return Ahead::Garbage,
        }
    }
    Ahead::Doorbells(bytes.len())
}

/// How long a process about to be sandboxed waits for its peer's part of
/// the hand-over (`settle_for_sandbox`).
const SANDBOX_SETTLE: Duration = Duration::from_secs(5);

/// How long a read that moved the stream past the peer's switch byte
/// waits for the peer's first raw bytes before it says EAGAIN (as
/// `crate::switched::read` does on one host).
const RAW_AFTER_SWITCH: Duration = Duration::from_millis(100);

/// Pauses (of a millisecond) of a process waiting for a hand-over between
/// two rings of the maker's watcher.
const RING_AGAIN: u32 = 64;

impl NetSwitched {
    pub fn new(page: Arc<Page>, record: Option<Arc<Inherit>>) -> NetSwitched {
        NetSwitched {
            page,
            ready: AtomicBool::new(false),
            _record: record,
        }
    }

    /// Asks the VI's maker for the hand-over (if not yet done) and waits
    /// for it. A program the maker became by an exec no hook saw, or any
    /// process of this end once the maker is gone without doing it, does
    /// it in its stead; EIO if the maker died in the middle of it.
    fn ensure_handed(&self, fd: RawFd) -> Result<(), i32> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut looks = 0u32;
        loop {
            match self.page.state() {
                page::HANDED => {
                    self.ready.store(true, Ordering::Release);
                    return Ok(());
                }
                s => {
                    let owner = self.page.owner();
                    if owner == crate::process::id() {
                        // We are a program the VI's maker became through
                        // an exec no hook saw: the VI went with it.
                        self.take_over(fd)?;
                        continue;
                    }
                    if !page::alive(owner) {
                        if s == page::HANDING {
                            return Err(libc::EIO); // it died handing over
                        }
                        // The maker went with its VI, never asked (a
                        // shell's first command on a descriptor, done
                        // before the second one runs): the page, which
                        // outlived it in the record, has what it kept.
                        self.take_over(fd)?;
                        continue;
                    }
                    // Asked, or asked long enough ago that the ring may
                    // have been lost: ring the maker's watcher.
                    looks = looks.wrapping_add(1);
                    if (s == page::LIVE && self.page.request())
                        || (s == page::REQUESTED && looks % RING_AGAIN == 0)
                    {
                        super::handover::ring(owner);
                    }
                    self.page.pause_while(s);
                }
            }
        }
    }

    /// The hand-over in the stead of the VI's maker, whose image an exec
    /// replaced (see `handover`): the switch byte, the count the peer saw
    /// acknowledged and, raw, what it did not (from the send buffers in
    /// the page); what is left over is known once the peer's count comes.
    fn take_over(&self, fd: RawFd) -> Result<(), i32> {
        if !self.page.begin() {
            return Ok(()); // another thread of ours is at it, or done
        }
        let Some((acked, unacked)) = self.page.unacked_sends() else {
            self.page.publish_dead();
            return Err(libc::ECONNRESET);
        };
        let mut sent = super::handover::send_all(fd, &[SWITCH_BYTE]);
        if sent.is_ok() {
            sent = super::handover::send_all(fd, &acked.to_le_bytes());
        }
        for p in unacked {
            if sent.is_ok() {
                sent = super::handover::send_all(fd, p);
            }
        }
        super::handover::push_now(fd);
        self.page.publish_dead();
        sent
    }

    /// For a socket this process lets go (`linger`): takes the peer's
    /// switch prefix off as far as it has come. Some(true) once done (plain
    /// data next, EOF or an error), Some(false) if more is to come, None
    /// if another process holds the page's lock (look again).
    pub fn settle_for_close(&self, fd: RawFd) -> Option<bool> {
        let _lock = self.page.lock(true)?;
        loop {
            if self.page.plain() {
                return Some(true);
            }
            match self.settle_stream(fd) {
                Ok(Settled::Look) => continue,
                Ok(Settled::Wait) => return Some(false),
                Ok(Settled::Raw) | Err(_) => return Some(true),
            }
        }
    }

    /// Before this process puts itself under a seccomp filter: the
    /// hand-over asked for and waited for, and the stream moved on past
    /// the peer's switch byte, its count and what we had already (the
    /// peer's part, which our switch byte asks of it, waited for up to
    /// `SANDBOX_SETTLE`). Then only what we had not read is left, in the
    /// page: handed out from memory (`Sandboxed`), no system call of ours
    /// needed.
    pub fn settle_for_sandbox(&self, fd: RawFd) -> Option<Arc<dyn Carried>> {
        let deadline = std::time::Instant::now() + SANDBOX_SETTLE;
        self.ensure_handed(fd).ok()?;
        loop {
            {
                let _lock = self.page.lock(false)?;
                if self.page.read_mode() == page::RAW && self.page.skip() == 0 {
                    break;
                }
                match self.settle_stream(fd) {
                    Ok(Settled::Raw) => break,
                    Ok(Settled::Look) => continue,
                    Ok(Settled::Wait) => {}
                    Err(_) => return None,
                }
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            kernel::readable_within(fd, left);
        }
        Some(Arc::new(super::sandboxed::Sandboxed::new(
            self.page.clone(),
        )))
    }

    /// A write from `at` (segment, offset) of `data` on: straight to the
    /// kernel.
    pub fn write_from(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        at: (usize, usize),
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32> {
        self.ensure_handed(fd)?;
        let mut flags = 0;
        if dontwait {
            flags |= libc::MSG_DONTWAIT;
        }
        if nosignal {
            flags |= libc::MSG_NOSIGNAL;
        }
        let bufs = crate::switched::parts(data.iter().copied(), at)
            .map(|b| (b.as_ptr() as *mut u8, b.len()));
        crate::switched::transfer(fd, bufs, flags, true)
    }

    /// Under the page lock: moves the stream on to plain data as far as
    /// it can without waiting (left-overs are handed out by the caller).
    fn settle_stream(&self, fd: RawFd) -> Result<Settled, i32> {
        let mut buf = [0u8; 256];
        loop {
            let mode = self.page.read_mode();
            if mode == page::AWAIT_SWITCH || mode == page::DEAD_VI {
                // SAFETY: up to 256 bytes into our own buffer.
                let n = unsafe {
                    (real().recv)(
                        fd,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        libc::MSG_PEEK | libc::MSG_DONTWAIT,
                    )
                };
                if n == 0 {
                    return Ok(Settled::Raw); // EOF: the reader sees it
                }
                if n < 0 {
                    return match kernel::errno() {
                        libc::EAGAIN | libc::EINTR => Ok(Settled::Wait),
                        _ => Ok(Settled::Raw), // the error: the reader sees it
                    };
                }
                let take = match scan(&buf[..n as usize]) {
                    Ahead::Garbage => return Err(libc::EIO),
                    Ahead::Partial => return Ok(Settled::Wait),
                    Ahead::Doorbells(k) => k,
                    Ahead::Switch(k, count) if mode == page::DEAD_VI => {
                        drop_bytes(fd, k)?;
                        if !self.page.settle_dead(count) {
                            return Err(libc::EIO);
                        }
                        return Ok(Settled::Look); // left-overs first, if any
                    }
                    Ahead::Switch(k, count) => {
                        let had = self.page.rx_total();
                        if count > had {
                            return Err(libc::EIO);
                        }
                        drop_bytes(fd, k)?;
                        self.page.set_raw(had - count);
                        continue;
                    }
                };
                drop_bytes(fd, take)?;
                return Ok(Settled::Wait);
            }
            let skip = self.page.skip();
            if skip == 0 {
                return Ok(Settled::Raw);
            }
            let k = (skip as usize).min(buf.len());
            // SAFETY: up to k bytes into our own buffer.
            let n = unsafe { (real().recv)(fd, buf.as_mut_ptr().cast(), k, libc::MSG_DONTWAIT) };
            match n {
                0 => return Ok(Settled::Raw),
                n if n > 0 => self.page.set_skip(skip - n as u64),
                _ => {
                    return match kernel::errno() {
                        libc::EAGAIN | libc::EINTR => Ok(Settled::Wait),
                        _ => Ok(Settled::Raw),
                    }
                }
            }
        }
    }
}

/// Takes `n` bytes already seen (peeked) off the kernel stream.
fn drop_bytes(fd: RawFd, n: usize) -> Result<(), i32> {
    let mut buf = [0u8; 256];
    let mut left = n;
    while left > 0 {
        // SAFETY: up to 256 bytes into our own buffer.
        let r = unsafe {
            (real().recv)(
                fd,
                buf.as_mut_ptr().cast(),
                left.min(buf.len()),
                libc::MSG_DONTWAIT,
            )
        };
        if r <= 0 {
            return Err(libc::EIO);
        }
        left -= r as usize;
    }
    Ok(())
}

impl Carried for NetSwitched {
    fn read(
        &self,
        fd: RawFd,
        out: &mut [&mut [u8]],
        dontwait: bool,
        peek: bool,
        all: bool,
    ) -> Result<usize, i32> {
        self.ensure_handed(fd)?;
        let awaited_switch = !self.page.plain() && self.page.read_mode() != page::RAW;
        // Until when a read that would say EAGAIN waits instead, once the
        // peer's switch prefix made the socket readable (below).
        let mut grace: Option<std::time::Instant> = None;
        let mut within_grace = |fd: RawFd| {
            let until = *grace.get_or_insert_with(|| std::time::Instant::now() + RAW_AFTER_SWITCH);
            let left = until.saturating_duration_since(std::time::Instant::now());
            !left.is_zero() && kernel::readable_within(fd, left)
        };
        // Asked of the kernel (a system call) only where we may wait
        // ourselves: plain reads leave waiting to the kernel.
        let nonblocking = || dontwait || kernel::is_nonblocking(fd);
        let want: usize = out.iter().map(|o| o.len()).sum();
        let (mut got, mut seg, mut off) = (0usize, 0usize, 0usize);
        loop {
            if !self.page.plain() {
                let Some(_lock) = self.page.lock(nonblocking()) else {
                    return if got > 0 { Ok(got) } else { Err(libc::EAGAIN) };
                };
                let (read, len) = self.page.left();
                if read < len {
                    let n = copy_out(
                        self.page.left_bytes(read, want - got),
                        out,
                        &mut seg,
                        &mut off,
                    );
                    got += n;
                    if !peek {
                        self.page.set_left_read(read + n as u64);
                    }
                    // MSG_WAITALL: the rest comes from the kernel.
                    if got == want || !all || peek {
                        return Ok(got);
                    }
                    continue;
                }
                match self.settle_stream(fd)? {
                    Settled::Raw => {}
                    Settled::Look => continue,
                    Settled::Wait => {
                        drop(_lock);
                        if got > 0 && !all {
                            return Ok(got);
                        }
                        if nonblocking() {
                            // As below: the rest of the peer's switch
                            // prefix, or its first data, is on its way.
                            if awaited_switch && got == 0 && within_grace(fd) {
                                continue;
                            }
                            return if got > 0 { Ok(got) } else { Err(libc::EAGAIN) };
                        }
                        kernel::wait_readable(fd);
                        continue;
                    }
                }
            }
            let mut flags = 0;
            if dontwait || got > 0 && !all {
                flags |= libc::MSG_DONTWAIT;
            }
            if peek {
                flags |= libc::MSG_PEEK;
            }
            if all {
                flags |= libc::MSG_WAITALL;
            }
            let mut once = || {
                let bufs = out
                    .iter_mut()
                    .skip(seg)
                    .enumerate()
                    .map(|(k, b)| if k == 0 { &mut b[off..] } else { &mut b[..] })
                    .map(|b| (b.as_mut_ptr(), b.len()));
                crate::switched::transfer(fd, bufs, flags, false)
            };
            let mut r = once();
            while awaited_switch && got == 0 && r == Err(libc::EAGAIN) && within_grace(fd) {
                // The peer's switch prefix made the socket readable, and
                // a program that polled reads now: what the peer writes
                // next comes within moments (it handed the connection
                // over in order to go on). EAGAIN after a readiness the
                // kernel alone would not have given is fatal to some
                // (OpenSSH's client).
                r = once();
            }
            return match r {
                Ok(n) => Ok(got + n),
                Err(_) if got > 0 => Ok(got),
                Err(e) => Err(e),
            };
        }
    }
    fn write(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32> {
        self.write_from(fd, data, (0, 0), dontwait, nosignal)
    }
    fn settle_for_sandbox(&self, fd: RawFd) -> Option<Arc<dyn Carried>> {
        NetSwitched::settle_for_sandbox(self, fd)
    }
    fn flush(&self) {}
    fn shut(&self) {}
    fn set_nonblocking(&self, _on: bool) {}
    /// Every process of this end may use it.
    fn owner_pid(&self) -> u32 {
        crate::process::id()
    }
    fn unread(&self, fd: RawFd) -> usize {
        let (read, len) = self.page.left();
        let left = (len - read.min(len)) as usize;
        if left > 0 || !self.page.plain() {
            return left;
        }
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int (the C library's ioctl).
        let r = unsafe { (real().ioctl)(fd, libc::FIONREAD, (&mut n as *mut libc::c_int).cast()) };
        if r == 0 {
            n.max(0) as usize
        } else {
            0
        }
    }
    fn writable(&self) -> bool {
        true
    }
    fn wait_room(&self, _fd: RawFd, _limit: Duration) {}
    /// Before this process lets the connection go: the peer's doorbells
    /// (and its switch byte) come off the socket once the left-overs are
    /// read, so that closing does not reset the connection over bytes
    /// the program never saw.
    fn hand_over(&self, fd: RawFd, _always: bool) {
        if self.page.state() != page::HANDED {
            return;
        }
        if let Some(_lock) = self.page.lock(true) {
            let (read, len) = self.page.left();
            if read == len && self.page.read_mode() != page::RAW {
                let _ = self.settle_stream(fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{scan, Ahead};

    #[test]
    fn the_switch_byte_and_its_count_are_found_behind_doorbells() {
        let mut s = b"DDS".to_vec();
        s.extend_from_slice(&7u64.to_le_bytes());
        s.extend_from_slice(b"data");
        assert!(matches!(scan(&s), Ahead::Switch(11, 7)));
        assert!(matches!(scan(b"DDD"), Ahead::Doorbells(3)));
        assert!(matches!(scan(b"DS\x01\x02"), Ahead::Partial));
        assert!(matches!(scan(b"Dx"), Ahead::Garbage));
    }
}
