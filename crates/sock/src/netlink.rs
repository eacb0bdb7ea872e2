//! One connection's VI between hosts, over the network device. No memory
//! is shared, so the bytes travel in the VI's messages: a write is copied
//! into pre-registered send buffers (a 16-byte header, then up to 64 KiB),
//! each buffer one message of a reliable VI; the reader copies out of its
//! posted receive buffers and posts them again (SDP's buffer-copy).
//!
//! Flow control is by credits: a writer has at most `SEND_SLOTS` messages
//! in flight, and the network device's receiver-driven flow control holds
//! a message until the reader has a receive posted for it (`RECV_SLOTS`,
//! each posted again only once the program has read it), so nothing is
//! dropped and a reader that stops reading stops its writer.
//!
//! Readiness: as on one host, the program's kernel TCP socket stays its
//! descriptor and holds doorbell bytes `D` while data is unread — here one
//! per write call (on its last message, or on one after which the call
//! may stop or wait for a free send slot), taken by the reader once it has
//! used that message up. A blocking read with nothing unread spins on the
//! VI for up to `VIARUN_NET_SPIN_US` (default 50, adaptive, see `spin_time`; an epoll
//! wait on such connections looks at the kernel as long, `netwait`), then sleeps
//! in poll on the kernel socket, which the doorbell wakes: one wake-up
//! per message, by the kernel, as for kernel TCP.
//!
//! The one-host link lets a spinning reader spare its writer the doorbell
//! (a token in a shared word, taken back before it sleeps). Between hosts
//! a token must travel as a message, and a reader that cannot take it
//! back cheaply must then sleep on the VI's own socket, where every
//! acknowledgement and protocol timer wakes it: measured between two
//! namespaces on the loaded 2-vCPU box (a blocking 14-byte ping-pong),
//! 80–160 µs one way with tokens against 17–19 µs with a doorbell per
//! message (kernel TCP 8–17 µs). So there are no tokens here.
//!
//! The kernel stream carries only the hellos and doorbells, then the FIN:
//! a peer that closes flushes first (every message placed in the reader's
//! receives), so EOF comes after the last byte; a killed peer's kernel
//! closes its socket, which the reader sees within one sleep slice. The
//! VI is on reliable reception for that: on reliable delivery a send
//! completes once the reader's device holds it, possibly for want of a
//! posted receive, and the writer's disconnect could then end the
//! connection with those messages still held, lost: the likely cause of
//! compat `threads` reading EOF 1.8 MB early in one CI run, not
//! reproduced since.
//!
//! This file sets the link up; `writer` writes; `reader` reads; `handover`,
//! `page` and `switched` hand a used connection back to the kernel for a
//! process without the VI (a child, an exec'd program).

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use openvia_core::descriptor::{status, DataSegment, DescPtr};
use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::spin::{Window, MAX_SPIN_NS};

use crate::waitspin::WaitSpin;
use openvia_core::vi::{reliability, Vi, ViState};
use openvia_core::ViaError;

use crate::control::Side;
use crate::kernel;
use crate::link::{meet, process_nic, HandshakeEnd, Hello, Listening, Medium, BARE, HELLO};
use crate::region::{Region, DESC_BYTES};

mod handover;
mod linger;
pub mod page;
mod reader;
mod sandboxed;
pub mod spare;
pub mod switched;
mod writer;

pub use handover::{after_fork, before_fork, forked_child, start_watcher};
pub use linger::{acknowledged_later, shutdown_when_acknowledged};
use switched::NetSwitched;

/// Header in front of each message: kind, flags, pad, number, length.
const HDR: usize = 16;
/// Most bytes of a write per message: with the header, a send of 64 KiB
/// or more, which the network device sends without copying it at post.
pub const CHUNK: usize = 64 << 10;
const BUF: usize = HDR + CHUNK;
const SEND_SLOTS: usize = 16;
pub const RECV_SLOTS: usize = 32;
/// A sleeping reader or writer looks at the kernel socket this often.
const SLICE: Duration = Duration::from_millis(10);
const LINGER: Duration = Duration::from_secs(10);
/// Longest sleep of a reader whose doorbell came before its message: the
/// datagram may have been taken off the VI's socket (by the NIC's progress
/// thread) just before the reader went to sleep on it.
const DOORBELL_FIRST: Duration = Duration::from_millis(1);

