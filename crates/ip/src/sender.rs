//! The sending loop: from the TUN to the peers' links, on one thread.
//!
//! It sleeps in one `ppoll` on the TUN, on the links whose peers' answers
//! it waits for, and until the links' next protocol timers; woken, it
//! takes every packet the TUN holds (up to [`BATCH`]) and posts each on
//! the link of the peer holding its destination, from this thread, and
//! drives a link itself when its peer answered or its timer is due. No
//! thread of the core stands between the TUN and the network.
//!
//! A packet is read straight into a free slot of the link the previous
//! packet took, so with one peer (or a run of packets to one) it reaches
//! the network without a copy of viaip's; one for another peer is copied
//! to that peer's link.
//!
//! The loop also (re)connects links, each connect on a short-lived thread
//! so a missing peer never stalls the others. A packet for a peer whose
//! link is down is dropped and counted (`peer_down`).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::counters::Drop;
use crate::daemon::{Interface, LinkState, Peer};
use crate::discovery::Discovery;
use crate::link::{Form, SendFailure, TxLink, MAX_MTU};
use crate::packet::{ipv4_destination, Refusal};
use crate::segment;
use crate::vnet::{self, VnetHeader};
use crate::wait::{AnswerSpin, Sleep};

/// How long one connect attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause after a failed connect before the next.
pub(crate) const RETRY_AFTER: Duration = Duration::from_millis(300);
/// How long a packet waits for a free send slot before it is dropped.
const SLOT_WAIT: Duration = Duration::from_millis(20);
/// Packets taken per look at the TUN or a link before the loop goes on
/// (to its other links, connects, counters).
pub(crate) const BATCH: usize = 64;
/// The longest sleep: bounds how late a loop sees a new peer or link.
pub(crate) const IDLE_SLEEP: Duration = Duration::from_millis(100);
/// How late the loop may run a link's protocol timer while few sends are
/// in flight. The timer due first is then the tail-loss probe (twice the
/// round trip, 100 µs at least), which the peer's acknowledgement, already
/// there, makes moot; the next packet's send takes that in anyway. Waking
/// for it cost a wake-up per packet in a ping-pong. A lost datagram is
/// still resent within a millisecond (the core's progress thread allows a
/// polled VI's timers the same slack).
const TIMER_SLACK_NS: u64 = 1_000_000;

/// What a packet from the TUN is, for counting.
struct Sent {
    form: Form,
    /// The IPv4 packet's bytes.
    bytes: usize,
    /// A TCP super-packet.
    gso: bool,
}

/// Where a packet goes.
enum Route {
    Peer(usize),
    /// Broadcast and multicast: every known peer.
    All,
    /// No known peer holds the destination (in the subnet: ask the link).
    Unknown(Ipv4Addr),
}

/// Checks a packet from the TUN (behind its offload header if the TUN
/// has them) and finds its peer among `peers`.
fn classify(ifc: &Interface, peers: &[Arc<Peer>], msg: &[u8]) -> Result<(Sent, Route), Drop> {
    let (form, pkt, gso) = if ifc.tun.vnet() {
        let (h, p) = msg
            .split_first_chunk::<{ vnet::LEN }>()
            .ok_or(Drop::Malformed)?;
        (Form::Vnet, p, VnetHeader::parse(h).is_gso())
    } else {
        (Form::Bare, msg, false)
    };
    let dst = ipv4_destination(pkt).map_err(|r| match r {
        Refusal::Unsupported => Drop::Unsupported,
        Refusal::Malformed => Drop::Malformed,
    })?;
    // A super-packet too large for a message is cut (datagram mode).
    if msg.len() > ifc.fabric.max_message && !gso {
        return Err(Drop::TooBig);
    }
    let sent = Sent {
        form,
        bytes: pkt.len(),
        gso,
    };
    let route = if dst.is_multicast() || dst.is_broadcast() || dst == ifc.broadcast() {
        Route::All
    } else {
        match peers.iter().position(|p| p.overlay == dst) {
            Some(i) => Route::Peer(i),
            None => Route::Unknown(dst),
        }
    };
    Ok((sent, route))
}

/// The sending loop's state: a link per connected peer.
pub(crate) struct Sender {
    ifc: Arc<Interface>,
    /// The interface's peers as this loop last saw them (only added to).
    peers: Vec<Arc<Peer>>,
    discovery: Option<Discovery>,
    links: HashMap<usize, TxLink>,
    retry_at: Vec<Instant>,
    /// The peer the last packet went to: the next is read into its link.
    last: Option<usize>,
    /// Whether a TUN read fits a send slot (not in datagram mode with
    /// offloads, where a super-packet is cut into several messages).
    stage: bool,
    done_tx: mpsc::Sender<(usize, Option<TxLink>)>,
    done_rx: mpsc::Receiver<(usize, Option<TxLink>)>,
    /// Whether a kick spins, and how long.
    answer: AnswerSpin,
}

