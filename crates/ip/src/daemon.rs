//! A running interface: the threads that move packets.
//!
//! - the sending loop (the calling thread) reads packets from the TUN,
//!   finds the peer holding each destination and posts the packet on that
//!   peer's [`TxLink`]; it also (re)connects links, each connect on a
//!   short-lived thread so a missing peer never stalls the others;
//! - the accepting thread takes the peers' connections, and one receiving
//!   thread per accepted link writes its packets to the TUN;
//! - the control thread answers `viaip show`.
//!
//! A packet for a peer whose link is down is dropped and counted
//! (`peer_down`); the link is reconnected in the background, so traffic
//! resumes by itself when the peer comes back.

use std::collections::HashMap;
use std::fmt::Write;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::counters::{Counters, Drop};
use crate::discovery::Discovery;
use crate::link::{Arrival, Fabric, Form, Mode, RxLink, SendFailure, TxLink};
use crate::packet::{ipv4_destination, Refusal};
use crate::peers::{host_addr, host_text, HostAddr};
use crate::tun::Tun;
use crate::vnet::{self, VnetHeader};
use crate::wait::Sleep;

/// How long one connect attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause after a failed connect before the next.
const RETRY_AFTER: Duration = Duration::from_millis(300);
/// How long a packet waits for a free send slot before it is dropped.
const SLOT_WAIT: Duration = Duration::from_millis(20);
/// Packets taken per look at the TUN or a link before the loop goes on
/// (to its other links, connects, counters).
const BATCH: usize = 64;
/// The longest sleep: bounds how late a loop sees a new peer or link.
const IDLE_SLEEP: Duration = Duration::from_millis(100);

/// What `viaip up` asks for.
pub struct UpConfig {
    pub ifname: String,
    pub addr: Ipv4Addr,
    pub prefix: u8,
    pub device: String,
    pub mode: Mode,
    pub mtu: Option<usize>,
    pub peers: Vec<(Ipv4Addr, HostAddr)>,
    /// The underlay interface, if known: neighbours are then also found
    /// by asking the link (`discovery.rs`).
    pub link: Option<String>,
    /// TUN checksum and segmentation offloads (connected mode only).
    pub offload: bool,
}

const DOWN: u8 = 0;
const CONNECTING: u8 = 1;
const UP: u8 = 2;

impl Peer {
    fn new(overlay: Ipv4Addr, host: HostAddr) -> Peer {
        Peer {
            overlay,
            host,
            state: AtomicU8::new(DOWN),
            connects: AtomicU64::new(0),
            rx_links: AtomicU32::new(0),
            counters: Counters::default(),
        }
    }
}

/// One peer: where it is, its link's state and its counters.
pub struct Peer {
    pub overlay: Ipv4Addr,
    pub host: HostAddr,
    state: AtomicU8,
    connects: AtomicU64,
    rx_links: AtomicU32,
    pub counters: Counters,
}

/// What every thread of an interface shares.
pub struct Interface {
    pub tun: Tun,
    pub fabric: Fabric,
    pub addr: Ipv4Addr,
    pub prefix: u8,
    pub counters: Counters,
    /// Listed in the peers file, then learnt by discovery (only added).
    peers: Mutex<Vec<Arc<Peer>>>,
    /// Links accepted from hosts not in the peers list.
    strangers: Mutex<Vec<HostAddr>>,
    /// A link accepted while `open` bound the listener, for the accepting
    /// thread to start.
    early: Mutex<Option<RxLink>>,
    /// The discovery socket, until `run` hands it to the sending loop.
    discovery: Mutex<Option<Discovery>>,
    /// Discovery messages that were not.
    pub discovery_garbage: AtomicU64,
}

impl Interface {
    /// The peers known now.
    pub fn peers(&self) -> Vec<Arc<Peer>> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn peer_by_host(&self, host: &HostAddr) -> Option<Arc<Peer>> {
        self.peers().into_iter().find(|p| &p.host == host)
    }

