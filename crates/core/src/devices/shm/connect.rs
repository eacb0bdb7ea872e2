//! Setting up a connected VI pair between two processes on this host.
//!
//! A server waiting on (host, discriminator) listens on the abstract Unix
//! socket `openvia/<uid>/cs/<hex discriminator>`; a client connects there.
//! Several servers on one host coexist as long as their discriminators
//! differ, and nothing is left behind when a process dies. Both ends check
//! the other's credentials: only the same user may connect.
//!
//! The exchange is Request → Accept (or Reject) → Ready. The server creates
//! the connection region; each side passes its doorbell page and progress
//! eventfd, and probes whether it can reach the other's memory by CMA (the
//! result decides whether large messages take one copy or the bounce path).
//!
//! Peer-to-peer connections rendezvous on `openvia/<uid>/peer/<a>/<b>`
//! (the two discriminators in order): whichever side binds the name first
//! plays the server.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openvia_wire::handshake::{Accept, Address, Message, Mode, Reason, Request, ViAttrs};

use super::channel::{ChannelParts, ShmChannel};
use super::region::{region_len, ConnRegion};
use crate::device::PendingConnection;
use crate::doorbell::{PeerDoorbell, REGION_LEN as NIC_REGION_LEN};
use crate::error::{Result, ViaError};
use crate::nic::NicShared;
use crate::sys::cma::{self, Range};
use crate::sys::seqpacket::{PeerCred, SeqPacket};
use crate::vi::{Vi, ViState};

/// How long the two sides wait for each other inside one exchange.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn cs_name(disc: &[u8]) -> Vec<u8> {
    format!("openvia/{}/cs/{}", crate::sys::uid(), hex(disc)).into_bytes()
}

fn peer_name(a: &[u8], b: &[u8]) -> Vec<u8> {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    format!("openvia/{}/peer/{}/{}", crate::sys::uid(), hex(lo), hex(hi)).into_bytes()
}

fn io_err(_: io::Error) -> ViaError {
    ViaError::Resource("local socket")
}

/// Whether we can read the peer's probe word (so CMA between us works).
fn probe(pid: i32, addr: u64, value: u64) -> bool {
    if !crate::config::Config::global().cma {
        return false;
    }
    let mut got = 0u64;
    let local = [Range {
        addr: &mut got as *mut u64 as u64,
        len: 8,
    }];
    let remote = [Range { addr, len: 8 }];
    matches!(cma::read_from(pid, &local, &remote), Ok(8)) && got == value
}

/// The first wait of a connector that found nobody listening yet. Both
/// ends of a connection usually come to it within microseconds of each
/// other (viarun's ends meet at their first use); a fixed 1 ms wait cost
/// each such connection most of a millisecond.
const FIRST_NAP: Duration = Duration::from_micros(20);
/// The longest of those waits (a server that calls ConnectWait late).
const LONGEST_NAP: Duration = Duration::from_millis(1);

/// Sleeps `nap`; the next wait, twice as long up to [`LONGEST_NAP`].
fn next_nap(nap: Duration) -> Duration {
    std::thread::sleep(nap);
    (nap * 2).min(LONGEST_NAP)
}

/// How long a connector retries without sleeping: the Waits' spin
/// (`OPENVIA_SPIN_NS`).
fn spin_limit() -> Duration {
    Duration::from_nanos(crate::config::Config::global().spin_ns)
}

