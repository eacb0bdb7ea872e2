//! The device interface: what the core asks of a device, whatever its
//! medium. The core names no concrete device; it holds an opened device
//! as `Arc<dyn Device>` and a connected VI's channel as `Box<dyn Channel>`.
//!
//! - [`Device`]: an opened device: what it is ([`DeviceInfo`]), how the
//!   core drives it ([`Drive`]), the connection calls, the name service
//!   for hosts that are not this one, and teardown.
//! - [`PendingConnection`]: a client's request taken by `VipConnectWait`.
//! - [`channel`]: the [`Channel`] of a connected VI pair (data, liveness,
//!   timers).
//! - [`registry`]: device names (`/dev/via_lo`, `/dev/via_udp`,
//!   `/dev/via_<ifname>`) to openers; the one place that names devices.
//!
//! What depends on what, bottom up: `sys`, `mem`, `descriptor`, `ranges`,
//! `doorbell`, `wait` → `vi`, `cq` → this interface → `nic` → `connect`
//! (the VIPL calls). The devices (`crate::devices::*`) depend on this
//! interface and the layers below it; this interface never names one,
//! except `registry`. Its connection calls take the NIC and VI they serve
//! (a device reads the NIC's doorbell and configuration, and hands a VI
//! its channel), so those two types appear in its signatures.
//! See docs/devices.md.

pub mod channel;
pub mod registry;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

pub use channel::{Channel, ChannelFailed, Completion, PeerEvent};
use openvia_wire::handshake::{Address, ViAttrs};

use crate::error::{Result, ViaError};
use crate::nic::{NicShared, NIC_ADDRESS_LEN};
use crate::vi::Vi;

/// What a device is, as `VipQueryNic` and tools report it.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// The name the NIC reports (`/dev/via_lo`, `/dev/via_eth0`, ...).
    pub name: String,
    /// The device's short name for tools and statistics (`shm`, `udp`).
    pub short_name: &'static str,
    /// This NIC's host address (16 bytes: IPv6, or IPv4 mapped).
    pub address: [u8; NIC_ADDRESS_LEN],
    /// Largest transfer one descriptor may carry.
    pub max_transfer: u64,
    /// `VipQueryNic`'s native MTU.
    pub native_mtu: u64,
    /// Reliability levels supported (VIA bits), and those with RDMA read.
    pub reliability: u16,
    pub rdma_read: u16,
    /// How the core drives the device's VIs.
    pub drive: Drive,
    /// The link below a network device (None on shared memory).
    pub link: Option<LinkInfo>,
}

/// How the core drives a device's VIs: the few places where the NIC,
/// its CQ polls, waits and progress thread treat media differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drive {
    /// Peers on this host write into our doorbell page: they ring it when
    /// we sleep and push notices naming the VI with work (see
    /// `crate::doorbell`). Without it only our own threads ring, and a CQ
    /// poll looks at every member VI.
    pub peer_doorbell: bool,
    /// Looking at a VI costs a system call: waits poll back to back (no
    /// pause between looks), and the VIs' descriptors, which carry data,
    /// leave the progress thread's epoll set while the program polls.
    pub costly_poll: bool,
    /// Channels have protocol timers (retransmission, keepalive) that the
    /// progress thread must run.
    pub timers: bool,
}

/// The link of a network device, as tools report it.
#[derive(Clone, Debug)]
pub struct LinkInfo {
    /// The interface it sends on, when known.
    pub interface: Option<String>,
    /// The link MTU the device segments for.
    pub mtu: usize,
    /// The segment policy as its setting spells it, and the payload bytes
    /// per segment it gives.
    pub segment_policy: String,
    pub segment_bytes: usize,
}

/// An opened device. One per NIC; the NIC drops it when it closes.
pub trait Device: Send + Sync + 'static {
    /// What it is.
    fn info(&self) -> &DeviceInfo;

    /// The device itself, for its own modules to find their state again
    /// from a NIC (`nic.device().as_any().downcast_ref::<X>()`).
    fn as_any(&self) -> &dyn Any;

    /// `VipConnectWait`: takes the next client request for `local`.
    fn connect_wait(
        &self,
        nic: &Arc<NicShared>,
        local: &Address,
        timeout: Option<Duration>,
    ) -> Result<Box<dyn PendingConnection>>;

    /// Stops listening for `local` (no `connect_wait` on it follows). A
    /// device keeps what it listens with between waits, so that no client
    /// is refused between two; a program that waits on a fresh
    /// discriminator per connection (viarun) would otherwise keep one
    /// listener per connection until its NIC closes.
    fn connect_wait_end(&self, _nic: &Arc<NicShared>, _local: &Address) {}

    /// `VipConnectRequest`: connects `vi` to the server at `remote`;
    /// returns the server VI's attributes.
    fn connect_request(
        &self,
        vi: &Arc<Vi>,
        local: &Address,
        remote: &Address,
        timeout: Option<Duration>,
    ) -> Result<ViAttrs>;

    /// `VipConnectPeerRequest`: starts a peer rendezvous (completed by
    /// `crate::vi::peer::peer_done` / `peer_wait`; a device starts it
    /// with `crate::vi::peer::start_peer`).
    fn peer_request(
        &self,
        vi: &Arc<Vi>,
        local: &Address,
        remote: &Address,
        timeout: Option<Duration>,
    ) -> Result<()>;

    /// `VipNSGetHostByName` for a name that is not this host's (those
    /// give the NIC's own address, see `crate::ns`).
    fn resolve_remote(&self, name: &str) -> Result<[u8; NIC_ADDRESS_LEN]> {
        Err(ViaError::NameService(format!(
            "{name} is not this host ({} device)",
            self.info().short_name
        )))
    }

    /// `VipNSGetHostByAddr` for an address that is not the NIC's own.
    fn remote_host_name(&self, _addr: &[u8]) -> Result<String> {
        Err(ViaError::NameService("unknown host address".into()))
    }

    /// The NIC is closing (its VIs are already disconnected): forget what
    /// the device keeps for it.
    fn close(&self, _nic: &NicShared) {}
}

/// A client's request taken by `VipConnectWait`, not yet answered.
pub trait PendingConnection: Send {
    /// The client's own address (host and discriminator).
    fn remote_address(&self) -> &Address;

    /// The client VI's attributes.
    fn remote_attrs(&self) -> ViAttrs;

    /// `VipConnectAccept`: binds the request to `vi`.
    fn accept(self: Box<Self>, vi: &Arc<Vi>) -> Result<()>;

    /// `VipConnectReject`.
    fn reject(self: Box<Self>) -> Result<()>;
}
