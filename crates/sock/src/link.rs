//! One connection's VI over the openvia device: its messages are 8 bytes
//! (length and place of the data, which the writer copies into the
//! shared data ring: buffer-copy), up to 64 sends in flight and twice as
//! many receives posted ahead, reliable reception (a send completes once
//! it sits in a posted receive of the peer, so a flushed connection has
//! lost nothing).
//!
//! Readiness: the program's kernel TCP socket stays its descriptor and
//! holds one doorbell byte, `D`, exactly while data is unread; the
//! control page (`control`) decides per message whether the writer must
//! ring it, so a reader spinning in read costs the writer no system call.
//! Both ends start the stream with one `H` byte, written before the VI
//! handshake, which wakes a peer that sleeps in poll so that it joins the
//! handshake. This file sets the link up and writes; `reader` reads;
//! `link/meet` is the VI handshake, `link/reuse` the VIs kept for the
//! next connection to the same process, `link/tx` the writer's account
//! of the ring, `link/carried` the link as the library's calls see it.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openvia_core::descriptor::{status, DataSegment, DescPtr};
use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi, ViState};
use openvia_core::ViaError;

use crate::carried::copy_in;
use crate::control::{peer_of, Announced, Control, Direction, Side, RING_BYTES, TABLE_LEN};
use crate::kernel;
use crate::region::{Region, DESC_BYTES};

mod carried;
mod meet;
mod reuse;
mod tx;

/// For tests: the network device on loopback, with an agent port of this
/// test process's own (set once, the same for every test that asks).
#[cfg(test)]
pub(crate) fn loopback_network_for_tests() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::env::set_var("OPENVIA_UDP_BIND", "127.0.0.1");
        let port = 20000 + (std::process::id() % 30000);
        std::env::set_var("OPENVIA_AGENT_PORT", port.to_string());
    });
}

pub(crate) use meet::{meet, Hello, Listening};
pub(crate) use reuse::hold_across_fork;
use tx::Tx;

/// Most bytes of one message (of a write cut into messages).
pub const SLOT_BYTES: usize = 64 << 10;
/// Bytes of a VI message buffer; a message says the length and place of
/// the bytes in the data ring (8 bytes).
const MSG_BYTES: usize = 64;
/// Sends in flight per connection: messages unread at most.
const SEND_SLOTS: usize = 64;
/// Receives posted per connection.
const RECV_SLOTS: usize = 2 * SEND_SLOTS;
/// How long a wait lasts before the kernel socket is checked again.
pub(crate) const SLICE: Duration = Duration::from_millis(50);
/// How long close waits for the peer to take what was sent.
const LINGER: Duration = Duration::from_secs(10);

pub const DOORBELL: u8 = b'D';
pub const HELLO: u8 = b'H';
/// Between hosts, where no page is shared: a process of this end exec'd a
/// program without the library on a connection agreed on and not yet
/// used (`conn::go_bare_before_exec`). The last byte of ours the stream
/// carries before the program's own; the peer takes it and says no hello
/// (or has its hello taken off by us), and the connection stays on the
/// kernel.
pub const BARE: u8 = b'B';

/// Which device a link runs on: the one-host device (`VIARUN_DEVICE`,
/// default `/dev/via_lo`) or the network device between hosts
/// (`VIARUN_NET_DEVICE`, default `/dev/via_udp`). The core picks the device
/// by name (its registry); the library names only these defaults.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    Local,
    Network,
}

fn device_name(medium: Medium) -> String {
    let (var, default) = match medium {
        Medium::Local => ("VIARUN_DEVICE", "/dev/via_lo"),
        Medium::Network => ("VIARUN_NET_DEVICE", "/dev/via_udp"),
    };
    std::env::var(var).unwrap_or_else(|_| String::from(default))
}

/// This process's NIC on one medium (a forked child opens its own).
struct ProcessNic {
    pid: u32,
    nic: Nic,
    ptag: PtagId,
}

static NICS: Mutex<[Option<ProcessNic>; 2]> = Mutex::new([None, None]);

