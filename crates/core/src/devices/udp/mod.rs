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

use crate::devices::rum::packet_auth;
use crate::devices::rum::settings::env;
pub use crate::devices::rum::settings::{
    RumSettings as UdpSettings, SegmentChoice, DEFAULT_AGENT_PORT, DEFAULT_INFLIGHT_BYTES,
    DEFAULT_KEEPALIVE_MS, DEFAULT_WINDOW_BYTES, MAX_TRANSFER,
};
pub use crate::devices::rum::stats::{stats, StatsSnapshot};
use openvia_wire::handshake::{Address, ViAttrs};

use crate::device::{Device, DeviceInfo, Drive, LinkInfo, PendingConnection};
use crate::error::{Result, ViaError};
use crate::nic::{NicShared, NIC_ADDRESS_LEN};
use crate::vi::{reliability, Vi};

/// Largest transfer one descriptor may carry on the network device.
pub const UDP_MAX_TRANSFER: u64 = MAX_TRANSFER;

/// What a NIC on the network device knows about its medium.
#[derive(Clone, Debug)]
pub struct UdpNic {
    pub ip: IpAddr,
    pub ifname: Option<String>,
    pub mtu: usize,
    pub settings: UdpSettings,
    /// Held open while the NIC is: see [`socket::gro_keeper`].
    _gro_keeper: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
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
        let _gro_keeper = settings
            .gro
            .then(socket::gro_keeper)
            .flatten()
            .map(std::sync::Arc::new);
        Ok(Self {
            ip,
            ifname,
            mtu,
            settings,
            _gro_keeper,
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

    /// The protocol settings for a VI with these attributes.
    pub fn proto_config(&self, attrs: &crate::vi::ViAttributes) -> openvia_proto::Config {
        self.settings
            .proto_config(attrs, self.segment_size(), UDP_MAX_TRANSFER)
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

    fn connect_wait_end(&self, nic: &Arc<NicShared>, local: &Address) {
        connect::connect_wait_end(nic, local)
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
        crate::sys::net::host_name(addr)
    }

    fn close(&self, nic: &NicShared) {
        connect::forget_nic(nic);
    }
}
