//! The Ethernet device (`/dev/via_<ifname>` with `OPENVIA_NET_DEVICE=ether`):
//! VIs between hosts on one Ethernet segment, the RUM protocol of the UDP
//! device carried in raw frames of EtherType 0x88B5 (`openvia_wire::ether`),
//! without IP or UDP, as M-VIA did. See docs/ether.md ("The device").
//!
//! - `mod.rs` (here): the device: open, settings, attributes, name service.
//! - `ids`: 16-bit connection ids, unique per interface on the host.
//! - `channel`: the RUM channel over a [`channel::FrameLink`] (AF_PACKET or
//!   AF_XDP through `crate::sys::frames::FrameIo`).
//! - `agent`: this process's receiver of id 0 on the interface: connect
//!   requests for its servers, MAC resolution.
//! - `connect`: client, server and peer-to-peer connection setup.
//!
//! Host addresses are the interface's IP address (so names resolve as on
//! the UDP device); a peer's MAC comes from the kernel's neighbour table
//! or from the device's own resolution exchange.

pub mod agent;
pub mod channel;
pub mod connect;
pub mod ids;

use std::any::Any;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use openvia_proto::SegmentPolicy;
use openvia_wire::handshake::{Address, ViAttrs};

use crate::device::{Device, DeviceInfo, Drive, LinkInfo, PendingConnection};
use crate::devices::rum::packet_auth;
use crate::devices::rum::settings::{env, RumSettings, SegmentChoice, MAX_TRANSFER};
use crate::error::{Result, ViaError};
use crate::nic::{NicShared, NIC_ADDRESS_LEN};
use crate::sys::frames::{FrameError, Mac};
use crate::vi::{reliability, Vi};

/// Largest transfer one descriptor may carry on the Ethernet device.
pub const ETHER_MAX_TRANSFER: u64 = MAX_TRANSFER;

/// How a connection's frames reach the wire (`OPENVIA_ETHER_PATH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FramePath {
    /// AF_PACKET with a TPACKET_V2 receive ring (CAP_NET_RAW).
    Packet,
    /// AF_XDP (CAP_NET_RAW, CAP_BPF, CAP_NET_ADMIN); one socket per
    /// interface queue, so one connection per interface on the host.
    Xdp,
    /// AF_XDP where it can be had, else AF_PACKET.
    Auto,
}