fn deadline_left(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

/// A client's request, taken by `VipConnectWait`, not yet answered.
pub struct ConnRequest {
    sock: SeqPacket,
    cred: PeerCred,
    request: Request,
    bell: Option<(OwnedFd, OwnedFd)>,
    nic: Arc<NicShared>,
}

impl PendingConnection for ConnRequest {
    /// The client's own address (host and discriminator).
    fn remote_address(&self) -> &Address {
        &self.request.local
    }

    /// The client VI's attributes.
    fn remote_attrs(&self) -> ViAttrs {
        self.request.attrs
    }

    /// `VipConnectAccept`: binds the request to `vi`.
    fn accept(mut self: Box<Self>, vi: &Arc<Vi>) -> Result<()> {
        if !Arc::ptr_eq(&vi.nic, &self.nic) {
            return Err(ViaError::InvalidParameter("VI of another NIC"));
        }
        vi.ensure_idle()?;
        let attrs = vi.attributes();
        if attrs.reliability != self.request.attrs.reliability {
            let _ = self
                .sock
                .send(&Message::Reject(Reason::ReliabilityMismatch).emit(), &[]);
            return Err(ViaError::InvalidReliability);
        }
        let (page, event) = self
            .bell
            .take()
            .ok_or(ViaError::InvalidState("request already answered"))?;
        server_finish(
            &self.nic,
            vi,
            self.sock,
            self.cred,
            &self.request,
            page,
            event,
        )
    }

    /// `VipConnectReject`.
    fn reject(self: Box<Self>) -> Result<()> {
        let _ = self
            .sock
            .send(&Message::Reject(Reason::Rejected).emit(), &[]);
        Ok(())
    }
}

/// The server half after the decision to accept.
fn server_finish(
    nic: &Arc<NicShared>,
    vi: &Arc<Vi>,
    sock: SeqPacket,
    cred: PeerCred,
    req: &Request,
    page: OwnedFd,
    event: OwnedFd,
) -> Result<()> {
    let mut peer = PeerDoorbell::map(page, event).map_err(|_| ViaError::Rejected)?;
    let i_reach_client = peer.reaches(cred.pid, req.probe_addr, req.probe_value, || {
        probe(cred.pid, req.probe_addr, req.probe_value)
    });
    let mut region = ConnRegion::create(nic.config.ring_bytes)
        .map_err(|_| ViaError::Resource("shared memory"))?;
    let region_fd = region
        .fd()
        .ok_or(ViaError::Resource("shared memory"))?
        .as_raw_fd();
    region.set_own_key(false, vi.notice_key());
    // SAFETY: the region moves into the channel with the doorbell and is
    // dropped after it (the mapping itself never moves).
    unsafe { peer.set_notice_keys(region.peer_key(false), region.peer_key(true)) };
    let (probe_addr, probe_value) = nic.doorbell.probe();
    let accept = Message::Accept(Accept {
        attrs: vi.attributes().wire(),
        conn_region_len: region.len() as u64,
        ring_bytes: region.ring_bytes() as u32,
        nic_region_len: NIC_REGION_LEN as u32,
        probe_addr,
        probe_value,
        peer_cma: i_reach_client,
    });
    sock.send(
        &accept.emit(),
        &[
            region_fd,
            nic.doorbell.page_fd().as_raw_fd(),
            nic.doorbell.event().fd().as_raw_fd(),
        ],
    )
    .map_err(|_| ViaError::Rejected)?;
    // The client has its own copy now: one descriptor fewer per connection.
    region.close_fd();
    let mut buf = [0u8; 256];
    let mut fds = Vec::new();
    let client_reaches_me = match sock.recv_timeout(&mut buf, &mut fds, Some(STEP_TIMEOUT)) {
        Ok(Some(n)) if n > 0 => match Message::parse(&buf[..n]) {
            Ok(Message::Ready { peer_cma }) => peer_cma,
            _ => return Err(ViaError::Rejected),
        },
        Ok(None) => return Err(ViaError::Timeout),
        _ => return Err(ViaError::Rejected),
    };
    let ch = ShmChannel::new(ChannelParts {
        region,
        is_client: false,
        peer,
        peer_pid: cred.pid,
        cma: client_reaches_me,
        sock,
        remote: req.attrs,
    });
    vi.attach_channel(Box::new(ch), req.attrs)
}

/// How reading a client's request ended.
enum Read {
    Request(Request, OwnedFd, OwnedFd, PeerCred),
    /// The caller's deadline came first: the client may still send it.
    NotYet,
    /// Not a client we answer (wrong user, bad request, gone, or silent
    /// for `STEP_TIMEOUT` since it was accepted).
    Refused,
}

/// Reads one request from a socket accepted at `since`.
fn read_request(sock: &SeqPacket, deadline: Option<Instant>, since: Instant) -> Read {
    let Ok(cred) = sock.peer_cred() else {
        return Read::Refused;
    };
    if cred.uid != crate::sys::uid() {
        return Read::Refused;
    }
    let mut buf = [0u8; 512];
    let mut fds = Vec::new();
    let step_left = STEP_TIMEOUT.saturating_sub(since.elapsed());
    let wait = deadline_left(deadline).map_or(step_left, |d| d.min(step_left));
    let n = match sock.recv_timeout(&mut buf, &mut fds, Some(wait)) {
        Ok(Some(n)) => n,
        Ok(None) if since.elapsed() < STEP_TIMEOUT => return Read::NotYet,
        _ => return Read::Refused,
    };
    let Ok(Message::Request(req)) = Message::parse(&buf[..n]) else {
        let _ = sock.send(&Message::Reject(Reason::BadRequest).emit(), &[]);
        return Read::Refused;
    };
    if fds.len() != 2 || req.nic_region_len as usize != NIC_REGION_LEN {
        return Read::Refused;
    }
    match (fds.pop(), fds.pop()) {
        (Some(event), Some(page)) => Read::Request(req, page, event, cred),
        _ => Read::Refused,
    }
}

/// A discriminator's listening socket, and a client it accepted whose
/// request had not come when a timed `VipConnectWait` ran out. That client
/// did nothing wrong (it sends its request right after connecting, but may
/// be off its CPU): it waits for the next `VipConnectWait` instead of
/// being reset.
pub(crate) struct Listening {
    sock: SeqPacket,
    early: Mutex<Option<(SeqPacket, Instant)>>,
}

impl Listening {
    fn new(sock: SeqPacket) -> Self {
        Self {
            sock,
            early: Mutex::new(None),
        }
    }

    fn take_early(&self) -> Option<(SeqPacket, Instant)> {
        self.early.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn keep_early(&self, sock: SeqPacket, since: Instant) {
        *self.early.lock().unwrap_or_else(|e| e.into_inner()) = Some((sock, since));
    }
}

/// Stops listening on `local`'s discriminator (its socket closes once no
/// wait holds it).
pub fn connect_wait_end(nic: &Arc<NicShared>, local: &Address) {
    if let Ok(shm) = super::shm_of(nic) {
        shm.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&local.discriminator);
    }
}

/// `VipConnectWait`: waits for a client asking for `local`'s discriminator.
pub fn connect_wait(
    nic: &Arc<NicShared>,
    local: &Address,
    timeout: Option<Duration>,
) -> Result<ConnRequest> {
    nic.check_owner()?;
    if local.host.as_slice() != nic.address.as_slice() {
        return Err(ViaError::InvalidParameter(
            "local address is not this NIC's",
        ));
    }
    let listener = {
        let mut ls = super::shm_of(nic)?
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match ls.get(&local.discriminator) {
            Some(l) => l.clone(),
            None => {
                let sock = SeqPacket::listen(&cs_name(&local.discriminator)).map_err(|_| {
                    ViaError::InvalidState("discriminator in use by another process")
                })?;
                let l = Arc::new(Listening::new(sock));
                ls.insert(local.discriminator.clone(), l.clone());
                l
            }
        }
    };
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let left = deadline_left(deadline);
        if left == Some(Duration::ZERO) {
            return Err(ViaError::Timeout);
        }
        // Wake up now and then to notice a closed NIC.
        let slice = left.map_or(Duration::from_millis(200), |l| {
            l.min(Duration::from_millis(200))
        });
        let (sock, since) = match listener.take_early() {
            Some(early) => early,
            None => match listener.sock.accept(Some(slice)).map_err(io_err)? {
                Some(sock) => (sock, Instant::now()),
                None => {
                    if nic.is_closed() {
                        return Err(ViaError::InvalidState("NIC closed"));
                    }
                    continue;
                }
            },
        };
        let (request, page, event, cred) = match read_request(&sock, deadline, since) {
            Read::Request(r, p, e, c) => (r, p, e, c),
            Read::NotYet => {
                listener.keep_early(sock, since);
                return Err(ViaError::Timeout);
            }
            Read::Refused => continue,
        };
        if request.mode != Mode::ClientServer {
            continue;
        }
        return Ok(ConnRequest {
            sock,
            cred,
            request,
            bell: Some((page, event)),
            nic: nic.clone(),
        });
    }
}