const DATA: u8 = 1;
/// The writer rang a doorbell for this message.
const BELLED: u8 = 1;

/// A message received and not yet used up.
struct Arrived {
    number: u32,
    slot: usize,
    len: usize,
    belled: bool,
}

struct State {
    /// Free send slots and how many are in flight.
    free: Vec<usize>,
    in_flight: usize,
    /// Data messages sent (they are numbered from 1).
    sent: u32,
    /// Messages arrived, by number; bytes of the first already read.
    arrived: VecDeque<Arrived>,
    taken: usize,
    /// Data messages used up; belled ones among them whose doorbell byte
    /// is still in the socket.
    consumed: u32,
    owed: u32,
    broken: bool,
    /// What each send slot carries now (payload bytes, message number).
    slot_len: [usize; SEND_SLOTS],
    slot_number: [u32; SEND_SLOTS],
    /// Payload bytes the peer acknowledged, and sends it did not (slot
    /// held, to go again through the kernel at a hand-over).
    tx_acked: u64,
    unacked: Vec<usize>,
    /// Payload bytes taken off the VI in all, and read by the program.
    rx_total: u64,
    used: u64,
}

impl State {
    /// Bytes arrived and not yet read.
    fn unread(&self) -> usize {
        self.arrived.iter().map(|a| a.len).sum::<usize>() - self.taken
    }
}

pub struct NetLink {
    nic: Nic,
    ptag: PtagId,
    vi: Arc<Vi>,
    region: Region,
    owner_pid: u32,
    state: Mutex<State>,
    /// Held by the thread reading (blocking ones sleep holding it).
    reading: Mutex<()>,
    /// How long the next blocking read spins before it sleeps (adapts).
    spin: Mutex<WaitSpin>,
    nonblocking: AtomicBool,
    /// shutdown(SHUT_WR) came: writes fail with EPIPE (the kernel's FIN
    /// may wait for the peer's acknowledgements, `acknowledged_later`).
    write_shut: AtomicBool,
    /// The descriptor of the last read or write, for a flush at close or
    /// exit (which come without one) to notice a peer gone.
    last_fd: AtomicI32,
    /// Shared with this end's other processes (after fork or exec): where
    /// a hand-over to the kernel leaves what the VI had unread.
    page: Option<Arc<page::Page>>,
    /// Once handed over: the connection as every process of this end
    /// now uses it.
    handed: OnceLock<Arc<NetSwitched>>,
    /// Writers between a post and its doorbell (a hand-over waits for
    /// them: its switch byte must follow every doorbell).
    ringing: AtomicU32,
    /// Forks made before the link: a close after a later one hands over.
    forks: u32,
    /// As `Link::shared`: a close hands over.
    shared: bool,
    /// The record a program exec'd on the socket takes it up with.
    record: Option<Arc<crate::inherit::Inherit>>,
}

