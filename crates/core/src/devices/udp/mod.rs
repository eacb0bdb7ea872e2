//! The network device (`/dev/via_<ifname>`, `/dev/via_udp`): VIs between
//! hosts over UDP, with the RUM protocol core (`openvia_proto`) doing
//! sequencing, flow control and loss recovery. See docs/udp.md.
//!
//! - `mod.rs` (here): the device: open, attributes, settings, name service.
//! - `socket`: UDP sockets, batched receive with GRO, interface address and MTU.
//! - `gso`: the datagrams of one flush, sent scatter-gather with GSO.
//! - `channel`: the RUM channel over the VI's socket (its [`DatagramLink`](crate::devices::rum::link::DatagramLink)).
//! - `agent`: the per-host rendezvous on the well-known port.
//! - `connect`: client, server and peer-to-peer connection setup.
//!
//! The channel of a connected VI, packet authentication, fault injection
//! and the drop counters are the RUM channel's, shared by every network
//! device: [`crate::devices::rum`].

pub mod agent;
pub mod channel;
pub mod connect;
pub mod gso;
pub mod socket;

use std::any::Any;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use openvia_proto::{FlowMode, Reliability, SegmentPolicy};

pub use crate::devices::rum::stats::{stats, StatsSnapshot};
use crate::devices::rum::{fault, packet_auth};
use openvia_wire::handshake::{Address, ViAttrs};

use crate::device::{Device, DeviceInfo, Drive, LinkInfo, PendingConnection};
use crate::error::{Result, ViaError};
use crate::nic::{NicShared, NIC_ADDRESS_LEN};
use crate::vi::{reliability, Vi};

/// Default well-known port of the connection agent.
pub const DEFAULT_AGENT_PORT: u16 = 7250;
/// Keepalive interval of an idle VI. Its datagrams are what a dead peer
/// process's host answers with ICMP port unreachable, so this bounds how
/// long the death of a peer that is not being sent to goes unnoticed.
pub const DEFAULT_KEEPALIVE_MS: u64 = 50;
/// Largest transfer one descriptor may carry on the network device.
pub const UDP_MAX_TRANSFER: u64 = 16 << 20;

/// The default receive window in bytes. Counted in segments, a fixed
/// window would be six times smaller in bytes at MTU 1500 than at 9000,
/// and 1.5 MB is less than two 1 MiB messages in flight.
pub const DEFAULT_WINDOW_BYTES: usize = 8 << 20;
/// Payload bytes a sender keeps in flight at most, by default: a quarter
/// of the window, so that the queue before a slower receiver stays short
/// and the window has room to send on while a hole is repaired
/// (`openvia_proto::Config::max_inflight`).
pub const DEFAULT_INFLIGHT_BYTES: usize = 2 << 20;

/// Settings of the network device, from the environment (the `OPENVIA_*`
/// variables of scope `udp` in [`crate::settings::SETTINGS`], docs/settings.md).
#[derive(Clone, Debug)]
pub struct UdpSettings {
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
    pub keepalive: Duration,
    pub dead_peer: Duration,
    /// A receiver descheduled for a time slice (milliseconds on a busy
    /// host) must not look like loss: each spurious timeout resends the
    /// whole window. SACK and fast retransmit handle real loss sooner.
    pub min_rto: Duration,
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

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|s| s.trim().to_string())
}

fn env_num(name: &str) -> Option<u64> {
    env(name)?.parse().ok()
}

impl UdpSettings {
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
            faults: fault::FaultConfig::parse(&env("OPENVIA_UDP_FAULTS").unwrap_or_default())
                .map_err(ViaError::InvalidParameter)?,
        })
    }
}

/// What a NIC on the network device knows about its medium.
#[derive(Clone, Debug)]
pub struct UdpNic {
    pub ip: IpAddr,
    pub ifname: Option<String>,
    pub mtu: usize,
    pub settings: UdpSettings,
}

impl UdpNic {
    /// Opens on interface `ifname`, or (None) on `OPENVIA_UDP_BIND` / the
    /// first non-loopback address.
    pub fn open(ifname: Option<&str>) -> Result<Self> {
        let settings = UdpSettings::from_env()?;
        let (ip, ifname) = match ifname {
            Some(name) => {
                let (ip, _) = socket::interface_info(name).ok_or(ViaError::InvalidParameter(
                    "no such interface (or no address)",
                ))?;
                (ip, Some(name.to_string()))
            }
            None => match env("OPENVIA_UDP_BIND") {
                Some(a) if !a.is_empty() => {
                    let ip: IpAddr = a
                        .parse()
                        .map_err(|_| ViaError::InvalidParameter("OPENVIA_UDP_BIND"))?;
                    (ip, socket::interface_of(ip))
                }
                _ => match socket::first_non_loopback() {
                    Some((n, ip)) => (ip, Some(n)),
                    None => (IpAddr::from([127, 0, 0, 1]), Some("lo".to_string())),
                },
            },
        };
        let mtu = settings.mtu_override.unwrap_or_else(|| {
            ifname
                .as_deref()
                .and_then(socket::interface_mtu)
                .unwrap_or(1500)
        });
        Ok(Self {
            ip,
            ifname,
            mtu,
            settings,
        })
    }

    /// Bytes of IP and UDP header per datagram.
    pub fn ip_udp_overhead(&self) -> usize {
        if self.ip.is_ipv4() {
            openvia_proto::segment::IPV4_UDP_OVERHEAD
        } else {
            openvia_proto::segment::IPV6_UDP_OVERHEAD
        }
    }

