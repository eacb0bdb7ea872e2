//! Agreeing on openvia with a peer on another host, without a byte in the
//! TCP stream. The one-host rendezvous (`rendezvous`) uses abstract Unix
//! sockets, which do not cross hosts; here the out-of-band channel is UDP
//! on the listener's own port number:
//!
//! - a TCP listener under viarun also binds UDP on its address and port
//!   `P`, and a thread of the listening process (its *agent*) answers
//!   there. A host where nothing under viarun listens on `P` has no such
//!   UDP socket, so its kernel answers a probe with ICMP port unreachable
//!   at once: a connector to a plain server learns "no" within a round
//!   trip (or, where ICMP is filtered, after `VIARUN_PROBE_MS`), and
//!   remembers it for that address for a while (`NEGATIVE`);
//! - the connector binds its TCP socket (learning its port `P'`), binds
//!   UDP on `P'` too and sends `PROBE` with a random nonce that its later
//!   messages repeat; the agent notes (connector address, `P'`, `P`,
//!   nonce) in a table shared with the processes that accept (a shared
//!   mapping made at listen, so a server that forks after listen shares
//!   it; `notes`) and answers `HERE`, or `BUSY` when it has no room for a
//!   note without giving away one still undecided (the connector then
//!   stays on the kernel). The connector then sends `COMMIT` and connects
//!   at once, without waiting to hear that it came: from then on it
//!   follows whatever the acceptor decides;
//! - whichever process accepts the TCP connection from `P'` decides: yes
//!   only if the note says committed (a connector whose `HERE` was lost
//!   and went to the kernel never committed). The `COMMIT` left before
//!   the connector's SYN, so it is in the agent's socket before the
//!   connection can be accepted; an acceptor that finds the note only
//!   probed waits a little for the agent to take it up (`COMMIT_WAIT`:
//!   the agent's thread may not have run yet, or the datagram was lost
//!   and the connector's first query will commit). The decision (with a token
//!   and the acceptor's network address) is kept in the table and sent to
//!   the connector's UDP port; a connector that has not heard it asks
//!   again (`QUERY`, which also counts as its commit) until it does, as
//!   long as its TCP connection lives. A query for a connection the table
//!   does not know is answered no, and that is kept, so an acceptor
//!   coming later says no as well.
//!
//! So no side commits to openvia without the other, and a peer without
//! viarun is never sent anything but (at most) one UDP probe to a closed
//! port. What stays open (docs/sockets.md): a decision never heard
//! because every answer and query was lost while the TCP connection
//! lives; a listening process that exits while its forked children still
//! accept (nobody answers probes: connections go to the kernel).

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const MAGIC: [u8; 4] = *b"OVH1";
const PROBE: u8 = 1;
const HERE: u8 = 2;
const COMMIT: u8 = 3;
// 4 was COMMITTED, the answer to COMMIT, which the connector no longer
// waits for (a round trip of every connection).
const QUERY: u8 = 5;
const ANSWER: u8 = 6;
/// From an acceptor on this host whose listener holds no registration:
/// no for the connection from (host: the connector's address as 16
/// bytes, connector port).
const DECLINE: u8 = 7;
/// To a probe: the agent has no room to note the connection now (every
/// note it could take waits for its acceptor); stay on the kernel, and
/// ask again next time.
const BUSY: u8 = 8;
/// Bytes of every datagram of this protocol.
const MSG_LEN: usize = 64;
/// Most bytes of a network address carried in an answer.
const HOST_MAX: usize = 32;
/// How long a "no viarun there" is remembered per address and port.
const NEGATIVE_FOR: Duration = Duration::from_secs(5);
/// Resend interval of probes and commits, and a query's first.
const RESEND: Duration = Duration::from_millis(10);
/// How long an acceptor waits for the commit of a connector whose probe
/// was answered (`Registry::committed`): longer than a connector waits
/// before its first query, which commits too.
const COMMIT_WAIT: Duration = Duration::from_millis(20);
/// How long a connector listens for the acceptor's answer before its
/// first query.
const FIRST_QUERY_AFTER: Duration = Duration::from_millis(2);
/// Longest gap between a waiting connector's queries.
const QUERY_EVERY_MAX: Duration = Duration::from_millis(200);
/// How old an undecided note is before a query makes the agent look who
/// accepted its connection (`holder`).
const HOLDER_AFTER_MS: u64 = 100;

mod notes;
use notes::{Notes, DECIDED, FREE, NOTED_COMMIT, PROBED};

