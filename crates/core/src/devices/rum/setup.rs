//! Connection setup common to the network devices (UDP, Ethernet): the
//! VIPL calls' state handling around a device's own rendezvous, the
//! checks every connect request passes, the client's reading of the
//! handshake's outcome, and the memory of requests already accepted.
//! A device brings only how requests reach its servers and how a VI's
//! link is made.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openvia_proto::{Connection, Event, REJECT_MISMATCH};
use openvia_wire::handshake::{Address, ViAttrs};
use openvia_wire::rum::{Body, Repr};

use super::packet_auth::verify;
use super::rendezvous::{tag, wall_ms, RequestData, MODE_CLIENT_SERVER, REPLAY_WINDOW_MS, TAG_LEN};
use super::stats::STATS;
use crate::device::PendingConnection;
use crate::error::{Result, ViaError};
use crate::nic::NicShared;
use crate::vi::{Vi, ViState};

/// The peer's attributes as the VI layer names them.
pub fn attrs_of(peer: &openvia_proto::PeerAttributes) -> ViAttrs {
    ViAttrs {
        reliability: peer.reliability.via_bits(),
        max_transfer: peer.max_transfer_size as u64,
        rdma_write: peer.rdma_write,
        rdma_read: peer.rdma_read,
    }
}

/// Requests recently accepted, by (client, its connection id), so that a
/// client's repeated request (its accept crossed the repeat) is not taken
/// for a new one. The oldest are forgotten past 4096.
pub struct Seen<K> {
    list: Mutex<VecDeque<(K, u64)>>,
}

impl<K: PartialEq> Default for Seen<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: PartialEq> Seen<K> {
    pub const fn new() -> Self {
        Self {
            list: Mutex::new(VecDeque::new()),
        }
    }

    pub fn remember(&self, from: K, cid: u64) {
        let mut s = self.list.lock().unwrap_or_else(|e| e.into_inner());
        s.push_back((from, cid));
        if s.len() > 4096 {
            s.pop_front();
        }
    }

    pub fn contains(&self, from: &K, cid: u64) -> bool {
        self.list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|(k, c)| k == from && *c == cid)
    }
}

/// A connect request that passed the checks.
pub struct CheckedRequest {
    pub data: RequestData,
    pub attrs: ViAttrs,
    /// The client's connection id.
    pub conn_id: u64,
}