impl Sender {
    pub(crate) fn new(ifc: Arc<Interface>, discovery: Option<Discovery>) -> Sender {
        let (done_tx, done_rx) = mpsc::channel();
        let stage = !ifc.tun.vnet() || ifc.fabric.max_message >= vnet::LEN + MAX_MTU;
        let ifc_spin_ns = ifc.kick.spin_ns();
        Sender {
            retry_at: Vec::new(),
            peers: Vec::new(),
            discovery,
            ifc,
            links: HashMap::new(),
            last: None,
            stage,
            done_tx,
            done_rx,
            answer: AnswerSpin::new(ifc_spin_ns),
        }
    }

    /// Carries packets until the TUN fails; the reason.
    pub(crate) fn run(mut self) -> String {
        let mut buf = vec![0u8; self.ifc.fabric.max_message.max(vnet::LEN + 65535)];
        let mut sleep = Sleep::new();
        // (peer, index in `sleep` or None: its timer only)
        let mut watched: Vec<(usize, Option<usize>)> = Vec::new();
        loop {
            self.maintain();
            sleep.clear();
            watched.clear();
            let tun = sleep.watch(self.ifc.tun.fd());
            let kick = sleep.watch(self.ifc.kick.fd());
            for (&i, link) in &self.links {
                match link.wait_hint() {
                    Some(h) if link.wants_acks() => watched.push((i, Some(sleep.hint(h)))),
                    Some((_, timer)) => {
                        if let Some(t) = timer {
                            sleep.until(t + TIMER_SLACK_NS);
                        }
                        watched.push((i, None));
                    }
                    None => {}
                }
            }
            self.ifc.kick.set_asleep(true);
            let due = sleep.sleep(IDLE_SLEEP);
            self.ifc.kick.set_asleep(false);
            let mut taken = false;
            if sleep.ready(kick) {
                self.ifc.kick.drain();
                match self.await_answer(&mut buf) {
                    Ok(t) => taken = t,
                    Err(e) => return format!("TUN: {e}"),
                }
            }
            if !taken && sleep.ready(tun) {
                self.answer.read_after_sleep(crate::wait::now_ns());
            }
            if taken || sleep.ready(tun) {
                for _ in 0..BATCH {
                    match self.take_packet(&mut buf) {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => break,
                        Err(e) => return format!("TUN: {e}"),
                    }
                }
            }
            for &(i, k) in &watched {
                if !(due || k.is_some_and(|k| sleep.ready(k))) {
                    continue;
                }
                let failed = self.links.get_mut(&i).is_some_and(|l| l.drive().is_err());
                if failed {
                    self.link_down(i);
                }
            }
        }
    }

