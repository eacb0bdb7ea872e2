//! PvmRouteDirect between hosts: a VI task to task over openvia's network
//! device, carried by the same [`Link`] the pvmds use between them (a
//! fragmenting sender thread with a window, a receiver thread writing
//! bodies into this task's own pool pages). On one host every message
//! already goes task to task through the pool, which is the direct route
//! there.
//!
//! Setup travels as hidden messages routed the default way, through the
//! pvmds, in a context `pvm_newcontext` never gives ([`DIRECT_CTX`]); they
//! are taken out before the user's queue and handled whenever the task is
//! in the library (a send, receive or probe), so nobody waits for the
//! other side:
//!
//! 1. A, sending to B with PvmRouteDirect, opens its NIC (once) and sends
//!    CONNECT(its discriminator, its address); the message itself and all
//!    until the VI is up still go through the pvmds.
//! 2. B makes a VI, posts its receives, waits for A's connect on a thread
//!    of its own and answers ACCEPT(its discriminator, address) — unless B
//!    set PvmDontRoute or has no pool or NIC: then REFUSE, and A stays
//!    routed. B's default (PvmAllowDirect, as in PVM) accepts. Two
//!    CONNECTs that cross: the lower tid's wins, the other side answers it.
//! 3. A makes its VI, posts its receives and connects to B's, also on a
//!    thread (the client retries until B waits). Each connect thread rings
//!    its task's pool doorbell when done; the task picks the outcome up on
//!    its next entry into the library. (Client and server rather than
//!    `peer_request`: on the network device the waiting side of a peer
//!    connect refuses its own VI, which is ConnectPending by then.)
//! 4. Once connected, each side sends SWITCH through the pvmds as its last
//!    routed message to the other and from then on sends over the VI (both
//!    sides use an open VI, as PVM uses an open direct route both ways).
//!    A receiver holds what comes over the VI from a peer until that peer's
//!    SWITCH came the routed way, so messages of one pair arrive in the
//!    order sent.
//!
//! A VI that fails (peer dead, unreachable) reports its link down; sends to
//! that peer go through the pvmds again, never hang. Not retried.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openvia_core::ViaError;

use super::{Queued, Task};
use crate::error::{PvmError, PvmResult};
use crate::frame::{self, Frame, Msg};
use crate::link::{decode_hello, encode_hello, Link, LinkEvent, LinkNic, PreparedLink, WakeUp};
use crate::pool::inbound::{Arrival, Inbound};
use crate::pool::{Body, Pool};
use crate::tid;

/// Context of the setup messages; user contexts are positive.
pub(crate) const DIRECT_CTX: i32 = i32::MIN + 1;

/// Tags of the setup messages.
mod kind {
    pub const CONNECT: i32 = 1;
    pub const ACCEPT: i32 = 2;
    pub const REFUSE: i32 = 3;
    pub const SWITCH: i32 = 4;
}

/// PvmRoute values.
pub(crate) const ROUTE_DONT: i32 = 1;
pub(crate) const ROUTE_ALLOW: i32 = 2;
const ROUTE_DIRECT: i32 = 3;

/// How long a peer-to-peer connect may take before the pair stays routed.
const CONNECT_LIMIT: Duration = Duration::from_secs(10);

/// Prints per-task figures at pvm_exit when set (tests check them).
pub(super) const ENV_STATS: &str = "OPENVIA_PVM_DIRECT_STATS";

/// Where a connect thread leaves its VI, ready to run.
type Outcome = Arc<Mutex<Option<Result<PreparedLink, ViaError>>>>;

/// Our side of a connect: wait for the peer's, or call it.
enum Role {
    Wait,
    Call {
        their_disc: Vec<u8>,
        their_addr: Vec<u8>,
    },
}

/// A link's wake-up: the task sleeps on its pool doorbell.
struct BellWaker {
    pool: Arc<Pool>,
    slot: usize,
}

