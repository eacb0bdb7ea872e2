//! The agent: this process's receiver of destination id 0 on one
//! interface, the Ethernet device's well-known address (the UDP device's
//! agent port).
//!
//! Every process that opens the device on an interface runs one agent
//! thread with an AF_PACKET socket whose kernel filter takes only our
//! EtherType with id 0. The kernel hands every such socket its own copy
//! of each frame, so every process on the host sees every connect request
//! and resolution frame that reaches the host, and nothing is forwarded
//! between processes:
//!
//! - a connect request (RUM CONNECT_REQUEST to id 0) goes to this
//!   process's server waiting on the request's tag, if it has one
//!   (`listen`); other processes' agents ignore it. Which process
//!   listens on a tag is settled host-wide by binding the abstract Unix
//!   name `openvia-ether-<ifindex>-l-<tag>`, freed when the server closes
//!   or dies;
//! - a resolution request for this host's address is answered by the one
//!   process holding id 0 (`ids`); the first agent to see a request while
//!   no one holds it takes it, so the answering process may exit at any
//!   time and the next request finds another;
//! - every resolution frame's sender (address, MAC) is learnt: requests
//!   carry the asker's, replies the answerer's.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use openvia_wire::ether::{self, HostAddr, ResolveRepr};
use openvia_wire::rum::{Body, Repr};

use super::ids::{self, IdClaim, AGENT_ID};
use super::EtherNic;
use crate::devices::rum::rendezvous::{RequestData, TAG_LEN};
use crate::devices::rum::stats::STATS;
use crate::error::{Result, ViaError};
use crate::sys::frames::{FrameFilter, FrameIo, Mac};
use crate::sys::packet::{PacketLink, RxPath};

const BROADCAST: Mac = [0xff; 6];
/// First wait for a resolution reply; doubled per retry up to a second.
const RESOLVE_FIRST_WAIT: Duration = Duration::from_millis(20);
/// How long a resolution is tried when the caller gave no deadline.
const RESOLVE_DEFAULT: Duration = Duration::from_secs(5);

/// A server's mailbox: connect requests for its tag, with the sender's MAC.
pub struct Mailbox {
    nic: usize,
    queue: Mutex<VecDeque<(Mac, Vec<u8>)>>,
    arrived: Condvar,
    /// The host-wide claim on the tag.
    _claim: UnixDatagram,
}

impl Mailbox {
    /// The next request, waiting up to `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<(Mac, Vec<u8>)> {
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let (mut q, _) = self
            .arrived
            .wait_timeout_while(q, timeout, |q| q.is_empty())
            .unwrap_or_else(|e| e.into_inner());
        q.pop_front()
    }
}

/// This process's agent on one interface.
pub struct Agent {
    ifname: String,
    ifindex: i32,
    mac: Mac,
    host: HostAddr,
    link: Mutex<PacketLink>,
    fd: RawFd,
    /// MACs learnt by host address, and a signal when one is learnt.
    macs: Mutex<HashMap<HostAddr, Mac>>,
    learnt: Condvar,
    listeners: Mutex<HashMap<[u8; TAG_LEN], Arc<Mailbox>>>,
    /// Id 0 while this process answers resolution requests.
    answering: Mutex<Option<IdClaim>>,
}