std::thread_local! {
    /// This thread used up a message from another host and has written
    /// nothing since: the VI holds its acknowledgement for a reply.
    static READ_UNANSWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// This thread used up a message from another host (`network_blocked`).
pub(crate) fn read_from_network() {
    READ_UNANSWERED.set(true);
}

/// This thread wrote to another host: what it read is acknowledged with it.
pub(crate) fn wrote_to_network() {
    READ_UNANSWERED.set(false);
}

/// Before this thread sleeps in the kernel (poll, epoll, select, a
/// read's wait) having read from another host and written nothing since:
/// the network NIC hears of it until the guard is dropped, so that its
/// progress thread runs the protocol's timers meanwhile. Without this it
/// took a thread that had just read for one still polling and left them
/// to it for 20 ms: the acknowledgement the VI held for a reply that never
/// came went out that late, and a peer closing after it (nginx, its FIN
/// sent once everything is acknowledged) gave a client waiting in select
/// its EOF ~19 ms after the answer. Only then: each such word wakes the
/// progress thread (nginx with keep-alive between two namespaces lost a
/// tenth of its requests a second when every sleep did).
pub(crate) fn network_blocked() -> Option<openvia_core::nic::BlockedElsewhere> {
    if !READ_UNANSWERED.replace(false) {
        return None;
    }
    let g = NICS.lock().unwrap_or_else(|e| e.into_inner());
    let pid = crate::process::id();
    g[Medium::Network as usize]
        .as_ref()
        .filter(|p| p.pid == pid)
        .map(|p| p.nic.blocked_elsewhere())
}

pub(crate) fn process_nic(medium: Medium) -> Result<(Nic, PtagId), ViaError> {
    let mut g = NICS.lock().unwrap_or_else(|e| e.into_inner());
    let slot = &mut g[medium as usize];
    let pid = crate::process::id();
    if let Some(p) = slot.as_ref().filter(|p| p.pid == pid) {
        return Ok((p.nic.clone(), p.ptag));
    }
    // The parent's NIC (if any) is left alone in a child: it is not ours.
    if let Some(old) = slot.take() {
        std::mem::forget(old);
    }
    let nic = Nic::open(Some(&device_name(medium)))?;
    if medium == Medium::Network {
        // A failed VI shows as a broken link (EOF/ECONNRESET from the
        // kernel socket); the core's default report would print on the
        // program's stderr.
        nic.set_error_handler(Some(Arc::new(|_: &openvia_core::nic::AsyncError| {})))?;
        // The library spins itself (VIARUN_SPIN_US) before it sleeps in a
        // Wait; the NIC's own spin on top took the CPU a peer on the same
        // machine needed (sockperf between namespaces: 190 µs against 28).
        nic.set_spin_ns(0);
    }
    let ptag = nic.create_ptag()?;
    *slot = Some(ProcessNic {
        pid,
        nic: nic.clone(),
        ptag,
    });
    Ok((nic, ptag))
}

/// Short name of this process's device on `medium`, for the statistics.
pub fn device_short_name(medium: Medium) -> &'static str {
    let fallback = match medium {
        Medium::Local => "shm",
        Medium::Network => "udp",
    };
    process_nic(medium).map_or(fallback, |(n, _)| n.shared().device().info().short_name)
}

pub(crate) struct Rx {
    /// The message being read: (place in the data ring, length, bytes
    /// already taken).
    pub current: Option<(usize, usize, usize)>,
    /// Messages after `current`, taken from the VI by a peek or a count
    /// of what is unread (FIONREAD) but not begun: (place, length), in
    /// order. A read takes them before it asks the VI again.
    pub later: std::collections::VecDeque<(usize, usize)>,
    /// Messages used up (compared with the writer's count on the page).
    pub consumed: u32,
    /// The doorbell byte is known to be in the socket (seen there since
    /// this reader last took one).
    pub bell_in_socket: bool,
    /// How long a blocking read spins before it sleeps (adapts).
    pub spin: crate::waitspin::WaitSpin,
}