impl FramePath {
    pub fn from_env() -> Result<Self> {
        match env("OPENVIA_ETHER_PATH").as_deref() {
            None | Some("") | Some("packet") => Ok(FramePath::Packet),
            Some("xdp") => Ok(FramePath::Xdp),
            Some("auto") => Ok(FramePath::Auto),
            Some(_) => Err(ViaError::InvalidParameter(
                "OPENVIA_ETHER_PATH (packet, xdp or auto)",
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            FramePath::Packet => "packet",
            FramePath::Xdp => "xdp",
            FramePath::Auto => "auto",
        }
    }
}

/// The error a missing capability or other refusal of the frame medium
/// maps to (VIP_ERROR_RESOURCE, with the capability named).
pub fn frame_error(e: &FrameError) -> ViaError {
    match e {
        FrameError::Permission("CAP_NET_RAW") => ViaError::Resource(
            "the Ethernet device needs CAP_NET_RAW (raw frames); run with it or set OPENVIA_NET_DEVICE=udp",
        ),
        FrameError::Permission("CAP_BPF") => {
            ViaError::Resource("OPENVIA_ETHER_PATH=xdp needs CAP_BPF (and CAP_NET_ADMIN)")
        }
        FrameError::Permission(_) => {
            ViaError::Resource("OPENVIA_ETHER_PATH=xdp needs CAP_NET_ADMIN (and CAP_BPF)")
        }
        FrameError::NoInterface => ViaError::InvalidParameter("no such interface"),
        FrameError::Unsupported("queue busy") => ViaError::Resource(
            "the interface's AF_XDP queue is taken (one XDP connection per interface)",
        ),
        FrameError::Unsupported(_) => ViaError::Resource("AF_XDP is not available here"),
        FrameError::Io(_) => ViaError::Resource("raw frame socket"),
    }
}

/// What a NIC on the Ethernet device knows about its medium.
#[derive(Clone, Debug)]
pub struct EtherNic {
    pub ifname: String,
    pub ifindex: i32,
    pub mac: Mac,
    /// The interface's IP address: this host's VIA address.
    pub ip: IpAddr,
    /// Largest frame payload the device sends (under AF_XDP at most
    /// `sys::xdp::MAX_MTU`).
    pub mtu: usize,
    pub path: FramePath,
    pub settings: RumSettings,
}

impl EtherNic {
    pub fn open(ifname: &str) -> Result<Self> {
        let settings = RumSettings::from_env()?;
        let path = FramePath::from_env()?;
        let info = crate::sys::packet::interface_info(ifname).map_err(|e| frame_error(&e))?;
        let (ip, _) = crate::sys::net::interface_info(ifname).ok_or(ViaError::InvalidParameter(
            "the interface has no IP address (the Ethernet device's host address)",
        ))?;
        let if_mtu = settings.mtu_override.unwrap_or(info.mtu).min(info.mtu);
        // AF_XDP frames are at most MAX_MTU; above it `auto` keeps to
        // AF_PACKET, which takes the interface's whole MTU.
        let (path, mtu) = match path {
            FramePath::Xdp => (path, if_mtu.min(crate::sys::xdp::MAX_MTU)),
            FramePath::Auto if if_mtu > crate::sys::xdp::MAX_MTU => (FramePath::Packet, if_mtu),
            _ => (path, if_mtu),
        };
        Ok(Self {
            ifname: ifname.to_string(),
            ifindex: info.ifindex,
            mac: info.mac,
            ip,
            mtu,
            path,
            settings,
        })
    }

    /// Payload bytes per segment under the settings: what a frame holds
    /// after the longest compact header (50 bytes) and, under a cluster
    /// key, the trailer. `largest` is the same as `fixed` here: a frame
    /// cannot exceed the MTU.
    pub fn segment_size(&self) -> usize {
        let trailer = packet_auth::overhead(self.settings.key.is_some());
        let fill = self
            .mtu
            .saturating_sub(openvia_wire::ether::MAX_HEAD_LEN + trailer)
            .max(64);
        let policy = match self.settings.segment {
            SegmentChoice::Bytes(n) => return n.clamp(64, fill),
            SegmentChoice::Policy(SegmentPolicy::LargestThatFits) => SegmentPolicy::Fixed,
            SegmentChoice::Policy(p) => p,
        };
        // The policy subtracts RUM's 64 header bytes; a frame's compact
        // header replaces them, so it is handed the MTU those 64 bytes
        // above the frame's own overhead.
        let as_rum =
            self.mtu + openvia_wire::rum::DATA_OVERHEAD - openvia_wire::ether::MAX_HEAD_LEN;
        openvia_proto::segment_size(as_rum, trailer, policy)
            .unwrap_or(fill)
            .clamp(64, fill)
    }

    pub fn proto_config(&self, attrs: &crate::vi::ViAttributes) -> openvia_proto::Config {
        self.settings
            .proto_config(attrs, self.segment_size(), ETHER_MAX_TRANSFER)
    }
}

/// The Ethernet device of one NIC.
pub struct EtherDevice {
    info: DeviceInfo,
    pub medium: EtherNic,
    /// This process's receiver of id 0 on the interface (shared by every
    /// NIC of the process on it).
    pub agent: Arc<agent::Agent>,
}

impl EtherDevice {
    /// Opens on interface `ifname`. Needs CAP_NET_RAW (the agent's packet
    /// socket is opened here, so a process without it is told at once).
    pub fn open(ifname: &str) -> Result<Self> {
        let medium = EtherNic::open(ifname)?;
        let agent = agent::Agent::for_interface(&medium)?;
        let info = DeviceInfo {
            name: format!("/dev/via_{ifname}"),
            short_name: "ether",
            address: crate::sys::net::host_bytes(medium.ip),
            max_transfer: ETHER_MAX_TRANSFER,
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
                interface: Some(ifname.to_string()),
                mtu: medium.mtu,
                segment_policy: format!("{} ({})", medium.settings.segment, medium.path.name()),
                segment_bytes: medium.segment_size(),
            }),
        };
        Ok(Self {
            info,
            medium,
            agent,
        })
    }
}

impl Device for EtherDevice {
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

    /// As on the UDP device: host names and IP literals (the device's
    /// host addresses are its interfaces' IP addresses).
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
