//! The devices this host can open: `/dev/via_lo`, one `/dev/via_<ifname>`
//! per interface with an address, and the generic `/dev/via_udp`. Each is
//! opened through the core's API and asked what `VipQueryNic` reports, so
//! what is listed is what a program would get.

use std::net::IpAddr;

use openvia_core::nic::{Nic, NicAttributes};
use openvia_core::sys::net::{host_ip, interface_addresses, interface_mtu};
use openvia_core::vi::reliability;
use serde::Serialize;

/// One device, opened or not.
#[derive(Serialize, Debug)]
pub struct DeviceInfo {
    /// The name a program passes to VipOpenNic.
    pub name: String,
    /// `shm`, `udp` or `ether` (the device that opened).
    pub kind: &'static str,
    /// The interface the device sends on (udp).
    pub interface: Option<String>,
    /// What drives the interface (its kernel driver, or its kind).
    pub behind: String,
    /// The host address the NIC reports.
    pub address: Option<String>,
    pub mtu: Option<u64>,
    /// Segment policy and the payload bytes per datagram it gives (udp).
    pub segment_policy: Option<String>,
    pub segment_bytes: Option<u64>,
    /// What VipQueryNic reports (bit sets as numbers; spelt out below).
    pub attributes: Option<NicAttributes>,
    /// `reliability_support` as the spec's short names (UR, RD, RR).
    pub reliability: Vec<&'static str>,
    /// `rdma_read_support` likewise.
    pub rdma_read: Vec<&'static str>,
    /// Why VipOpenNic failed, when it did.
    pub error: Option<String>,
}

/// VIA reliability bits as the spec's short names.
pub fn reliability_names(bits: u16) -> Vec<&'static str> {
    [
        (reliability::UNRELIABLE, "UR"),
        (reliability::RELIABLE_DELIVERY, "RD"),
        (reliability::RELIABLE_RECEPTION, "RR"),
    ]
    .iter()
    .filter(|(b, _)| bits & b != 0)
    .map(|&(_, n)| n)
    .collect()
}

/// Interfaces with an address, in the kernel's order, once each. `lo` is
/// left out: `/dev/via_lo` names the shared-memory device.
pub fn interfaces() -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (name, _) in interface_addresses() {
        if name != "lo" && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// What drives an interface: the driver of its device (sysfs), else its
/// kind from uevent (bridge, vlan, ...), else "virtual".
pub fn behind(ifname: &str) -> String {
    let base = format!("/sys/class/net/{ifname}");
    if let Ok(p) = std::fs::read_link(format!("{base}/device/driver")) {
        if let Some(d) = p.file_name() {
            return format!("driver {}", d.to_string_lossy());
        }
    }
    if let Ok(u) = std::fs::read_to_string(format!("{base}/uevent")) {
        if let Some(t) = u.lines().find_map(|l| l.strip_prefix("DEVTYPE=")) {
            return t.to_string();
        }
    }
    if std::fs::read_to_string(format!("{base}/iflink")).ok()
        != std::fs::read_to_string(format!("{base}/ifindex")).ok()
    {
        // A veth's iflink names its peer, not itself.
        return "virtual (peer link)".to_string();
    }
    "virtual".to_string()
}

/// Opens `name` and reads what it reports.
pub fn probe(name: &str, kind: &'static str, interface: Option<String>) -> DeviceInfo {
    let mut info = DeviceInfo {
        name: name.to_string(),
        kind,
        behind: match (&interface, kind) {
            (_, "shm") => "shared memory between processes of this host".to_string(),
            (Some(i), _) => behind(i),
            (None, _) => "unknown".to_string(),
        },
        interface,
        address: None,
        mtu: None,
        segment_policy: None,
        segment_bytes: None,
        attributes: None,
        reliability: Vec::new(),
        rdma_read: Vec::new(),
        error: None,
    };
    match Nic::open(Some(name)) {
        Ok(nic) => {
            // The device that opened: /dev/via_<ifname> is the UDP or the
            // Ethernet device per OPENVIA_NET_DEVICE.
            info.kind = nic.shared().device().info().short_name;
            let a = nic.query();
            info.address = host_ip(&a.address).map(|ip: IpAddr| ip.to_string());
            if let Some(link) = &nic.shared().device().info().link {
                info.mtu = Some(link.mtu as u64);
                if info.interface.is_none() {
                    info.interface = link.interface.clone();
                    if let Some(i) = &link.interface {
                        info.behind = behind(i);
                    }
                }
                info.segment_policy = Some(link.segment_policy.clone());
                info.segment_bytes = Some(link.segment_bytes as u64);
            }
            info.reliability = reliability_names(a.reliability_support);
            info.rdma_read = reliability_names(a.rdma_read_support);
            info.attributes = Some(a);
        }
        Err(e) => {
            info.error = Some(e.to_string());
            info.mtu = info
                .interface
                .as_deref()
                .and_then(interface_mtu)
                .map(|m| m as u64);
        }
    }
    info
}

/// Every device of this host, opened and queried.
pub fn all() -> Vec<DeviceInfo> {
    let mut out = vec![probe("/dev/via_lo", "shm", None)];
    // What /dev/via_<ifname> is asked to be, until it opens and says.
    let per_interface = match std::env::var("OPENVIA_NET_DEVICE").as_deref() {
        Ok("ether") => "ether",
        _ => "udp",
    };
    for i in interfaces() {
        out.push(probe(&format!("/dev/via_{i}"), per_interface, Some(i)));
    }
    out.push(probe("/dev/via_udp", "udp", None));
    out
}