impl WakeUp for BellWaker {
    fn wake(&self) {
        self.pool.ring_bell(self.slot);
    }
}

enum State {
    /// Nothing asked either way.
    Idle,
    /// Our CONNECT is out, under our discriminator.
    Asked {
        disc: Vec<u8>,
    },
    /// Connect in progress on its own thread.
    Connecting(Outcome),
    Up(Link),
    /// Refused or failed: routed for good.
    Off,
}

struct Peer {
    state: State,
    /// We sent SWITCH: our messages to the peer go over the VI.
    switched_out: bool,
    /// The peer's SWITCH came: its VI messages may be seen.
    switched_in: bool,
    /// VI messages that came before the peer's SWITCH.
    held: Vec<Queued>,
    /// Messages sent and received over the VI.
    sent: u64,
    received: u64,
    /// Messages sent and received over the current VI.
    sent_on_link: u64,
    received_on_link: u64,
    /// A VI failed after we had sent over it: the next send says so.
    failed: bool,
    /// VIs opened again (their connect started) after an earlier one
    /// carried messages: counted when the connect starts, as the peer
    /// may exit before a replacement comes up (tests/pvm/multihost.sh
    /// saw its master exit with the third slave's VI still connecting,
    /// and no reopening counted, in one CI run).
    reopened: u64,
}

impl Peer {
    /// Enters `state`; a connect started after messages went over an
    /// earlier VI counts as a reopening.
    fn connecting(&mut self, state: State) {
        if matches!(state, State::Connecting(_)) {
            self.reopened += u64::from(self.sent + self.received > 0);
        }
        self.state = state;
    }

    fn new() -> Peer {
        Peer {
            state: State::Idle,
            switched_out: false,
            switched_in: false,
            held: Vec::new(),
            sent: 0,
            received: 0,
            sent_on_link: 0,
            received_on_link: 0,
            failed: false,
            reopened: 0,
        }
    }
}

/// The task's NIC and what its links deliver.
struct Endpoint {
    nic: Arc<LinkNic>,
    address: Vec<u8>,
    inbound: Arc<Inbound>,
    arrivals: Receiver<Arrival>,
    events: (Sender<LinkEvent>, Receiver<LinkEvent>),
    waker: Arc<BellWaker>,
}

/// A task's direct routes.
#[derive(Default)]
pub struct Direct {
    endpoint: Option<Endpoint>,
    /// The NIC could not be opened: do not try again.
    unavailable: bool,
    peers: HashMap<i32, Peer>,
    /// Setup messages not handled yet.
    control: VecDeque<Queued>,
    /// Links that went down, joined at exit.
    retired: Vec<Link>,
    /// The task drives its links itself while it waits (`wait_direct`);
    /// the NIC's progress thread leaves them alone meanwhile.
    polling: bool,
    /// How long a wait on a direct VI polls before it sleeps (made on
    /// first use, from OPENVIA_PVM_SPIN_NS).
    spin: Option<crate::spin::Window>,
}

/// One `pvm_recv`'s wait on a direct VI: when its spin ends, and whether
/// it slept in the end.
#[derive(Default)]
pub(super) struct DirectWait {
    spin: Option<crate::spin::Spin>,
}

/// Longest sleep in `wait_direct` between looks at the link (its protocol
/// timers wake it sooner; this bounds how late a message from the peer
/// that came the routed way, into the pool, after its VI failed is seen),
/// and the shortest (a timer already due).
const DIRECT_SLEEP_MAX_NS: u64 = 20_000_000;
const DIRECT_SLEEP_MIN_NS: u64 = 20_000;

/// Fault injection for the tests (`OPENVIA_PVM_DIRECT_BREAK_AFTER=N`):
/// a task drops its direct VI to a peer abruptly once N messages came
/// over it, as a failing network would (tests/pvm/multihost.c).
static BREAK_AFTER: std::sync::LazyLock<Option<u64>> = std::sync::LazyLock::new(|| {
    std::env::var("OPENVIA_PVM_DIRECT_BREAK_AFTER")
        .ok()
        .and_then(|v| v.parse().ok())
});

