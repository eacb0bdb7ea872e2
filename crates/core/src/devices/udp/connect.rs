//! Connection setup on the network device.
//!
//! Client: a fresh UDP socket for the VI sends the protocol's connect
//! request to the agent port of the server's host and waits for the accept,
//! which comes from the server VI's own socket; that address becomes the
//! peer of the connected socket. Server (`VipConnectWait`): binds the
//! discriminator's mailbox (see `agent`), checks each forwarded request
//! (authenticator, replay window, duplicates) and hands it to the
//! application; accepting creates the VI's socket, connects it to the
//! client and answers from it. Peer-to-peer: the end whose (host,
//! discriminator) is smaller plays the server, the other the client, in a
//! background thread.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use openvia_proto::{emit_reject, Connection, Event, REJECT_MISMATCH};
use openvia_wire::handshake::{Address, ViAttrs};
use openvia_wire::rum::{Body, Repr};

use super::agent::{
    self, ensure_agent, wall_ms, Listener, RequestData, MODE_CLIENT_SERVER, MODE_PEER,
    REPLAY_WINDOW_MS,
};
use super::channel::UdpChannel;
use super::socket::{host_bytes, host_ip, UdpSock};
use super::UdpNic;
use crate::device::PendingConnection;
use crate::devices::rum::channel::{now, AcceptEcho};
use crate::devices::rum::packet_auth::{sign, verify};
use crate::devices::rum::stats::STATS;
use crate::error::{Result, ViaError};
use crate::nic::NicShared;
use crate::vi::{Vi, ViState};

/// Reject reason of `VipConnectReject`.
const REJECT_REFUSED: u32 = 2;

fn udp_of(nic: &NicShared) -> Result<&UdpNic> {
    nic.device()
        .as_any()
        .downcast_ref::<super::UdpDevice>()
        .map(|d| &d.medium)
        .ok_or(ViaError::InvalidState("not a network NIC"))
}

fn vi_socket(u: &UdpNic) -> Result<UdpSock> {
    let mut s = UdpSock::bind(SocketAddr::new(u.ip, 0), false)
        .map_err(|_| ViaError::Resource("UDP socket"))?;
    // A segment set larger than the MTU allows travels as IP fragments,
    // which GSO refuses (the kernel fails every such send): send those one
    // by one.
    let fits_mtu =
        u.segment_size() + openvia_wire::rum::DATA_OVERHEAD + u.datagram_overhead() <= u.mtu;
    s.enable_offloads(u.settings.gso && fits_mtu, u.settings.gro);
    Ok(s)
}

fn attrs_of(peer: &openvia_proto::PeerAttributes) -> ViAttrs {
    ViAttrs {
        reliability: peer.reliability.via_bits(),
        max_transfer: peer.max_transfer_size as u64,
        rdma_write: peer.rdma_write,
        rdma_read: peer.rdma_read,
    }
}

/// Requests recently accepted, so that a client's repeated request (its
/// accept crossed the repeat) is not taken for a new one.
fn seen() -> &'static Mutex<VecDeque<(SocketAddr, u64)>> {
    static S: OnceLock<Mutex<VecDeque<(SocketAddr, u64)>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(VecDeque::new()))
}

fn remember(from: SocketAddr, cid: u64) {
    let mut s = seen().lock().unwrap_or_else(|e| e.into_inner());
    s.push_back((from, cid));
    if s.len() > 4096 {
        s.pop_front();
    }
}

fn already_seen(from: SocketAddr, cid: u64) -> bool {
    seen()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&(from, cid))
}

/// A client's request, taken by `VipConnectWait`, not yet answered.
pub struct UdpConnRequest {
    nic: Arc<NicShared>,
    from: SocketAddr,
    datagram: Vec<u8>,
    remote: Address,
    attrs: ViAttrs,
}

impl UdpConnRequest {
    pub fn remote_address(&self) -> &Address {
        &self.remote
    }

    pub fn remote_attrs(&self) -> ViAttrs {
        self.attrs
    }

    fn send_reject(&self, reason: u32) {
        let Ok(u) = udp_of(&self.nic) else { return };
        let Ok(Repr {
            body: Body::ConnectRequest(h),
            ..
        }) = Repr::parse(&self.datagram)
        else {
            return;
        };
        let mut buf = [0u8; 512];
        if let Ok(n) = emit_reject(&h, reason, u.settings.key.is_some(), &mut buf) {
            sign(u.settings.key.as_deref(), &mut buf[..n]);
            if let Ok(s) = vi_socket(u) {
                let _ = s.send_to(&buf[..n], self.from);
            }
        }
    }