// SAFETY: the region is plain memory owned by the link; its slots are
// handed out under the state mutex.
unsafe impl Send for NetLink {}
// SAFETY: as above.
unsafe impl Sync for NetLink {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `a` comes after `b` in message numbers (which wrap).
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Whether the connection is reset or closed both ways (a write must fail),
/// or `fd` no longer names it.
fn hung_up_both(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: one pollfd of ours.
    unsafe { (crate::real::real().poll)(&mut p, 1, 0) };
    p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0
}

/// How long a blocking read spins on the VI before it sleeps at most
/// (`VIARUN_NET_SPIN_US`, default 50): a message that comes within the
/// spin costs no wake-up. The window adapts and yields as a wait on one
/// host does (`waitspin`): it halves while waits outlast it, so a reader
/// whose peer answers slowly soon sleeps at once, and it gives its CPU
/// away between looks once this host's processes outnumber the CPUs.
/// Measured on the quiet 2-vCPU box between two namespaces: 22 µs one
/// way against 46 µs without a spin (kernel TCP 28).
///
/// The short looks for a doorbell or a last acknowledgement stop when a
/// pause between two looks is longer than this (another process held
/// the CPU).
const SPIN_CONTENDED_NS: u64 = 30_000;

/// An idle link's keepalive interval and the silence after which its VI
/// counts the peer dead. A peer that dies is known from the kernel's
/// stream; one stopped (a debugger, SIGSTOP) past `IDLE_DEAD` has its
/// connection handed to the kernel (`handover`), not broken.
const IDLE_KEEPALIVE: Duration = Duration::from_secs(1);
const IDLE_DEAD: Duration = Duration::from_secs(10);

/// How long a writer about to close looks for its last acknowledgement
/// before it naps (`NetLink::flush_all`).
const FLUSH_LOOK: Duration = Duration::from_micros(100);

/// A spin by the rule of a blocking read's (`spin_time`), for an epoll,
/// poll or select waiter on connections between hosts.
pub(crate) fn spin_window() -> WaitSpin {
    WaitSpin::new(spin_time())
}

/// A spin of none at all (for a second waiter on a set).
pub(crate) fn spin_window_closed() -> WaitSpin {
    WaitSpin::new(Duration::ZERO)
}

fn spin_time() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = std::env::var("VIARUN_NET_SPIN_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(50);
        Duration::from_micros(us.min(MAX_SPIN_NS / 1000))
    })
}