pub struct Link {
    nic: Nic,
    pub(crate) vi: Arc<Vi>,
    region: Region,
    owner_pid: u32,
    side: Side,
    control: Arc<Control>,
    tx: Mutex<Tx>,
    pub(crate) rx: Mutex<Rx>,
    /// The exec record that lets a program exec'd on the socket take the
    /// connection up after a switch (`switched`); None where none could
    /// be made (it then gets ECONNRESET, `exec`).
    record: Option<Arc<crate::inherit::Inherit>>,
    /// `process::forks()` when the link was made.
    forks: u32,
    /// Another process may hold the socket since before the link was made
    /// (its record was taken up from an exec, or this process forked
    /// while the connection was unused): a close hands over, as after a
    /// later fork.
    shared: AtomicBool,
    /// The socket's O_NONBLOCK, asked once when the link is made and then
    /// followed through the program's fcntl(F_SETFL) and ioctl(FIONBIO)
    /// (lib.rs): a read or write that must know it makes no system call.
    nonblocking: AtomicBool,
    /// shutdown(SHUT_WR) came here and its FIN waits aside for the peer
    /// to take what was sent (`netlink::shutdown_when_acknowledged`):
    /// writes say EPIPE meanwhile.
    writes_closed: AtomicBool,
    /// The VI's pair (the token of the connection it was made for) and
    /// this connection's generation on it, sent with every message as
    /// immediate data (`reuse`).
    pair: u64,
    pub(crate) generation: u32,
    /// The program waits for this connection in epoll, which lets its
    /// token stand between waits: a read that uses every message up
    /// offers it again (`reader`), so that the peer's next message finds
    /// one even when it comes before the next wait.
    pub(crate) standing: AtomicBool,
}

// SAFETY: the region is plain memory owned by the link; all access to its
// slots goes through the tx/rx mutexes.
unsafe impl Send for Link {}
// SAFETY: as above.
unsafe impl Sync for Link {}

/// Why a handshake ended without a link.
pub enum HandshakeEnd {
    /// The peer closed before it ever used the connection: plain EOF.
    PeerNeverCame,
    /// A process of either side exec'd a program without the library on
    /// the connection before its first use: it stays on the kernel.
    PeerWentBare,
    /// Something failed after both sides committed: the stream is lost.
    Broken,
    /// Another process of one end, which forked from the one setting the
    /// connection up before its first use, used it meanwhile through the
    /// control page and switched it to the kernel (`switched`): no VI.
    Switched,
}

impl Link {
    /// Sets up and connects the VI of a connection both ends agreed on.
    /// `record`: the connection's exec record, claimed by this process,
    /// which becomes its switchable one where no other process holds it.
    pub fn handshake(
        fd: RawFd,
        side: Side,
        token: u64,
        control: Arc<Control>,
        record: Option<Arc<crate::inherit::Inherit>>,
    ) -> Result<Link, HandshakeEnd> {
        // A process of either side exec'd a program without the library
        // on the connection before its first use (`conn::go_bare_before_
        // exec`): it stays on the kernel, and no byte of ours may enter a
        // stream that program reads.
        control.note_user(side, crate::process::id());
        if !control.say_hello(side) {
            return Err(HandshakeEnd::PeerWentBare);
        }
        kernel::send_byte(fd, HELLO).map_err(|_| HandshakeEnd::Broken)?;
        if let Some(r) = &record {
            r.note_hello_sent();
        }
        // A peer that went bare after our hello took it off its stream
        // and never meets: ended like a switch (no byte of the stream
        // taken), then told apart.
        let switched = {
            let control = control.clone();
            move || {
                control.rx(side).seen().switched
                    || control.tx(side).seen().switched
                    || control.stays_on_kernel(side)
            }
        };
        let went_bare = |e: HandshakeEnd| {
            if control.stays_on_kernel(side) {
                HandshakeEnd::PeerWentBare
            } else {
                e
            }
        };
        let mut link = match reuse::meet_again(fd, side, &control, &switched).map_err(went_bare)? {
            Some(kept) => {
                let link = Link::from_kept(side, control.clone(), kept);
                meet::take_peer_hello(fd, &switched).map_err(went_bare)?;
                link
            }
            None => {
                let link =
                    Link::create(side, control.clone(), token).map_err(|_| HandshakeEnd::Broken)?;
                let word = Some(link.control.listening_word());
                meet(
                    fd,
                    &link.nic,
                    &link.vi,
                    side,
                    token,
                    None,
                    &switched,
                    Hello::Sent,
                    None,
                    word,
                )
                .map_err(went_bare)?;
                link
            }
        };
        let shared = record.as_ref().is_some_and(|r| r.may_be_shared());
        link.shared.store(shared, Ordering::Relaxed);
        link.set_nonblocking(kernel::is_nonblocking(fd));
        kernel::no_delay(fd);
        if let Some(page) = link.control.take_fd() {
            link.record = match record {
                Some(r) if r.become_switchable(side, page) => Some(r),
                _ => crate::inherit::Inherit::offer(
                    fd,
                    crate::inherit::Offered::Switchable {
                        side,
                        control: page,
                    },
                ),
            };
            // SAFETY: the page's kept copy, handed to the record (which
            // made its own) and ours to close.
            unsafe { (crate::real::real().close)(page) };
        }
        Ok(link)
    }