impl Agent {
    /// The agent of `medium`'s interface, started on first use (it lives
    /// as long as the process). Fails without CAP_NET_RAW.
    pub fn for_interface(medium: &EtherNic) -> Result<Arc<Agent>> {
        type Agents = Mutex<HashMap<(String, i32), Arc<Agent>>>;
        static AGENTS: OnceLock<Agents> = OnceLock::new();
        let mut agents = AGENTS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (medium.ifname.clone(), medium.ifindex);
        if let Some(a) = agents.get(&key) {
            return Ok(a.clone());
        }
        let filter = FrameFilter {
            ethertype: ether::ETHERTYPE,
            dst_id: Some((ether::DST_ID_OFFSET, AGENT_ID)),
        };
        let link = PacketLink::open(&medium.ifname, filter, RxPath::Copy)
            .map_err(|e| super::frame_error(&e))?;
        let agent = Arc::new(Agent {
            ifname: medium.ifname.clone(),
            ifindex: medium.ifindex,
            mac: medium.mac,
            host: crate::sys::net::host_bytes(medium.ip),
            fd: link.raw_fd(),
            link: Mutex::new(link),
            macs: Mutex::new(HashMap::new()),
            learnt: Condvar::new(),
            listeners: Mutex::new(HashMap::new()),
            answering: Mutex::new(ids::claim_exact(medium.ifindex, AGENT_ID).ok().flatten()),
        });
        let a = agent.clone();
        crate::sys::thread::spawn_quiet("openvia-ether-agent", move || {
            crate::vi::held::this_thread_is_transport();
            a.run()
        })
        .map_err(|_| ViaError::Resource("agent thread"))?;
        agents.insert(key, agent.clone());
        Ok(agent)
    }

    fn run(&self) {
        let mut frames: Vec<(Mac, Vec<u8>)> = Vec::new();
        loop {
            if !wait_fd(self.fd, 1000) {
                continue;
            }
            {
                let mut link = self.link.lock().unwrap_or_else(|e| e.into_inner());
                let _ = link.recv(64, &mut |src, f| frames.push((src, f.to_vec())));
            }
            for (src, f) in frames.drain(..) {
                self.take(src, &f);
            }
        }
    }