/// Sleeps until the VI's socket has a datagram, the kernel socket shows
/// `events` (or an error or hang-up), the VI's next protocol timer is due,
/// or `limit` passed: one wake-up, by the kernel, where the VI's own Wait
/// goes through the NIC's progress thread (two, and on a loaded machine
/// hundreds of microseconds more per message).
fn nap(vi: &Vi, tcp: RawFd, events: libc::c_short, limit: Duration) {
    let Some((vfd, timer)) = vi.wait_hint() else {
        std::thread::sleep(Duration::from_millis(1));
        return;
    };
    let left = timer
        .map_or(SLICE, |t| {
            Duration::from_nanos(t.saturating_sub(openvia_core::sys::now_ns()))
        })
        .min(limit);
    let mut p = [
        libc::pollfd {
            fd: tcp,
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: vfd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ts = libc::timespec {
        tv_sec: left.as_secs() as libc::time_t,
        tv_nsec: left.subsec_nanos() as libc::c_long,
    };
    let _blocked = crate::link::network_blocked();
    // SAFETY: two pollfds and a timespec of ours, alive across the call.
    unsafe { (crate::real::real().ppoll)(p.as_mut_ptr(), 2, &ts, std::ptr::null()) };
}

/// Bytes waiting in the kernel socket (its doorbells): the C library's
/// ioctl, not this library's, which answers FIONREAD with the data.
fn bytes_in(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe {
        (crate::real::real().ioctl)(fd, libc::FIONREAD, (&mut n as *mut libc::c_int).cast())
    };
    if r == 0 {
        n.max(0) as usize
    } else {
        0
    }
}

impl NetLink {
    /// Sets up and connects the VI of a connection both ends agreed on;
    /// the connector names the acceptor's network address. `record`: the
    /// connection's exec record (claimed by this process), which then
    /// holds the hand-over page (`Inherit::net_page`) and goes on as the
    /// record a program exec'd on the socket takes it up with.
    pub fn handshake(
        fd: RawFd,
        side: Side,
        token: u64,
        peer_host: Option<&[u8]>,
        record: Option<Arc<crate::inherit::Inherit>>,
    ) -> Result<NetLink, HandshakeEnd> {
        // The acceptor says hello once it listens (`Hello::WhenListening`),
        // and listens before it makes the link's memory and VI: the
        // connector's request travels meanwhile.
        let listening = match side {
            Side::Connector => {
                // The acceptor's side exec'd a program without the library
                // (`link::BARE`): no hello of ours may follow.
                if kernel::take_if_within(fd, |b| b == BARE, Duration::ZERO).is_some() {
                    return Err(HandshakeEnd::PeerWentBare);
                }
                kernel::send_byte(fd, HELLO).map_err(|_| HandshakeEnd::Broken)?;
                None
            }
            Side::Acceptor => {
                let (nic, _) = process_nic(Medium::Network).map_err(|_| HandshakeEnd::Broken)?;
                Some((Listening::announce(fd, &nic, token)?, nic))
            }
        };
        let mut link = match NetLink::create(record) {
            Ok(link) => link,
            Err(_) => {
                if let Some((l, nic)) = listening {
                    l.stop(&nic, token);
                }
                return Err(HandshakeEnd::Broken);
            }
        };
        let listening = listening.map(|(l, _)| l);
        link.nonblocking
            .store(kernel::is_nonblocking(fd), Ordering::Relaxed);
        let (nic, vi, hello) = (&link.nic, &link.vi, Hello::WhenListening);
        meet(
            fd,
            nic,
            vi,
            side,
            token,
            peer_host,
            &|| false,
            hello,
            listening,
            None,
        )?;
        // Doorbells go out at once, as on one host (`kernel::no_delay`):
        // with Nagle on, a reply written in two calls (a header, then a
        // body) rang its second doorbell only once the first was
        // acknowledged, which the reader's kernel delays up to 40 ms when
        // it sends nothing back (nginx between two namespaces: ~40 ms a
        // request).
        kernel::no_delay(fd);
        // The kernel's stream tells of the peer's death (its FIN or reset,
        // the ICMP of a datagram to its closed port): the VI's keepalives,
        // by the device's default 20 a second each way on an idle
        // connection (each a wake-up of both ends' progress threads), need
        // only show that the peer is there (see `IDLE_KEEPALIVE`).
        let _ = link.vi.set_liveness(IDLE_KEEPALIVE, IDLE_DEAD);
        if link.record.is_some() {
            return Ok(link);
        }
        if let Some(page) = link.page.as_ref().and_then(|p| p.take_fd()) {
            link.record =
                crate::inherit::Inherit::offer(fd, crate::inherit::Offered::NetSwitchable { page });
            // SAFETY: the page's kept copy, handed to the record (which
            // made its own) and ours to close.
            unsafe { (crate::real::real().close)(page) };
        }
        Ok(link)
    }

    fn create(record: Option<Arc<crate::inherit::Inherit>>) -> Result<NetLink, ViaError> {
        let (nic, ptag) = process_nic(Medium::Network)?;
        // A record taken from the pool brings the page and memory of an
        // earlier connection of ours (`spare`).
        let spare = record
            .as_ref()
            .and_then(|r| r.take_spare())
            .filter(|s| s.fits(&nic, ptag));
        let made = match spare {
            Some(spare) => spare::take_up(spare, &nic, ptag, reliability::RELIABLE_RECEPTION)
                .map(|(page, region, vi)| (Some(Arc::new(page)), region, vi, record)),
            None => NetLink::make_memory(&nic, ptag, record),
        };
        let (page, region, vi, record) = made?;
        let link = NetLink {
            nic,
            ptag,
            vi,
            region,
            owner_pid: crate::process::id(),
            state: Mutex::new(State {
                free: (0..SEND_SLOTS).collect(),
                in_flight: 0,
                sent: 0,
                arrived: VecDeque::with_capacity(RECV_SLOTS),
                taken: 0,
                consumed: 0,
                owed: 0,
                broken: false,
                slot_len: [0; SEND_SLOTS],
                slot_number: [0; SEND_SLOTS],
                tx_acked: 0,
                unacked: Vec::new(),
                rx_total: 0,
                used: 0,
            }),
            reading: Mutex::new(()),
            spin: Mutex::new(spin_window()),
            nonblocking: AtomicBool::new(false),
            write_shut: AtomicBool::new(false),
            last_fd: AtomicI32::new(-1),
            page,
            handed: OnceLock::new(),
            ringing: AtomicU32::new(0),
            forks: crate::process::forks(),
            shared: record.as_ref().is_some_and(|r| r.may_be_shared()),
            record,
        };
        handover::count_link(1);
        for i in SEND_SLOTS..SEND_SLOTS + RECV_SLOTS {
            link.post_recv(i)?;
        }
        Ok(link)
    }

    /// A new hand-over page and registered memory, with their VI: in the
    /// record if there is one, else in a memfd of the page's own.
    #[allow(clippy::type_complexity)]
    fn make_memory(
        nic: &Nic,
        ptag: PtagId,
        record: Option<Arc<crate::inherit::Inherit>>,
    ) -> Result<
        (
            Option<Arc<page::Page>>,
            Region,
            Arc<Vi>,
            Option<Arc<crate::inherit::Inherit>>,
        ),
        ViaError,
    > {
        // The page in the record if there is one, else a memfd of its own
        // (then offered in a record of its own at the handshake's end).
        let in_record = record.as_ref().and_then(|r| {
            let (fd, at) = r.net_page()?;
            Some((page::Page::create_in(fd, at)?, fd, at))
        });
        let (page, shared, record) = match in_record {
            Some((p, fd, at)) => (Some(Arc::new(p)), Some((fd, at + page::REGION_AT)), record),
            None => {
                let page = page::Page::create().map(Arc::new);
                // The registered memory lies in the page: see `page`.
                let shared = page
                    .as_ref()
                    .and_then(|p| p.kept_fd())
                    .map(|fd| (fd, page::REGION_AT));
                (page, shared, None)
            }
        };
        let (region, vi) = Region::open(
            nic,
            ptag,
            // Sends complete once placed: see the module text (close).
            reliability::RELIABLE_RECEPTION,
            SEND_SLOTS + RECV_SLOTS,
            BUF,
            shared,
        )?;
        Ok((page, region, vi, record))
    }

    fn fill(&self, slot: usize, len: usize) -> DescPtr {
        let d = self.region.desc(slot);
        // SAFETY: `d` is slot `slot`'s 128-byte descriptor in our region,
        // not posted (its slot is free or just completed).
        unsafe {
            std::ptr::write_bytes(d.0 as *mut u8, 0, DESC_BYTES);
            (*d.0).cs.seg_count = 1;
            (*d.0).ds[0] = DataSegment {
                data: self.region.buffer(slot) as u64,
                handle: self.region.handle,
                length: len as u32,
            };
        }
        d
    }

    fn post_recv(&self, slot: usize) -> Result<(), ViaError> {
        let d = self.fill(slot, BUF);
        self.vi.post_recv(d.0, self.region.handle)
    }

    /// Posts a message of kind `kind` in send slot `slot`, whose payload
    /// (`len` bytes) is already in place.
    fn post_send(&self, slot: usize, kind: u8, flags: u8, number: u32, len: usize) -> bool {
        let buf = self.region.buffer_ptr(slot);
        // SAFETY: the slot's buffer is ours (free) and HDR bytes long at least.
        unsafe {
            *buf = kind;
            *buf.add(1) = flags;
            std::ptr::write_unaligned(buf.add(4) as *mut u32, number);
            std::ptr::write_unaligned(buf.add(8) as *mut u32, len as u32);
        }
        let d = self.fill(slot, HDR + len);
        self.vi.post_send(d.0, self.region.handle).is_ok()
    }

    /// A completed send: its slot is free again (unless the peer did not
    /// take it: then it is kept for a hand-over to send again).
    fn sent_done(&self, st: &mut State, d: DescPtr) {
        let slot = self.region.slot_of(d);
        st.in_flight -= 1;
        if d.status() & status::ERROR_MASK != 0 {
            st.broken = true;
            st.unacked.push(slot);
            return;
        }
        st.tx_acked += st.slot_len[slot] as u64;
        st.free.push(slot);
        if let Some(p) = &self.page {
            p.note_sent(st.tx_acked, st.slot_number[slot], st.sent);
        }
    }

    /// A completed receive: a message to read (anything else is dropped
    /// and its receive posted again).
    fn received(&self, st: &mut State, d: DescPtr) {
        let slot = self.region.slot_of(d);
        if d.status() & status::ERROR_MASK != 0 {
            // Flushed: the VI is gone.
            st.broken = true;
            return;
        }
        // SAFETY: the descriptor is ours and completed.
        let got = unsafe { (*d.0).cs.length as usize };
        let buf = self.region.buffer_ptr(slot);
        // SAFETY: the buffer holds `got` ≥ HDR bytes (checked first).
        let (kind, flags, number, len) = if got >= HDR {
            unsafe {
                (
                    *buf,
                    *buf.add(1),
                    std::ptr::read_unaligned(buf.add(4) as *const u32),
                    std::ptr::read_unaligned(buf.add(8) as *const u32) as usize,
                )
            }
        } else {
            (0, 0, 0, 0)
        };
        match kind {
            DATA if len <= got - HDR && len <= CHUNK => {
                st.rx_total += len as u64;
                let at = st
                    .arrived
                    .iter()
                    .position(|a| after(a.number, number))
                    .unwrap_or(st.arrived.len());
                st.arrived.insert(
                    at,
                    Arrived {
                        number,
                        slot,
                        len,
                        belled: flags & BELLED != 0,
                    },
                );
            }
            _ => {
                if self.post_recv(slot).is_err() {
                    st.broken = true;
                }
            }
        }
    }

    /// Takes the completed sends back (their slots are free again).
    fn reap(&self, st: &mut State) {
        while let Ok(d) = self.vi.send_done() {
            self.sent_done(st, d);
        }
        if self.vi.state() == ViState::Error {
            st.broken = true;
        }
    }

    /// Takes back the sends already known to be done, without a look at
    /// the network: an event loop's requests are acknowledged by the
    /// replies it read, and driving the device for them cost each fourth
    /// write a receive that found nothing and a bare acknowledgement sent
    /// just ahead of the message that would have carried it. Whether it
    /// freed any.
    fn reap_at_hand(&self, st: &mut State) -> bool {
        let mut any = false;
        while let Ok(d) = self.vi.send_done_at_hand() {
            self.sent_done(st, d);
            any = true;
        }
        any
    }

    /// Takes what arrived. (Each look at the VI is a system call on the
    /// network device: a reader does not look for send completions, nor a
    /// writer that has a free slot for them.)
    fn pump(&self, st: &mut State) {
        self.pump_for(st, usize::MAX);
    }

    /// Takes what arrived until `need` bytes are unread: the look that
    /// finds nothing more costs a system call, which a read already
    /// satisfied does without. Once something is unread it takes only what
    /// the VI holds already (a read returns what is there, as TCP's does):
    /// after a lone message — a request, a reply — the network has nothing
    /// more, and looking cost each such read a second system call. A
    /// stream's messages come in batches, which the first look completes
    /// together.
    fn pump_for(&self, st: &mut State, need: usize) {
        while st.unread() < need {
            let d = if st.unread() == 0 {
                self.vi.recv_done()
            } else {
                self.vi.recv_done_at_hand()
            };
            let Ok(d) = d else { break };
            self.received(st, d);
        }
        if self.vi.state() == ViState::Error {
            st.broken = true;
        }
    }

    fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }
}

impl crate::carried::Carried for NetLink {
    fn read(
        &self,
        fd: RawFd,
        out: &mut [&mut [u8]],
        dontwait: bool,
        peek: bool,
        all: bool,
    ) -> Result<usize, i32> {
        self.last_fd.store(fd, Ordering::Relaxed);
        self.read_some(fd, out, dontwait, peek, all)
    }
    fn write(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32> {
        self.last_fd.store(fd, Ordering::Relaxed);
        self.write_all(fd, data, dontwait, nosignal)
    }
    fn flush(&self) {
        self.flush_all(self.last_fd.load(Ordering::Relaxed))
    }
    fn unacknowledged(&self) -> bool {
        if self.handed.get().is_some() {
            return false;
        }
        let mut st = lock(&self.state);
        self.reap(&mut st);
        st.in_flight > 0 && !st.broken
    }
    fn acknowledged_soon(&self) -> bool {
        let mut look = Window::new(FLUSH_LOOK, SPIN_CONTENDED_NS).start();
        loop {
            if !self.unacknowledged() {
                return true;
            }
            if !look.go_on_busy() {
                return false;
            }
        }
    }
    /// Writes end here; the reader learns of the end from the kernel's
    /// FIN, which follows every doorbell.
    fn shut(&self) {
        self.write_shut.store(true, Ordering::Release);
    }
    fn close_writes(&self) {
        self.write_shut.store(true, Ordering::Release);
    }
    fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }
    fn owner_pid(&self) -> u32 {
        self.owner_pid
    }
    fn rung_from_another_host(&self) -> bool {
        // Handed to the kernel, the connection is plain TCP: no spin.
        self.handed.get().is_none()
    }
    fn writable(&self) -> bool {
        if self.handed.get().is_some() {
            return true;
        }
        let mut st = lock(&self.state);
        self.reap(&mut st);
        st.broken || !st.free.is_empty()
    }
    fn unread(&self, fd: RawFd) -> usize {
        if let Some(s) = self.handed.get() {
            return s.unread(fd);
        }
        let mut st = lock(&self.state);
        self.pump(&mut st);
        st.unread()
    }
    fn wait_room(&self, fd: RawFd, limit: Duration) {
        if !self.writable() {
            // Room comes with the peer's acknowledgements, on the VI's socket.
            nap(&self.vi, fd, 0, limit);
        }
    }
    fn switched(&self, _fd: RawFd) -> Option<Arc<dyn crate::carried::Carried>> {
        let page = self.page.clone()?;
        Some(Arc::new(NetSwitched::new(page, self.record.clone())))
    }
    fn settle_for_sandbox(&self, fd: RawFd) -> Option<Arc<dyn crate::carried::Carried>> {
        if self.owner_pid == crate::process::id() {
            // Our own VI: handed over here, as at an exec.
            self.hand_over_now(fd).ok()?;
        }
        let page = self.page.clone()?;
        NetSwitched::new(page, self.record.clone()).settle_for_sandbox(fd)
    }
    fn hand_over(&self, fd: RawFd, always: bool) {
        if always || self.shared || crate::process::forks() != self.forks {
            let _ = self.hand_over_now(fd);
        }
        if let Some(s) = self.handed.get() {
            s.hand_over(fd, always);
        }
    }
    fn linger(&self, fd: RawFd) {
        if let Some(s) = self.handed.get() {
            linger::hold(fd, s.clone());
        }
    }
    fn serve_request(&self, fd: RawFd) -> bool {
        let asked = self
            .page
            .as_ref()
            .is_some_and(|p| p.state() == page::REQUESTED);
        if asked {
            let _ = self.hand_over_now(fd);
        }
        asked
    }
}

/// At exit: waits (bounded) for the connections this process let go
/// after a fork to take their peers' hand-over answers (`linger`).
pub fn wait_lingering() {
    linger::wait_all(Duration::from_millis(500));
}

/// At `_exit`: waits only for what the peers have not acknowledged (a
/// close or shutdown sent it aside), which would go with the process.
pub fn wait_acknowledgements() {
    linger::wait_all(Duration::ZERO);
}

impl Drop for NetLink {
    fn drop(&mut self) {
        if self.owner_pid == crate::process::id() {
            if !self.keep_memory() {
                self.region.release(&self.nic, &self.vi);
            }
            handover::count_link(-1);
        }
    }
}

#[cfg(test)]
mod tests;
