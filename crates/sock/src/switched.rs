//! A one-host connection handed back to the kernel, so that a process
//! without the VI can use it: a child forked after the connection was
//! used, or a program exec'd on the socket. Both ends then carry on over
//! plain kernel TCP, and two processes sharing the socket (after fork)
//! share it as the kernel shares any socket.
//!
//! The switch, done by whichever process of either end notices it first
//! (its first use in a new process, or a flag on the page):
//! - both directions' words get `SWITCH`: no writer announces another
//!   message (a writer that finds it set writes to the kernel instead);
//! - before an end's first raw write, one of its processes, once its
//!   end's last doorbell is sent, puts the switch byte `S` into its
//!   kernel stream (`Claim`): so `S` is the last of the doorbells, and an
//!   end that never writes again sends none;
//! - a reader first takes what is still unread in the ring, through the
//!   page's message table (not the VI, which only its maker can read),
//!   under the reading side's lock; then it drops kernel bytes up to and
//!   including `S` (doorbells and the hello); everything after is data.
//!
//! Nothing is read twice or lost: messages are used up only under the
//! lock, and the holder of the VI publishes how far into a message it has
//! read (`taken`) under the same lock.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::carried::{copy_out, reader_turn, Carried};
use crate::control::{peer_of, Claim, Control, Side, RING_BYTES, SWITCH_BYTE};
use crate::inherit::Inherit;
use crate::kernel;
use crate::link::SLOT_BYTES;
use crate::real::real;

/// How long a process waits for its end's last doorbell, or another
/// process's switch byte, before the connection is given up (EIO).
const CLAIM_LIMIT: Duration = Duration::from_secs(5);

/// Switches the connection, both directions: no writer of either end
/// announces another message from now on (writers asleep for room wake
/// and look). Cheap once done.
pub(crate) fn switch(control: &Control, side: Side) {
    let (tx, rx) = (control.tx(side), control.rx(side));
    if tx.seen().switched && rx.seen().switched {
        return;
    }
    tx.switch();
    rx.switch();
    control.wake_writers();
}

/// Before this end's first raw write: makes sure its switch byte is in
/// the kernel stream (sent here, or by another process of this end).
/// Only a writer sends it, so an end that never writes again sends
/// nothing into a socket its peer may have closed.
fn raw_tx(control: &Control, side: Side, fd: RawFd) -> Result<(), i32> {
    let tx = control.tx(side);
    if tx.raw() {
        return Ok(());
    }
    switch(control, side);
    let start = Instant::now();
    loop {
        match tx.claim() {
            Claim::Done => return Ok(()),
            Claim::Mine => {
                let mut sent = kernel::send_byte(fd, SWITCH_BYTE);
                if sent.is_ok() && control.rewind_asked(side) {
                    sent = resend_unread(control, side, fd);
                }
                // Even when the peer is gone: nobody waits for it then.
                tx.set_raw();
                return sent;
            }
            Claim::Wait if start.elapsed() > CLAIM_LIMIT => return Err(libc::EIO),
            Claim::Wait => std::thread::sleep(Duration::from_micros(20)),
        }
    }
}