/// How long a probe waits for an answer before it says no (default 200 ms;
/// a closed port answers at once).
fn probe_time() -> Duration {
    static T: OnceLock<Duration> = OnceLock::new();
    *T.get_or_init(|| {
        let ms = std::env::var("VIARUN_PROBE_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(200);
        Duration::from_millis(ms)
    })
}

/// One datagram: magic (4), kind (1), yes (1), listen port (2), connector
/// port (2), host length (1), pad (5), token (8), host (up to 32).
#[derive(Clone, Copy, Default, PartialEq, Debug)]
pub struct Msg {
    kind: u8,
    pub yes: bool,
    lport: u16,
    cport: u16,
    pub token: u64,
    host_len: u8,
    host: [u8; HOST_MAX],
}

impl Msg {
    fn new(kind: u8, lport: u16, cport: u16) -> Msg {
        Msg {
            kind,
            lport,
            cport,
            ..Msg::default()
        }
    }

    fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = self.kind;
        b[5] = u8::from(self.yes);
        b[6..8].copy_from_slice(&self.lport.to_le_bytes());
        b[8..10].copy_from_slice(&self.cport.to_le_bytes());
        b[10] = self.host_len;
        b[16..24].copy_from_slice(&self.token.to_le_bytes());
        b[24..24 + HOST_MAX].copy_from_slice(&self.host);
        b
    }

    fn decode(b: &[u8]) -> Option<Msg> {
        if b.len() != MSG_LEN || b[0..4] != MAGIC || b[10] as usize > HOST_MAX {
            return None;
        }
        let mut host = [0u8; HOST_MAX];
        host.copy_from_slice(&b[24..24 + HOST_MAX]);
        Some(Msg {
            kind: b[4],
            yes: b[5] == 1,
            lport: u16::from_le_bytes([b[6], b[7]]),
            cport: u16::from_le_bytes([b[8], b[9]]),
            token: u64::from_le_bytes(b[16..24].try_into().ok()?),
            host_len: b[10],
            host,
        })
    }

    /// The acceptor's network address, from a yes.
    pub fn host(&self) -> &[u8] {
        &self.host[..self.host_len as usize]
    }
}

/// An address as 16 bytes (IPv4 mapped), the table's key.
fn ip16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn now_ms() -> u64 {
    // SAFETY: clock_gettime into our own timespec; CLOCK_MONOTONIC is one
    // clock for every process of the host (the table is shared).
    unsafe {
        let mut t: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t);
        t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
    }
}

/// A listener's registration for peers on other hosts: its UDP socket
/// (shared with forked children), its notes and its agent thread.
pub struct Registry {
    udp: UdpSocket,
    notes: Notes,
    port: u16,
    stop: AtomicBool,
    /// Rung by `stop` (an eventfd), so the agent sleeps while nobody
    /// writes to it, not looking five times a second whether to stop;
    /// None where none could be made (it then looks every 200 ms).
    stop_bell: Option<std::os::fd::OwnedFd>,
    /// Times the agent looked who holds a connection, and queries it had
    /// (tests).
    holder_looks: AtomicU32,
    queries: AtomicU32,
    /// Times the agent woke (tests).
    agent_wakes: AtomicU32,
}

impl Registry {
    /// Registers a TCP listener bound to `addr` (its port included) whose
    /// listen queue is `backlog` long; None if that UDP port is taken or
    /// no thread can be made.
    pub fn start(addr: SocketAddr, backlog: i32) -> Option<Arc<Registry>> {
        let udp = UdpSocket::bind(addr).ok()?;
        // The agent polls, then reads until nothing is left.
        udp.set_nonblocking(true).ok()?;
        let port = udp.local_addr().ok()?.port();
        let notes = Notes::new(notes::slots_for(backlog))?;
        let reg = Arc::new(Registry {
            udp,
            notes,
            port,
            stop: AtomicBool::new(false),
            stop_bell: stop_bell(),
            holder_looks: AtomicU32::new(0),
            queries: AtomicU32::new(0),
            agent_wakes: AtomicU32::new(0),
        });
        let agent = reg.clone();
        openvia_core::sys::thread::spawn_quiet("viarun-agent", move || agent.serve()).ok()?;
        Some(reg)
    }