/// Our discriminator for the pair: tids and a nonce (a tid may come back
/// in a later virtual machine).
pub(super) fn make_disc(me: i32, peer: i32) -> Vec<u8> {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // SAFETY: getpid has no preconditions.
    let nonce = t ^ unsafe { libc::getpid() } as u32;
    let mut d = b"pvD".to_vec();
    d.extend_from_slice(&me.to_le_bytes());
    d.extend_from_slice(&peer.to_le_bytes());
    d.extend_from_slice(&nonce.to_le_bytes());
    d
}

impl Task {
    /// Where every arriving message goes: setup messages to the direct
    /// route (a SWITCH at once, so the peer's held VI messages line up
    /// right behind what it routed before), the rest to the queue.
    pub(super) fn arrive(&mut self, q: Queued) {
        if q.ctx != DIRECT_CTX {
            self.queue.push_back(q);
            return;
        }
        if q.tag == kind::SWITCH {
            let p = self.direct.peers.entry(q.src).or_insert_with(Peer::new);
            p.switched_in = true;
            let held = std::mem::take(&mut p.held);
            self.queue.extend(held);
        } else {
            self.direct.control.push_back(q);
        }
    }

    /// Moves the direct route along: setup messages, connects in progress,
    /// links gone down, messages that came over VIs. True if any message
    /// was queued.
    pub(super) fn direct_progress(&mut self) -> PvmResult<bool> {
        if self.direct.peers.is_empty() && self.direct.control.is_empty() {
            return Ok(false);
        }
        while let Some(c) = self.direct.control.pop_front() {
            self.direct_control(c)?;
        }
        self.poll_connects()?;
        let Some(ep) = &self.direct.endpoint else {
            return Ok(false);
        };
        let events: Vec<LinkEvent> = ep.events.1.try_iter().collect();
        let arrivals: Vec<Arrival> = ep.arrivals.try_iter().collect();
        let mut got = false;
        for ev in events {
            match ev {
                LinkEvent::Down { via, .. } => self.peer_failed(via as i32, false),
                // Not addressed to us (nothing sends that): drop.
                LinkEvent::Frame { .. } => {}
            }
        }
        for a in arrivals {
            let q = Queued {
                src: a.src,
                tag: a.tag,
                ctx: a.ctx,
                enc: a.enc,
                body: a.body,
            };
            let p = self.direct.peers.entry(q.src).or_insert_with(Peer::new);
            p.received += 1;
            p.received_on_link += 1;
            let broken = Some(p.received_on_link) == *BREAK_AFTER;
            if let (true, State::Up(link)) = (broken, &p.state) {
                link.abort();
            }
            let src = q.src;
            match p.switched_in {
                false => p.held.push(q),
                true => {
                    self.queue.push_back(q);
                    got = true;
                }
            }
            if broken {
                self.peer_failed(src, true);
            }
        }
        Ok(got)
    }

    /// Tries the direct route for one message; Ok(false) when it goes
    /// through the pvmds (not a task of another host, route not open yet;
    /// with PvmRouteDirect the first such send asks for one).
    pub(super) fn direct_send(&mut self, id: i32, dst: i32, tag: i32, ctx: i32) -> PvmResult<bool> {
        if self.home.is_none()
            || dst & tid::DAEMON_BIT as i32 != 0
            || tid::host_of(dst) == tid::host_of(self.mytid)
        {
            return Ok(false);
        }
        if self.direct.peers.get(&dst).is_some_and(|p| p.failed) {
            return Err(self.report_failure(dst));
        }
        let want = self.opts.route == ROUTE_DIRECT;
        let (ask, open) = match self.direct.peers.get(&dst) {
            None => (want, false),
            Some(p) => (
                want && matches!(p.state, State::Idle),
                p.switched_out && matches!(p.state, State::Up(_)),
            ),
        };
        if ask {
            self.ask(dst)?;
        }
        if !open {
            return Ok(false);
        }
        let (ints, body) = self.link_message(id, dst, tag, ctx)?;
        let sent = match self.direct.peers.get_mut(&dst) {
            Some(p) => {
                let ok = matches!(&p.state, State::Up(link)
                    if link.send_msg((self.mytid as u32, dst as u32), ints, body));
                p.sent += u64::from(ok);
                p.sent_on_link += u64::from(ok);
                ok
            }
            None => false,
        };
        if !sent {
            // This message goes through the pvmds instead; the ones before
            // it on the failed VI are reported at the next send.
            self.peer_failed(dst, true);
        }
        Ok(sent)
    }