/// Connects `sock` as the client: sends the request, takes the answer.
fn client_exchange(
    vi: &Arc<Vi>,
    sock: SeqPacket,
    req: Request,
    deadline: Option<Instant>,
) -> Result<ViAttrs> {
    let nic = &vi.nic;
    let cred = sock.peer_cred().map_err(io_err)?;
    if cred.uid != crate::sys::uid() {
        return Err(ViaError::Rejected);
    }
    sock.send(
        &Message::Request(req).emit(),
        &[
            nic.doorbell.page_fd().as_raw_fd(),
            nic.doorbell.event().fd().as_raw_fd(),
        ],
    )
    .map_err(|_| ViaError::Rejected)?;
    let mut buf = [0u8; 512];
    let mut fds = Vec::new();
    let n = loop {
        let left = deadline_left(deadline);
        if left == Some(Duration::ZERO) {
            return Err(ViaError::Timeout);
        }
        let slice = left.map_or(Duration::from_millis(200), |l| {
            l.min(Duration::from_millis(200))
        });
        match sock.recv_timeout(&mut buf, &mut fds, Some(slice)) {
            Ok(Some(0)) | Err(_) => return Err(ViaError::Rejected),
            Ok(Some(n)) => break n,
            Ok(None) if nic.is_closed() => return Err(ViaError::InvalidState("NIC closed")),
            Ok(None) => continue,
        }
    };
    let accept = match Message::parse(&buf[..n]) {
        Ok(Message::Accept(a)) => a,
        Ok(Message::Reject(Reason::ReliabilityMismatch)) => {
            return Err(ViaError::InvalidReliability)
        }
        _ => return Err(ViaError::Rejected),
    };
    if fds.len() != 3
        || accept.nic_region_len as usize != NIC_REGION_LEN
        || accept.conn_region_len != region_len(accept.ring_bytes as usize) as u64
    {
        return Err(ViaError::Rejected);
    }
    let event = fds.pop().ok_or(ViaError::Rejected)?;
    let page = fds.pop().ok_or(ViaError::Rejected)?;
    let region_fd = fds.pop().ok_or(ViaError::Rejected)?;
    let region =
        ConnRegion::open(region_fd, accept.ring_bytes as usize).map_err(|_| ViaError::Rejected)?;
    let mut peer = PeerDoorbell::map(page, event).map_err(|_| ViaError::Rejected)?;
    region.set_own_key(true, vi.notice_key());
    // SAFETY: as in `server_finish`.
    unsafe { peer.set_notice_keys(region.peer_key(true), region.peer_key(false)) };
    let i_reach_server = peer.reaches(cred.pid, accept.probe_addr, accept.probe_value, || {
        probe(cred.pid, accept.probe_addr, accept.probe_value)
    });
    sock.send(
        &Message::Ready {
            peer_cma: i_reach_server,
        }
        .emit(),
        &[],
    )
    .map_err(|_| ViaError::Rejected)?;
    let ch = ShmChannel::new(ChannelParts {
        region,
        is_client: true,
        peer,
        peer_pid: cred.pid,
        cma: accept.peer_cma,
        sock,
        remote: accept.attrs,
    });
    vi.attach_channel(Box::new(ch), accept.attrs)?;
    Ok(accept.attrs)
}