    /// `VipConnectAccept`.
    pub fn accept(self, vi: &Arc<Vi>) -> Result<()> {
        if !Arc::ptr_eq(&vi.nic, &self.nic) {
            return Err(ViaError::InvalidParameter("VI of another NIC"));
        }
        vi.ensure_idle()?;
        let attrs = vi.attributes();
        if attrs.reliability != self.attrs.reliability {
            self.send_reject(REJECT_MISMATCH);
            return Err(ViaError::InvalidReliability);
        }
        let u = udp_of(&self.nic)?;
        let Ok(Repr {
            body: Body::ConnectRequest(h),
            ..
        }) = Repr::parse(&self.datagram)
        else {
            return Err(ViaError::Rejected);
        };
        let t = now();
        let mut conn = match Connection::accept(u.proto_config(&attrs), random_cid(), &h, &[], t) {
            Ok(c) => c,
            Err(_) => {
                self.send_reject(REJECT_MISMATCH);
                return Err(ViaError::Rejected);
            }
        };
        let sock = vi_socket(u)?;
        sock.connect(self.from)
            .map_err(|_| ViaError::Resource("UDP connect"))?;
        let mut buf = vec![0u8; conn.max_datagram_len().max(2048)];
        let n = conn.poll_transmit(t, &mut buf).ok_or(ViaError::Rejected)?;
        buf.truncate(n);
        sign(u.settings.key.as_deref(), &mut buf);
        let _ = sock.send(&buf);
        remember(self.from, h.conn_id);
        let peer = conn.peer_attributes().map(attrs_of).unwrap_or(self.attrs);
        let now_ns = t.as_nanos();
        let echo = AcceptEcho {
            datagram: buf,
            next: now_ns + 20_000_000,
            interval_ns: 20_000_000,
            give_up: now_ns + 30_000_000_000,
        };
        let ch = UdpChannel::new(
            sock,
            conn,
            peer,
            Some(echo),
            u.settings.in_place_sends,
            u.settings.key.as_deref(),
        )
        .with_faults(u.settings.faults);
        vi.attach_channel(Box::new(ch), peer)
    }

    /// `VipConnectReject`.
    pub fn reject(self) -> Result<()> {
        self.send_reject(REJECT_REFUSED);
        Ok(())
    }
}

impl PendingConnection for UdpConnRequest {
    fn remote_address(&self) -> &Address {
        UdpConnRequest::remote_address(self)
    }

    fn remote_attrs(&self) -> ViAttrs {
        UdpConnRequest::remote_attrs(self)
    }

    fn accept(self: Box<Self>, vi: &Arc<Vi>) -> Result<()> {
        UdpConnRequest::accept(*self, vi)
    }

    fn reject(self: Box<Self>) -> Result<()> {
        UdpConnRequest::reject(*self)
    }
}

fn random_cid() -> u64 {
    loop {
        let c = crate::sys::random_u64();
        if c != 0 {
            return c;
        }
    }
}

/// Mailboxes by (NIC, tag).
type ListenerMap = HashMap<(usize, [u8; agent::TAG_LEN]), Arc<Listener>>;

fn listeners() -> &'static Mutex<ListenerMap> {
    static L: OnceLock<Mutex<ListenerMap>> = OnceLock::new();
    L.get_or_init(|| Mutex::new(HashMap::new()))
}

fn listener_for(nic: &Arc<NicShared>, tag: [u8; agent::TAG_LEN]) -> Result<Arc<Listener>> {
    let u = udp_of(nic)?;
    let key = (Arc::as_ptr(nic) as usize, tag);
    let mut ls = listeners().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(l) = ls.get(&key) {
        return Ok(l.clone());
    }
    let l = Arc::new(
        Listener::bind(u.settings.agent_port, &tag)
            .map_err(|_| ViaError::InvalidState("discriminator in use by another process"))?,
    );
    ls.insert(key, l.clone());
    Ok(l)
}

/// Forgets the listeners of a closing NIC.
pub fn forget_nic(nic: &NicShared) {
    let p = nic as *const NicShared as usize;
    listeners()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|k, _| k.0 != p);
}