    /// Bytes around each RUM packet: IP and UDP headers, and the
    /// authentication trailer under a cluster key.
    pub fn datagram_overhead(&self) -> usize {
        self.ip_udp_overhead() + packet_auth::overhead(self.settings.key.is_some())
    }

    /// Payload bytes per segment under the settings.
    pub fn segment_size(&self) -> usize {
        let trailer = packet_auth::overhead(self.settings.key.is_some());
        // The largest UDP payload holds the packet and its trailer.
        let largest = openvia_wire::rum::MAX_DATAGRAM - openvia_wire::rum::DATA_OVERHEAD - trailer;
        match self.settings.segment {
            SegmentChoice::Bytes(n) => n.clamp(64, largest),
            SegmentChoice::Policy(p) => {
                openvia_proto::segment_size(self.mtu, self.datagram_overhead(), p)
                    .unwrap_or(512)
                    .clamp(64, largest)
            }
        }
    }

    fn window_segments(&self, segment_size: usize) -> u32 {
        match self.settings.window {
            0 => (DEFAULT_WINDOW_BYTES / segment_size.max(1)).clamp(1024, 1 << 24) as u32,
            w => w,
        }
    }

    /// The protocol settings for a VI with these attributes.
    pub fn proto_config(&self, attrs: &crate::vi::ViAttributes) -> openvia_proto::Config {
        let reliability =
            Reliability::from_via_bits(attrs.reliability).unwrap_or(Reliability::ReliableDelivery);
        let segment_size = self.segment_size();
        let max_transfer = attrs.max_transfer.clamp(1, UDP_MAX_TRANSFER) as u32;
        let need = openvia_proto::segments_for(max_transfer as usize, segment_size) as u32;
        let keepalive = self.settings.keepalive;
        let dead = self
            .settings
            .dead_peer
            .max(keepalive + Duration::from_millis(1));
        openvia_proto::Config {
            reliability,
            flow_mode: self.settings.flow_mode,
            flow_control_only: self.settings.lossless && reliability.is_reliable(),
            segment_size,
            max_transfer_size: max_transfer,
            recv_window: self.window_segments(segment_size).max(need),
            max_inflight: self.settings.inflight,
            rdma_write: attrs.rdma_write,
            rdma_read: attrs.rdma_read && reliability.is_reliable(),
            authenticated: self.settings.key.is_some(),
            keepalive_interval: keepalive,
            dead_peer_timeout: dead,
            ..Self::timers(self.settings.min_rto)
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
}

/// The UDP device of one NIC: its medium and what it reports.
pub struct UdpDevice {
    info: DeviceInfo,
    pub medium: UdpNic,
}

impl UdpDevice {
    /// Opens on interface `ifname` (`/dev/via_<ifname>`), or (None) the
    /// generic `/dev/via_udp`, bound per `OPENVIA_UDP_BIND`.
    pub fn open(ifname: Option<&str>) -> Result<Self> {
        let medium = UdpNic::open(ifname)?;
        let name = match &medium.ifname {
            Some(i) if ifname.is_some() => format!("/dev/via_{i}"),
            _ => "/dev/via_udp".to_string(),
        };
        let info = DeviceInfo {
            name,
            short_name: "udp",
            address: socket::host_bytes(medium.ip),
            max_transfer: UDP_MAX_TRANSFER,
            native_mtu: medium.mtu as u64,
            reliability: reliability::UNRELIABLE
                | reliability::RELIABLE_DELIVERY
                | reliability::RELIABLE_RECEPTION,
            rdma_read: reliability::RELIABLE_DELIVERY | reliability::RELIABLE_RECEPTION,
            drive: Drive {
                peer_doorbell: false,
                costly_poll: true,
                timers: true,
            },
            link: Some(LinkInfo {
                interface: medium.ifname.clone(),
                mtu: medium.mtu,
                segment_policy: medium.settings.segment.to_string(),
                segment_bytes: medium.segment_size(),
            }),
        };
        Ok(Self { info, medium })
    }
}

impl Device for UdpDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn connect_wait(
        &self,
        nic: &Arc<NicShared>,
        local: &Address,
        timeout: Option<Duration>,
    ) -> Result<Box<dyn PendingConnection>> {
        connect::connect_wait(nic, local, timeout).map(|r| Box::new(r) as _)
    }

    fn connect_request(
        &self,
        vi: &Arc<Vi>,
        local: &Address,
        remote: &Address,
        timeout: Option<Duration>,
    ) -> Result<ViAttrs> {
        connect::connect_request(vi, local, remote, timeout)
    }

    fn peer_request(
        &self,
        vi: &Arc<Vi>,
        local: &Address,
        remote: &Address,
        timeout: Option<Duration>,
    ) -> Result<()> {
        connect::peer_request(vi, local, remote, timeout)
    }

    /// Any host name or IPv4/IPv6 literal, to 16 bytes (IPv4 mapped into
    /// IPv6, IPv4 preferred when a name has both).
    fn resolve_remote(&self, name: &str) -> Result<[u8; NIC_ADDRESS_LEN]> {
        crate::sys::net::resolve(name)
    }

    fn remote_host_name(&self, addr: &[u8]) -> Result<String> {
        socket::host_ip(addr)
            .map(|ip| ip.to_string())
            .ok_or_else(|| ViaError::NameService("unknown host address".into()))
    }

    fn close(&self, nic: &NicShared) {
        connect::forget_nic(nic);
    }
}
