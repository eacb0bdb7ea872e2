//! Connection setup on the Ethernet device.
//!
//! Client: finds the server host's MAC (`Agent::resolve`), claims a
//! connection id, opens the VI's frame link for that id towards that MAC
//! and drives the protocol's handshake: the connect request goes to id 0,
//! where every process's agent on the server host sees it and the one
//! whose server waits on the request's tag hands it over. Server
//! (`VipConnectWait`): checks each request (authenticator, replay window,
//! duplicates) and hands it to the application; accepting claims an id,
//! opens the VI's link towards the request's source MAC and answers from
//! it. Peer-to-peer: the end whose (host, discriminator) is smaller plays
//! the server, the other the client, in a background thread (as on the
//! UDP device).
//!
//! The request's user data is the UDP device's (`rum::rendezvous`), with
//! the client's 16-byte host address in front of its discriminator: a
//! frame says only the sender's MAC. So a client discriminator is carried
//! up to 23 bytes here (39 on UDP).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use openvia_proto::{emit_reject, Connection, Event, REJECT_MISMATCH};
use openvia_wire::ether::ETHERTYPE;
use openvia_wire::handshake::{Address, ViAttrs};
use openvia_wire::rum::{Body, Repr};

use super::channel::{EtherChannel, FrameLink};
use super::{frame_error, ids, EtherDevice, EtherNic, FramePath};
use crate::device::PendingConnection;
use crate::devices::rum::channel::{now, AcceptEcho};
use crate::devices::rum::link::DatagramLink;
use crate::devices::rum::packet_auth::{overhead, sign, verify};
use crate::devices::rum::rendezvous::{
    tag, wall_ms, RequestData, MODE_CLIENT_SERVER, MODE_PEER, REPLAY_WINDOW_MS, TAG_LEN,
};
use crate::devices::rum::rx::{RxBatch, RX_BATCH};
use crate::devices::rum::stats::STATS;
use crate::error::{Result, ViaError};
use crate::nic::NicShared;
use crate::sys::frames::{FrameFilter, FrameIo, Mac};
use crate::sys::packet::{PacketLink, RxPath};
use crate::sys::xdp::XdpLink;
use crate::vi::{Vi, ViState};

/// Reject reason of `VipConnectReject`.
const REJECT_REFUSED: u32 = 2;
/// Bytes of the client's host address in front of its discriminator.
const HOST_LEN: usize = 16;

fn ether_of(nic: &NicShared) -> Result<&EtherDevice> {
    nic.device()
        .as_any()
        .downcast_ref::<EtherDevice>()
        .ok_or(ViaError::InvalidState("not an Ethernet NIC"))
}

fn attrs_of(peer: &openvia_proto::PeerAttributes) -> ViAttrs {
    ViAttrs {
        reliability: peer.reliability.via_bits(),
        max_transfer: peer.max_transfer_size as u64,
        rdma_write: peer.rdma_write,
        rdma_read: peer.rdma_read,
    }
}

/// The frame I/O of one connection, per `OPENVIA_ETHER_PATH`.
fn open_io(m: &EtherNic, id: u16) -> Result<Box<dyn FrameIo>> {
    let filter = FrameFilter {
        ethertype: ETHERTYPE,
        dst_id: Some((openvia_wire::ether::DST_ID_OFFSET, id)),
    };
    let packet = || -> Result<Box<dyn FrameIo>> {
        PacketLink::open(&m.ifname, filter, RxPath::FrameRing)
            .map(|l| Box::new(l) as _)
            .map_err(|e| frame_error(&e))
    };
    match m.path {
        FramePath::Packet => packet(),
        FramePath::Xdp => XdpLink::open(&m.ifname, filter)
            .map(|l| Box::new(l) as _)
            .map_err(|e| frame_error(&e)),
        // The queue is taken (another connection or process) or AF_XDP is
        // not allowed here: AF_PACKET serves.
        FramePath::Auto => match XdpLink::open(&m.ifname, filter) {
            Ok(l) => Ok(Box::new(l)),
            Err(_) => packet(),
        },
    }
}

/// A connection id and the link receiving it, towards `peer`.
fn open_link(m: &EtherNic, peer: Mac) -> Result<FrameLink> {
    let claim = ids::claim(m.ifindex).map_err(|_| ViaError::Resource("Ethernet connection ids"))?;
    let io = open_io(m, claim.id())?;
    Ok(FrameLink::new(io, peer, claim))
}