    /// Adds a peer learnt from the link, unless its address is known.
    fn learn(&self, overlay: Ipv4Addr, host: HostAddr) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if overlay != self.addr && !peers.iter().any(|p| p.overlay == overlay) {
            peers.push(Arc::new(Peer::new(overlay, host)));
        }
    }

    fn in_subnet(&self, a: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        };
        u32::from(a) & mask == u32::from(self.addr) & mask
    }

    fn broadcast(&self) -> Ipv4Addr {
        let host_bits = if self.prefix >= 32 {
            0
        } else {
            u32::MAX >> self.prefix
        };
        Ipv4Addr::from(u32::from(self.addr) | host_bits)
    }

    /// What `viaip show` prints for this interface.
    pub fn report(&self) -> String {
        let mut s = format!(
            "{}: {} mode, mtu {}, offloads {}, {}/{} over {} (host {}), pid {}\n    {}\n",
            self.tun.name(),
            self.fabric.mode.name(),
            self.fabric.mtu,
            if self.tun.vnet() { "on" } else { "off" },
            self.addr,
            self.prefix,
            self.fabric.device,
            host_text(&self.fabric.host),
            std::process::id(),
            self.counters.render()
        );
        let junk = self.discovery_garbage.load(Ordering::Relaxed);
        if junk > 0 {
            let _ = writeln!(s, "    discovery: malformed={junk}");
        }
        for p in &self.peers() {
            let state = match p.state.load(Ordering::Relaxed) {
                UP => "up",
                CONNECTING => "connecting",
                _ => "down",
            };
            let _ = writeln!(
                s,
                "    peer {} at {}: link {}, connects {}, links in {}\n        {}",
                p.overlay,
                host_text(&p.host),
                state,
                p.connects.load(Ordering::Relaxed),
                p.rx_links.load(Ordering::Relaxed),
                p.counters.render()
            );
        }
        for h in self
            .strangers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(s, "    link in from {} (not a listed peer)", host_text(h));
        }
        s
    }
}

/// Opens the device and the TUN and configures the interface; the caller
/// then runs [`run`].
pub fn open(cfg: UpConfig) -> Result<Arc<Interface>, String> {
    let offload = cfg.offload && cfg.mode == Mode::Connected;
    let fabric = Fabric::open(&cfg.device, cfg.mode, cfg.mtu, offload)?;
    let tun = Tun::create(&cfg.ifname, offload).map_err(|e| format!("TUN {}: {e}", cfg.ifname))?;
    tun.configure(cfg.addr, cfg.prefix, fabric.mtu as u32)
        .map_err(|e| format!("configuring {}: {e}", cfg.ifname))?;
    let peers = cfg
        .peers
        .iter()
        .filter(|(overlay, host)| *overlay != cfg.addr && *host != fabric.host)
        .map(|&(overlay, host)| Arc::new(Peer::new(overlay, host)))
        .collect();
    let discovery = match &cfg.link {
        Some(l) => Some(Discovery::bind(l).map_err(|e| format!("discovery socket on {l}: {e}"))?),
        None => None,
    };
    // Bind the agent and our discriminator's listener now, before the
    // caller reports readiness: a peer may connect the moment we are up.
    let early = fabric
        .accept(Duration::from_millis(1))
        .map_err(|e| format!("listening on {}: {e}", fabric.device))?;
    Ok(Arc::new(Interface {
        early: Mutex::new(early),
        tun,
        fabric,
        addr: cfg.addr,
        prefix: cfg.prefix,
        counters: Counters::default(),
        peers: Mutex::new(peers),
        strangers: Mutex::new(Vec::new()),
        discovery: Mutex::new(discovery),
        discovery_garbage: AtomicU64::new(0),
    }))
}

/// Starts the accepting and control threads, then carries packets on the
/// calling thread until the process ends (or the TUN fails).
pub fn run(ifc: Arc<Interface>, control: std::os::unix::net::UnixListener) -> String {
    {
        let ifc = ifc.clone();
        std::thread::Builder::new()
            .name("viaip-control".into())
            .spawn(move || crate::control::serve(control, || ifc.report()))
            .expect("spawn control thread");
    }
    {
        let ifc = ifc.clone();
        std::thread::Builder::new()
            .name("viaip-accept".into())
            .spawn(move || accept_loop(&ifc))
            .expect("spawn accept thread");
    }
    let discovery = ifc
        .discovery
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(d) = &discovery {
        if let Ok(answering) = d.try_clone() {
            let ifc = ifc.clone();
            std::thread::Builder::new()
                .name("viaip-discovery".into())
                .spawn(move || {
                    let mode = ifc.fabric.mode.name();
                    let why = answering.serve(
                        mode,
                        ifc.addr,
                        &|a| ifc.in_subnet(a),
                        &|overlay, ip| ifc.learn(overlay, host_addr(ip)),
                        &|| {
                            ifc.discovery_garbage.fetch_add(1, Ordering::Relaxed);
                        },
                    );
                    eprintln!("viaip: discovery: {why}");
                })
                .expect("spawn discovery thread");
        }
    }
    Sender::new(ifc, discovery).run()
}

fn accept_loop(ifc: &Arc<Interface>) {
    let mut early = ifc.early.lock().unwrap_or_else(|e| e.into_inner()).take();
    loop {
        let next = match early.take() {
            Some(link) => Ok(Some(link)),
            None => ifc.fabric.accept(Duration::from_secs(1)),
        };
        match next {
            Ok(Some(link)) => {
                let ifc = ifc.clone();
                let _ = std::thread::Builder::new()
                    .name("viaip-recv".into())
                    .spawn(move || recv_loop(&ifc, link));
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("viaip: accept: {e}");
                std::thread::sleep(RETRY_AFTER);
            }
        }
    }
}