/// Waits for a valid request on `tag`.
fn wait_request(
    nic: &Arc<NicShared>,
    tag: [u8; agent::TAG_LEN],
    mode: u8,
    deadline: Option<Instant>,
    cancel: &dyn Fn() -> bool,
) -> Result<UdpConnRequest> {
    let u = udp_of(nic)?;
    ensure_agent(u.settings.agent_port).map_err(|_| ViaError::Resource("agent port"))?;
    let listener = listener_for(nic, tag)?;
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Err(ViaError::Timeout);
        }
        if nic.is_closed() || cancel() {
            return Err(ViaError::InvalidState("NIC closed"));
        }
        let slice = left.map_or(Duration::from_millis(200), |l| {
            l.min(Duration::from_millis(200))
        });
        let Some((from, dg)) = listener
            .recv(slice)
            .map_err(|_| ViaError::Resource("agent mailbox"))?
        else {
            continue;
        };
        if !verify(u.settings.key.as_deref(), &dg) {
            STATS
                .auth_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            continue;
        }
        let Ok(Repr {
            header,
            body: Body::ConnectRequest(h),
        }) = Repr::parse(&dg)
        else {
            continue;
        };
        let Some(data) = RequestData::parse(h.user_data) else {
            continue;
        };
        if header.conn_id != 0 || data.tag != tag || data.mode != mode {
            continue;
        }
        if already_seen(from, h.conn_id) || wall_ms().abs_diff(data.time_ms) > REPLAY_WINDOW_MS {
            STATS
                .replayed_requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            continue;
        }
        let attrs = ViAttrs {
            reliability: h.reliability,
            max_transfer: h.max_transfer_size as u64,
            rdma_write: h.rdma_write,
            rdma_read: h.rdma_read,
        };
        return Ok(UdpConnRequest {
            nic: nic.clone(),
            from,
            remote: Address {
                host: host_bytes(from.ip()).to_vec(),
                discriminator: data.client_disc,
            },
            attrs,
            datagram: dg,
        });
    }
}

/// `VipConnectWait` on the network device.
pub fn connect_wait(
    nic: &Arc<NicShared>,
    local: &Address,
    timeout: Option<Duration>,
) -> Result<UdpConnRequest> {
    nic.check_owner()?;
    if local.host.as_slice() != nic.address.as_slice() {
        return Err(ViaError::InvalidParameter(
            "local address is not this NIC's",
        ));
    }
    let tag = agent::tag(MODE_CLIENT_SERVER, &local.discriminator, &[]);
    let deadline = timeout.map(|t| Instant::now() + t);
    wait_request(nic, tag, MODE_CLIENT_SERVER, deadline, &|| false)
}