/// Checks a request for a server waiting on `tag` in `mode`: its
/// authenticator under the cluster key, a CONNECT_REQUEST to id 0 with
/// our tag and mode, within the replay window, not one already accepted
/// (`seen(client connection id)`). None (counted) otherwise.
pub fn check_request(
    key: Option<&[u8]>,
    dg: &[u8],
    tag: [u8; TAG_LEN],
    mode: u8,
    seen: impl Fn(u64) -> bool,
) -> Option<CheckedRequest> {
    if !verify(key, dg) {
        STATS.auth_failures.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let Ok(Repr {
        header,
        body: Body::ConnectRequest(h),
    }) = Repr::parse(dg)
    else {
        return None;
    };
    let data = RequestData::parse(h.user_data)?;
    if header.conn_id != 0 || data.tag != tag || data.mode != mode {
        return None;
    }
    if seen(h.conn_id) || wall_ms().abs_diff(data.time_ms) > REPLAY_WINDOW_MS {
        STATS.replayed_requests.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let attrs = ViAttrs {
        reliability: h.reliability,
        max_transfer: h.max_transfer_size as u64,
        rdma_write: h.rdma_write,
        rdma_read: h.rdma_read,
    };
    Some(CheckedRequest {
        data,
        attrs,
        conn_id: h.conn_id,
    })
}

/// `VipConnectWait`'s checks; the tag to wait on and the deadline.
pub fn wait_args(
    nic: &Arc<NicShared>,
    local: &Address,
    timeout: Option<Duration>,
) -> Result<([u8; TAG_LEN], Option<Instant>)> {
    nic.check_owner()?;
    if local.host.as_slice() != nic.address.as_slice() {
        return Err(ViaError::InvalidParameter(
            "local address is not this NIC's",
        ));
    }
    let tag = tag(MODE_CLIENT_SERVER, &local.discriminator, &[]);
    Ok((tag, timeout.map(|t| Instant::now() + t)))
}

/// How long a client keeps asking: until the caller's deadline (the
/// server may not wait yet), or a year.
pub fn connect_timeout(deadline: Option<Instant>) -> Duration {
    deadline
        .map_or(Duration::from_secs(365 * 86400), |d| {
            d.saturating_duration_since(Instant::now())
        })
        .max(Duration::from_millis(1))
}

/// What the handshake came to so far: `Some(Ok(peer))` once connected,
/// `Some(Err)` when rejected or given up, None while it goes on.
pub fn client_outcome(conn: &mut Connection) -> Option<Result<ViAttrs>> {
    while let Some(ev) = conn.poll_event() {
        return Some(match ev {
            Event::Connected(peer) => Ok(attrs_of(&peer)),
            Event::Rejected { reason } if reason == REJECT_MISMATCH => {
                Err(ViaError::InvalidReliability)
            }
            Event::Rejected { .. } => Err(ViaError::Rejected),
            Event::ConnectionLost(openvia_proto::LostReason::ConnectTimeout) => {
                Err(ViaError::Timeout)
            }
            Event::ConnectionLost(_) | Event::PeerDisconnected { .. } => Err(ViaError::Rejected),
            Event::SendCompleted(_) => continue,
        });
    }
    None
}

/// `VipConnectRequest`: `client(deadline)` runs the device's client with
/// the VI ConnectPending, back to Idle if it fails.
pub fn connect_request(
    vi: &Arc<Vi>,
    timeout: Option<Duration>,
    client: impl FnOnce(Option<Instant>) -> Result<ViAttrs>,
) -> Result<ViAttrs> {
    vi.nic.check_owner()?;
    vi.ensure_idle()?;
    vi.set_state(ViState::ConnectPending);
    let r = client(timeout.map(|t| Instant::now() + t));
    if r.is_err() && vi.state() == ViState::ConnectPending {
        vi.set_state(ViState::Idle);
    }
    r
}

/// `VipConnectPeerRequest`: the end whose (host, discriminator) is
/// smaller waits for the other's request (`wait(nic, tag, deadline,
/// cancelled)`) and accepts it; the other runs the device's client
/// (`client(vi, local, remote, deadline, cancelled)`), in a background
/// thread either way.
pub fn peer_request<W, C>(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
    wait: W,
    client: C,
) -> Result<()>
where
    W: FnOnce(
            &Arc<NicShared>,
            [u8; TAG_LEN],
            Option<Instant>,
            &dyn Fn() -> bool,
        ) -> Result<Box<dyn PendingConnection>>
        + Send
        + 'static,
    C: FnOnce(&Arc<Vi>, &Address, &Address, Option<Instant>, &dyn Fn() -> bool) -> Result<ViAttrs>
        + Send
        + 'static,
{
    use super::rendezvous::MODE_PEER;
    vi.nic.check_owner()?;
    if local.discriminator == remote.discriminator && local.host == remote.host {
        return Err(ViaError::InvalidParameter("peer addresses must differ"));
    }
    let (vi2, local, remote) = (vi.clone(), local.clone(), remote.clone());
    let deadline = timeout.map(|t| Instant::now() + t);
    crate::vi::peer::start_peer(vi, move |cancel| {
        let stop = || cancel.load(Ordering::SeqCst);
        let me = (vi2.nic.address.to_vec(), local.discriminator.clone());
        let them = (remote.host.clone(), remote.discriminator.clone());
        if me < them {
            let tag = tag(MODE_PEER, &local.discriminator, &remote.discriminator);
            wait(&vi2.nic, tag, deadline, &stop).and_then(|req| {
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
            client(&vi2, &local, &remote, deadline, &stop)
        }
    })
}

/// The client's checks between two rounds of its handshake: out of time,
/// or cancelled (the NIC closed, the peer rendezvous called off).
pub fn client_check(
    nic: &NicShared,
    deadline: Option<Instant>,
    cancel: &dyn Fn() -> bool,
) -> Result<()> {
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(ViaError::Timeout);
    }
    if nic.is_closed() || cancel() {
        return Err(ViaError::InvalidState("cancelled"));
    }
    Ok(())
}

/// How long the client may wait for an answer now: until the protocol's
/// next timer, at most 50 ms (to look at the deadline and cancellation).
pub fn client_wait(conn: &Connection, now: openvia_proto::Time) -> Duration {
    conn.poll_timeout()
        .map_or(Duration::from_millis(50), |d| d.saturating_since(now))
        .min(Duration::from_millis(50))
}

/// Hands an answer to the client's handshake, if it verifies under the
/// cluster key (counted otherwise); then runs a due protocol timer.
pub fn client_input(conn: &mut Connection, key: Option<&[u8]>, dg: &[u8]) {
    if !verify(key, dg) {
        STATS.auth_failures.fetch_add(1, Ordering::Relaxed);
        return;
    }
    conn.handle_datagram(super::channel::now(), dg);
}

/// Runs the client's protocol timer if it is due.
pub fn client_timers(conn: &mut Connection) {
    let t = super::channel::now();
    if conn.poll_timeout().is_some_and(|d| d <= t) {
        conn.handle_timeout(t);
    }
}
