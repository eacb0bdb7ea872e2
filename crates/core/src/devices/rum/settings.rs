//! The settings every network device's RUM channel reads from the
//! environment (`OPENVIA_UDP_*` and the cluster key; docs/settings.md),
//! and the protocol configuration of one VI built from them. The UDP and
//! Ethernet devices differ only in how they size a segment (their framing
//! overhead), which they pass in.

use std::time::Duration;

use openvia_proto::{FlowMode, Reliability, SegmentPolicy};

use super::fault;
use crate::error::{Result, ViaError};

/// Default well-known port of the UDP connection agent.
pub const DEFAULT_AGENT_PORT: u16 = 7250;
/// Keepalive interval of an idle VI. Its datagrams are what a dead peer
/// process's host answers with ICMP port unreachable, so this bounds how
/// long the death of a peer that is not being sent to goes unnoticed.
pub const DEFAULT_KEEPALIVE_MS: u64 = 50;
/// Largest transfer one descriptor may carry on a network device.
pub const MAX_TRANSFER: u64 = 16 << 20;

/// The default receive window in bytes. Counted in segments, a fixed
/// window would be six times smaller in bytes at MTU 1500 than at 9000,
/// and 1.5 MB is less than two 1 MiB messages in flight.
pub const DEFAULT_WINDOW_BYTES: usize = 8 << 20;
/// Payload bytes a sender keeps in flight at most, by default: a quarter
/// of the window, so that the queue before a slower receiver stays short
/// and the window has room to send on while a hole is repaired
/// (`openvia_proto::Config::max_inflight`).
pub const DEFAULT_INFLIGHT_BYTES: usize = 2 << 20;

/// Settings of the RUM protocol on a network device, from the environment
/// (the `OPENVIA_*` variables of scope `udp` in [`crate::settings::SETTINGS`], docs/settings.md).
#[derive(Clone, Debug)]
pub struct RumSettings {
    pub agent_port: u16,
    pub key: Option<Vec<u8>>,
    pub mtu_override: Option<usize>,
    pub segment: SegmentChoice,
    pub flow_mode: FlowMode,
    pub lossless: bool,
    /// Receive window in segments; 0: [`DEFAULT_WINDOW_BYTES`] worth.
    pub window: u32,
    /// Most payload bytes in flight (`openvia_proto::Config::max_inflight`;
    /// 0: the receiver's window alone).
    pub inflight: usize,
    pub gso: bool,
    pub gro: bool,
    /// Large sends on levels with retransmission are read from the
    /// application's memory until acknowledged, not copied at post
    /// (`channel::EXTERNAL_MIN`).
    pub in_place_sends: bool,
    /// Data that arrives in order is copied straight into the posted
    /// receive or RDMA target (`OPENVIA_UDP_DIRECT=0` buffers it first,
    /// as before).
    pub place_on_arrival: bool,
    pub keepalive: Duration,
    pub dead_peer: Duration,
    /// A receiver descheduled for a time slice (milliseconds on a busy
    /// host) must not look like loss: each spurious timeout resends the
    /// whole window. SACK and fast retransmit handle real loss sooner.
    pub min_rto: Duration,
    /// In-order segments per acknowledgement
    /// (`openvia_proto::Config::ack_every`).
    pub ack_every: u32,
    /// Faults injected into every connection's received datagrams.
    pub faults: Option<fault::FaultConfig>,
}

/// How the segment size is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentChoice {
    Policy(SegmentPolicy),
    Bytes(usize),
}

impl std::fmt::Display for SegmentChoice {
    /// As `OPENVIA_UDP_SEGMENT` spells it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SegmentChoice::Policy(SegmentPolicy::Fixed) => f.write_str("fixed"),
            SegmentChoice::Policy(SegmentPolicy::PageAligned) => f.write_str("page"),
            SegmentChoice::Policy(SegmentPolicy::LargestThatFits) => f.write_str("largest"),
            SegmentChoice::Bytes(n) => write!(f, "{n}"),
        }
    }
}

pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|s| s.trim().to_string())
}

fn env_num(name: &str) -> Option<u64> {
    env(name)?.parse().ok()
}

