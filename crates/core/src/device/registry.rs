//! Device names to devices: the one place in the core that names the
//! concrete devices. `VipOpenNic` comes here with the name a program
//! passes; each entry says which names it takes and opens its device.
//! Adding a device adds an entry (docs/devices.md).

use std::sync::Arc;

use super::Device;
use crate::config::Config;
use crate::devices::{shm::ShmDevice, udp::UdpDevice};
use crate::error::{Result, ViaError};

/// What a name asks for.
enum Choice<'a> {
    SharedMemory,
    /// The UDP device on this interface (None: the generic `/dev/via_udp`).
    Udp(Option<&'a str>),
}

/// Reads a device name. NULL, "", `/dev/via_lo` (and its short forms)
/// name the shared-memory device; `/dev/via_udp` the generic network
/// device; `/dev/via_<ifname>` the network device on that interface.
fn choose(name: Option<&str>) -> Result<Choice<'_>> {
    match name.map(str::trim) {
        None | Some("") | Some("/dev/via_lo") | Some("via_lo") | Some("lo")
        | Some("/dev/via_shm") => Ok(Choice::SharedMemory),
        Some("/dev/via_udp") | Some("via_udp") => Ok(Choice::Udp(None)),
        Some(n) => {
            let ifname = n
                .strip_prefix("/dev/via_")
                .or_else(|| n.strip_prefix("via_"))
                .ok_or(ViaError::InvalidParameter("unknown device name"))?;
            if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
                return Err(ViaError::InvalidParameter("unknown device name"));
            }
            Ok(Choice::Udp(Some(ifname)))
        }
    }
}

/// Opens the device `name` names.
pub fn open(name: Option<&str>, config: &Config) -> Result<Arc<dyn Device>> {
    Ok(match choose(name)? {
        Choice::SharedMemory => Arc::new(ShmDevice::open(config)?),
        Choice::Udp(ifname) => Arc::new(UdpDevice::open(ifname)?),
    })
}