/// Writes one peer's packets to the TUN until its link fails.
fn recv_loop(ifc: &Interface, link: RxLink) {
    let peer = ifc.peer_by_host(&link.peer);
    match &peer {
        Some(p) => {
            p.rx_links.fetch_add(1, Ordering::Relaxed);
        }
        None => ifc
            .strangers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(link.peer),
    }
    let mut deliver = |a: Arrival<'_>| {
        let verdict = match a {
            Arrival::Packet(msg, form) => to_kernel(&ifc.tun, msg, form),
            Arrival::Garbage => Err(Drop::Malformed),
        };
        match verdict {
            Ok((bytes, gso)) => {
                ifc.counters.received(bytes, gso);
                if let Some(p) = &peer {
                    p.counters.received(bytes, gso);
                }
            }
            Err(why) => {
                ifc.counters.drop(why);
                if let Some(p) = &peer {
                    p.counters.drop(why);
                }
            }
        }
    };
    // Everything that has arrived, then asleep on the VI until more does
    // or its timer is due (an acknowledgement owed): one wake-up a batch,
    // and no thread of the core in between.
    let mut sleep = Sleep::new();
    loop {
        match link.drain(BATCH, &mut deliver) {
            Ok(n) if n == BATCH => continue,
            Ok(_) => {}
            Err(_) => break,
        }
        let Some(hint) = link.wait_hint() else { break };
        sleep.clear();
        sleep.hint(hint);
        sleep.sleep(IDLE_SLEEP);
    }
    match &peer {
        Some(p) => {
            p.rx_links.fetch_sub(1, Ordering::Relaxed);
        }
        None => ifc
            .strangers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|h| h != &link.peer),
    }
}

/// Writes a message from a peer to the TUN, in the form the TUN takes:
/// with an offload header (a plain one for a bare packet), or bare (an
/// owed checksum finished here first). The IPv4 bytes and whether it was
/// a super-packet; the drop reason if it is not a packet for the kernel.
fn to_kernel(tun: &Tun, msg: &mut [u8], form: Form) -> Result<(usize, bool), Drop> {
    let refused = |r| match r {
        Refusal::Unsupported => Drop::Unsupported,
        Refusal::Malformed => Drop::Malformed,
    };
    let hdr = match form {
        Form::Bare => None,
        Form::Vnet => Some(VnetHeader::parse(
            msg.first_chunk::<{ vnet::LEN }>().ok_or(Drop::Malformed)?,
        )),
    };
    let at = if hdr.is_some() { vnet::LEN } else { 0 };
    let pkt = &msg[at..];
    ipv4_destination(pkt).map_err(refused)?;
    if let Some(h) = &hdr {
        h.check(pkt).map_err(refused)?;
    }
    let bytes = pkt.len();
    let written = match (hdr, tun.vnet()) {
        (None, false) => tun.write(&[], msg),
        (None, true) => tun.write(&vnet::PLAIN, msg),
        (Some(_), true) => tun.write(&[], msg),
        (Some(h), false) => {
            vnet::complete_checksum(&h, &mut msg[at..]);
            tun.write(&[], &msg[at..])
        }
    };
    written.map_err(|_| Drop::TunWrite)?;
    Ok((bytes, hdr.is_some_and(|h| h.is_gso())))
}

/// A packet on its way to one or more peers.
struct Sent<'a> {
    /// The message: the packet, behind its header in [`Form::Vnet`].
    msg: &'a [u8],
    form: Form,
    /// The IPv4 packet's bytes.
    bytes: usize,
    /// A TCP super-packet.
    gso: bool,
}

/// The sending loop's state: a link per connected peer.
struct Sender {
    ifc: Arc<Interface>,
    /// The interface's peers as this loop last saw them (only added to).
    peers: Vec<Arc<Peer>>,
    discovery: Option<Discovery>,
    links: HashMap<usize, TxLink>,
    retry_at: Vec<Instant>,
    done_tx: mpsc::Sender<(usize, Option<TxLink>)>,
    done_rx: mpsc::Receiver<(usize, Option<TxLink>)>,
}

impl Sender {
    fn new(ifc: Arc<Interface>, discovery: Option<Discovery>) -> Sender {
        let (done_tx, done_rx) = mpsc::channel();
        Sender {
            retry_at: Vec::new(),
            peers: Vec::new(),
            discovery,
            ifc,
            links: HashMap::new(),
            done_tx,
            done_rx,
        }
    }