/// Requests recently accepted, so that a client's repeated request (its
/// accept crossed the repeat) is not taken for a new one.
fn seen() -> &'static Mutex<VecDeque<(Mac, u64)>> {
    static S: OnceLock<Mutex<VecDeque<(Mac, u64)>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(VecDeque::new()))
}

fn remember(from: Mac, cid: u64) {
    let mut s = seen().lock().unwrap_or_else(|e| e.into_inner());
    s.push_back((from, cid));
    if s.len() > 4096 {
        s.pop_front();
    }
}

fn already_seen(from: Mac, cid: u64) -> bool {
    seen()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&(from, cid))
}

/// A client's request, taken by `VipConnectWait`, not yet answered.
pub struct EtherConnRequest {
    nic: Arc<NicShared>,
    from: Mac,
    datagram: Vec<u8>,
    remote: Address,
    attrs: ViAttrs,
}

impl EtherConnRequest {
    fn request_header(&self) -> Option<openvia_wire::rum::HandshakeRepr<'_>> {
        match Repr::parse(&self.datagram) {
            Ok(Repr {
                body: Body::ConnectRequest(h),
                ..
            }) => Some(h),
            _ => None,
        }
    }

    fn send_reject(&self, reason: u32) {
        let Ok(dev) = ether_of(&self.nic) else { return };
        let Some(h) = self.request_header() else {
            return;
        };
        let key = dev.medium.settings.key.as_deref();
        let mut buf = [0u8; 512];
        if let Ok(n) = emit_reject(&h, reason, key.is_some(), &mut buf) {
            sign(key, &mut buf[..n]);
            dev.agent.send_rum(self.from, &buf[..n]);
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
        let dev = ether_of(&self.nic)?;
        let m = &dev.medium;
        let Some(h) = self.request_header() else {
            return Err(ViaError::Rejected);
        };
        let mut link = open_link(m, self.from)?;
        let t = now();
        let mut conn =
            match Connection::accept(m.proto_config(&attrs), link.local_id().into(), &h, &[], t) {
                Ok(c) => c,
                Err(_) => {
                    self.send_reject(REJECT_MISMATCH);
                    return Err(ViaError::Rejected);
                }
            };
        let mut buf = vec![0u8; conn.max_datagram_len().max(2048)];
        let n = conn.poll_transmit(t, &mut buf).ok_or(ViaError::Rejected)?;
        buf.truncate(n);
        let key = m.settings.key.as_deref();
        sign(key, &mut buf);
        let _ = link.send(&buf);
        remember(self.from, h.conn_id);
        let peer = conn.peer_attributes().map(attrs_of).unwrap_or(self.attrs);
        let now_ns = t.as_nanos();
        let echo = AcceptEcho {
            datagram: buf,
            next: now_ns + 20_000_000,
            interval_ns: 20_000_000,
            give_up: now_ns + 30_000_000_000,
        };
        let ch = EtherChannel::new(link, conn, peer, Some(echo), m.settings.in_place_sends, key)
            .with_faults(m.settings.faults);
        vi.attach_channel(Box::new(ch), peer)
    }

    /// `VipConnectReject`.
    pub fn reject(self) -> Result<()> {
        self.send_reject(REJECT_REFUSED);
        Ok(())
    }
}

impl PendingConnection for EtherConnRequest {
    fn remote_address(&self) -> &Address {
        &self.remote
    }

    fn remote_attrs(&self) -> ViAttrs {
        self.attrs
    }

    fn accept(self: Box<Self>, vi: &Arc<Vi>) -> Result<()> {
        EtherConnRequest::accept(*self, vi)
    }

    fn reject(self: Box<Self>) -> Result<()> {
        EtherConnRequest::reject(*self)
    }
}

/// Forgets the mailboxes of a closing NIC.
pub fn forget_nic(nic: &NicShared) {
    if let Ok(dev) = ether_of(nic) {
        dev.agent.forget(nic as *const NicShared as usize);
    }
}

