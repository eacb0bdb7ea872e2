//! The shared-memory device (`/dev/via_lo`): VIs between processes on
//! one host.
//!
//! - `mod.rs` (here): the device: open, attributes.
//! - `connect`: pairing two VIs over an abstract Unix socket.
//! - `channel`: the [`Channel`](crate::device::Channel) of a connected pair.
//! - `ring`, `region`: the rings in the shared connection region.
//! - `shared_copy`: both processes copying one large message at once.

pub mod channel;
pub mod connect;
pub mod region;
pub mod ring;
pub mod shared_copy;

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openvia_wire::handshake::{Address, ViAttrs};

use crate::config::Config;
use crate::device::{Device, DeviceInfo, Drive, PendingConnection};
use crate::error::{Result, ViaError};
use crate::nic::{NicShared, NIC_ADDRESS_LEN};
use crate::vi::{reliability, Vi};

/// Largest transfer one descriptor may carry on this device.
pub const MAX_TRANSFER_SIZE: u64 = 1 << 30;

/// The host address of the shared-memory device: IPv4 loopback mapped
/// into IPv6 (the device reaches exactly this host).
pub fn local_host_address() -> [u8; NIC_ADDRESS_LEN] {
    let mut a = [0u8; NIC_ADDRESS_LEN];
    a[10] = 0xff;
    a[11] = 0xff;
    a[12..].copy_from_slice(&[127, 0, 0, 1]);
    a
}

/// The shared-memory device of one NIC.
pub struct ShmDevice {
    info: DeviceInfo,
    /// The listening sockets of `VipConnectWait`, by discriminator.
    pub(crate) listeners: Mutex<HashMap<Vec<u8>, Arc<connect::Listening>>>,
}

impl ShmDevice {
    pub fn open(config: &Config) -> Result<Self> {
        Ok(Self {
            info: DeviceInfo {
                name: "/dev/via_lo".to_string(),
                short_name: "shm",
                address: local_host_address(),
                max_transfer: MAX_TRANSFER_SIZE,
                native_mtu: config.inline_max as u64,
                reliability: reliability::UNRELIABLE
                    | reliability::RELIABLE_DELIVERY
                    | reliability::RELIABLE_RECEPTION,
                rdma_read: reliability::RELIABLE_DELIVERY | reliability::RELIABLE_RECEPTION,
                drive: Drive {
                    peer_doorbell: true,
                    costly_poll: false,
                    timers: false,
                },
                link: None,
            },
            listeners: Mutex::new(HashMap::new()),
        })
    }
}

/// The shared-memory device of `nic`.
pub(crate) fn shm_of(nic: &NicShared) -> Result<&ShmDevice> {
    nic.device()
        .as_any()
        .downcast_ref::<ShmDevice>()
        .ok_or(ViaError::InvalidState("not a shared-memory NIC"))
}

impl Device for ShmDevice {
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

    fn close(&self, _nic: &NicShared) {
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
