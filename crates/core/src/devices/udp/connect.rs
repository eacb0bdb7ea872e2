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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use openvia_proto::{emit_reject, Connection, REJECT_MISMATCH};
use openvia_wire::handshake::{Address, ViAttrs};
use openvia_wire::rum::{Body, Repr};

use super::agent::{self, ensure_agent, Listener, MODE_CLIENT_SERVER, MODE_PEER};
use super::channel::UdpChannel;
use super::socket::{host_bytes, host_ip, UdpSock};
use super::UdpNic;
use crate::device::PendingConnection;
use crate::devices::rum::channel::{now, AcceptEcho};
use crate::devices::rum::packet_auth::{sign, verify};
use crate::devices::rum::rendezvous::client_request;
use crate::devices::rum::setup::{self, attrs_of, check_request, Seen};
use crate::devices::rum::stats::STATS;
use crate::error::{Result, ViaError};
use crate::nic::NicShared;
use crate::vi::Vi;

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

/// Requests recently accepted (`setup::Seen`), by client address.
static SEEN: Seen<SocketAddr> = Seen::new();

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
        SEEN.remember(self.from, h.conn_id);
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
        .with_faults(u.settings.faults)
        .with_direct(u.settings.place_on_arrival);
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
        let Some(req) = check_request(u.settings.key.as_deref(), &dg, tag, mode, |cid| {
            SEEN.contains(&from, cid)
        }) else {
            continue;
        };
        return Ok(UdpConnRequest {
            nic: nic.clone(),
            from,
            remote: Address {
                host: host_bytes(from.ip()).to_vec(),
                discriminator: req.data.client_disc,
            },
            attrs: req.attrs,
            datagram: dg,
        });
    }
}

/// `VipConnectWait` on the network device.
/// Stops listening on `local`'s discriminator (its mailbox goes once no
/// wait holds it).
pub fn connect_wait_end(nic: &Arc<NicShared>, local: &Address) {
    if let Ok((tag, _)) = setup::wait_args(nic, local, None) {
        listeners()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(Arc::as_ptr(nic) as usize, tag));
    }
}

pub fn connect_wait(
    nic: &Arc<NicShared>,
    local: &Address,
    timeout: Option<Duration>,
) -> Result<UdpConnRequest> {
    let (tag, deadline) = setup::wait_args(nic, local, timeout)?;
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
    let user = client_request(mode, &local.discriminator, &remote.discriminator, &[]);
    let attrs = vi.attributes();
    let mut cfg = u.proto_config(&attrs);
    cfg.connect_timeout = setup::connect_timeout(deadline);
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
        if let Some(outcome) = setup::client_outcome(&mut conn) {
            let remote_attrs = outcome?;
            let to = server.ok_or(ViaError::Rejected)?;
            sock.connect(to)
                .map_err(|_| ViaError::Resource("UDP connect"))?;
            let ch = UdpChannel::new(
                sock,
                conn,
                remote_attrs,
                None,
                u.settings.in_place_sends,
                key,
            )
            .with_faults(u.settings.faults)
            .with_direct(u.settings.place_on_arrival);
            vi.attach_channel(Box::new(ch), remote_attrs)?;
            return Ok(remote_attrs);
        }
        setup::client_check(&nic, deadline, cancel)?;
        let wait = setup::client_wait(&conn, t);
        if sock.wait_readable(wait) {
            while let Ok(Some((n, from))) = sock.recv_from(&mut buf) {
                if from.ip() != server_ip && !(from.ip().is_loopback() && server_ip.is_loopback()) {
                    STATS
                        .wrong_conn_id
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    continue;
                }
                let dg = &buf[..n];
                if let Ok(Repr {
                    body: Body::ConnectAccept(_),
                    ..
                }) = Repr::parse(dg)
                {
                    if verify(key, dg) {
                        server = Some(from);
                    }
                }
                setup::client_input(&mut conn, key, dg);
            }
        }
        setup::client_timers(&mut conn);
    }
}

/// `VipConnectRequest` on the network device.
pub fn connect_request(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
) -> Result<ViAttrs> {
    setup::connect_request(vi, timeout, |deadline| {
        client_connect(vi, local, remote, MODE_CLIENT_SERVER, deadline, &|| false)
    })
}

/// `VipConnectPeerRequest` on the network device.
pub fn peer_request(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
) -> Result<()> {
    setup::peer_request(
        vi,
        local,
        remote,
        timeout,
        |nic, tag, deadline, stop| {
            wait_request(nic, tag, MODE_PEER, deadline, stop).map(|r| Box::new(r) as _)
        },
        |vi, local, remote, deadline, stop| {
            client_connect(vi, local, remote, MODE_PEER, deadline, stop)
        },
    )
}
