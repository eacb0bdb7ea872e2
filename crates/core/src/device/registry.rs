//! Device names to devices: the one place in the core that names the
//! concrete devices. `VipOpenNic` comes here with the name a program
//! passes; each entry says which names it takes and opens its device.
//! Adding a device adds an entry (docs/devices.md).

use std::sync::Arc;

use super::Device;
use crate::config::Config;
use crate::devices::{ether::EtherDevice, shm::ShmDevice, udp::UdpDevice};
use crate::error::{Result, ViaError};

/// What a name asks for.
enum Choice<'a> {
    SharedMemory,
    /// The UDP device on this interface (None: the generic `/dev/via_udp`).
    Udp(Option<&'a str>),
    /// `/dev/via_<ifname>`: the Ethernet or the UDP device on that
    /// interface, per `OPENVIA_NET_DEVICE`.
    Interface(&'a str),
}

/// Which device `/dev/via_<ifname>` opens (`OPENVIA_NET_DEVICE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NetDevice {
    Udp,
    Ether,
    /// Ethernet when the process may (CAP_NET_RAW) and the interface is
    /// not loopback, else UDP.
    Auto,
}

fn net_device() -> Result<NetDevice> {
    match std::env::var("OPENVIA_NET_DEVICE")
        .as_deref()
        .map(str::trim)
    {
        Err(_) | Ok("") | Ok("udp") => Ok(NetDevice::Udp),
        Ok("ether") => Ok(NetDevice::Ether),
        Ok("auto") => Ok(NetDevice::Auto),
        Ok(_) => Err(ViaError::InvalidParameter(
            "OPENVIA_NET_DEVICE (udp, ether or auto)",
        )),
    }
}

/// Opens `/dev/via_<ifname>` per `OPENVIA_NET_DEVICE`.
fn open_interface(ifname: &str) -> Result<Arc<dyn Device>> {
    let loopback = crate::sys::net::interface_info(ifname).is_some_and(|(ip, _)| ip.is_loopback());
    match net_device()? {
        NetDevice::Udp => Ok(Arc::new(UdpDevice::open(Some(ifname))?)),
        NetDevice::Ether => Ok(Arc::new(EtherDevice::open(ifname)?)),
        NetDevice::Auto if loopback => Ok(Arc::new(UdpDevice::open(Some(ifname))?)),
        NetDevice::Auto => match EtherDevice::open(ifname) {
            Ok(d) => Ok(Arc::new(d)),
            // Without CAP_NET_RAW (or AF_PACKET): UDP serves.
            Err(ViaError::Resource(_)) => Ok(Arc::new(UdpDevice::open(Some(ifname))?)),
            Err(e) => Err(e),
        },
    }
}

/// Reads a device name. NULL, "", `/dev/via_lo` (and its short forms)
/// name the shared-memory device; `/dev/via_udp` the generic network
/// device; `/dev/via_<ifname>` the UDP or Ethernet device on that
/// interface (`OPENVIA_NET_DEVICE`).
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
            Ok(Choice::Interface(ifname))
        }
    }
}

/// Opens the device `name` names.
pub fn open(name: Option<&str>, config: &Config) -> Result<Arc<dyn Device>> {
    Ok(match choose(name)? {
        Choice::SharedMemory => Arc::new(ShmDevice::open(config)?),
        Choice::Udp(ifname) => Arc::new(UdpDevice::open(ifname)?),
        Choice::Interface(ifname) => open_interface(ifname)?,
    })
}
