//! pvmd to pvmd: one reliable VI over openvia's network device per peer
//! daemon, carrying daemon frames (`frame.rs`) inside a small envelope
//! (source and destination host, so a hub can relay), cut into fragments.
//!
//! The sliding window is the number of fragment sends in flight
//! (`OPENVIA_PVM_WINDOW`, default 16, of `OPENVIA_PVM_FRAG` bytes, default
//! 256 KiB). Each end keeps twice that many receives posted; when they run
//! out, RUM's receiver-driven flow control holds the sender, so nothing is
//! dropped. Sending: a one-fragment item is posted by the calling thread
//! when the window has room; the rest goes to a sender thread that copies
//! fragments into registered buffers and posts them as the window allows,
//! so the daemon's poll loop never blocks on the network. Receiving has no
//! thread of its own: a receive notify handler ([`RecvSide`]) reassembles
//! each fragment on whichever thread drove the VI (the NIC's progress
//! thread, woken by the datagram; or the owner itself, see
//! [`Link::poll`]) and hands frames to the loop through a channel and an
//! eventfd, or writes messages straight into the pool.
//!
//! Tasks use the same links for PvmRouteDirect between hosts
//! (`task/direct.rs`): there the envelope carries tids, a message body is
//! handed over as a pool [`Body`] (copied once, from its pool pages into
//! the registered fragments), and the receiver writes bodies into the
//! task's own pool pages. What a link wakes is a [`WakeUp`]: the daemon's
//! eventfd, or the task's pool doorbell.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use openvia_core::descriptor::{status, DescPtr};
use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::slots::Slots;
use openvia_core::sys::poll::EventFd;
use openvia_core::vi::{reliability, Vi, ViAttributes};
use openvia_core::{Address, ViaError};

mod recv;
mod send;

use recv::{Assembly, RecvSide, RecvState};
use send::{send_loop, Outgoing, SendSide, SendState};

use crate::frame::Frame;
use crate::pool::inbound::Inbound;
use crate::pool::Body;

/// The immediate data of the last fragment of a frame.
const LAST_FRAGMENT: u32 = 1;
/// Envelope: source host, destination host.
const ENVELOPE: usize = 8;
/// Envelope, frame length, kind, five ints and the body length: where a
/// message's body starts in its first fragment.
const MSG_HEADER: usize = ENVELOPE + 4 + 1 + 20 + 4;

/// Link settings, from the environment.
#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    /// Fragment sends in flight.
    pub window: usize,
    /// Bytes per fragment.
    pub frag: usize,
}

impl LinkConfig {
    pub fn from_env() -> LinkConfig {
        let get = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|&v| v > 0)
                .unwrap_or(d)
        };
        LinkConfig {
            window: get("OPENVIA_PVM_WINDOW", 16).min(1024),
            frag: get("OPENVIA_PVM_FRAG", 256 * 1024).clamp(1024, 1 << 20),
        }
    }
}

/// What a link reports to the daemon's loop.
pub enum LinkEvent {
    /// A whole frame from host `src`, meant for host `dst`.
    Frame {
        via: u32,
        src: u32,
        dst: u32,
        frame: Frame,
    },
    /// The link to host `via` is gone (peer dead, unreachable or closed).
    Down { via: u32, why: String },
}

/// Whatever a link's threads wake when they have news.
pub trait WakeUp: Send + Sync {
    fn wake(&self);

    /// A message was written into a task's pool pages (and its doorbell
    /// rung). The task will likely answer at once: a daemon loop that is
    /// asleep may want to start spinning for that answer.
    fn delivered(&self) {}
}

/// Wakes the daemon's poll loop: an eventfd it polls.
pub struct Waker {
    fd: EventFd,
    /// A delivery into the pool wakes the loop (`WakeUp::delivered`):
    /// set while the loop sleeps and its spin is on; not while it drives
    /// the links itself (spinning), when it needs no kick.
    kick: std::sync::atomic::AtomicBool,
}