    fn create(side: Side, control: Arc<Control>, pair: u64) -> Result<Link, ViaError> {
        let (nic, ptag) = process_nic(Medium::Local)?;
        let (region, vi) = Region::open(
            &nic,
            ptag,
            reliability::RELIABLE_RECEPTION,
            SEND_SLOTS + RECV_SLOTS,
            MSG_BYTES,
            None,
        )?;
        let link = Link::from_kept(side, control, reuse::Kept::fresh(pair, nic, vi, region));
        for j in 0..RECV_SLOTS {
            link.post_recv(j)?;
        }
        Ok(link)
    }

    fn fill(&self, desc_slot: usize, buf: usize, len: usize) -> DescPtr {
        let d = self.region.desc(desc_slot);
        // SAFETY: `d` is a free 128-byte slot of our registered region.
        unsafe {
            std::ptr::write_bytes(d.0 as *mut u8, 0, DESC_BYTES);
            (*d.0).cs.seg_count = 1;
            (*d.0).ds[0] = DataSegment {
                data: buf as u64,
                handle: self.region.handle,
                length: len as u32,
            };
        }
        d
    }

    /// Whether the program made the socket nonblocking (as last seen).
    pub(crate) fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }

    /// The program changed the socket's O_NONBLOCK.
    pub fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    /// Which connection this is, for `unrung` (its page's address).
    pub(crate) fn page_id(&self) -> usize {
        Arc::as_ptr(&self.control) as usize
    }

    /// Marks this link as listed in `unrung`: true if it was not yet.
    pub(crate) fn note_unrung(&self) -> bool {
        !self.control.noted.swap(true, Ordering::AcqRel)
    }

    /// What `unrung` keeps of a link: its page (to look without the
    /// table) and the side whose messages it notes.
    pub(crate) fn unrung_handle(&self) -> (std::sync::Weak<Control>, Side) {
        (Arc::downgrade(&self.control), self.side)
    }

    /// The page word this side's messages are announced in.
    fn tx_word(&self) -> Direction<'_> {
        self.control.tx(self.side)
    }

    /// The page word the peer announces its messages in.
    pub(crate) fn rx_word(&self) -> Direction<'_> {
        self.control.rx(self.side)
    }

    /// Address of receive slot `j`'s buffer.
    /// The reading side's lock on the page (`Control::lock_reader`).
    pub(crate) fn lock_reader(&self, nonblocking: bool) -> Option<crate::control::ReaderLock<'_>> {
        self.control.lock_reader(peer_of(self.side), nonblocking)
    }

    /// Messages of the peer's direction used up, as the page says (by us,
    /// or after a switch by another process of our end).
    pub(crate) fn consumed_on_page(&self) -> u32 {
        self.control.consumed(peer_of(self.side))
    }

    /// How much of the first unread message is read, for a process that
    /// may read on after a switch.
    pub(crate) fn publish_taken(&self, n: usize) {
        self.control.set_taken(peer_of(self.side), n as u32);
    }

    /// The rest of a read (into `out` from `at` on; `got` bytes read
    /// before) on a connection handed back to the kernel.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_switched(
        &self,
        fd: RawFd,
        out: &mut [&mut [u8]],
        at: (usize, usize),
        got: usize,
        nonblocking: bool,
        peek: bool,
        all: bool,
    ) -> Result<usize, i32> {
        crate::switched::switch(&self.control, self.side);
        // What this call already has counts: a nonblocking tail then.
        let nb = nonblocking || (got > 0 && !all);
        match crate::switched::read(&self.control, self.side, fd, out, at, nb, peek, all) {
            Ok(n) => Ok(got + n),
            Err(_) if got > 0 => Ok(got),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn recv_buffer(&self, j: usize) -> usize {
        self.region.buffer(SEND_SLOTS + j)
    }

    /// Byte `place` of the peer's data ring (checked by the caller to
    /// lie, with the message, inside the ring).
    pub(crate) fn data_in(&self, place: usize) -> *const u8 {
        // SAFETY: place < RING_BYTES (the caller's check).
        unsafe { self.control.ring(peer_of(self.side)).add(place) }
    }

    /// Reader: one more of the peer's messages used up.
    pub(crate) fn used_up(&self) {
        self.control.used_up(peer_of(self.side));
    }

    /// Receive slot index of a completed receive descriptor.
    pub(crate) fn recv_slot_of(&self, d: DescPtr) -> usize {
        self.region.slot_of(d) - SEND_SLOTS
    }

    pub(crate) fn post_recv(&self, j: usize) -> Result<(), ViaError> {
        let d = self.fill(
            SEND_SLOTS + j,
            self.region.buffer(SEND_SLOTS + j),
            MSG_BYTES,
        );
        self.vi.post_recv(d.0, self.region.handle)
    }

    pub(crate) fn broken(&self) -> bool {
        self.vi.state() == ViState::Error
    }

    /// Takes completed sends back; Err if one failed.
    fn reap(&self, tx: &mut Tx, wait: bool) -> Result<(), ()> {
        loop {
            let r = if wait {
                self.vi.send_wait(Some(SLICE))
            } else {
                self.vi.send_done()
            };
            match r {
                Ok(d) => {
                    let st = d.status();
                    tx.free.push(self.region.slot_of(d));
                    tx.in_flight -= 1;
                    if st & status::ERROR_MASK != 0 {
                        return Err(());
                    }
                    if wait {
                        return Ok(());
                    }
                }
                Err(ViaError::NotDone) | Err(ViaError::Timeout) => {
                    return if self.broken() { Err(()) } else { Ok(()) };
                }
                Err(_) => return Err(()),
            }
        }
    }

    /// write/send: Ok(bytes taken) or Err(errno). `dontwait`: the call
    /// asked not to block (else the socket's own mode decides, asked only
    /// when every slot is in flight). `nosignal`: no SIGPIPE.
    pub fn write(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32> {
        crate::epoll::stamp_mine();
        let seen = self.tx_word().seen();
        if (seen.shut || self.writes_closed.load(Ordering::Acquire)) && !seen.switched {
            // shutdown(SHUT_WR) came (in any process holding the socket):
            // the kernel says EPIPE to a write after it.
            if !nosignal {
                // SAFETY: raising a signal in this thread, as the kernel would.
                unsafe { libc::raise(libc::SIGPIPE) };
            }
            return Err(libc::EPIPE);
        }
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = data.iter().map(|d| d.len()).sum();
        let mut nonblock = None;
        let mut taken = 0usize;
        let (mut seg, mut off) = (0usize, 0usize);
        while taken < total {
            if self.reap(&mut tx, false).is_err() {
                return self.vi_lost(fd, data, (seg, off), taken, dontwait, nosignal);
            }
            while tx.free.is_empty() {
                // (Where nothing waits, `announce` says whether we switched.)
                if self.tx_word().seen().switched {
                    return self.write_switched(fd, data, (seg, off), taken, dontwait, nosignal);
                }
                if *nonblock.get_or_insert_with(|| dontwait || self.is_nonblocking()) {
                    return if taken > 0 {
                        Ok(taken)
                    } else {
                        Err(libc::EAGAIN)
                    };
                }
                if self.reap(&mut tx, true).is_err() {
                    return self.vi_lost(fd, data, (seg, off), taken, dontwait, nosignal);
                }
            }
            // Room in the data ring for the next message.
            let want = data[seg..].iter().map(|d| d.len()).sum::<usize>() - off;
            let want = want.min(SLOT_BYTES);
            let at = loop {
                let used = self.control.consumed(self.side);
                tx.release(used);
                // The page's table holds the last TABLE_LEN messages' places.
                let table_room = tx.sent.wrapping_sub(used) < TABLE_LEN;
                if let Some(at) = tx.place(want).filter(|_| table_room) {
                    break at;
                }
                if self.tx_word().seen().switched {
                    return self.write_switched(fd, data, (seg, off), taken, dontwait, nosignal);
                }
                if *nonblock.get_or_insert_with(|| dontwait || self.is_nonblocking()) {
                    return if taken > 0 {
                        Ok(taken)
                    } else {
                        Err(libc::EAGAIN)
                    };
                }
                if self.broken() {
                    return self.vi_lost(fd, data, (seg, off), taken, dontwait, nosignal);
                }
                crate::unrung::ring_all();
                self.control.wait_for_room(self.side, used, SLICE);
            };
            let place = (at % RING_BYTES as u64) as usize;
            // SAFETY: [place, place + want) lies inside the ring (`place`
            // keeps a message from crossing its end) and is free: the
            // reader has used up every message that was there.
            let slot = unsafe {
                std::slice::from_raw_parts_mut(self.control.ring(self.side).add(place), want)
            };
            let start = (seg, off);
            let len = copy_in(data, &mut seg, &mut off, slot);
            let i = tx.free.pop().unwrap_or(0);
            let buf = self.region.buffer(i);
            // SAFETY: message slot `i` is free and MSG_BYTES (≥ 8) long.
            unsafe {
                std::ptr::write_unaligned(buf as *mut u32, len as u32);
                std::ptr::write_unaligned((buf + 4) as *mut u32, place as u32);
            }
            // Announced before it is posted: a reader never uses up a
            // message its count does not show yet (it waits the moment
            // between). Rung after it is posted: a reader woken by the
            // doorbell finds the message there, instead of spinning for it
            // while this writer may wait for a CPU (with as many runnable
            // threads as CPUs, until the reader's time slice ends: ms). A
            // reader that finds data unread before the byte arrives waits
            // for it before it returns (`bell_visible`, `take_bell`), so
            // the socket is readable while data is unread. A dead peer
            // shows on the doorbell as EPIPE (and SIGPIPE) from the kernel.
            self.control.set_entry(self.side, tx.sent, place, len);
            let Some(announced) = self.tx_word().announce(len) else {
                // Switched meanwhile: this message goes to the kernel.
                tx.free.push(i);
                return self.write_switched(fd, data, start, taken, dontwait, nosignal);
            };
            let d = self.fill(i, buf, 8);
            // SAFETY: `d` is the free slot just filled, not yet posted.
            unsafe {
                (*d.0).cs.control |= openvia_core::descriptor::control::IMMEDIATE;
                (*d.0).cs.immediate_data = self.generation;
            }
            let posted = self.vi.post_send(d.0, self.region.handle).is_ok();
            if posted {
                tx.in_flight += 1;
            } else {
                tx.free.push(i);
            }
            let ring = announced == Announced::Ring;
            if announced == Announced::TookToken {
                crate::unrung::note(fd, self);
            }
            // Announced either way: after a switch the peer reads it
            // from the ring through the page.
            tx.sent = tx.sent.wrapping_add(1);
            let end = at + len as u64;
            tx.head = end;
            tx.ends.push_back(end);
            taken += len;
            if !posted {
                if ring {
                    self.tx_word().rang();
                }
                return self.vi_lost(fd, data, (seg, off), taken, dontwait, nosignal);
            }
            if ring {
                let rung = kernel::send_doorbell(fd, nosignal);
                self.tx_word().rang();
                if rung.is_err() {
                    // This message is posted (taken); the next write fails.
                    return Ok(taken);
                }
            }
        }
        Ok(taken)
    }

    /// Our VI failed in a write, `taken` bytes taken. If the peer's socket
    /// hung up, the peer is gone: EPIPE (and SIGPIPE) as the kernel says.
    /// Else its VI ended while its socket lives on in another process (it
    /// exec'd, or it let the connection go after a fork without telling
    /// us): the connection is handed to the kernel and the write goes on
    /// there; what we announced before stays readable through the page.
    #[allow(clippy::too_many_arguments)]
    fn vi_lost(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        at: (usize, usize),
        taken: usize,
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32> {
        if !kernel::peer_hung_up(fd) {
            return self.write_switched(fd, data, at, taken, dontwait, nosignal);
        }
        if taken > 0 {
            return Ok(taken);
        }
        if !nosignal {
            // SAFETY: raising a signal in this thread, as the kernel would.
            unsafe { libc::raise(libc::SIGPIPE) };
        }
        Err(libc::EPIPE)
    }

    /// The rest of a write, from `at` (segment, offset) of `data` on, on a
    /// connection handed back to the kernel (`switched`); `taken` bytes
    /// went before it through the ring.
    fn write_switched(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        at: (usize, usize),
        taken: usize,
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32> {
        let dontwait = dontwait || self.is_nonblocking();
        match crate::switched::write(&self.control, self.side, fd, data, at, dontwait, nosignal) {
            Ok(n) => Ok(taken + n),
            Err(_) if taken > 0 => Ok(taken),
            Err(e) => Err(e),
        }
    }

    /// Room for a whole message (a free slot and SLOT_BYTES of ring):
    /// what the room watcher (`room`) waits for. A writer busy at it
    /// (its lock taken) will see for itself.
    fn writable(&self) -> bool {
        let Ok(mut tx) = self.tx.try_lock() else {
            return false;
        };
        if self.reap(&mut tx, false).is_err() {
            return true; // broken: the write fails at once
        }
        let used = self.control.consumed(self.side);
        tx.release(used);
        !tx.free.is_empty()
            && tx.place(SLOT_BYTES).is_some()
            && tx.sent.wrapping_sub(used) < TABLE_LEN
    }

    /// Waits (up to LINGER) until the peer holds everything sent.
    pub fn flush(&self) {
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let start = std::time::Instant::now();
        // After a switch the peer reads what is unread through the page,
        // not the VI: nothing to wait for.
        while tx.in_flight > 0 && start.elapsed() < LINGER && !self.tx_word().seen().switched {
            if self.reap(&mut tx, true).is_err() {
                return;
            }
        }
    }

    /// After flush, before the kernel's FIN: the peer's reads ask the
    /// kernel from now on.
    pub fn shut(&self) {
        self.tx_word().shut();
    }

    /// Writes end here, before the peer is told (`shut`, after the flush).
    pub fn close_writes(&self) {
        self.writes_closed.store(true, Ordering::Release);
    }

    /// Messages the peer has not taken yet (looked at without waiting).
    pub fn unacknowledged(&self) -> bool {
        if self.tx_word().seen().switched {
            return false;
        }
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        self.reap(&mut tx, false).is_ok() && tx.in_flight > 0
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if self.owner_pid == crate::process::id() {
            reuse::keep_or_end(self);
        }
    }
}