    /// Buffer `id` as a link carries it: the message's ints (src, dst,
    /// tag, ctx, encoding) and its body, shared from the pool pages where
    /// it was packed (copied out when it holds in-place items).
    pub(super) fn link_message(
        &mut self,
        id: i32,
        dst: i32,
        tag: i32,
        ctx: i32,
    ) -> PvmResult<([i32; 5], Body)> {
        let b = self.bufs.get(id)?;
        let body = if b.refs.is_empty() {
            b.data.share()
        } else {
            Body::from_vec(b.body(), None)
        };
        Ok(([self.mytid, dst, tag, ctx, b.enc], body))
    }

    /// The first send to a peer whose VI failed under messages we had
    /// sent over it: PvmNoTask if the peer is gone (its pvmd says so),
    /// else PvmSysErr, since those messages may be lost. Either way this
    /// message is not sent; the next one opens a new VI (PvmRouteDirect)
    /// or goes through the pvmds.
    fn report_failure(&mut self, dst: i32) -> PvmError {
        if let Some(p) = self.direct.peers.get_mut(&dst) {
            p.failed = false;
        }
        self.lost_messages_error(dst)
    }

    /// What a send reports once messages to `dst` may have been lost on a
    /// VI that failed: PvmNoTask if `dst` is gone (its pvmd says so),
    /// else PvmSysErr.
    pub(super) fn lost_messages_error(&mut self, dst: i32) -> PvmError {
        match self.task_exists(dst) {
            Ok(false) => PvmError::NoTask,
            Ok(true) => PvmError::SysErr,
            Err(e) => e,
        }
    }

    /// A setup message through the pvmds.
    fn send_control(&mut self, dst: i32, tag: i32, body: Vec<u8>) -> PvmResult<()> {
        // The messages before it to that host went over our link to its
        // pvmd: so does this one, to stay behind them.
        let host = tid::host_num(dst);
        if self.host_links.is_up(host) {
            let ints = [self.mytid, dst, tag, DIRECT_CTX, 0];
            if self.host_link_post(host, ints, Body::from_vec(body.clone(), None)) {
                return Ok(());
            }
        }
        let m = Msg {
            src: self.mytid,
            dst,
            tag,
            ctx: DIRECT_CTX,
            enc: 0,
            body,
        };
        let r = frame::write_frame(&mut self.wr, &Frame::Msg(m));
        self.socket_io(r)
    }

    fn flush_routed(&mut self) -> PvmResult<()> {
        let r = self.wr.flush();
        self.socket_io(r)
    }

    /// The task's NIC and its doorbell waker, opened on first use (host
    /// links share them, `host_link.rs`).
    pub(super) fn link_endpoint(&mut self) -> Option<(Arc<LinkNic>, Arc<dyn WakeUp>)> {
        let ep = self.endpoint()?;
        Some((ep.nic.clone(), ep.waker.clone()))
    }