    /// Asleep in one `ppoll` on the TUN and the links' VIs: takes every
    /// packet the TUN holds (up to [`BATCH`]) and posts each on its
    /// peer's link from this thread, and drives a link itself when its
    /// peer answered or its timer is due.
    fn run(mut self) -> String {
        let mut buf = vec![0u8; self.ifc.fabric.max_message.max(vnet::LEN + 65535)];
        let mut sleep = Sleep::new();
        let mut watched: Vec<(usize, usize)> = Vec::new();
        loop {
            self.maintain();
            sleep.clear();
            watched.clear();
            let tun = sleep.watch(self.ifc.tun.fd());
            for (&i, link) in &self.links {
                if let Some(h) = link.wait_hint() {
                    watched.push((i, sleep.hint(h)));
                }
            }
            let due = sleep.sleep(IDLE_SLEEP);
            if sleep.ready(tun) {
                for _ in 0..BATCH {
                    match self.ifc.tun.read(&mut buf) {
                        Ok(Some(n)) => self.forward(&buf[..n]),
                        Ok(None) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => break,
                        Err(e) => return format!("TUN: {e}"),
                    }
                }
            }
            for &(i, k) in &watched {
                if !(due || sleep.ready(k)) {
                    continue;
                }
                let failed = self.links.get_mut(&i).is_some_and(|l| l.drive().is_err());
                if failed {
                    self.link_down(i);
                }
            }
        }
    }

    /// Takes finished connects, drops failed links and starts the connects
    /// that are due.
    fn maintain(&mut self) {
        if self.peers.len() != self.ifc.peers.lock().map_or(0, |p| p.len()) {
            self.peers = self.ifc.peers();
            self.retry_at.resize(self.peers.len(), Instant::now());
        }
        while let Ok((i, link)) = self.done_rx.try_recv() {
            let peer = &self.peers[i];
            match link {
                Some(l) => {
                    peer.connects.fetch_add(1, Ordering::Relaxed);
                    peer.state.store(UP, Ordering::Relaxed);
                    self.links.insert(i, l);
                }
                None => {
                    peer.state.store(DOWN, Ordering::Relaxed);
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
            if peer.state.load(Ordering::Relaxed) == DOWN && now >= self.retry_at[i] {
                peer.state.store(CONNECTING, Ordering::Relaxed);
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
                    peer.state.store(DOWN, Ordering::Relaxed);
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
        self.peers[i].state.store(DOWN, Ordering::Relaxed);
        self.retry_at[i] = Instant::now();
    }

    /// Sends what the TUN gave (a packet, behind its offload header if
    /// the TUN has them) to the peer holding its destination.
    fn forward(&mut self, msg: &[u8]) {
        let ifc = self.ifc.clone();
        let (form, pkt, gso) = if ifc.tun.vnet() {
            let Some((h, p)) = msg.split_first_chunk::<{ vnet::LEN }>() else {
                return ifc.counters.drop(Drop::Malformed);
            };
            (Form::Vnet, p, VnetHeader::parse(h).is_gso())
        } else {
            (Form::Bare, msg, false)
        };
        let dst = match ipv4_destination(pkt) {
            Ok(d) => d,
            Err(Refusal::Unsupported) => return ifc.counters.drop(Drop::Unsupported),
            Err(Refusal::Malformed) => return ifc.counters.drop(Drop::Malformed),
        };
        if msg.len() > ifc.fabric.max_message {
            return ifc.counters.drop(Drop::TooBig);
        }
        let sent = Sent {
            msg,
            form,
            bytes: pkt.len(),
            gso,
        };
        if dst.is_multicast() || dst.is_broadcast() || dst == ifc.broadcast() {
            for i in 0..self.peers.len() {
                self.send_to(i, &sent);
            }
            return;
        }
        match self.peers.iter().position(|p| p.overlay == dst) {
            Some(i) => self.send_to(i, &sent),
            None => {
                // As a packet waiting for ARP would be: dropped, and the
                // link asked who holds the address.
                if let (Some(d), true) = (&mut self.discovery, ifc.in_subnet(dst)) {
                    d.ask(ifc.fabric.mode.name(), dst, ifc.addr);
                }
                ifc.counters.drop(Drop::NoRoute)
            }
        }
    }

    fn send_to(&mut self, i: usize, m: &Sent) {
        let peer = self.peers[i].clone();
        let verdict = match self.links.get_mut(&i) {
            None => Err(Drop::PeerDown),
            Some(link) => match link.send(m.msg, m.form, SLOT_WAIT) {
                Ok(()) => Ok(()),
                Err(SendFailure::QueueFull) => Err(Drop::QueueFull),
                Err(SendFailure::Down) => {
                    self.link_down(i);
                    Err(Drop::PeerDown)
                }
            },
        };
        match verdict {
            Ok(()) => {
                self.ifc.counters.sent(m.bytes, m.gso);
                peer.counters.sent(m.bytes, m.gso);
            }
            Err(why) => {
                self.ifc.counters.drop(why);
                peer.counters.drop(why);
            }
        }
    }
}
