//! Connection setup. The client sends CONNECT_REQUEST (header connection id
//! 0, its own random id in the body) and repeats it with backoff until an
//! ACCEPT or REJECT arrives or the connect timeout passes. The server side
//! is created from a parsed request by the caller, which first decides
//! whether to accept (discriminator, authenticator, resources); it answers
//! ACCEPT and re-answers each repeated request, since its ACCEPT may have
//! been lost. Both ends must agree on reliability level and flow mode; the
//! segment size and max transfer size become the smaller of the two.

use std::time::Duration;

use openvia_wire::rum::{Body, EmitError, HandshakeRepr, HeaderRepr, Repr, MAX_USER_DATA};

use crate::config::{Config, ConfigError, Reliability};
use crate::connection::{Connection, Role, State};
use crate::events::{Event, LostReason, PeerAttributes};
use crate::flow::CreditWindow;
use crate::time::Time;

/// Why a connect request cannot be accepted with the local config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcceptError {
    #[error("invalid local config: {0}")]
    Config(#[from] ConfigError),
    #[error("the peer's {0} differs from ours")]
    Mismatch(&'static str),
    #[error("the peer's receive window cannot hold one message")]
    PeerWindowTooSmall,
    #[error("user data longer than {MAX_USER_DATA} bytes")]
    UserDataTooLong,
}

/// Reject reasons the core itself uses (the caller may use others).
pub const REJECT_MISMATCH: u32 = 1;

impl Connection {
    /// Client side: starts connecting; the request leaves at the next
    /// `poll_transmit`. `local_cid` must be random and non-zero;
    /// `user_data` (≤ 64 bytes) travels opaque, e.g. the discriminator.
    pub fn connect(
        config: Config,
        local_cid: u64,
        user_data: &[u8],
        now: Time,
    ) -> Result<Self, AcceptError> {
        Self::checked(&config)?;
        if user_data.len() > MAX_USER_DATA {
            return Err(AcceptError::UserDataTooLong);
        }
        if local_cid == 0 {
            return Err(AcceptError::Mismatch("connection id (zero)"));
        }
        let mut c = Self::new(config, Role::Client, local_cid, now);
        c.user_data = user_data.to_vec();
        c.handshake_due = true;
        c.handshake_deadline = Some(now + c.config.handshake_resend);
        Ok(c)
    }

    /// Server side: accepts a parsed connect request (the caller has
    /// checked its authenticator). The ACCEPT leaves at the next
    /// `poll_transmit`; `Event::Connected` is queued at once.
    pub fn accept(
        config: Config,
        local_cid: u64,
        request: &HandshakeRepr<'_>,
        user_data: &[u8],
        now: Time,
    ) -> Result<Self, AcceptError> {
        Self::checked(&config)?;
        if user_data.len() > MAX_USER_DATA {
            return Err(AcceptError::UserDataTooLong);
        }
        if local_cid == 0 {
            return Err(AcceptError::Mismatch("connection id (zero)"));
        }
        let mut c = Self::new(config, Role::Server, local_cid, now);
        c.user_data = user_data.to_vec();
        c.adopt_peer(request)?;
        c.handshake_due = true;
        c.state = State::Connected;
        c.events
            .push_back(Event::Connected(c.peer.expect("set by adopt_peer")));
        Ok(c)
    }

    /// Checks the peer's attributes against ours and takes the negotiated values.
    fn adopt_peer(&mut self, h: &HandshakeRepr<'_>) -> Result<(), AcceptError> {
        let reliability = Reliability::from_via_bits(h.reliability)
            .ok_or(AcceptError::Mismatch("reliability level"))?;
        if reliability != self.config.reliability {
            return Err(AcceptError::Mismatch("reliability level"));
        }
        if h.flow_mode != self.config.flow_mode {
            return Err(AcceptError::Mismatch("flow mode"));
        }
        if h.flow_control_only != self.config.flow_control_only {
            return Err(AcceptError::Mismatch("flow-control-only mode"));
        }
        if h.segment_size == 0 || h.max_transfer_size == 0 {
            return Err(AcceptError::Mismatch("segment or transfer size"));
        }
        self.segment_size = self.config.segment_size.min(h.segment_size as usize);
        self.max_transfer_size = self.config.max_transfer_size.min(h.max_transfer_size);
        if !self.window_fits(h.recv_window) {
            return Err(AcceptError::PeerWindowTooSmall);
        }
        self.peer_cid = h.conn_id;
        self.peer = Some(PeerAttributes {
            conn_id: h.conn_id,
            reliability,
            max_transfer_size: h.max_transfer_size,
            segment_size: h.segment_size,
            recv_window: h.recv_window,
            rdma_write: h.rdma_write,
            rdma_read: h.rdma_read,
        });
        self.credit = CreditWindow::new(self.config.flow_mode, h.recv_window);
        Ok(())
    }

    pub(crate) fn on_accept(&mut self, now: Time, h: &HandshakeRepr<'_>) {
        if self.role != Role::Client || self.state != State::Connecting {
            // A repeated ACCEPT (our data already flows): harmless.
            self.counters.unexpected_packets += 1;
            return;
        }
        self.last_heard = now;
        if self.adopt_peer(h).is_err() {
            self.peer_cid = h.conn_id;
            self.fail(LostReason::ProtocolViolation);
            return;
        }
        if self.handshake_attempts == 1 {
            self.rtt
                .on_sample(now.saturating_since(self.handshake_started));
        }
        self.state = State::Connected;
        self.handshake_due = false;
        self.handshake_deadline = None;
        self.last_sent = now;
        self.events
            .push_back(Event::Connected(self.peer.expect("set by adopt_peer")));
        self.rearm_probe(now);
    }

    pub(crate) fn on_reject(&mut self, h: &HandshakeRepr<'_>) {
        if self.role != Role::Client || self.state != State::Connecting {
            self.counters.unexpected_packets += 1;
            return;
        }
        self.enter_closed();
        self.events.push_back(Event::Rejected {
            reason: h.reject_reason,
        });
    }

    /// Client: the connect request is due again (backoff) or has timed out.
    pub(crate) fn handshake_timeout(&mut self, now: Time) {
        if now >= self.handshake_started + self.config.connect_timeout {
            self.fail(LostReason::ConnectTimeout);
            return;
        }
        if self.handshake_deadline.is_some_and(|d| now >= d) {
            self.handshake_due = true;
            let backoff = self
                .config
                .handshake_resend
                .saturating_mul(1 << self.handshake_attempts.min(10));
            self.handshake_deadline = Some(now + backoff.min(Duration::from_secs(1)));
        }
    }

    /// Writes the REQUEST (client) or ACCEPT (server).
    pub(crate) fn emit_handshake(&mut self, buf: &mut [u8]) -> Result<usize, EmitError> {
        let body = HandshakeRepr {
            conn_id: self.local_cid,
            reliability: self.config.reliability.via_bits(),
            rdma_write: self.config.rdma_write,
            rdma_read: self.config.rdma_read,
            flow_mode: self.config.flow_mode,
            flow_control_only: self.config.flow_control_only,
            max_transfer_size: self.config.max_transfer_size,
            segment_size: self.config.segment_size as u32,
            recv_window: self.config.recv_window,
            reject_reason: 0,
            user_data: &self.user_data,
            has_authenticator: self.config.authenticated,
        };
        let header = self.header(self.send.next_seq);
        let repr = match self.role {
            Role::Client => {
                self.handshake_attempts += 1;
                Repr {
                    header: HeaderRepr {
                        conn_id: 0,
                        ..header
                    },
                    body: Body::ConnectRequest(body),
                }
            }
            Role::Server => Repr {
                header,
                body: Body::ConnectAccept(body),
            },
        };
        repr.emit(buf)
    }
}

/// Writes a CONNECT_REJECT answering `request`, for a request the caller
/// turns down without creating a connection.
pub fn emit_reject(
    request: &HandshakeRepr<'_>,
    reason: u32,
    authenticated: bool,
    buf: &mut [u8],
) -> Result<usize, EmitError> {
    let body = HandshakeRepr {
        reject_reason: reason,
        user_data: &[],
        has_authenticator: authenticated,
        ..*request
    };
    Repr {
        header: HeaderRepr {
            conn_id: request.conn_id,
            ..HeaderRepr::default()
        },
        body: Body::ConnectReject(body),
    }
    .emit(buf)
}
