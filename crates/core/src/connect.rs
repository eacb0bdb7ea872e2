//! Connection calls, whatever the device: each VIPL connect call goes to
//! the device of the VI's (or listener's) NIC.

use std::sync::Arc;
use std::time::Duration;

use openvia_wire::handshake::{Address, ViAttrs};

use crate::error::Result;
use crate::nic::{Device, NicShared};
use crate::transport::{shm, udp};
use crate::vi::Vi;

/// A client's request taken by `VipConnectWait`, not yet answered.
pub enum ConnRequest {
    Shm(shm::connect::ConnRequest),
    Udp(udp::connect::UdpConnRequest),
}

impl ConnRequest {
    /// The client's own address (host and discriminator).
    pub fn remote_address(&self) -> &Address {
        match self {
            ConnRequest::Shm(r) => r.remote_address(),
            ConnRequest::Udp(r) => r.remote_address(),
        }
    }

    /// The client VI's attributes.
    pub fn remote_attrs(&self) -> ViAttrs {
        match self {
            ConnRequest::Shm(r) => r.remote_attrs(),
            ConnRequest::Udp(r) => r.remote_attrs(),
        }
    }

    /// `VipConnectAccept`.
    pub fn accept(self, vi: &Arc<Vi>) -> Result<()> {
        match self {
            ConnRequest::Shm(r) => r.accept(vi),
            ConnRequest::Udp(r) => r.accept(vi),
        }
    }

    /// `VipConnectReject`.
    pub fn reject(self) -> Result<()> {
        match self {
            ConnRequest::Shm(r) => r.reject(),
            ConnRequest::Udp(r) => r.reject(),
        }
    }
}

fn is_udp(nic: &NicShared) -> bool {
    nic.device == Device::Udp
}

/// `VipConnectWait`.
pub fn connect_wait(
    nic: &Arc<NicShared>,
    local: &Address,
    timeout: Option<Duration>,
) -> Result<ConnRequest> {
    if is_udp(nic) {
        udp::connect::connect_wait(nic, local, timeout).map(ConnRequest::Udp)
    } else {
        shm::connect::connect_wait(nic, local, timeout).map(ConnRequest::Shm)
    }
}

/// `VipConnectRequest`.
pub fn connect_request(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
) -> Result<ViAttrs> {
    if is_udp(&vi.nic) {
        udp::connect::connect_request(vi, local, remote, timeout)
    } else {
        shm::connect::connect_request(vi, local, remote, timeout)
    }
}

/// `VipConnectPeerRequest`.
pub fn peer_request(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
) -> Result<()> {
    if is_udp(&vi.nic) {
        udp::connect::peer_request(vi, local, remote, timeout)
    } else {
        shm::connect::peer_request(vi, local, remote, timeout)
    }
}

/// `VipConnectPeerDone`.
pub fn peer_done(vi: &Arc<Vi>) -> Result<ViAttrs> {
    if is_udp(&vi.nic) {
        udp::connect::peer_done(vi)
    } else {
        shm::connect::peer_done(vi)
    }
}

/// `VipConnectPeerWait`.
pub fn peer_wait(vi: &Arc<Vi>) -> Result<ViAttrs> {
    if is_udp(&vi.nic) {
        udp::connect::peer_wait(vi)
    } else {
        shm::connect::peer_wait(vi)
    }
}