impl Waker {
    pub fn new() -> io::Result<Arc<Waker>> {
        Ok(Arc::new(Waker {
            fd: EventFd::new()?,
            kick: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    pub fn fd(&self) -> RawFd {
        self.fd.fd().as_raw_fd()
    }

    pub fn wake(&self) {
        self.fd.signal();
    }

    /// Whether a delivery into the pool wakes the loop (see `kick`).
    pub fn set_kick(&self, on: bool) {
        self.kick.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Clears the counter after a wake-up.
    pub fn drain(&self) {
        self.fd.drain();
    }
}

impl WakeUp for Waker {
    fn wake(&self) {
        Waker::wake(self);
    }

    /// Wakes a sleeping loop so that it spins for the task's answer: the
    /// loop's wake-up then runs beside the task's, instead of after the
    /// task's send (one wake-up off each message's path).
    fn delivered(&self) {
        if self.kick.load(std::sync::atomic::Ordering::Relaxed) {
            Waker::wake(self);
        }
    }
}

/// The daemon's side of the network: one NIC for every link.
pub struct LinkNic {
    nic: Nic,
    ptag: PtagId,
    cfg: LinkConfig,
}

impl LinkNic {
    /// Opens the network device (`OPENVIA_PVM_DEVICE`, default the generic
    /// `/dev/via_udp` on this host's address).
    pub fn open() -> Result<LinkNic, ViaError> {
        let dev = std::env::var("OPENVIA_PVM_DEVICE").unwrap_or_else(|_| "/dev/via_udp".into());
        let nic = Nic::open(Some(&dev))?;
        // Daemon threads must not busy-poll: tasks need the CPUs. Receives
        // come through notify handlers (`RecvSide`), which the progress
        // thread runs as soon as a datagram arrives.
        nic.set_spin_ns(0);
        nic.set_event_driven(true);
        // ... but the progress thread, which runs those handlers, polls its
        // sockets a while before it sleeps: a message between hosts that
        // finds it asleep pays an idle vCPU's wake-up (5–50 µs here) on top
        // of the receiver's. The window adapts, so an idle daemon stops
        // polling after a few empty waits (docs/pvm.md, "The progress
        // thread's poll").
        nic.set_progress_spin(crate::spin::limit() * 2, crate::spin::PVMD_CONTENDED_NS);
        // A failed VI is reported as the link going down (`LinkEvent`);
        // the core's default report would print it on stderr, which is
        // the program's (a direct route lives in user tasks).
        nic.set_error_handler(Some(Arc::new(|_: &openvia_core::nic::AsyncError| {})))?;
        let ptag = nic.create_ptag()?;
        Ok(LinkNic {
            nic,
            ptag,
            cfg: LinkConfig::from_env(),
        })
    }

    /// Whether the progress thread must watch the VIs (the owner sleeps
    /// elsewhere) or may leave them to an owner that drives them itself
    /// while it waits (`Link::poll`, `Link::wait_hint`).
    pub fn set_event_driven(&self, on: bool) {
        self.nic.set_event_driven(on);
    }

    /// Fragment sends in flight on a link.
    pub fn window(&self) -> usize {
        self.cfg.window
    }

    /// This NIC's host address.
    pub fn address(&self) -> Vec<u8> {
        self.nic.query().address.to_vec()
    }

    /// A fresh VI for a link (the daemon's, or a task's direct route).
    pub fn new_vi(&self) -> Result<Arc<Vi>, ViaError> {
        let attrs = ViAttributes {
            reliability: reliability::RELIABLE_DELIVERY,
            max_transfer: self.cfg.frag as u64,
            ptag: self.ptag,
            rdma_write: false,
            rdma_read: false,
        };
        self.nic.create_vi(attrs, None, None)
    }

    /// Waits for the peer daemon to connect to (our address, `disc`).
    pub fn accept(&self, disc: &[u8], timeout: Duration) -> Result<Arc<Vi>, ViaError> {
        let vi = self.new_vi()?;
        self.accept_on(&vi, disc, timeout)?;
        Ok(vi)
    }

    /// Connects to the daemon waiting at (`host`, `disc`).
    pub fn connect(
        &self,
        host: &[u8],
        disc: &[u8],
        timeout: Duration,
    ) -> Result<Arc<Vi>, ViaError> {
        let vi = self.new_vi()?;
        self.connect_on(&vi, disc, (host, disc), timeout)?;
        Ok(vi)
    }

    /// Waits for a connect to (our address, `disc`) and accepts it on
    /// `vi` (whose receives may be posted already).
    pub fn accept_on(&self, vi: &Arc<Vi>, disc: &[u8], timeout: Duration) -> Result<(), ViaError> {
        let local = Address {
            host: self.address(),
            discriminator: disc.to_vec(),
        };
        let req = openvia_core::connect_wait(self.nic.shared(), &local, Some(timeout))?;
        req.accept(vi)
    }

    /// Connects `vi` (ours at `disc`) to the VI waiting at (`host`,
    /// `their_disc`).
    pub fn connect_on(
        &self,
        vi: &Arc<Vi>,
        disc: &[u8],
        (host, their_disc): (&[u8], &[u8]),
        timeout: Duration,
    ) -> Result<(), ViaError> {
        let local = Address {
            host: self.address(),
            discriminator: disc.to_vec(),
        };
        let remote = Address {
            host: host.to_vec(),
            discriminator: their_disc.to_vec(),
        };
        openvia_core::connect_request(vi, &local, &remote, Some(timeout)).map(|_| ())
    }

    /// Starts the two threads of a link on a connected VI; `via` is the
    /// peer's host number, `me` ours. With `inbound`, messages for tasks of
    /// this host go straight into the pool.
    pub fn start(
        &self,
        vi: Arc<Vi>,
        (via, me): (u32, u32),
        events: Sender<LinkEvent>,
        waker: Arc<dyn WakeUp>,
        inbound: Option<Arc<Inbound>>,
    ) -> Result<Link, ViaError> {
        self.prepare(vi)?.run((via, me), events, waker, inbound)
    }

    /// Registers a link's buffers and posts its receives: done before the
    /// VI connects, so whatever the peer sends at once finds room.
    pub fn prepare(&self, vi: Arc<Vi>) -> Result<PreparedLink, ViaError> {
        self.prepare_with(vi, self.cfg.window, 2 * self.cfg.window)
    }

    /// As [`LinkNic::prepare`], for a link that carries data one way
    /// only (a task's link to a pvmd, `daemon/task_links.rs`): the end
    /// that only sends posts `recv_n` = 1 receive, the end that only
    /// receives keeps `send_n` = 1 send slot, instead of a window's worth
    /// of registered memory it would never use.
    pub fn prepare_with(
        &self,
        vi: Arc<Vi>,
        send_n: usize,
        recv_n: usize,
    ) -> Result<PreparedLink, ViaError> {
        let cfg = self.cfg;
        let send_slots = Slots::new(&self.nic, self.ptag, send_n.max(1), cfg.frag, true)?;
        let recv_n = recv_n.max(1);
        let recv_slots = Slots::new(&self.nic, self.ptag, recv_n, cfg.frag, true)?;
        for i in 0..recv_n {
            recv_slots.prepare(i, cfg.frag, None);
            vi.post_recv(recv_slots.desc(i), recv_slots.desc_handle())?;
        }
        Ok(PreparedLink {
            nic: self.nic.clone(),
            vi,
            send_slots,
            recv_slots,
        })
    }
}

/// A link's VI with its buffers registered and receives posted; `run`
/// starts its threads once the VI is connected.
pub struct PreparedLink {
    nic: Nic,
    vi: Arc<Vi>,
    send_slots: Slots,
    recv_slots: Slots,
}

impl PreparedLink {
    pub fn vi(&self) -> &Arc<Vi> {
        &self.vi
    }

    /// Starts the sender and receiver threads (see [`LinkNic::start`]).
    pub fn run(
        self,
        (via, me): (u32, u32),
        events: Sender<LinkEvent>,
        waker: Arc<dyn WakeUp>,
        inbound: Option<Arc<Inbound>>,
    ) -> Result<Link, ViaError> {
        let PreparedLink {
            nic,
            vi,
            send_slots,
            recv_slots,
        } = self;
        let (tx, rx) = mpsc::channel::<Outgoing>();
        let side = Arc::new(SendSide {
            state: Mutex::new(SendState {
                free: (0..send_slots.len()).rev().collect(),
                queued: 0,
            }),
            vi: vi.clone(),
            slots: send_slots,
        });
        let sender = {
            let (side, events, waker, nic) =
                (side.clone(), events.clone(), waker.clone(), nic.clone());
            openvia_core::sys::thread::spawn_quiet_from(
                std::thread::Builder::new().name(format!("pvm-send-{via:x}")),
                move || {
                    let _keep = nic;
                    if let Err(why) = send_loop(&side, rx) {
                        let _ = events.send(LinkEvent::Down { via, why });
                        waker.wake();
                    }
                },
            )
            .map_err(|_| ViaError::Resource("thread"))?
        };
        let recv = Arc::new(RecvSide {
            vi: Arc::downgrade(&vi),
            _nic: nic,
            slots: recv_slots,
            via,
            waker,
            inbound,
            state: Mutex::new(RecvState {
                pending: Default::default(),
                running: false,
                down: false,
                assembly: Assembly::Idle,
                events,
            }),
        });
        // What arrived before the handler was armed fires it at once.
        recv.arm(true)
            .map_err(|_| ViaError::InvalidState("receive notify"))?;
        Ok(Link {
            tx,
            side,
            recv,
            vi,
            me,
            sender: Some(sender),
        })
    }
}

/// A live link to one peer daemon (or, for a direct route, one task).
pub struct Link {
    tx: Sender<Outgoing>,
    side: Arc<SendSide>,
    recv: Arc<RecvSide>,
    vi: Arc<Vi>,
    me: u32,
    sender: Option<JoinHandle<()>>,
}

impl Link {
    /// Queues `frame` for host `dst` (reached through this link); `src` is
    /// the host it comes from (ours unless relaying).
    pub fn send(&self, src: u32, dst: u32, frame: &Frame) -> bool {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&src.to_le_bytes());
        bytes.extend_from_slice(&dst.to_le_bytes());
        bytes.extend_from_slice(&frame.encode());
        self.submit(Outgoing::Bytes(bytes))
    }

    /// Posts a one-fragment item from the calling thread when nothing is
    /// queued before it and the window has room (a thread hop less per
    /// small message); otherwise queues it for the sender thread.
    fn submit(&self, out: Outgoing) -> bool {
        let mut st = self.side.lock();
        if st.queued == 0 && !matches!(out, Outgoing::Close) {
            let parts = out.parts();
            let total = parts[0].len() + parts[1].len();
            // Completions are reaped only when no slot is free: a look
            // costs a system call on the network device.
            if total <= self.side.slots.size()
                && (!st.free.is_empty() || self.side.reap(&mut st).is_ok())
                && !st.free.is_empty()
            {
                let posted = self.side.post_fragment(&mut st, parts, 0, total, true);
                crate::trace::mark("link.posted", total);
                return posted.is_ok();
            }
        }
        st.queued += 1;
        drop(st);
        crate::trace::mark("link.queued", 0);
        self.tx.send(out).is_ok()
    }

    /// Drives the VI once from the calling thread, without waiting: what
    /// has arrived is taken in here (the receive handler runs on this
    /// thread), so a task that polls while it waits for a message is not
    /// woken by another thread. False if the link failed.
    pub fn poll(&self) -> bool {
        let mut st = self.side.lock();
        self.side.reap(&mut st).is_ok()
    }

    /// The VI's descriptor (readable when the peer sent something) and
    /// its next protocol timer (CLOCK_MONOTONIC ns), for an owner that
    /// sleeps in `poll` and then calls [`Link::poll`].
    pub fn wait_hint(&self) -> Option<(RawFd, Option<u64>)> {
        self.vi.wait_hint()
    }

    /// Whether the link went down (its VI failed or was closed).
    pub fn failed(&self) -> bool {
        self.recv.lock().down || self.vi.state() != openvia_core::vi::ViState::Connected
    }

    /// Drops the VI at once, without letting what is queued go out (a
    /// failing network, for the tests); both ends then see the link down.
    pub fn abort(&self) {
        let _ = self.vi.disconnect();
    }

    /// Queues a frame of our own.
    pub fn send_own(&self, dst: u32, frame: &Frame) -> bool {
        self.send(self.me, dst, frame)
    }

    /// Queues a message whose body stays where it is until the sender
    /// thread copies it into fragments: the frame `Frame::Msg` would give,
    /// with the envelope (`env_src`, `env_dst`).
    pub fn send_msg(&self, (env_src, env_dst): (u32, u32), ints: [i32; 5], body: Body) -> bool {
        let mut head = Vec::with_capacity(MSG_HEADER);
        head.extend_from_slice(&env_src.to_le_bytes());
        head.extend_from_slice(&env_dst.to_le_bytes());
        head.extend_from_slice(&((1 + 20 + 4 + body.len()) as u32).to_le_bytes());
        head.push(crate::frame::KIND_MSG);
        for v in ints {
            head.extend_from_slice(&v.to_le_bytes());
        }
        head.extend_from_slice(&(body.len() as u32).to_le_bytes());
        self.submit(Outgoing::Msg { head, body })
    }

    /// Closes the link once what is queued has gone out (the peer then
    /// sees its VI go down).
    pub fn close_after_queue(&self) {
        if !self.submit(Outgoing::Close) {
            let _ = self.vi.disconnect();
        }
    }

    /// Closes after the queue as above and waits until the sender thread
    /// is gone and no receive handler runs: a task does this before
    /// leaving, so nothing still writes into pool pages its slot is about
    /// to give up.
    pub fn close_and_join(mut self) {
        self.close_after_queue();
        if let Some(sender) = self.sender.take() {
            let _ = sender.join();
        }
        // The sender disconnected (or failed); either way the VI is no
        // longer connected.
        let _ = self.vi.disconnect();
        self.recv.quiesce();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // A link dropped without close_and_join (its peer failed): the
        // handler's pending work is of no use to anyone any more.
        self.recv.quiesce();
    }
}

fn status_ok(d: DescPtr) -> Result<(u32, u32), String> {
    // SAFETY: the descriptor came back from the core, which wrote it last.
    let (st, len, imm) = unsafe {
        let c = &(*d.0).cs;
        (d.status(), c.length, c.immediate_data)
    };
    if st & status::ERROR_MASK != 0 {
        return Err(format!("descriptor status {st:#x}"));
    }
    Ok((len, imm))
}

/// How one end of a link to be made tells the other where it waits (a
/// direct route's CONNECT and ACCEPT, a pvmd's answer to LINK_OPEN):
/// discriminator length, discriminator, network address.
pub fn encode_hello(disc: &[u8], address: &[u8]) -> Vec<u8> {
    let mut b = vec![disc.len() as u8];
    b.extend_from_slice(disc);
    b.extend_from_slice(address);
    b
}

/// The inverse of [`encode_hello`]; None if malformed.
pub fn decode_hello(b: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let n = *b.first()? as usize;
    let disc = b.get(1..1 + n)?.to_vec();
    let addr = b.get(1 + n..)?.to_vec();
    (!disc.is_empty() && !addr.is_empty()).then_some((disc, addr))
}

/// Envelope and frame; None if malformed.
pub fn parse(bytes: &[u8]) -> Option<(u32, u32, Frame)> {
    if bytes.len() < ENVELOPE + 4 {
        return None;
    }
    let src = u32::from_le_bytes(bytes[0..4].try_into().ok()?);
    let dst = u32::from_le_bytes(bytes[4..8].try_into().ok()?);
    let len = u32::from_le_bytes(bytes[8..12].try_into().ok()?) as usize;
    if bytes.len() - 12 != len {
        return None;
    }
    Frame::decode(&bytes[12..]).ok().map(|f| (src, dst, f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Args, Msg};

    fn readable(w: &Waker) -> bool {
        openvia_core::sys::poll::readable_now(w.fd())
    }

    #[test]
    fn a_delivery_kicks_a_sleeping_loop_only() {
        let w = Waker::new().unwrap();
        // By default (no spin, or a task's link) a delivery wakes nobody.
        w.delivered();
        assert!(!readable(&w));
        // The loop sleeps, its spin on: a message placed into the pool
        // wakes it, so it spins for the task's answer.
        w.set_kick(true);
        w.delivered();
        assert!(readable(&w));
        w.drain();
        assert!(!readable(&w));
        // The loop is spinning, polling the links itself: nothing to wake.
        w.set_kick(false);
        w.delivered();
        assert!(!readable(&w));
        // Frames and link failures always wake it.
        WakeUp::wake(&*w);
        assert!(readable(&w));
    }

    #[test]
    fn hello_round_trips_and_rejects_garbage() {
        let b = encode_hello(b"disc", &[1, 2, 3]);
        assert_eq!(decode_hello(&b), Some((b"disc".to_vec(), vec![1, 2, 3])));
        assert_eq!(decode_hello(&b[..3]), None);
        assert_eq!(decode_hello(&[]), None);
        assert_eq!(decode_hello(&[0, 1, 2]), None);
        assert_eq!(decode_hello(&[4, b'd', b'i', b's', b'c']), None);
    }

    #[test]
    fn envelope_round_trips_and_rejects_garbage() {
        let f = Frame::Msg(Msg {
            src: 1,
            dst: 0x80001,
            tag: 5,
            ctx: 0,
            enc: 0,
            body: vec![7; 100],
        });
        let mut b = Vec::new();
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&f.encode());
        assert_eq!(parse(&b), Some((1, 2, f)));
        assert_eq!(parse(&b[..b.len() - 1]), None);
        assert_eq!(parse(&[0; 5]), None);
        let r = Frame::Reply {
            seq: 1,
            code: 0,
            args: Args::default(),
        };
        let mut b = vec![0u8; 8];
        b.extend_from_slice(&r.encode());
        b[8] ^= 0xff;
        assert_eq!(parse(&b), None);
    }
}