    /// Opens the NIC on first use.
    fn endpoint(&mut self) -> Option<&Endpoint> {
        if self.direct.endpoint.is_none() && !self.direct.unavailable {
            let home = self.home.clone()?;
            match LinkNic::open() {
                Ok(nic) => {
                    let (inbound, arrivals) =
                        Inbound::for_task(home.pool.clone(), home.slot, self.mytid);
                    self.direct.endpoint = Some(Endpoint {
                        address: nic.address(),
                        nic: Arc::new(nic),
                        inbound: Arc::new(inbound),
                        arrivals,
                        events: mpsc::channel(),
                        waker: Arc::new(BellWaker {
                            pool: home.pool.clone(),
                            slot: home.slot,
                        }),
                    });
                }
                Err(_) => self.direct.unavailable = true,
            }
        }
        self.direct.endpoint.as_ref()
    }

    fn ask(&mut self, dst: i32) -> PvmResult<()> {
        let Some(ep) = self.endpoint() else {
            self.direct.peers.entry(dst).or_insert_with(Peer::new).state = State::Off;
            return Ok(());
        };
        let address = ep.address.clone();
        let disc = make_disc(self.mytid, dst);
        self.send_control(dst, kind::CONNECT, encode_hello(&disc, &address))?;
        self.direct.peers.entry(dst).or_insert_with(Peer::new).state = State::Asked { disc };
        Ok(())
    }