fn new_request(vi: &Arc<Vi>, mode: Mode, local: &Address, remote: &Address) -> Request {
    let (probe_addr, probe_value) = vi.nic.doorbell.probe();
    Request {
        mode,
        attrs: vi.attributes().wire(),
        local: local.clone(),
        remote: remote.clone(),
        nic_region_len: NIC_REGION_LEN as u32,
        probe_addr,
        probe_value,
    }
}

/// `VipConnectRequest`: connects `vi` to the server at `remote`.
pub fn connect_request(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
) -> Result<ViAttrs> {
    let nic = vi.nic.clone();
    nic.check_owner()?;
    if remote.host.as_slice() != nic.address.as_slice() {
        return Err(ViaError::NoMatch);
    }
    vi.ensure_idle()?;
    vi.set_state(ViState::ConnectPending);
    let deadline = timeout.map(|t| Instant::now() + t);
    let result = (|| {
        let name = cs_name(&remote.discriminator);
        let mut nap = FIRST_NAP;
        let first_refusal = std::cell::OnceCell::new();
        let sock = loop {
            match SeqPacket::connect(&name) {
                Ok(s) => break s,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ECONNREFUSED) | Some(libc::ENOENT) | Some(libc::EAGAIN)
                    ) =>
                {
                    // Nobody listens yet: the server may not have called
                    // ConnectWait. Try again until the timeout.
                    if deadline_left(deadline) == Some(Duration::ZERO) {
                        return Err(ViaError::Timeout);
                    }
                    if nic.is_closed() {
                        return Err(ViaError::InvalidState("NIC closed"));
                    }
                    // Within the Waits' spin of the first refusal, only
                    // yield before the next try: the server is usually a
                    // few microseconds from listening, and the shortest
                    // sleep costs far more than asked (timer slack, and
                    // a halted virtual CPU's wake-up): a connector that
                    // came 5 µs early paid ~70 µs.
                    let since = *first_refusal.get_or_init(Instant::now);
                    if since.elapsed() < spin_limit() {
                        std::thread::yield_now();
                        continue;
                    }
                    nap = next_nap(nap);
                }
                Err(e) => return Err(io_err(e)),
            }
        };
        client_exchange(
            vi,
            sock,
            new_request(vi, Mode::ClientServer, local, remote),
            deadline,
        )
    })();
    if result.is_err() && vi.state() == ViState::ConnectPending {
        vi.set_state(ViState::Idle);
    }
    result
}