/// Waits for a valid request on `tag`.
fn wait_request(
    nic: &Arc<NicShared>,
    tag: [u8; TAG_LEN],
    mode: u8,
    deadline: Option<Instant>,
    cancel: &dyn Fn() -> bool,
) -> Result<EtherConnRequest> {
    let dev = ether_of(nic)?;
    let key = dev.medium.settings.key.as_deref();
    let mailbox = dev.agent.listen(Arc::as_ptr(nic) as usize, tag)?;
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
        let Some((from, dg)) = mailbox.recv(slice) else {
            continue;
        };
        if !verify(key, &dg) {
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
        if header.conn_id != 0
            || data.tag != tag
            || data.mode != mode
            || data.client_disc.len() < HOST_LEN
        {
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
        let (host, disc) = data.client_disc.split_at(HOST_LEN);
        let remote = Address {
            host: host.to_vec(),
            discriminator: disc.to_vec(),
        };
        return Ok(EtherConnRequest {
            nic: nic.clone(),
            from,
            remote,
            attrs,
            datagram: dg,
        });
    }
}

/// `VipConnectWait` on the Ethernet device.
pub fn connect_wait(
    nic: &Arc<NicShared>,
    local: &Address,
    timeout: Option<Duration>,
) -> Result<EtherConnRequest> {
    nic.check_owner()?;
    if local.host.as_slice() != nic.address.as_slice() {
        return Err(ViaError::InvalidParameter(
            "local address is not this NIC's",
        ));
    }
    let tag = tag(MODE_CLIENT_SERVER, &local.discriminator, &[]);
    let deadline = timeout.map(|t| Instant::now() + t);
    wait_request(nic, tag, MODE_CLIENT_SERVER, deadline, &|| false)
}

/// The client half: resolves the server host's MAC, then drives the
/// protocol's handshake to its id 0 until accepted, rejected or out of time.
fn client_connect(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    mode: u8,
    deadline: Option<Instant>,
    cancel: &dyn Fn() -> bool,
) -> Result<ViAttrs> {
    let nic = vi.nic.clone();
    let dev = ether_of(&nic)?;
    let m = &dev.medium;
    let host: [u8; HOST_LEN] = remote
        .host
        .as_slice()
        .try_into()
        .map_err(|_| ViaError::InvalidParameter("remote host address"))?;
    if host == nic.address {
        return Err(ViaError::InvalidParameter(
            "the Ethernet device reaches other hosts only (this host: /dev/via_lo)",
        ));
    }
    let peer_mac = dev.agent.resolve(host, deadline, cancel)?;
    let target = match mode {
        MODE_PEER => tag(MODE_PEER, &remote.discriminator, &local.discriminator),
        _ => tag(MODE_CLIENT_SERVER, &remote.discriminator, &[]),
    };
    let mut carried = nic.address.to_vec();
    carried.extend_from_slice(&local.discriminator);
    let user = RequestData {
        mode,
        tag: target,
        time_ms: wall_ms(),
        client_disc: carried,
    }
    .emit();
    let attrs = vi.attributes();
    let mut cfg = m.proto_config(&attrs);
    // Keep asking until the caller's timeout: the server may not wait yet.
    cfg.connect_timeout = deadline
        .map_or(Duration::from_secs(365 * 86400), |d| {
            d.saturating_duration_since(Instant::now())
        })
        .max(Duration::from_millis(1));
    let mut link = open_link(m, peer_mac)?;
    let t = now();
    let mut conn = Connection::connect(cfg, link.local_id().into(), &user, t)
        .map_err(|_| ViaError::InvalidParameter("connection settings"))?;
    let key = m.settings.key.as_deref();
    let mut buf = vec![0u8; conn.max_datagram_len().max(2048)];
    let longest = conn.max_datagram_len() + overhead(key.is_some());
    let mut rx = RxBatch::new(link.rx_buffer_len(longest));
    loop {
        let t = now();
        while let Some(n) = conn.poll_transmit(t, &mut buf) {
            sign(key, &mut buf[..n]);
            let _ = link.send(&buf[..n]);
        }
        while let Some(ev) = conn.poll_event() {
            match ev {
                Event::Connected(peer) => {
                    let remote_attrs = attrs_of(&peer);
                    let ch = EtherChannel::new(
                        link,
                        conn,
                        remote_attrs,
                        None,
                        m.settings.in_place_sends,
                        key,
                    )
                    .with_faults(m.settings.faults);
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
        if link.wait_readable(wait) {
            let n = link.recv_batch(&mut rx, RX_BATCH).unwrap_or(0);
            for k in (0..n).filter(|&k| !rx.truncated[k]) {
                for dg in rx.datagrams(k) {
                    if !verify(key, dg) {
                        STATS
                            .auth_failures
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        continue;
                    }
                    conn.handle_datagram(now(), dg);
                }
            }
        }
        let t = now();
        if conn.poll_timeout().is_some_and(|d| d <= t) {
            conn.handle_timeout(t);
        }
    }
}

/// `VipConnectRequest` on the Ethernet device.
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

/// `VipConnectPeerRequest` on the Ethernet device.
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
            let tag = tag(MODE_PEER, &local.discriminator, &remote.discriminator);
            wait_request(&vi2.nic, tag, MODE_PEER, deadline, &stop).and_then(|req| {
                let attrs = req.attrs;
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