impl RumSettings {
    pub fn from_env() -> Result<Self> {
        let key = match env("OPENVIA_CLUSTER_KEY") {
            Some(path) if !path.is_empty() => {
                let k = std::fs::read(&path)
                    .map_err(|_| ViaError::InvalidParameter("cannot read OPENVIA_CLUSTER_KEY"))?;
                if k.len() < 16 {
                    return Err(ViaError::InvalidParameter(
                        "cluster key shorter than 16 bytes",
                    ));
                }
                Some(k)
            }
            _ => None,
        };
        let segment = match env("OPENVIA_UDP_SEGMENT").as_deref() {
            None | Some("") | Some("fixed") => SegmentChoice::Policy(SegmentPolicy::Fixed),
            Some("page") | Some("page-aligned") => {
                SegmentChoice::Policy(SegmentPolicy::PageAligned)
            }
            Some("largest") => SegmentChoice::Policy(SegmentPolicy::LargestThatFits),
            Some(n) => SegmentChoice::Bytes(
                n.parse()
                    .map_err(|_| ViaError::InvalidParameter("OPENVIA_UDP_SEGMENT"))?,
            ),
        };
        let flow_mode = match env("OPENVIA_UDP_FLOW").as_deref() {
            Some("homo") => FlowMode::Homo,
            _ => FlowMode::Hetero,
        };
        Ok(Self {
            agent_port: env_num("OPENVIA_AGENT_PORT")
                .map(|p| p as u16)
                .unwrap_or(DEFAULT_AGENT_PORT),
            key,
            mtu_override: env_num("OPENVIA_UDP_MTU").map(|m| m as usize),
            segment,
            flow_mode,
            lossless: env_num("OPENVIA_UDP_LOSSLESS") == Some(1),
            window: env_num("OPENVIA_UDP_WINDOW").map_or(0, |w| w.clamp(16, 1 << 24) as u32),
            inflight: env_num("OPENVIA_UDP_INFLIGHT")
                .map_or(DEFAULT_INFLIGHT_BYTES, |b| b as usize),
            gso: env_num("OPENVIA_UDP_GSO") != Some(0),
            gro: env_num("OPENVIA_UDP_GRO") != Some(0),
            in_place_sends: env_num("OPENVIA_UDP_COPY_SENDS") != Some(1),
            place_on_arrival: env_num("OPENVIA_UDP_DIRECT") != Some(0),
            keepalive: Duration::from_millis(
                env_num("OPENVIA_UDP_KEEPALIVE_MS")
                    .unwrap_or(DEFAULT_KEEPALIVE_MS)
                    .max(1),
            ),
            dead_peer: Duration::from_millis(env_num("OPENVIA_UDP_DEAD_MS").unwrap_or(3000)),
            min_rto: Duration::from_micros(
                env_num("OPENVIA_UDP_MIN_RTO_US")
                    .unwrap_or(10_000)
                    .clamp(100, 1_000_000),
            ),
            ack_every: env_num("OPENVIA_UDP_ACK_EVERY")
                .map_or(openvia_proto::config::DEFAULT_ACK_EVERY, |n| {
                    n.clamp(1, 1 << 16) as u32
                }),
            faults: fault::FaultConfig::parse(&env("OPENVIA_UDP_FAULTS").unwrap_or_default())
                .map_err(ViaError::InvalidParameter)?,
        })
    }
}

impl RumSettings {
    fn window_segments(&self, segment_size: usize) -> u32 {
        match self.window {
            0 => (DEFAULT_WINDOW_BYTES / segment_size.max(1)).clamp(1024, 1 << 24) as u32,
            w => w,
        }
    }

    /// The protocol settings for a VI with these attributes, on a device
    /// whose segments carry `segment_size` payload bytes and whose
    /// transfers are at most `max_transfer` bytes.
    pub fn proto_config(
        &self,
        attrs: &crate::vi::ViAttributes,
        segment_size: usize,
        max_transfer: u64,
    ) -> openvia_proto::Config {
        let reliability =
            Reliability::from_via_bits(attrs.reliability).unwrap_or(Reliability::ReliableDelivery);
        let max_transfer = attrs.max_transfer.clamp(1, max_transfer) as u32;
        let need = openvia_proto::segments_for(max_transfer as usize, segment_size) as u32;
        let keepalive = self.keepalive;
        let dead = self.dead_peer.max(keepalive + Duration::from_millis(1));
        openvia_proto::Config {
            reliability,
            flow_mode: self.flow_mode,
            flow_control_only: self.lossless && reliability.is_reliable(),
            segment_size,
            max_transfer_size: max_transfer,
            recv_window: self.window_segments(segment_size).max(need),
            max_inflight: self.inflight,
            rdma_write: attrs.rdma_write,
            rdma_read: attrs.rdma_read && reliability.is_reliable(),
            authenticated: self.key.is_some(),
            keepalive_interval: keepalive,
            dead_peer_timeout: dead,
            ack_every: self.ack_every,
            ..timers(self.min_rto)
        }
    }
}

/// Protocol defaults with the retransmission timeout's lower bound set
/// (the initial and largest timeouts raised to stay above it).
fn timers(min_rto: Duration) -> openvia_proto::Config {
    let d = openvia_proto::Config::default();
    openvia_proto::Config {
        min_rto,
        initial_rto: d.initial_rto.max(min_rto),
        max_rto: d.max_rto.max(min_rto),
        ..d
    }
}