/// `VipConnectPeerRequest`: starts connecting `vi` with the peer at `remote`.
pub fn peer_request(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
) -> Result<()> {
    vi.nic.check_owner()?;
    if remote.host.as_slice() != vi.nic.address.as_slice() {
        return Err(ViaError::NoMatch);
    }
    if local.discriminator == remote.discriminator {
        return Err(ViaError::InvalidParameter(
            "peer discriminators must differ",
        ));
    }
    let (vi2, local, remote) = (vi.clone(), local.clone(), remote.clone());
    let deadline = timeout.map(|t| Instant::now() + t);
    crate::vi::peer::start_peer(vi, move |cancel| {
        peer_rendezvous(&vi2, &local, &remote, deadline, cancel)
    })
}

fn peer_rendezvous(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    deadline: Option<Instant>,
    cancel: &AtomicBool,
) -> Result<ViAttrs> {
    let name = peer_name(&local.discriminator, &remote.discriminator);
    let mut nap = FIRST_NAP;
    loop {
        if cancel.load(Ordering::SeqCst) || vi.nic.is_closed() {
            return Err(ViaError::InvalidState("cancelled"));
        }
        if deadline_left(deadline) == Some(Duration::ZERO) {
            return Err(ViaError::Timeout);
        }
        match SeqPacket::listen(&name) {
            Ok(l) => loop {
                if cancel.load(Ordering::SeqCst) {
                    return Err(ViaError::InvalidState("cancelled"));
                }
                let left = deadline_left(deadline);
                if left == Some(Duration::ZERO) {
                    return Err(ViaError::Timeout);
                }
                let slice = left.map_or(Duration::from_millis(100), |d| {
                    d.min(Duration::from_millis(100))
                });
                let Some(sock) = l.accept(Some(slice)).map_err(io_err)? else {
                    continue;
                };
                // A request not come by the deadline ends the rendezvous
                // (the loop above says Timeout): both sides gave up.
                let Read::Request(req, page, event, cred) =
                    read_request(&sock, deadline, Instant::now())
                else {
                    continue;
                };
                if req.mode != Mode::Peer || req.local.discriminator != remote.discriminator {
                    let _ = sock.send(&Message::Reject(Reason::BadRequest).emit(), &[]);
                    continue;
                }
                if req.attrs.reliability != vi.attributes().reliability {
                    let _ = sock.send(&Message::Reject(Reason::ReliabilityMismatch).emit(), &[]);
                    return Err(ViaError::InvalidReliability);
                }
                server_finish(&vi.nic, vi, sock, cred, &req, page, event)?;
                return Ok(req.attrs);
            },
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => match SeqPacket::connect(&name)
            {
                Ok(sock) => {
                    let req = new_request(vi, Mode::Peer, local, remote);
                    return client_exchange(vi, sock, req, deadline);
                }
                Err(_) => nap = next_nap(nap),
            },
            Err(e) => return Err(io_err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::nic::Nic;
    use crate::vi::ViAttributes;

    fn attrs(nic: &Nic) -> ViAttributes {
        ViAttributes::reliable_for_tests(nic)
    }

    /// A client that connects but sends its request only after the
    /// server's timed wait ran out is answered by the server's next wait
    /// (it used to be accepted, dropped unread, and reset).
    #[test]
    fn a_request_that_misses_a_timed_wait_is_taken_by_the_next() {
        let (client, server) = (Nic::open(None).unwrap(), Nic::open(None).unwrap());
        let cvi = client.create_vi(attrs(&client), None, None).unwrap();
        let svi = server.create_vi(attrs(&server), None, None).unwrap();
        let host = server.query().address.to_vec();
        let disc = format!("early-{}", std::process::id()).into_bytes();
        let saddr = Address {
            host: host.clone(),
            discriminator: disc.clone(),
        };
        let caddr = Address {
            host,
            discriminator: [&disc[..], b"-c"].concat(),
        };
        let timeouts = Arc::new(AtomicUsize::new(0));
        let (shared, saddr2, svi2, t2) = (
            server.shared().clone(),
            saddr.clone(),
            svi.clone(),
            timeouts.clone(),
        );
        let waiter = std::thread::spawn(move || loop {
            match connect_wait(&shared, &saddr2, Some(Duration::from_millis(5))) {
                Ok(req) => break Box::new(req).accept(&svi2),
                Err(ViaError::Timeout) => {
                    t2.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => break Err(e),
            }
        });
        let name = cs_name(&disc);
        let sock = loop {
            match SeqPacket::connect(&name) {
                Ok(s) => break s,
                Err(_) => std::thread::yield_now(),
            }
        };
        // Two timed waits end after the connection: the second at least
        // had it accepted and waited out its deadline for the request.
        let seen = timeouts.load(Ordering::SeqCst);
        while timeouts.load(Ordering::SeqCst) < seen + 2 {
            std::thread::yield_now();
        }
        cvi.set_state(ViState::ConnectPending);
        let req = new_request(&cvi, Mode::ClientServer, &caddr, &saddr);
        let deadline = Some(Instant::now() + STEP_TIMEOUT);
        client_exchange(&cvi, sock, req, deadline).expect("the server answers");
        waiter.join().unwrap().expect("the server accepts");
        assert_eq!(cvi.state(), ViState::Connected);
        assert_eq!(svi.state(), ViState::Connected);
        let _ = (cvi.disconnect(), svi.disconnect());
    }
}
