//! Connection calls, whatever the device: each VIPL connect call goes to
//! the device of the VI's (or listener's) NIC, through the device
//! interface (`crate::device::Device`). The peer rendezvous thread and its
//! outcome, common to all devices, are the VI's (`crate::vi::peer`).

use std::sync::Arc;
use std::time::Duration;

use openvia_wire::handshake::{Address, ViAttrs};

use crate::device::PendingConnection;
use crate::error::Result;
use crate::nic::NicShared;
pub use crate::vi::peer::{peer_done, peer_wait};
use crate::vi::Vi;

/// A client's request taken by `VipConnectWait`, not yet answered: the
/// device's own (remote address and attributes, accept, reject).
pub type ConnRequest = Box<dyn PendingConnection>;

/// `VipConnectWait`.
pub fn connect_wait(
    nic: &Arc<NicShared>,
    local: &Address,
    timeout: Option<Duration>,
) -> Result<ConnRequest> {
    nic.device().connect_wait(nic, local, timeout)
}

/// Stops listening for `local` after the last `connect_wait` on it.
pub fn connect_wait_end(nic: &Arc<NicShared>, local: &Address) {
    nic.device().connect_wait_end(nic, local)
}

/// `VipConnectRequest`.
pub fn connect_request(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
) -> Result<ViAttrs> {
    vi.nic.device().connect_request(vi, local, remote, timeout)
}

/// `VipConnectPeerRequest`.
pub fn peer_request(
    vi: &Arc<Vi>,
    local: &Address,
    remote: &Address,
    timeout: Option<Duration>,
) -> Result<()> {
    vi.nic.device().peer_request(vi, local, remote, timeout)
}