    fn direct_control(&mut self, c: Queued) -> PvmResult<()> {
        let src = c.src;
        match c.tag {
            kind::CONNECT => self.on_connect(src, &c.body),
            kind::ACCEPT => {
                let p = self.direct.peers.entry(src).or_insert_with(Peer::new);
                if !matches!(p.state, State::Asked { .. }) {
                    // Not asked (any more): the peer's connect times out.
                    return Ok(());
                }
                let State::Asked { disc } = std::mem::replace(&mut p.state, State::Off) else {
                    return Ok(());
                };
                let state = decode_hello(&c.body)
                    .and_then(|(their_disc, their_addr)| {
                        let role = Role::Call {
                            their_disc,
                            their_addr,
                        };
                        self.start_connect(&disc, role)
                    })
                    .unwrap_or(State::Off);
                self.direct
                    .peers
                    .entry(src)
                    .or_insert_with(Peer::new)
                    .connecting(state);
                Ok(())
            }
            kind::REFUSE => {
                let p = self.direct.peers.entry(src).or_insert_with(Peer::new);
                if matches!(p.state, State::Asked { .. }) {
                    p.state = State::Off;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A peer asks for a direct route to us.
    fn on_connect(&mut self, src: i32, body: &[u8]) -> PvmResult<()> {
        let me = self.mytid;
        let p = self.direct.peers.entry(src).or_insert_with(Peer::new);
        match p.state {
            // Both asked: the lower tid's request is the one answered.
            State::Asked { .. } if me < src => return Ok(()),
            State::Connecting(_) => return Ok(()),
            // The peer asks again: its end of our VI failed, so ours is
            // of no use either (its failure may just not have reached us).
            State::Up(_) => self.peer_failed(src, true),
            _ => {}
        }
        let off = self
            .direct
            .peers
            .get(&src)
            .is_some_and(|p| matches!(p.state, State::Off));
        let refused = self.opts.route == ROUTE_DONT || off;
        let disc = make_disc(me, src);
        let started = match (refused, decode_hello(body), self.endpoint().is_some()) {
            (false, Some(_), true) => self.start_connect(&disc, Role::Wait),
            _ => None,
        };
        let p = self.direct.peers.entry(src).or_insert_with(Peer::new);
        match started {
            Some(state) => {
                p.connecting(state);
                let address = self.direct.endpoint.as_ref().map(|e| e.address.clone());
                let body = encode_hello(&disc, &address.unwrap_or_default());
                self.send_control(src, kind::ACCEPT, body)?;
            }
            None => {
                p.state = State::Off;
                self.send_control(src, kind::REFUSE, Vec::new())?;
            }
        }
        self.flush_routed()
    }

    /// A VI with its receives posted (so whatever the peer sends at once
    /// finds room), connected on a thread of its own: the caller goes on,
    /// and the thread rings our doorbell when it is done. None if the VI
    /// cannot be made.
    fn start_connect(&mut self, disc: &[u8], role: Role) -> Option<State> {
        let ep = self.direct.endpoint.as_ref()?;
        let prepared = ep.nic.new_vi().and_then(|vi| ep.nic.prepare(vi)).ok()?;
        let outcome: Outcome = Arc::new(Mutex::new(None));
        let (nic, waker, out, disc) = (
            ep.nic.clone(),
            ep.waker.clone(),
            outcome.clone(),
            disc.to_vec(),
        );
        openvia_core::sys::thread::spawn_quiet("pvm-direct-connect", move || {
            let vi = prepared.vi().clone();
            let r = match role {
                Role::Wait => nic.accept_on(&vi, &disc, CONNECT_LIMIT),
                Role::Call {
                    their_disc,
                    their_addr,
                } => nic.connect_on(&vi, &disc, (&their_addr, &their_disc), CONNECT_LIMIT),
            };
            *out.lock().unwrap_or_else(|e| e.into_inner()) = Some(r.map(|_| prepared));
            waker.wake();
        })
        .ok()?;
        Some(State::Connecting(outcome))
    }

    /// Connects that finished: start the link and switch our sends to it.
    fn poll_connects(&mut self) -> PvmResult<()> {
        let ready: Vec<(i32, Result<PreparedLink, ViaError>)> = self
            .direct
            .peers
            .iter()
            .filter_map(|(&t, p)| match &p.state {
                State::Connecting(out) => out
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .map(|r| (t, r)),
                _ => None,
            })
            .collect();
        for (t, r) in ready {
            let (Some(p), Some(ep)) = (self.direct.peers.get_mut(&t), &self.direct.endpoint) else {
                continue;
            };
            p.state = State::Off;
            let Ok(pl) = r else {
                continue;
            };
            let waker: Arc<dyn WakeUp> = ep.waker.clone();
            let run = pl.run(
                (t as u32, self.mytid as u32),
                ep.events.0.clone(),
                waker,
                Some(ep.inbound.clone()),
            );
            if let Ok(link) = run {
                p.state = State::Up(link);
                p.sent_on_link = 0;
                p.received_on_link = 0;
                p.switched_out = true;
                self.send_control(t, kind::SWITCH, Vec::new())?;
                self.flush_routed()?;
            }
        }
        Ok(())
    }

    /// The VI to `peer` failed (or a stale report of an earlier one that
    /// did, which changes nothing): its messages go through the pvmds,
    /// and the route may be opened again (the next send with
    /// PvmRouteDirect asks, and a CONNECT from the peer is accepted).
    /// The peer's VI messages wait again for its next SWITCH.
    /// `known`: the caller saw it fail; otherwise the current VI is
    /// looked at, since a report may come from one already replaced.
    fn peer_failed(&mut self, peer: i32, known: bool) {
        let Some(p) = self.direct.peers.get_mut(&peer) else {
            return;
        };
        if matches!(&p.state, State::Up(link) if !known && !link.failed()) {
            return;
        }
        if let State::Up(link) = std::mem::replace(&mut p.state, State::Idle) {
            p.failed |= p.sent_on_link > 0;
            link.close_after_queue();
            self.direct.retired.push(link);
        }
        p.switched_out = false;
        p.switched_in = false;
    }

    /// Closes every direct link after what is queued has gone out, and
    /// waits for their threads: called before leaving the virtual machine,
    /// while the pool slot is still ours.
    pub(super) fn direct_close(&mut self) {
        let d = std::mem::take(&mut self.direct);
        if std::env::var_os(ENV_STATS).is_some() {
            let mut peers: Vec<_> = d.peers.iter().collect();
            peers.sort_by_key(|(t, _)| **t);
            for (t, p) in peers {
                let state = match p.state {
                    State::Idle => "idle",
                    State::Asked { .. } => "asked",
                    State::Connecting(_) => "connecting",
                    State::Up(_) => "up",
                    State::Off => "off",
                };
                eprintln!(
                    "openvia-pvm direct t{:x} -> t{t:x}: {state}, {} messages sent and {} received over the VI",
                    self.mytid, p.sent, p.received
                );
                if p.reopened > 0 {
                    eprintln!(
                        "openvia-pvm direct t{:x} -> t{t:x}: reopened {} times",
                        self.mytid, p.reopened
                    );
                }
            }
        }
        for (_, p) in d.peers {
            if let State::Up(link) = p.state {
                link.close_and_join();
            }
        }
        for link in d.retired {
            link.close_and_join();
        }
    }
}

impl Direct {
    /// Anything set up or asked: sends then look for setup answers.
    pub(super) fn active(&self) -> bool {
        !self.peers.is_empty() || !self.control.is_empty()
    }

    /// Waits for a message from `src` on its direct link, as stock PVM's
    /// task waits in a TCP read: asleep in `ppoll` on the VI's socket
    /// (and on `sock`, the pvmd's, which carries notifies and hangs up
    /// when the pvmd dies) until a datagram, a protocol timer of the link,
    /// or the pvmd; then this thread drives the VI, so the message is
    /// taken in here (the link's receive handler runs on this thread) and
    /// no other thread is woken for it. Meanwhile the NIC's progress
    /// thread leaves the VIs to us ([`LinkNic::set_event_driven`]), so it
    /// neither wakes per datagram nor holds a VI lock we want. False when
    /// `src` has no open direct route to us: the caller waits the pool way.
    pub(super) fn wait_direct(
        &mut self,
        src: i32,
        sock: std::os::fd::RawFd,
        wait: &mut DirectWait,
    ) -> bool {
        let spin = wait.spin.get_or_insert_with(|| {
            self.spin
                .get_or_insert_with(|| {
                    crate::spin::Window::new(
                        crate::spin::remote_limit(),
                        crate::spin::TASK_CONTENDED_NS,
                    )
                })
                .start()
        });
        let hint = match self.peers.get(&src) {
            Some(Peer {
                state: State::Up(link),
                switched_in: true,
                ..
            }) => link.wait_hint().map(|h| (h, link)),
            _ => None,
        };
        let Some(((fd, timer), link)) = hint else {
            return false;
        };
        if !self.polling {
            if let Some(ep) = &self.endpoint {
                ep.nic.set_event_driven(false);
            }
            self.polling = true;
        }
        // First a spin: the reply of a peer that answers at once is taken
        // in without a wake-up (each look drives the VI: one system call).
        if spin.go_on() {
            link.poll();
            return true;
        }
        let now = crate::trace::now_ns();
        let wait = timer
            .map_or(DIRECT_SLEEP_MAX_NS, |t| t.saturating_sub(now))
            .clamp(DIRECT_SLEEP_MIN_NS, DIRECT_SLEEP_MAX_NS);
        let mut fds = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sock,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ts = libc::timespec {
            tv_sec: (wait / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: two valid pollfds, a live timespec, no signal mask.
        unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
        link.poll();
        true
    }

    /// A receive that waited on a direct VI got its message: how long it
    /// waited adapts the next one's spin (`spin::Window`).
    pub(super) fn settle_spin(&mut self, wait: &DirectWait) {
        if let (Some(spin), Some(w)) = (&wait.spin, self.spin.as_mut()) {
            w.settle(spin);
        }
    }

    /// Before the task sleeps anywhere else: the progress thread watches
    /// the links again.
    pub(super) fn stop_polling(&mut self) {
        if std::mem::take(&mut self.polling) {
            if let Some(ep) = &self.endpoint {
                ep.nic.set_event_driven(true);
            }
        }
    }
}
