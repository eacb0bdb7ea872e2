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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openvia_proto::{emit_reject, Connection, REJECT_MISMATCH};
use openvia_wire::ether::ETHERTYPE;
use openvia_wire::handshake::{Address, ViAttrs};
use openvia_wire::rum::{Body, Repr};

use super::channel::{EtherChannel, FrameLink};
use super::{frame_error, ids, EtherDevice, EtherNic, FramePath};
use crate::device::PendingConnection;
use crate::devices::rum::channel::{now, AcceptEcho};
use crate::devices::rum::link::DatagramLink;
use crate::devices::rum::packet_auth::{overhead, sign};
use crate::devices::rum::rendezvous::client_request;
use crate::devices::rum::rendezvous::{MODE_CLIENT_SERVER, MODE_PEER, TAG_LEN};
use crate::devices::rum::rx::{RxBatch, RX_BATCH};
use crate::devices::rum::setup::{self, attrs_of, check_request, Seen};
use crate::devices::rum::stats::STATS;
use crate::error::{Result, ViaError};
use crate::nic::NicShared;
use crate::sys::frames::{FrameError, FrameFilter, FrameIo, Mac};
use crate::sys::packet::{PacketLink, RxPath};
use crate::sys::xdp::XdpLink;
use crate::vi::Vi;

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

/// Frames a connection's receive queue holds: its receive window (the
/// most data segments the peer may have in flight), a quarter more for
/// acknowledgements, probes and resent duplicates, and some. The kernel
/// drops a frame that finds the queue full, so a shorter queue turns a
/// stream's bursts into losses (measured at MTU 1500 with the 4 MiB
/// default ring: 1.5–3.5 % of a stream's frames dropped, the stream at
/// 0.03–0.25 GB/s, stalled on retransmission timeouts).
fn rx_queue_frames(cfg: &openvia_proto::Config) -> usize {
    let window = cfg.recv_window as usize;
    window + window / 4 + 256
}

/// The frame I/O of one connection, per `OPENVIA_ETHER_PATH`, with room
/// for `queue` frames waiting to be read.
fn open_io(m: &EtherNic, id: u16, queue: usize) -> Result<Box<dyn FrameIo>> {
    let filter = FrameFilter {
        ethertype: ETHERTYPE,
        dst_id: Some((openvia_wire::ether::DST_ID_OFFSET, id)),
    };
    let packet = || -> Result<Box<dyn FrameIo>> {
        let l = PacketLink::open_queued(&m.ifname, filter, RxPath::FrameRing, queue)
            .map_err(|e| frame_error(&e))?;
        STATS.ether_packet_links.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(l))
    };
    let xdp = || -> std::result::Result<Box<dyn FrameIo>, FrameError> {
        let l = XdpLink::open(&m.ifname, filter)?;
        STATS.ether_xdp_links.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(l))
    };
    match m.path {
        FramePath::Packet => packet(),
        FramePath::Xdp => xdp().map_err(|e| frame_error(&e)),
        // The queue is taken (another connection or process) or AF_XDP is
        // not allowed here: AF_PACKET serves.
        FramePath::Auto => xdp().or_else(|_| packet()),
    }
}

/// A connection id and the link receiving it, towards `peer`, for a
/// connection of settings `cfg`.
fn open_link(m: &EtherNic, peer: Mac, cfg: &openvia_proto::Config) -> Result<FrameLink> {
    let claim = ids::claim(m.ifindex).map_err(|_| ViaError::Resource("Ethernet connection ids"))?;
    let io = open_io(m, claim.id(), rx_queue_frames(cfg))?;
    Ok(FrameLink::new(io, peer, claim))
}

/// Requests recently accepted (`setup::Seen`), by client MAC.
static SEEN: Seen<Mac> = Seen::new();

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
        let cfg = m.proto_config(&attrs);
        let mut link = open_link(m, self.from, &cfg)?;
        let t = now();
        let mut conn = match Connection::accept(cfg, link.local_id().into(), &h, &[], t) {
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
        SEEN.remember(self.from, h.conn_id);
        let peer = conn.peer_attributes().map(attrs_of).unwrap_or(self.attrs);
        let now_ns = t.as_nanos();
        let echo = AcceptEcho {
            datagram: buf,
            next: now_ns + 20_000_000,
            interval_ns: 20_000_000,
            give_up: now_ns + 30_000_000_000,
        };
        let ch = EtherChannel::new(link, conn, peer, Some(echo), m.settings.in_place_sends, key)
            .with_faults(m.settings.faults)
            .with_direct(m.settings.place_on_arrival);
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

/// Stops listening on `local`'s discriminator.
pub fn connect_wait_end(nic: &Arc<NicShared>, local: &Address) {
    if let (Ok(dev), Ok((tag, _))) = (ether_of(nic), setup::wait_args(nic, local, None)) {
        dev.agent.unlisten(Arc::as_ptr(nic) as usize, tag);
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
        let Some(req) = check_request(key, &dg, tag, mode, |cid| SEEN.contains(&from, cid)) else {
            continue;
        };
        if req.data.client_disc.len() < HOST_LEN {
            continue;
        }
        let (host, disc) = req.data.client_disc.split_at(HOST_LEN);
        let remote = Address {
            host: host.to_vec(),
            discriminator: disc.to_vec(),
        };
        return Ok(EtherConnRequest {
            nic: nic.clone(),
            from,
            remote,
            attrs: req.attrs,
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
    let (tag, deadline) = setup::wait_args(nic, local, timeout)?;
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
    let user = client_request(
        mode,
        &local.discriminator,
        &remote.discriminator,
        &nic.address,
    );
    let attrs = vi.attributes();
    let mut cfg = m.proto_config(&attrs);
    cfg.connect_timeout = setup::connect_timeout(deadline);
    let mut link = open_link(m, peer_mac, &cfg)?;
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
        if let Some(outcome) = setup::client_outcome(&mut conn) {
            let remote_attrs = outcome?;
            let ch = EtherChannel::new(
                link,
                conn,
                remote_attrs,
                None,
                m.settings.in_place_sends,
                key,
            )
            .with_faults(m.settings.faults)
            .with_direct(m.settings.place_on_arrival);
            vi.attach_channel(Box::new(ch), remote_attrs)?;
            return Ok(remote_attrs);
        }
        setup::client_check(&nic, deadline, cancel)?;
        let wait = setup::client_wait(&conn, t);
        if link.wait_readable(wait) {
            let n = link.recv_batch(&mut rx, RX_BATCH).unwrap_or(0);
            for k in (0..n).filter(|&k| !rx.truncated[k]) {
                for dg in rx.datagrams(k) {
                    setup::client_input(&mut conn, key, dg);
                }
            }
        }
        setup::client_timers(&mut conn);
    }
}

/// `VipConnectRequest` on the Ethernet device.
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

/// `VipConnectPeerRequest` on the Ethernet device.
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