    /// Kicked (a packet was just written to the TUN): polls the TUN for
    /// the local program's answer up to the kick's spin and sends the
    /// first packet found; true if one was (the caller takes the rest).
    fn await_answer(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        let start = crate::wait::now_ns();
        let end = start + self.answer.spin_ns();
        loop {
            match self.take_packet(buf) {
                Ok(true) => {
                    self.answer.caught();
                    return Ok(true);
                }
                Ok(false) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            if crate::wait::now_ns() >= end {
                self.answer.missed(start);
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    /// Reads one packet from the TUN and sends it on; false when the TUN
    /// had none. Read into a free slot of the last packet's link where it
    /// has one, and posted from there if it goes the same way.
    fn take_packet(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        let ifc = &self.ifc;
        let staged = self
            .last
            .filter(|_| self.stage)
            .and_then(|i| Some((i, self.links.get_mut(&i)?)));
        if let Some((i, link)) = staged {
            if let Some(slot) = link.staging() {
                let Some(n) = ifc.tun.read(slot)? else {
                    return Ok(false);
                };
                let verdict = classify(ifc, &self.peers, &slot[..n]);
                if let Ok((sent, Route::Peer(j))) = &verdict {
                    if *j == i {
                        let posted = link.post_staged(n, sent.form);
                        self.account(i, sent, posted);
                        return Ok(true);
                    }
                }
                buf[..n].copy_from_slice(&slot[..n]);
                self.dispatch(&buf[..n], verdict);
                return Ok(true);
            }
        }
        let Some(n) = ifc.tun.read(buf)? else {
            return Ok(false);
        };
        let verdict = classify(ifc, &self.peers, &buf[..n]);
        self.dispatch(&buf[..n], verdict);
        Ok(true)
    }

    /// Sends a classified packet where it goes (copied into a slot of
    /// each link), or counts why not.
    fn dispatch(&mut self, msg: &[u8], verdict: Result<(Sent, Route), Drop>) {
        let (sent, route) = match verdict {
            Ok(v) => v,
            Err(why) => return self.ifc.counters.drop(why),
        };
        match route {
            Route::Peer(i) => self.send_or_cut(i, msg, &sent),
            Route::All => {
                for i in 0..self.peers.len() {
                    self.send_or_cut(i, msg, &sent);
                }
            }
            Route::Unknown(dst) => {
                // As a packet waiting for ARP would be: dropped, and the
                // link asked who holds the address.
                let ifc = &self.ifc;
                if let (Some(d), true) = (&mut self.discovery, ifc.in_subnet(dst)) {
                    d.ask(ifc.fabric.mode.name(), dst, ifc.addr);
                }
                ifc.counters.drop(Drop::NoRoute)
            }
        }
    }

    /// Sends `msg` to peer i; a super-packet larger than a message is cut
    /// into segments first (`segment.rs`), each sent as a packet of its own.
    fn send_or_cut(&mut self, i: usize, msg: &[u8], sent: &Sent) {
        let max = self.ifc.fabric.max_message;
        if msg.len() <= max {
            return self.send_to(i, msg, sent);
        }
        let Some((h, pkt)) = msg.split_first_chunk::<{ vnet::LEN }>() else {
            return self.ifc.counters.drop(Drop::Malformed);
        };
        let cut = segment::cut(&VnetHeader::parse(h), pkt, max, &mut |seg| {
            let part = Sent {
                form: Form::Vnet,
                bytes: seg.len() - vnet::LEN,
                gso: false,
            };
            self.send_to(i, seg, &part);
        });
        match cut {
            Ok(_) => {
                self.ifc.counters.cut();
                self.peers[i].counters.cut();
            }
            Err(_) => self.ifc.counters.drop(Drop::Malformed),
        }
    }

    fn send_to(&mut self, i: usize, msg: &[u8], sent: &Sent) {
        let posted = match self.links.get_mut(&i) {
            None => Err(None),
            Some(link) => link.send(msg, sent.form, SLOT_WAIT).map_err(Some),
        };
        match posted {
            Err(None) => {
                self.ifc.counters.drop(Drop::PeerDown);
                self.peers[i].counters.drop(Drop::PeerDown);
            }
            Ok(()) => self.account(i, sent, Ok(())),
            Err(Some(e)) => self.account(i, sent, Err(e)),
        }
    }

    /// Counts a packet posted to peer i, or dropped; a failed link goes.
    fn account(&mut self, i: usize, sent: &Sent, posted: Result<(), SendFailure>) {
        let peer = self.peers[i].clone();
        let why = match posted {
            Ok(()) => {
                self.last = Some(i);
                self.ifc.counters.sent(sent.bytes, sent.gso);
                peer.counters.sent(sent.bytes, sent.gso);
                return;
            }
            Err(SendFailure::QueueFull) => Drop::QueueFull,
            Err(SendFailure::Down) => {
                self.link_down(i);
                Drop::PeerDown
            }
        };
        self.ifc.counters.drop(why);
        peer.counters.drop(why);
    }

    /// Takes finished connects, drops failed links and starts the connects
    /// that are due.
    fn maintain(&mut self) {
        if self.peers.len() != self.ifc.peer_count() {
            self.peers = self.ifc.peers();
            self.retry_at.resize(self.peers.len(), Instant::now());
        }
        while let Ok((i, link)) = self.done_rx.try_recv() {
            let peer = &self.peers[i];
            match link {
                Some(l) => {
                    peer.connects.fetch_add(1, Ordering::Relaxed);
                    peer.set_state(LinkState::Up);
                    self.links.insert(i, l);
                }
                None => {
                    peer.set_state(LinkState::Down);
                    self.retry_at[i] = Instant::now() + RETRY_AFTER;
                }
            }
        }
        let dead: Vec<usize> = self
            .links
            .iter()
            .filter(|(_, l)| !l.alive())
            .map(|(&i, _)| i)
            .collect();
        for i in dead {
            self.link_down(i);
        }
        let now = Instant::now();
        for i in 0..self.peers.len() {
            let peer = &self.peers[i];
            if peer.state() == LinkState::Down && now >= self.retry_at[i] {
                peer.set_state(LinkState::Connecting);
                let ifc = self.ifc.clone();
                let host = peer.host;
                let done = self.done_tx.clone();
                let spawned = std::thread::Builder::new()
                    .name("viaip-connect".into())
                    .spawn(move || {
                        let link = ifc.fabric.connect(&host, CONNECT_TIMEOUT).ok();
                        let _ = done.send((i, link));
                    });
                if spawned.is_err() {
                    peer.set_state(LinkState::Down);
                    self.retry_at[i] = now + RETRY_AFTER;
                }
            }
        }
    }

    /// Forgets peer i's link; a thread of its own closes it, since a close
    /// may linger for the peer's acknowledgements.
    fn link_down(&mut self, i: usize) {
        if let Some(link) = self.links.remove(&i) {
            let _ = std::thread::Builder::new()
                .name("viaip-close".into())
                .spawn(move || drop(link));
        }
        if self.last == Some(i) {
            self.last = None;
        }
        self.peers[i].set_state(LinkState::Down);
        self.retry_at[i] = Instant::now();
    }
}