    fn take(&self, src: Mac, frame: &[u8]) {
        match ether::peek(frame) {
            Ok((AGENT_ID, ether::KIND_RESOLVE_REQUEST | ether::KIND_RESOLVE_REPLY)) => {
                match ResolveRepr::parse(frame) {
                    Ok(r) => self.take_resolution(src, r),
                    Err(_) => {
                        STATS.agent_garbage.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok((AGENT_ID, ether::KIND_RUM)) => self.take_request(src, frame),
            _ => {
                STATS.agent_garbage.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn take_resolution(&self, src: Mac, r: ResolveRepr) {
        // A frame's claimed MAC must be its sender's: no one may point
        // another host's address at a third MAC.
        if r.sender_mac != src {
            STATS.agent_garbage.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !r.reply || r.target == self.host {
            self.learn(r.sender, src);
        }
        if r.reply || r.target != self.host || !self.answers() {
            return;
        }
        let answer = r.answer(self.mac).emit();
        if self.send_frame(src, &answer).is_ok() {
            STATS.resolve_answered.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether this process answers resolution requests: it holds id 0,
    /// or takes it now (its holder is gone).
    fn answers(&self) -> bool {
        let mut a = self.answering.lock().unwrap_or_else(|e| e.into_inner());
        if a.is_none() {
            *a = ids::claim_exact(self.ifindex, AGENT_ID).ok().flatten();
        }
        a.is_some()
    }

    fn take_request(&self, src: Mac, frame: &[u8]) {
        let Ok(dg) = ether::to_rum(frame) else {
            STATS.agent_garbage.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let tag = match Repr::parse(&dg) {
            Ok(Repr {
                header,
                body: Body::ConnectRequest(h),
            }) if header.conn_id == 0 => RequestData::parse(h.user_data).map(|d| d.tag),
            _ => None,
        };
        let Some(tag) = tag else {
            STATS.agent_garbage.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mailbox = self
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&tag)
            .cloned();
        match mailbox {
            Some(m) => {
                let mut q = m.queue.lock().unwrap_or_else(|e| e.into_inner());
                // A server that stopped waiting must not pile requests up.
                if q.len() < 256 {
                    q.push_back((src, dg));
                }
                m.arrived.notify_all();
                STATS.agent_forwarded.fetch_add(1, Ordering::Relaxed);
            }
            // Another process's server, or none yet (the client retries).
            None => {
                STATS.agent_no_listener.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn learn(&self, host: HostAddr, mac: Mac) {
        self.macs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(host, mac);
        self.learnt.notify_all();
    }

    /// Sends one frame payload to `dst` from the agent's socket.
    pub fn send_frame(&self, dst: Mac, payload: &[u8]) -> std::io::Result<usize> {
        let parts: [&[u8]; 1] = [payload];
        self.link
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(dst, &[&parts])
    }

    /// Sends a RUM datagram (a reject) to `dst` from the agent's socket.
    pub fn send_rum(&self, dst: Mac, datagram: &[u8]) {
        if let Ok(f) = ether::frame_from_rum(datagram) {
            let _ = self.send_frame(dst, &f);
        }
    }

    /// The MAC of the host with VIA address `host` on this link: learnt
    /// before, in the kernel's neighbour table, or asked for by broadcast
    /// until `deadline` (5 s if none) or `cancel`.
    pub fn resolve(
        &self,
        host: HostAddr,
        deadline: Option<Instant>,
        cancel: &dyn Fn() -> bool,
    ) -> Result<Mac> {
        if let Some(m) = self.known(&host) {
            return Ok(m);
        }
        if let Some(ip) = crate::sys::net::host_ip(&host) {
            if let Ok(Some(m)) = crate::sys::packet::neighbour_mac(ip, &self.ifname) {
                self.learn(host, m);
                return Ok(m);
            }
        }
        let deadline = deadline.unwrap_or_else(|| Instant::now() + RESOLVE_DEFAULT);
        let ask = ResolveRepr {
            reply: false,
            target: host,
            sender: self.host,
            sender_mac: self.mac,
        }
        .emit();
        let mut wait = RESOLVE_FIRST_WAIT;
        loop {
            let _ = self.send_frame(BROADCAST, &ask);
            let until = (Instant::now() + wait).min(deadline);
            let macs = self.macs.lock().unwrap_or_else(|e| e.into_inner());
            let (macs, _) = self
                .learnt
                .wait_timeout_while(macs, until.saturating_duration_since(Instant::now()), |m| {
                    !m.contains_key(&host)
                })
                .unwrap_or_else(|e| e.into_inner());
            if let Some(m) = macs.get(&host) {
                return Ok(*m);
            }
            drop(macs);
            if Instant::now() >= deadline {
                return Err(ViaError::Timeout);
            }
            if cancel() {
                return Err(ViaError::InvalidState("cancelled"));
            }
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    }

    fn known(&self, host: &HostAddr) -> Option<Mac> {
        self.macs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(host)
            .copied()
    }

    /// The mailbox of `tag` for NIC `nic` (an address identifying it),
    /// claimed host-wide; fails if another process or NIC has it.
    pub fn listen(&self, nic: usize, tag: [u8; TAG_LEN]) -> Result<Arc<Mailbox>> {
        let mut ls = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = ls.get(&tag) {
            return if m.nic == nic {
                Ok(m.clone())
            } else {
                Err(ViaError::InvalidState(
                    "discriminator in use by another NIC",
                ))
            };
        }
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        let claim = UnixAddr::from_abstract_name(format!("openvia-ether-{}-l-{hex}", self.ifindex))
            .and_then(|a| UnixDatagram::bind_addr(&a))
            .map_err(|_| ViaError::InvalidState("discriminator in use by another process"))?;
        let m = Arc::new(Mailbox {
            nic,
            queue: Mutex::new(VecDeque::new()),
            arrived: Condvar::new(),
            _claim: claim,
        });
        ls.insert(tag, m.clone());
        Ok(m)
    }

    /// Drops NIC `nic`'s mailbox of `tag` (the tag becomes free once no
    /// wait holds it).
    pub fn unlisten(&self, nic: usize, tag: [u8; TAG_LEN]) {
        let mut ls = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        if ls.get(&tag).is_some_and(|m| m.nic == nic) {
            ls.remove(&tag);
        }
    }

    /// Drops the mailboxes of a closing NIC (their tags become free).
    pub fn forget(&self, nic: usize) {
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, m| m.nic != nic);
    }
}

/// Waits up to `ms` for `fd` to be readable.
fn wait_fd(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}
