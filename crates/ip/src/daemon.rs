//! A running interface: the threads that move packets.
//!
//! - the sending loop (the calling thread, `sender.rs`) reads packets
//!   from the TUN, finds the peer holding each destination and posts the
//!   packet on that peer's link; it also (re)connects links;
//! - the accepting thread takes the peers' connections, and one receiving
//!   thread per accepted link takes its packets straight from the VI
//!   (asleep on the VI's descriptor, a batch a wake-up) and writes them to
//!   the TUN;
//! - the control thread answers `viaip show`.
//!
//! A packet for a peer whose link is down is dropped and counted
//! (`peer_down`); the link is reconnected in the background, so traffic
//! resumes by itself when the peer comes back.

use std::fmt::Write;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::counters::{Counters, Drop};
use crate::discovery::Discovery;
use crate::link::{Arrival, Fabric, Form, Mode, RxLink};
use crate::packet::{ipv4_destination, Refusal};
use crate::peers::{host_addr, host_text, HostAddr};
use crate::sender::{Sender, BATCH, IDLE_SLEEP, RETRY_AFTER};
use crate::tun::Tun;
use crate::vnet::{self, VnetHeader};
use crate::wait::{RxPoll, Sleep};

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
    /// TUN checksum and segmentation offloads.
    pub offload: bool,
    /// How long the sending loop polls the TUN for an answer after a
    /// receiving thread wrote a packet to it (`wait::Kick`).
    pub answer_spin: Duration,
    /// How long a receiving thread polls its link before it sleeps, at
    /// most (`wait::RxPoll`).
    pub rx_spin: Duration,
}

/// A peer's sending link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    Down = 0,
    Connecting = 1,
    Up = 2,
}

impl Peer {
    fn new(overlay: Ipv4Addr, host: HostAddr) -> Peer {
        Peer {
            overlay,
            host,
            state: AtomicU8::new(LinkState::Down as u8),
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
    pub(crate) connects: AtomicU64,
    rx_links: AtomicU32,
    pub counters: Counters,
}

impl Peer {
    pub fn state(&self) -> LinkState {
        match self.state.load(Ordering::Relaxed) {
            2 => LinkState::Up,
            1 => LinkState::Connecting,
            _ => LinkState::Down,
        }
    }

    pub(crate) fn set_state(&self, s: LinkState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }
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
    /// Rung by the receiving threads for the sending loop (`wait::Kick`).
    pub kick: crate::wait::Kick,
    /// The receiving threads' poll before they sleep (`wait::RxPoll`).
    rx_spin: Duration,
}

impl Interface {
    /// The peers known now.
    pub fn peers(&self) -> Vec<Arc<Peer>> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many peers are known now.
    pub(crate) fn peer_count(&self) -> usize {
        self.peers.lock().map_or(0, |p| p.len())
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

    pub(crate) fn in_subnet(&self, a: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        };
        u32::from(a) & mask == u32::from(self.addr) & mask
    }

    pub(crate) fn broadcast(&self) -> Ipv4Addr {
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
            let state = match p.state() {
                LinkState::Up => "up",
                LinkState::Connecting => "connecting",
                LinkState::Down => "down",
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
    let offload = cfg.offload;
    let fabric = Fabric::open(&cfg.device, cfg.mode, cfg.mtu, offload)?;
    // A kernel that refuses the offloads gets a TUN without them (the
    // interface of the failed try went with its descriptor); the peers
    // still talk to it (vnet.rs).
    let tun = match Tun::create(&cfg.ifname, offload) {
        Err(e) if offload => {
            eprintln!("viaip: {}: no TUN offloads ({e})", cfg.ifname);
            Tun::create(&cfg.ifname, false)
        }
        made => made,
    }
    .map_err(|e| format!("TUN {}: {e}", cfg.ifname))?;
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
        kick: crate::wait::Kick::new(cfg.answer_spin).map_err(|e| format!("eventfd: {e}"))?,
        rx_spin: cfg.rx_spin,
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
    // Everything that has arrived, then a poll of the VI a while (the
    // next datagram often comes within tens of microseconds: the answer
    // to what the program just sent), then asleep on the VI until more
    // comes or its timer is due (an acknowledgement owed): at most one
    // wake-up a batch, and no thread of the core in between.
    let mut sleep = Sleep::new();
    let mut poll = RxPoll::new(ifc.rx_spin);
    'link: while let Ok(n) = link.drain(BATCH, &mut deliver) {
        poll.after_sleep(n > 0);
        if n == BATCH {
            continue;
        }
        if n > 0 {
            ifc.kick.ring();
        }
        let mut spin = poll.start();
        while spin.go_on() {
            match link.drain(BATCH, &mut deliver) {
                Ok(0) => {}
                Ok(n) => {
                    poll.caught(&spin);
                    if n < BATCH {
                        ifc.kick.ring();
                    }
                    continue 'link;
                }
                Err(_) => break 'link,
            }
        }
        let Some(hint) = link.wait_hint() else { break };
        sleep.clear();
        sleep.hint(hint);
        poll.sleeping(spin);
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