/// Right before a program without the library is exec'd on the socket
/// (`Carried::go_bare`): the connection is switched, and the kernel
/// stream is made plain for that program, which cannot drop doorbells
/// or read the ring. Our switch byte goes out after our last doorbell
/// (the peer drops up to it, as for any switch). The peer is asked to
/// send what we did not read again, raw right after its own switch byte
/// (`ask_rewind`): then on our stream its doorbells up to that byte are
/// taken off. Where nothing of its is unread and it sent no switch byte
/// yet, we claim its place instead, so that it sends none and its raw
/// writes follow at once (it need not act). False, and the program
/// cannot use the connection, when a byte does not come in time (a peer
/// that neither reads nor writes). May run in a vfork child: no
/// allocation.
pub(crate) fn bare_over(control: &Control, side: Side, fd: RawFd) -> bool {
    let writer = peer_of(side);
    let Some(_lock) = control.lock_reader(writer, false) else {
        return false;
    };
    // Asked before the switch, so that no switch byte of the peer's can
    // go out without what we did not read behind it.
    control.ask_rewind(writer);
    switch(control, side);
    if control.raw_read(writer) {
        return raw_tx(control, side, fd).is_ok();
    }
    let theirs = control.rx(side);
    let unread = match left_in_ring(control, side) {
        Ok(n) => n,
        Err(_) => return false,
    };
    // Our switch byte also wakes a reader of the peer's, which then sends
    // its own (`read`).
    if raw_tx(control, side, fd).is_err() {
        return false;
    }
    let start = Instant::now();
    let sent_switch = loop {
        if unread > 0 {
            if theirs.raw() {
                break true;
            }
            if start.elapsed() > CLAIM_LIMIT {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        match theirs.claim() {
            // Its doorbells are all out (a claim waits for the one on
            // its way): from now on its stream is raw.
            Claim::Mine => {
                theirs.set_raw();
                break false;
            }
            Claim::Done => break true,
            Claim::Wait if start.elapsed() > CLAIM_LIMIT => return false,
            Claim::Wait => std::thread::sleep(Duration::from_micros(20)),
        }
    };
    if sent_switch {
        loop {
            match kernel::take_byte_within(fd, CLAIM_LIMIT) {
                Some(SWITCH_BYTE) => break,
                Some(_) => {} // a doorbell
                None => return false,
            }
        }
    } else if theirs.clear_bell(control.consumed(writer))
        && kernel::take_byte_within(fd, CLAIM_LIMIT) != Some(crate::link::DOORBELL)
    {
        return false;
    }
    control.set_raw_read(writer);
    true
}

/// After our switch byte, when the reader asked (`Control::ask_rewind`:
/// it hands the stream to a program that reads the kernel only): every
/// byte of ours it has not used up, raw, in order; then they count as
/// used up. The reader holds its side's lock meanwhile and reads nothing.
fn resend_unread(control: &Control, side: Side, fd: RawFd) -> Result<(), i32> {
    let posted = control.tx(side).seen().posted;
    let mut i = control.consumed(side);
    let mut taken = control.taken(side) as usize;
    while i != posted {
        let (place, len) = checked_entry(control, side, i)?;
        let from = taken.min(len);
        // SAFETY: [place, place + len) lies in our ring (checked), which
        // nobody writes once the connection is switched.
        let bytes =
            unsafe { std::slice::from_raw_parts(control.ring(side).add(place + from), len - from) };
        send_all(fd, bytes)?;
        taken = 0;
        i = i.wrapping_add(1);
    }
    control.set_taken(side, 0);
    control.set_consumed(side, posted);
    Ok(())
}

/// Sends all of `bytes` on the kernel socket, waiting for room.
fn send_all(fd: RawFd, mut bytes: &[u8]) -> Result<(), i32> {
    while !bytes.is_empty() {
        let n = transfer(
            fd,
            std::iter::once((bytes.as_ptr() as *mut u8, bytes.len())),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            true,
        );
        match n {
            Ok(n) => bytes = &bytes[n..],
            Err(libc::EAGAIN) => kernel::wait_writable(fd),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Before this process lets a switched connection go (its last close,
/// exit): takes the peer's doorbells (and its switch byte, if there) off
/// the socket without waiting, once everything in the ring is read. A
/// socket closed with bytes unread makes the kernel reset the connection,
/// and the peer could lose what we wrote last; the program read all it
/// saw, and so must not cause that.
pub(crate) fn drain(control: &Control, side: Side, fd: RawFd) {
    let writer = peer_of(side);
    let Some(_lock) = control.lock_reader(writer, true) else {
        return;
    };
    if control.raw_read(writer) || left_in_ring(control, side) != Ok(0) {
        return;
    }
    while let Ok(b) = take_one(fd, false) {
        if b == SWITCH_BYTE {
            control.set_raw_read(writer);
            return;
        }
    }
}

/// Bytes still unread in the ring of `side`'s peer (the first message
/// from what was taken of it), and whether the page's entries are sound.
fn left_in_ring(control: &Control, side: Side) -> Result<usize, i32> {
    let writer = peer_of(side);
    let posted = control.rx(side).seen().posted;
    let mut i = control.consumed(writer);
    let mut n = 0usize;
    let mut taken = control.taken(writer) as usize;
    while i != posted {
        let (_, len) = checked_entry(control, writer, i)?;
        n += len.saturating_sub(taken);
        taken = 0;
        i = i.wrapping_add(1);
    }
    Ok(n)
}

/// The peer's entry for message `i`, bounds-checked (the peer wrote it).
fn checked_entry(control: &Control, writer: Side, i: u32) -> Result<(usize, usize), i32> {
    let (place, len) = control.entry_of(writer, i);
    match place.checked_add(len) {
        Some(end) if len <= SLOT_BYTES && end <= RING_BYTES => Ok((place, len)),
        _ => Err(libc::EIO),
    }
}

/// A read on a switched connection: what the ring still holds, then the
/// kernel stream after the peer's switch byte. `nonblocking`: the call
/// or the socket asked not to wait.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read(
    control: &Control,
    side: Side,
    fd: RawFd,
    out: &mut [&mut [u8]],
    at: (usize, usize),
    nonblocking: bool,
    peek: bool,
    all: bool,
) -> Result<usize, i32> {
    let (mut seg, mut off) = at;
    let want = parts(out.iter().map(|o| &o[..]), at)
        .map(|p| p.len())
        .sum::<usize>();
    if want == 0 {
        return Ok(0);
    }
    let writer = peer_of(side);
    if control.rewind_asked(side) && !control.tx(side).raw() {
        // Our reader is about to give the stream to a program that reads
        // the kernel only (`bare_over`) and waits for our switch byte and
        // what it did not read: sent now, as a writer would.
        let _ = raw_tx(control, side, fd);
    }
    let Some(lock) = control.lock_reader(writer, nonblocking) else {
        return Err(libc::EAGAIN);
    };
    let mut got = 0usize;
    let posted = control.rx(side).seen().posted;
    let mut i = control.consumed(writer);
    let mut at = control.taken(writer) as usize;
    while i != posted && got < want {
        let (place, len) = checked_entry(control, writer, i)?;
        let from = at.min(len);
        // SAFETY: [place, place + len) lies in the peer's ring (checked),
        // which it leaves alone until the message is used up, and no
        // message is announced after the switch.
        let src = unsafe {
            std::slice::from_raw_parts(control.ring(writer).add(place + from), len - from)
        };
        let n = copy_out(src, out, &mut seg, &mut off);
        got += n;
        at = from + n;
        if at == len {
            i = i.wrapping_add(1);
            at = 0;
        }
    }
    if !peek {
        control.set_taken(writer, at as u32);
        control.set_consumed(writer, i);
    }
    if got > 0 && (!all || got == want || peek) {
        return Ok(got);
    }
    // Everything the ring held is read: the kernel stream, from the
    // peer's switch byte on.
    let mut took_switch = false;
    while !control.raw_read(writer) {
        let wait = !nonblocking && (got == 0 || all);
        match take_one(fd, wait) {
            Ok(SWITCH_BYTE) => {
                control.set_raw_read(writer);
                took_switch = true;
            }
            Ok(_) => {} // a doorbell or the hello
            Err(0) => return Ok(got),
            Err(e) => return if got > 0 { Ok(got) } else { Err(e) },
        }
    }
    drop(lock);
    if control.rewind_asked(side) && !control.tx(side).raw() {
        // Asked before the switch byte we just took (`bare_over`), and
        // not seen above: sent before this read waits in the kernel.
        let _ = raw_tx(control, side, fd);
    }
    let mut flags = 0;
    if peek {
        flags |= libc::MSG_PEEK;
    }
    if all && !nonblocking {
        flags |= libc::MSG_WAITALL;
    } else if nonblocking || got > 0 {
        flags |= libc::MSG_DONTWAIT;
    }
    let mut once = || {
        transfer(
            fd,
            out.iter_mut().skip(seg).enumerate().map(|(k, o)| {
                let from = if k == 0 { off.min(o.len()) } else { 0 };
                (o[from..].as_mut_ptr(), o.len() - from)
            }),
            flags,
            false,
        )
    };
    let mut r = once();
    if took_switch
        && got == 0
        && r == Err(libc::EAGAIN)
        && kernel::readable_within(fd, RAW_AFTER_SWITCH)
    {
        // The peer's switch byte made the socket readable, and a program
        // that polled for it reads now: the peer hands the connection
        // over in order to go on (a program exec'd or sandboxed there),
        // and what it writes next comes within moments. Said EAGAIN, a
        // read after a readiness that the kernel alone would not have
        // given (OpenSSH's client takes that as fatal).
        r = once();
    }
    match r {
        Ok(n) => Ok(got + n),
        Err(_) if got > 0 => Ok(got),
        Err(e) => Err(e),
    }
}

/// How long a read that took only the peer's switch byte waits for the
/// peer's first raw bytes before it says EAGAIN.
const RAW_AFTER_SWITCH: Duration = Duration::from_millis(100);

/// One byte off the kernel stream; Err(0) at EOF.
fn take_one(fd: RawFd, wait: bool) -> Result<u8, i32> {
    if wait {
        return kernel::take_byte(fd);
    }
    let mut b = 0u8;
    // SAFETY: one byte into our own variable.
    let n = unsafe { (real().recv)(fd, (&mut b as *mut u8).cast(), 1, libc::MSG_DONTWAIT) };
    match n {
        1 => Ok(b),
        0 => Err(0),
        _ => Err(kernel::errno()),
    }
}

/// The buffers of `bufs` from the cursor `at` (segment, offset) on.
pub(crate) fn parts<'a>(
    bufs: impl Iterator<Item = &'a [u8]>,
    at: (usize, usize),
) -> impl Iterator<Item = &'a [u8]> {
    bufs.skip(at.0)
        .enumerate()
        .map(move |(k, b)| if k == 0 { &b[at.1.min(b.len())..] } else { b })
}

/// recvmsg (`send` false) or sendmsg on the buffers `parts` names, with
/// `flags`; EINTR is retried. The iovecs live on the stack for up to 16
/// buffers (no allocation per call on a switched connection).
pub(crate) fn transfer(
    fd: RawFd,
    parts: impl Iterator<Item = (*mut u8, usize)>,
    flags: i32,
    send: bool,
) -> Result<usize, i32> {
    let none = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut stack = [none; 16];
    let mut heap: Vec<libc::iovec> = Vec::new();
    let mut n = 0;
    for (p, len) in parts.filter(|&(_, len)| len > 0) {
        let v = libc::iovec {
            iov_base: p.cast(),
            iov_len: len,
        };
        if n < stack.len() {
            stack[n] = v;
        } else {
            if heap.is_empty() {
                heap.extend_from_slice(&stack);
            }
            heap.push(v);
        }
        n += 1;
    }
    if n == 0 {
        return Ok(0);
    }
    let iov: &mut [libc::iovec] = if n <= stack.len() {
        &mut stack[..n]
    } else {
        &mut heap
    };
    loop {
        // SAFETY: a msghdr naming the program's buffers, which live across
        // the call (sendmsg only reads them); no name or control data.
        let r = unsafe {
            let mut m: libc::msghdr = std::mem::zeroed();
            m.msg_iov = iov.as_mut_ptr();
            m.msg_iovlen = iov.len() as _;
            if send {
                (real().sendmsg)(fd, &m, flags)
            } else {
                (real().recvmsg)(fd, &mut m, flags)
            }
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        match kernel::errno() {
            libc::EINTR => {}
            e => return Err(e),
        }
    }
}

/// A write on a switched connection, from `at` (segment, offset) of
/// `data` on: raw bytes after this end's switch byte.
pub(crate) fn write(
    control: &Control,
    side: Side,
    fd: RawFd,
    data: &[&[u8]],
    at: (usize, usize),
    dontwait: bool,
    nosignal: bool,
) -> Result<usize, i32> {
    if let Err(libc::EIO) = raw_tx(control, side, fd) {
        return Err(libc::EIO);
    }
    let mut flags = 0;
    if dontwait {
        flags |= libc::MSG_DONTWAIT;
    }
    if nosignal {
        flags |= libc::MSG_NOSIGNAL;
    }
    let bufs = parts(data.iter().copied(), at).map(|b| (b.as_ptr() as *mut u8, b.len()));
    transfer(fd, bufs, flags, true)
}

/// FIONREAD on a switched connection.
pub(crate) fn unread(control: &Control, side: Side, fd: RawFd) -> usize {
    let left = left_in_ring(control, side).unwrap_or(0);
    if left > 0 || !control.raw_read(peer_of(side)) {
        return left;
    }
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD into our own int.
    let r = unsafe { (real().ioctl)(fd, libc::FIONREAD, (&mut n as *mut libc::c_int).cast()) };
    if r == 0 {
        n.max(0) as usize
    } else {
        0
    }
}

/// A connection this process uses after it was switched (or switches on
/// first use): made for a forked child of the VI's maker, and for a
/// program exec'd on the socket (from the connection's exec record).
pub struct Switched {
    control: Arc<Control>,
    side: Side,
    owner_pid: u32,
    /// This process's readers, one at a time (the page's lock orders the
    /// processes).
    rx: Mutex<()>,
    nonblocking: AtomicBool,
    /// The connection's exec record, held for a further exec.
    _record: Option<Arc<Inherit>>,
}

impl Switched {
    pub fn new(
        control: Arc<Control>,
        side: Side,
        fd: RawFd,
        record: Option<Arc<Inherit>>,
    ) -> Switched {
        Switched {
            control,
            side,
            owner_pid: crate::process::id(),
            rx: Mutex::new(()),
            nonblocking: AtomicBool::new(kernel::is_nonblocking(fd)),
            _record: record,
        }
    }
}

impl Carried for Switched {
    fn go_bare(&self, fd: RawFd) -> bool {
        bare_over(&self.control, self.side, fd)
    }
    fn read(
        &self,
        fd: RawFd,
        out: &mut [&mut [u8]],
        dontwait: bool,
        peek: bool,
        all: bool,
    ) -> Result<usize, i32> {
        let nonblocking = dontwait || self.nonblocking.load(Ordering::Relaxed);
        switch(&self.control, self.side);
        let _turn = reader_turn(&self.rx, || nonblocking)?;
        read(
            &self.control,
            self.side,
            fd,
            out,
            (0, 0),
            nonblocking,
            peek,
            all,
        )
    }
    fn write(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32> {
        let dontwait = dontwait || self.nonblocking.load(Ordering::Relaxed);
        if let Some(r) = &self._record {
            // A program exec'd on the socket while the connection's first
            // user is still setting it up: our switch byte must come after
            // that user's hello (`inherit::USED_HELLO_SENT`).
            r.wait_for_hello(CLAIM_LIMIT);
        }
        write(
            &self.control,
            self.side,
            fd,
            data,
            (0, 0),
            dontwait,
            nosignal,
        )
    }
    fn flush(&self) {}
    fn shut(&self) {}
    fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }
    fn owner_pid(&self) -> u32 {
        self.owner_pid
    }
    fn unread(&self, fd: RawFd) -> usize {
        unread(&self.control, self.side, fd)
    }
    fn writable(&self) -> bool {
        true
    }
    fn wait_room(&self, _fd: RawFd, _limit: Duration) {}
    fn hand_over(&self, fd: RawFd, _always: bool) {
        drain(&self.control, self.side, fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read by the acceptor into one buffer, from its start.
    fn read_one(
        c: &Control,
        fd: RawFd,
        out: &mut [u8],
        nonblocking: bool,
        peek: bool,
    ) -> Result<usize, i32> {
        read(
            c,
            Side::Acceptor,
            fd,
            &mut [out],
            (0, 0),
            nonblocking,
            peek,
            false,
        )
    }

    fn socket_pair() -> [RawFd; 2] {
        let mut sv = [0; 2];
        // SAFETY: a stream socketpair into our array.
        let r = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) };
        assert_eq!(r, 0);
        sv
    }

    /// The connector wrote two messages into its ring (the acceptor read
    /// 3 bytes of the first before the switch), then its kernel stream
    /// holds a doorbell, the switch byte and raw bytes.
    fn switched_page(sv: [RawFd; 2]) -> Control {
        let (c, fd) = Control::create().expect("memfd");
        // SAFETY: the memfd the test made.
        unsafe { libc::close(fd) };
        let w = Side::Connector;
        for (i, (place, msg)) in [(0usize, &b"abcdef"[..]), (6, &b"gh"[..])]
            .iter()
            .enumerate()
        {
            // SAFETY: inside the connector's ring.
            unsafe {
                std::ptr::copy_nonoverlapping(msg.as_ptr(), c.ring(w).add(*place), msg.len())
            };
            c.set_entry(w, i as u32, *place, msg.len());
            assert!(c.tx(w).announce(msg.len()).is_some());
        }
        c.set_taken(w, 3);
        c.tx(w).switch();
        for b in [b'D', SWITCH_BYTE, b'r', b'a', b'w'] {
            kernel::send_byte(sv[0], b).expect("send");
        }
        let _ = sv;
        c
    }

    #[test]
    fn a_switched_read_takes_the_ring_first_then_the_kernel_after_the_switch_byte() {
        let sv = socket_pair();
        let c = switched_page(sv);
        let me = Side::Acceptor;
        let mut a = [0u8; 4];
        let n = read_one(&c, sv[1], &mut a, false, true).expect("peek");
        assert_eq!(&a[..n], b"defg", "a peek leaves it");
        let mut b = [0u8; 2];
        assert_eq!(read_one(&c, sv[1], &mut b, false, false), Ok(2));
        assert_eq!(&b, b"de");
        let mut rest = [0u8; 16];
        let n = read_one(&c, sv[1], &mut rest, false, false).expect("read");
        assert_eq!(
            &rest[..n],
            b"fgh",
            "what the ring held, nothing of the kernel's yet"
        );
        assert_eq!(unread(&c, me, sv[1]), 0, "the switch byte is not read yet");
        let n = read_one(&c, sv[1], &mut rest, false, false).expect("read");
        assert_eq!(
            &rest[..n],
            b"raw",
            "the doorbell and the switch byte are dropped"
        );
        let mut none = [0u8; 1];
        assert_eq!(
            read_one(&c, sv[1], &mut none, true, false),
            Err(libc::EAGAIN)
        );
        // SAFETY: closing the test's sockets.
        unsafe { libc::close(sv[0]) };
        assert_eq!(read_one(&c, sv[1], &mut none, false, false), Ok(0));
        // SAFETY: as above.
        unsafe { libc::close(sv[1]) };
    }

    #[test]
    fn a_peer_entry_outside_the_ring_is_refused() {
        let sv = socket_pair();
        let c = switched_page(sv);
        c.set_entry(Side::Connector, 1, RING_BYTES - 1, 2);
        let mut out = [0u8; 16];
        assert_eq!(unread(&c, Side::Acceptor, sv[1]), 0);
        let r = read_one(&c, sv[1], &mut out, false, false);
        assert_eq!(r, Err(libc::EIO));
        for fd in sv {
            // SAFETY: closing the test's sockets.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn writing_after_a_switch_sends_the_switch_byte_once_then_raw_bytes() {
        let sv = socket_pair();
        let c = switched_page(sv);
        let me = Side::Acceptor;
        assert_eq!(
            write(&c, me, sv[1], &[b"xy", b"z"], (0, 0), false, true),
            Ok(3)
        );
        assert_eq!(write(&c, me, sv[1], &[b"!"], (0, 0), false, true), Ok(1));
        let mut got = [0u8; 8];
        // SAFETY: reading the test's socket into our buffer.
        let n = unsafe { libc::recv(sv[0], got.as_mut_ptr().cast(), 8, libc::MSG_DONTWAIT) };
        assert_eq!(&got[..n as usize], b"Sxyz!");
        for fd in sv {
            // SAFETY: closing the test's sockets.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn reads_and_writes_go_on_from_the_cursor_and_past_sixteen_buffers() {
        let sv = socket_pair();
        let c = switched_page(sv);
        let me = Side::Acceptor;
        // From the cursor (segment 1, offset 1), then 20 one-byte buffers
        // (more iovecs than the stack holds).
        assert_eq!(
            write(&c, me, sv[1], &[b"ab", b"cde"], (1, 1), false, true),
            Ok(2)
        );
        let ones: Vec<[u8; 1]> = (0..20u8).map(|i| [b'A' + i]).collect();
        let refs: Vec<&[u8]> = ones.iter().map(|o| &o[..]).collect();
        assert_eq!(write(&c, me, sv[1], &refs, (0, 0), false, true), Ok(20));
        let mut got = [0u8; 32];
        // SAFETY: reading the test's socket into our buffer.
        let n = unsafe { libc::recv(sv[0], got.as_mut_ptr().cast(), 32, libc::MSG_DONTWAIT) };
        assert_eq!(&got[..n as usize], b"SdeABCDEFGHIJKLMNOPQRST");
        // A read into the second buffer from its third byte on: the
        // ring's "defgh" (3 of the first message taken before), so
        // "de" there, then "fgh" from the start of the next call.
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        let n = read(
            &c,
            me,
            sv[1],
            &mut [&mut a[..], &mut b[..]],
            (1, 2),
            false,
            false,
            false,
        );
        assert_eq!(n, Ok(2));
        assert_eq!((&a, &b), (&[0u8; 4], b"\0\0de"));
        for fd in sv {
            // SAFETY: closing the test's sockets.
            unsafe { libc::close(fd) };
        }
    }
}