    /// The listener closed: its agent ends at once (within one look
    /// without a stop bell).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(b) = &self.stop_bell {
            let one = 1u64.to_ne_bytes();
            // SAFETY: 8 bytes of ours into our eventfd (a full counter
            // leaves it readable anyway).
            unsafe { (crate::real::real().write)(b.as_raw_fd(), one.as_ptr().cast(), 8) };
        }
    }

    fn serve(&self) {
        let mut buf = [0u8; 256];
        while !self.stop.load(Ordering::Acquire) {
            let mut p = [
                libc::pollfd {
                    fd: self.udp.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.stop_bell.as_ref().map_or(-1, |b| b.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let look_ms = if self.stop_bell.is_some() { -1 } else { 200 };
            // SAFETY: two pollfds of ours (a negative fd is skipped).
            let ready = unsafe { (crate::real::real().poll)(p.as_mut_ptr(), 2, look_ms) };
            self.agent_wakes.fetch_add(1, Ordering::Relaxed);
            if ready <= 0 {
                continue;
            }
            if p[1].revents != 0 {
                // Rung: taken, so that it sleeps again if it was not our
                // stop (a forked child's copy of the listener closed).
                let mut n = [0u8; 8];
                // SAFETY: into our own 8 bytes, from our eventfd.
                unsafe { (crate::real::real().read)(p[1].fd, n.as_mut_ptr().cast(), 8) };
            }
            if p[0].revents == 0 {
                continue;
            }
            while let Ok((n, from)) = self.udp.recv_from(&mut buf) {
                if let Some(m) = Msg::decode(&buf[..n]).filter(|m| m.lport == self.port) {
                    self.handle(m, from);
                }
            }
        }
    }

    fn handle(&self, m: Msg, from: SocketAddr) {
        if m.kind == DECLINE {
            self.declined(m, from);
            return;
        }
        if m.kind == QUERY {
            self.queries.fetch_add(1, Ordering::Relaxed);
        }
        let ip = ip16(from.ip());
        let mut plain_check = false;
        let reply = {
            let mut t = self.notes.lock();
            match m.kind {
                PROBE => match t.claim(&ip, m.cport, m.lport) {
                    Some(n) => {
                        // A resent probe (same nonce) leaves the note as it
                        // is; another connection on the same ports starts
                        // anew.
                        if n.state == FREE || n.nonce != m.token {
                            n.state = PROBED;
                            n.nonce = m.token;
                            n.stamp_ms = now_ms();
                            n.checked_ms = 0;
                        }
                        Some(Msg::new(HERE, m.lport, m.cport).encode())
                    }
                    None => Some(Msg::new(BUSY, m.lport, m.cport).encode()),
                },
                COMMIT => match t.find(&ip, m.cport, m.lport) {
                    Some(n)
                        if n.nonce == m.token && (n.state == PROBED || n.state == NOTED_COMMIT) =>
                    {
                        n.state = NOTED_COMMIT;
                        None
                    }
                    _ => None,
                },
                QUERY => match t.find(&ip, m.cport, m.lport).filter(|n| n.nonce == m.token) {
                    Some(n) if n.state == DECIDED => Some(n.answer),
                    Some(n) => {
                        // Not accepted yet; a query is a commit too.
                        n.state = NOTED_COMMIT;
                        // Unless a program without viarun took it (a
                        // second listener on the port), which never
                        // answers: looked at below, without the lock,
                        // once the note is as old as a connector on this
                        // host waits before it looks.
                        // Then again at ever longer gaps (half the note's
                        // age): a server slow to accept keeps its
                        // connectors asking, and each look reads /proc
                        // (milliseconds with many sockets; at every query
                        // one waiting connector cost the agent 40 % of a
                        // CPU).
                        let now = now_ms();
                        let age = now.saturating_sub(n.stamp_ms);
                        plain_check =
                            age >= HOLDER_AFTER_MS && now.saturating_sub(n.checked_ms) >= age / 2;
                        if plain_check {
                            n.checked_ms = now;
                            self.holder_looks.fetch_add(1, Ordering::Relaxed);
                        }
                        None
                    }
                    None => {
                        // Unknown: no, and kept so (where there is room),
                        // for an acceptor to come; one that finds no note
                        // says no as well.
                        let no = Msg::new(ANSWER, m.lport, m.cport).encode();
                        if let Some(n) = t.claim(&ip, m.cport, m.lport) {
                            n.state = DECIDED;
                            n.nonce = m.token;
                            n.answer = no;
                        }
                        Some(no)
                    }
                },
                _ => None,
            }
        };
        let reply = match reply {
            None if plain_check => self.taken_by_a_plain_process(m, from),
            r => r,
        };
        if let Some(r) = reply {
            let _ = self.udp.send_to(&r, from);
        }
    }

    /// A connection not decided yet whose other end a process without
    /// viarun on this host accepted (holder.rs): decided no, and that
    /// answer returned. None while it is queued or held by viarun.
    fn taken_by_a_plain_process(&self, m: Msg, from: SocketAddr) -> Option<[u8; MSG_LEN]> {
        let here = SocketAddr::new(self.udp.local_addr().ok()?.ip(), m.lport);
        let peer = SocketAddr::new(from.ip(), m.cport);
        if crate::holder::of_peer(peer, here) != crate::holder::Holder::Plain {
            return None;
        }
        let mut t = self.notes.lock();
        let n = t.find(&ip16(from.ip()), m.cport, m.lport)?;
        if n.state != DECIDED {
            n.answer = Msg::new(ANSWER, m.lport, m.cport).encode();
            n.state = DECIDED;
        }
        Some(n.answer)
    }

    /// A DECLINE (see [`decline`]): the connection is decided no and the
    /// connector told now. Taken only from this host's own addresses (it
    /// can only keep a connection on the kernel anyway).
    fn declined(&self, m: Msg, from: SocketAddr) {
        if m.host_len != 16 || !from_this_host(from.ip()) {
            return;
        }
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&m.host[..16]);
        let answer = {
            let mut t = self.notes.lock();
            match t.claim(&ip, m.cport, m.lport) {
                Some(n) => {
                    if n.state != DECIDED {
                        n.answer = Msg::new(ANSWER, m.lport, m.cport).encode();
                        n.state = DECIDED;
                    }
                    n.answer
                }
                // No room to keep it: the connector hears no all the same,
                // and an unknown connection is answered no.
                None => Msg::new(ANSWER, m.lport, m.cport).encode(),
            }
        };
        let v6 = Ipv6Addr::from(ip);
        let peer = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
        let _ = self.udp.send_to(&answer, SocketAddr::new(peer, m.cport));
    }

    /// Acceptor: whether the connector at `peer` committed (so a yes is
    /// worth preparing). A note still only probed is waited on for up to
    /// `COMMIT_WAIT`: the connector sent its commit before it connected.
    pub fn committed(&self, peer: SocketAddr) -> bool {
        self.committed_within(peer, COMMIT_WAIT)
    }

    fn committed_within(&self, peer: SocketAddr, limit: Duration) -> bool {
        let start = Instant::now();
        let mut looks = 0u32;
        loop {
            let state = {
                let mut t = self.notes.lock();
                t.find(&ip16(peer.ip()), peer.port(), self.port)
                    .map(|n| n.state)
            };
            match state {
                Some(NOTED_COMMIT) => return true,
                Some(PROBED) if start.elapsed() < limit => {}
                _ => return false,
            }
            // The agent's thread is about to run: a few yields first, then
            // naps, so that a connector that never commits (its HERE was
            // lost) costs little CPU.
            looks += 1;
            if looks <= 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Acceptor of a connection from `peer`: decides (yes only if the
    /// connector committed and `offer` is given: (token, our network
    /// address)), keeps the decision, and tells the connector. Some(token)
    /// for yes.
    pub fn decide(&self, peer: SocketAddr, offer: Option<(u64, &[u8])>) -> Option<u64> {
        let ip = ip16(peer.ip());
        let answer = {
            let mut t = self.notes.lock();
            let note = t.find(&ip, peer.port(), self.port)?;
            if note.state != DECIDED {
                let mut a = Msg::new(ANSWER, self.port, peer.port());
                if let Some((token, host)) = offer.filter(|(_, h)| h.len() <= HOST_MAX) {
                    if note.state == NOTED_COMMIT {
                        a.yes = true;
                        a.token = token;
                        a.host_len = host.len() as u8;
                        a.host[..host.len()].copy_from_slice(host);
                    }
                }
                note.answer = a.encode();
                note.state = DECIDED;
                note.stamp_ms = now_ms();
            }
            note.answer
        };
        let _ = self.udp.send_to(&answer, peer);
        Msg::decode(&answer).filter(|a| a.yes).map(|a| a.token)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The eventfd that wakes a listener's agent to stop, kept high in the
/// descriptor table (`dup_high`).
fn stop_bell() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: a new eventfd; flags valid.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return None;
    }
    let high = crate::kernel::dup_high(fd, true);
    let keep = if high >= 0 {
        // SAFETY: the eventfd just made, now copied.
        unsafe { (crate::real::real().close)(fd) };
        high
    } else {
        fd
    };
    // SAFETY: a descriptor just made, owned by nobody else.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(keep) })
}

/// Whether `ip` is an address of this host (one can bind to it).
fn from_this_host(ip: IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// An acceptor whose listener holds no registration (another listener on
/// the port has it: SO_REUSEPORT, or a program exec'd with the listener)
/// declines the connection that came to `local` from `peer` on another
/// host: the port's agent decides no for it, so its connector, which
/// committed on that agent's word, stops asking and stays on the kernel.
pub fn decline(local: SocketAddr, peer: SocketAddr) {
    let Ok(udp) = UdpSocket::bind(SocketAddr::new(local.ip(), 0)) else {
        return;
    };
    let mut m = Msg::new(DECLINE, local.port(), peer.port());
    m.host_len = 16;
    m.host[..16].copy_from_slice(&ip16(peer.ip()));
    // Twice: a datagram to this host is lost only to a full buffer, and
    // the connector's queries keep the note alive meanwhile.
    for _ in 0..2 {
        let _ = udp.send_to(&m.encode(), local);
    }
}

/// Addresses where a probe found no viarun, and when.
static NEGATIVE: Mutex<Option<HashMap<SocketAddr, Instant>>> = Mutex::new(None);

fn known_plain(dst: SocketAddr) -> bool {
    let g = NEGATIVE.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()
        .and_then(|m| m.get(&dst))
        .is_some_and(|t| t.elapsed() < NEGATIVE_FOR)
}

fn note_plain(dst: SocketAddr) {
    let mut g = NEGATIVE.lock().unwrap_or_else(|e| e.into_inner());
    let m = g.get_or_insert_with(HashMap::new);
    m.retain(|_, t| t.elapsed() < NEGATIVE_FOR);
    m.insert(dst, Instant::now());
}

/// Connector with a committed offer: its UDP socket (bound to its TCP
/// port, connected to the listener's) awaits the acceptor's decision.
pub struct Offer {
    udp: UdpSocket,
    lport: u16,
    cport: u16,
    /// This connection's number in every message to the agent (`Note`'s
    /// nonce).
    nonce: u64,
}

/// `udp` at the library's descriptor floor (`fdroom`, through the core's
/// `sys::floor`): an offer lives until the connection's first use, maybe
/// long after, and must not push the program's next sockets up.
fn lifted(udp: UdpSocket) -> UdpSocket {
    UdpSocket::from(openvia_core::sys::floor::lift(udp.into()))
}

/// Sends `ask` until a datagram of a kind in `want` (for our ports) comes,
/// for at most `limit`; Err(()) when the port is closed (ICMP refused).
fn exchange(udp: &UdpSocket, ask: &Msg, want: &[u8], limit: Duration) -> Result<Option<Msg>, ()> {
    exchange_every(udp, ask, want, limit, RESEND)
}

/// [`exchange`], sending `ask` again every `every`.
fn exchange_every(
    udp: &UdpSocket,
    ask: &Msg,
    want: &[u8],
    limit: Duration,
    every: Duration,
) -> Result<Option<Msg>, ()> {
    let start = Instant::now();
    while start.elapsed() < limit {
        match udp.send(&ask.encode()) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Err(()),
            _ => {}
        }
        let slice = every.min(limit.saturating_sub(start.elapsed()));
        if let Some(m) = listen(udp, ask, want, Instant::now() + slice)? {
            return Ok(Some(m));
        }
    }
    Ok(None)
}

/// Takes datagrams until one of a kind in `want` for `ask`'s ports comes
/// (Some) or `until` passes (None); Err(()) when the port is closed.
fn listen(udp: &UdpSocket, ask: &Msg, want: &[u8], until: Instant) -> Result<Option<Msg>, ()> {
    let mut buf = [0u8; 256];
    while Instant::now() < until {
        let _ = udp.set_read_timeout(Some(
            until
                .saturating_duration_since(Instant::now())
                .max(Duration::from_micros(100)),
        ));
        match udp.recv(&mut buf) {
            Ok(n) => {
                if let Some(m) = Msg::decode(&buf[..n]).filter(|m| {
                    want.contains(&m.kind) && m.lport == ask.lport && m.cport == ask.cport
                }) {
                    return Ok(Some(m));
                }
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Err(()),
            Err(_) => break,
        }
    }
    Ok(None)
}

impl Offer {
    /// Its UDP socket's descriptor, its ports (listener's, connector's)
    /// and its nonce.
    pub fn parts(&self) -> (std::os::fd::RawFd, u16, u16, u64) {
        use std::os::fd::AsRawFd;
        (self.udp.as_raw_fd(), self.lport, self.cport, self.nonce)
    }

    /// An offer made by the program that exec'd this one (`inherit`).
    pub fn adopt(udp: UdpSocket, lport: u16, cport: u16, nonce: u64) -> Offer {
        Offer {
            udp,
            lport,
            cport,
            nonce,
        }
    }

    fn ask(&self, kind: u8) -> Msg {
        let mut m = Msg::new(kind, self.lport, self.cport);
        m.token = self.nonce;
        m
    }

    /// Connector of TCP socket `fd` (bound to port `cport`) to `dst`:
    /// probes for viarun there and commits if it answers. None: stay on
    /// the kernel (nobody there will wait for us).
    pub fn make(dst: SocketAddr, cport: u16) -> Option<Offer> {
        if known_plain(dst) {
            return None;
        }
        let any = match dst {
            SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], cport)),
            SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, cport)),
        };
        let udp = lifted(UdpSocket::bind(any).ok()?);
        udp.connect(dst).ok()?;
        let offer = Offer {
            udp,
            lport: dst.port(),
            cport,
            nonce: openvia_core::sys::random_u64(),
        };
        let limit = probe_time();
        match exchange(&offer.udp, &offer.ask(PROBE), &[HERE, BUSY], limit) {
            Ok(Some(m)) if m.kind == HERE => {}
            // Room for the note another time: nothing to remember.
            Ok(Some(_)) => return None,
            _ => {
                note_plain(dst);
                return None;
            }
        }
        // Committed from here on, heard or not: a lost COMMIT is made up
        // by the first query, which commits too, within the acceptor's
        // `COMMIT_WAIT`; past it the answer is no, which we follow.
        match offer.udp.send(&offer.ask(COMMIT).encode()) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                note_plain(dst);
                None
            }
            _ => Some(offer),
        }
    }

    /// Waits for the acceptor's decision while TCP socket `tcp` lives;
    /// Some(answer) for yes. The acceptor sends its answer when it
    /// decides; a query only makes up for a lost one, so they go out at
    /// growing gaps (10 ms doubling to 200 ms): a server slow to accept
    /// is not asked a hundred times a second by each connector.
    pub fn decision(&self, tcp: RawFd) -> Option<Msg> {
        // The acceptor's answer is on its way when the acceptor is quick:
        // a query sent at once crossed it in every connection, each costing
        // a datagram, and a wake-up of the listener's agent to answer it.
        let first = Instant::now() + FIRST_QUERY_AFTER;
        match listen(&self.udp, &self.ask(QUERY), &[ANSWER], first) {
            Ok(Some(a)) => return a.yes.then_some(a),
            Err(()) => return None,
            Ok(None) => {}
        }
        let mut every = RESEND;
        loop {
            let limit = every.max(Duration::from_millis(50));
            let r = exchange_every(&self.udp, &self.ask(QUERY), &[ANSWER], limit, every);
            every = (every * 2).min(QUERY_EVERY_MAX);
            match r {
                Ok(Some(a)) => return a.yes.then_some(a),
                Err(()) => return None,
                Ok(None) => {}
            }
            let mut p = libc::pollfd {
                fd: tcp,
                events: 0,
                revents: 0,
            };
            // SAFETY: one pollfd of ours.
            unsafe { (crate::real::real().poll)(&mut p, 1, 0) };
            if p.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                return None;
            }
        }
    }
}