/// The client half: drives the protocol's handshake to the agent of
/// `remote`'s host until accepted, rejected or out of time.
fn client_connect(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    mode: u8,
    deadline: Option<Instant>,
    cancel: &dyn Fn() -> bool,
) -> Result<ViAttrs> {
    let nic = vi.nic.clone();
    let u = udp_of(&nic)?;
    let server_ip = host_ip(&remote.host).ok_or(ViaError::NoMatch)?;
    let agent_addr = SocketAddr::new(server_ip, u.settings.agent_port);
    let target = match mode {
        MODE_PEER => agent::tag(MODE_PEER, &remote.discriminator, &local.discriminator),
        _ => agent::tag(MODE_CLIENT_SERVER, &remote.discriminator, &[]),
    };
    let user = RequestData {
        mode,
        tag: target,
        time_ms: wall_ms(),
        client_disc: local.discriminator.clone(),
    }
    .emit();
    let attrs = vi.attributes();
    let mut cfg = u.proto_config(&attrs);
    // Keep asking until the caller's timeout: the server may not wait yet.
    cfg.connect_timeout = deadline
        .map_or(Duration::from_secs(365 * 86400), |d| {
            d.saturating_duration_since(Instant::now())
        })
        .max(Duration::from_millis(1));
    let sock = vi_socket(u)?;
    let t = now();
    let mut conn = Connection::connect(cfg, random_cid(), &user, t)
        .map_err(|_| ViaError::InvalidParameter("connection settings"))?;
    let key = u.settings.key.as_deref();
    let mut buf = vec![0u8; conn.max_datagram_len().max(2048)];
    let mut server: Option<SocketAddr> = None;
    loop {
        let t = now();
        while let Some(n) = conn.poll_transmit(t, &mut buf) {
            sign(key, &mut buf[..n]);
            let _ = sock.send_to(&buf[..n], agent_addr);
        }
        while let Some(ev) = conn.poll_event() {
            match ev {
                Event::Connected(peer) => {
                    let to = server.ok_or(ViaError::Rejected)?;
                    sock.connect(to)
                        .map_err(|_| ViaError::Resource("UDP connect"))?;
                    let remote_attrs = attrs_of(&peer);
                    let ch = UdpChannel::new(
                        sock,
                        conn,
                        remote_attrs,
                        None,
                        u.settings.in_place_sends,
                        key,
                    )
                    .with_faults(u.settings.faults);
                    vi.attach_channel(Box::new(ch), remote_attrs)?;
                    return Ok(remote_attrs);
                }
                Event::Rejected { reason } if reason == REJECT_MISMATCH => {
                    return Err(ViaError::InvalidReliability)
                }
                Event::Rejected { .. } => return Err(ViaError::Rejected),
                Event::ConnectionLost(openvia_proto::LostReason::ConnectTimeout) => {
                    return Err(ViaError::Timeout)
                }
                Event::ConnectionLost(_) | Event::PeerDisconnected { .. } => {
                    return Err(ViaError::Rejected)
                }
                Event::SendCompleted(_) => {}
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(ViaError::Timeout);
        }
        if nic.is_closed() || cancel() {
            return Err(ViaError::InvalidState("cancelled"));
        }
        let wait = conn
            .poll_timeout()
            .map_or(Duration::from_millis(50), |d| d.saturating_since(t))
            .min(Duration::from_millis(50));
        if sock.wait_readable(wait) {
            while let Ok(Some((n, from))) = sock.recv_from(&mut buf) {
                if from.ip() != server_ip && !(from.ip().is_loopback() && server_ip.is_loopback()) {
                    STATS
                        .wrong_conn_id
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    continue;
                }
                let dg = &buf[..n];
                if !verify(key, dg) {
                    STATS
                        .auth_failures
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    continue;
                }
                if let Ok(Repr {
                    body: Body::ConnectAccept(_),
                    ..
                }) = Repr::parse(dg)
                {
                    server = Some(from);
                }
                conn.handle_datagram(now(), dg);
            }
        }
        let t = now();
        if conn.poll_timeout().is_some_and(|d| d <= t) {
            conn.handle_timeout(t);
        }
    }
}

/// `VipConnectRequest` on the network device.
pub fn connect_request(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
) -> Result<ViAttrs> {
    vi.nic.check_owner()?;
    vi.ensure_idle()?;
    vi.set_state(ViState::ConnectPending);
    let deadline = timeout.map(|t| Instant::now() + t);
    let r = client_connect(vi, local, remote, MODE_CLIENT_SERVER, deadline, &|| false);
    if r.is_err() && vi.state() == ViState::ConnectPending {
        vi.set_state(ViState::Idle);
    }
    r
}

/// `VipConnectPeerRequest` on the network device.
pub fn peer_request(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
) -> Result<()> {
    vi.nic.check_owner()?;
    if local.discriminator == remote.discriminator && local.host == remote.host {
        return Err(ViaError::InvalidParameter("peer addresses must differ"));
    }
    let (vi2, local, remote) = (vi.clone(), local.clone(), remote.clone());
    let deadline = timeout.map(|t| Instant::now() + t);
    crate::vi::peer::start_peer(vi, move |cancel| {
        let stop = || cancel.load(std::sync::atomic::Ordering::SeqCst);
        let me = (vi2.nic.address.to_vec(), local.discriminator.clone());
        let them = (remote.host.clone(), remote.discriminator.clone());
        if me < them {
            let tag = agent::tag(MODE_PEER, &local.discriminator, &remote.discriminator);
            wait_request(&vi2.nic, tag, MODE_PEER, deadline, &stop).and_then(|req| {
                let attrs = req.remote_attrs();
                // Our VI is ConnectPending (the rendezvous owns it), which
                // a plain accept refuses: hand it back as Idle first.
                if vi2.state() != ViState::ConnectPending {
                    return Err(ViaError::InvalidState("peer connection cancelled"));
                }
                vi2.set_state(ViState::Idle);
                req.accept(&vi2).map(|_| attrs)
            })
        } else {
            client_connect(&vi2, &local, &remote, MODE_PEER, deadline, &stop)
        }
    })
}