/// A socket address as std's type (IPv4 and IPv6 only).
pub fn socket_addr(a: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(a.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let s = unsafe { &*(a as *const libc::sockaddr_storage as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(s.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let s = unsafe { &*(a as *const libc::sockaddr_storage as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(s.sin6_port))))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_nonsense_is_refused() {
        let mut m = Msg::new(ANSWER, 5201, 40000);
        m.yes = true;
        m.token = 0x1234_5678_9abc_def1;
        m.host_len = 16;
        m.host[..16].copy_from_slice(&[7; 16]);
        assert_eq!(Msg::decode(&m.encode()), Some(m));
        assert_eq!(Msg::decode(&m.encode()).unwrap().host(), &[7; 16]);
        let mut bad = m.encode();
        bad[0] = b'X';
        assert_eq!(Msg::decode(&bad), None);
        assert_eq!(Msg::decode(&m.encode()[..10]), None);
    }

    /// A connector that committed, whose connection another listener on
    /// the port accepted: that acceptor's DECLINE makes the agent answer
    /// no, at once and to later queries, and a yes can no longer follow.
    /// An agent on loopback and a connector committed to it: (registry,
    /// the agent's address, the offer, the connector's address).
    fn committed_pair() -> (Arc<Registry>, SocketAddr, Offer, SocketAddr) {
        let reg = Registry::start(SocketAddr::from(([127, 0, 0, 1], 0)), 16).expect("registry");
        let dst = SocketAddr::from(([127, 0, 0, 1], reg.port));
        let cport = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port")
            .port();
        let offer = Offer::make(dst, cport).expect("the agent answers");
        let peer = SocketAddr::from(([127, 0, 0, 1], cport));
        assert!(reg.committed(peer));
        (reg, dst, offer, peer)
    }

    /// An agent nobody writes to sleeps, and its listener's close ends
    /// it: it looked five times a second whether to stop.
    #[test]
    fn an_idle_agent_sleeps_until_its_listener_closes() {
        let reg = Registry::start(SocketAddr::from(([127, 0, 0, 1], 0)), 16).expect("registry");
        // The idle time measured (no server is waited for).
        std::thread::sleep(Duration::from_millis(500));
        let woke = reg.agent_wakes.load(Ordering::Relaxed);
        assert!(woke <= 1, "an idle agent woke {woke} times in 500 ms");
        reg.stop();
        // The agent lets its registry go as it ends.
        let t = Instant::now();
        while Arc::strong_count(&reg) > 1 {
            assert!(t.elapsed() < Duration::from_secs(5), "the agent ended");
            std::thread::yield_now();
        }
        assert!(reg.agent_wakes.load(Ordering::Relaxed) <= woke + 2);
    }

    /// A server that accepts late: more connectors committed and
    /// undecided at once than the agent's table once held (256, and the
    /// oldest was given away) each get the acceptor's yes when it comes
    /// to them.
    #[test]
    fn every_connector_of_a_late_acceptor_gets_yes() {
        const N: usize = 300;
        let reg =
            Registry::start(SocketAddr::from(([127, 0, 0, 1], 0)), N as i32).expect("registry");
        let dst = SocketAddr::from(([127, 0, 0, 1], reg.port));
        let offers: Vec<(Offer, SocketAddr)> = (0..N)
            .map(|_| {
                let cport = UdpSocket::bind("127.0.0.1:0")
                    .and_then(|s| s.local_addr())
                    .expect("a free port")
                    .port();
                let offer = Offer::make(dst, cport).expect("the agent answers");
                (offer, SocketAddr::from(([127, 0, 0, 1], cport)))
            })
            .collect();
        for (i, (offer, peer)) in offers.iter().enumerate() {
            let token = i as u64 + 1;
            // As the acceptor does: the last commits may still be on their
            // way to the agent (the connector does not wait for them).
            assert!(reg.committed(*peer), "connection {i} committed");
            assert_eq!(
                reg.decide(*peer, Some((token, &[1]))),
                Some(token),
                "connection {i} still noted"
            );
            assert_eq!(offer.decision(-1).map(|a| a.token), Some(token));
        }
        reg.stop();
    }

    /// A connector kept waiting (its server does not accept): its queries
    /// come at growing gaps, and the agent looks who holds the connection
    /// (reading /proc) at growing gaps too, not at every query: at ~100,
    /// 200, 400 and 800 ms of a second's wait, where it looked ~90 times
    /// (40 % of a CPU for one waiting connector, with many sockets).
    #[test]
    fn a_connector_kept_waiting_is_looked_after_at_growing_gaps() {
        use std::os::fd::AsRawFd;
        let (reg, _, offer, _) = committed_pair();
        let (tcp, peer) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let waiter = std::thread::spawn(move || offer.decision(tcp.as_raw_fd()).is_none());
        // How long the connector waits: the span the gaps are counted in.
        std::thread::sleep(Duration::from_millis(1000));
        let looks = reg.holder_looks.load(Ordering::Relaxed);
        let queries = reg.queries.load(Ordering::Relaxed);
        drop(peer);
        assert!(waiter.join().expect("waiter"), "no answer came");
        assert!((2..=5).contains(&looks), "{looks} looks in a second");
        assert!((5..=25).contains(&queries), "{queries} queries in a second");
        reg.stop();
    }

    #[test]
    fn a_declined_connection_is_answered_no() {
        let (reg, dst, offer, peer) = committed_pair();
        decline(dst, peer);
        assert!(offer.decision(-1).is_none(), "declined: no");
        assert!(!reg.committed(peer));
        assert_eq!(reg.decide(peer, Some((7, &[1]))), None, "decided already");
        reg.stop();
    }

    /// The whole exchange against a real agent over loopback: a
    /// committed connector gets yes with the acceptor's token and address;
    /// a connection nobody noted gets no.
    #[test]
    fn only_a_committed_connector_gets_yes() {
        let (reg, _, offer, peer) = committed_pair();
        let cport = peer.port();
        assert_eq!(reg.decide(peer, Some((99, &[1, 2, 3]))), Some(99));
        let a = offer.decision(-1).expect("yes");
        assert_eq!((a.token, a.host()), (99, &[1u8, 2, 3][..]));
        // The answer came unasked: no query crossed it (a probe's round
        // trip through the agent first, so that one sent would be counted).
        let flush_port = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port")
            .port();
        let dst = SocketAddr::from(([127, 0, 0, 1], reg.port));
        assert!(Offer::make(dst, flush_port).is_some());
        assert_eq!(reg.queries.load(Ordering::Relaxed), 0, "no query sent");
        let other = SocketAddr::from(([127, 0, 0, 1], cport.wrapping_add(1)));
        assert!(!reg.committed(other));
        assert_eq!(reg.decide(other, Some((5, &[1]))), None);
        reg.stop();
    }

    /// A connector sends its commit once and connects without waiting to
    /// hear of it (it waited a round trip, and sent it again every 10 ms
    /// until answered): against an agent of the test's that answers the
    /// probe and nothing else, the offer is made and one commit came.
    #[test]
    fn a_connector_commits_once_without_waiting_for_an_answer() {
        let agent = UdpSocket::bind("127.0.0.1:0").expect("agent socket");
        let dst = agent.local_addr().expect("agent address");
        let counter = std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            let (n, from) = agent.recv_from(&mut buf).expect("the probe");
            let probe = Msg::decode(&buf[..n]).expect("a message");
            assert_eq!(probe.kind, PROBE);
            let here = Msg::new(HERE, probe.lport, probe.cport).encode();
            agent.send_to(&here, from).expect("HERE");
            // Commits counted over longer than the connector's resend
            // interval times ten.
            agent
                .set_read_timeout(Some(Duration::from_millis(150)))
                .expect("timeout");
            let mut commits = 0;
            while let Ok(n) = agent.recv(&mut buf) {
                if Msg::decode(&buf[..n]).is_some_and(|m| m.kind == COMMIT) {
                    commits += 1;
                }
            }
            commits
        });
        let cport = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port")
            .port();
        let offer = Offer::make(dst, cport);
        assert!(offer.is_some(), "committed on the agent's HERE");
        assert_eq!(
            counter.join().expect("counter"),
            1,
            "one commit, unanswered"
        );
    }

    /// An acceptor that finds the connector's note only probed waits for
    /// the commit the connector sent before it connected (the agent may
    /// not have read it yet), and says no when none comes.
    #[test]
    fn an_acceptor_waits_for_a_commit_on_its_way() {
        let reg = Registry::start(SocketAddr::from(([127, 0, 0, 1], 0)), 16).expect("registry");
        let dst = SocketAddr::from(([127, 0, 0, 1], reg.port));
        let probed = |nonce: u64| {
            let udp = UdpSocket::bind("127.0.0.1:0").expect("connector socket");
            udp.connect(dst).expect("connect");
            let offer = Offer {
                cport: udp.local_addr().expect("address").port(),
                udp,
                lport: dst.port(),
                nonce,
            };
            let here = exchange(
                &offer.udp,
                &offer.ask(PROBE),
                &[HERE],
                Duration::from_secs(5),
            );
            assert!(matches!(here, Ok(Some(_))), "the agent noted the probe");
            let peer = SocketAddr::from(([127, 0, 0, 1], offer.cport));
            (offer, peer)
        };
        let (offer, peer) = probed(11);
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            offer.udp.send(&offer.ask(COMMIT).encode()).expect("COMMIT");
            offer
        });
        assert!(reg.committed(peer), "the commit came within the wait");
        drop(late.join());
        let (_never, peer) = probed(12);
        assert!(!reg.committed(peer), "no commit: no");
        reg.stop();
    }

    #[test]
    fn a_closed_port_says_no_at_once() {
        let port = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port")
            .port();
        let start = Instant::now();
        let dst = SocketAddr::from(([127, 0, 0, 1], port));
        assert!(Offer::make(dst, 0).is_none());
        assert!(
            start.elapsed() < Duration::from_millis(100),
            "ICMP refused is fast"
        );
        assert!(known_plain(dst), "remembered");
    }
}
