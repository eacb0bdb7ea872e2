//! openvia's network devices — the UDP device and the Ethernet device
//! (raw frames, EtherType 0x88B5, through AF_PACKET or AF_XDP), both
//! carrying the RUM protocol — measured through the core's VIA API exactly
//! as the shared-memory device is (`shm.rs`, whose endpoint this mirrors:
//! registration cache, windows of posted sends, several posted receives).
//! Latency round trips post the receive for the echo first
//! (`via_latency`), which the unreliable level needs: there a message
//! that finds no receive posted is dropped.
//!
//! One type, [`NetTransport`], serves the three transports `udp`, `ether`
//! (AF_PACKET) and `ether-xdp` (AF_XDP): they differ only in which device
//! the name `/dev/via_<ifname>` opens, which the core reads from
//! `OPENVIA_NET_DEVICE` and `OPENVIA_ETHER_PATH`. The transport sets both
//! before it opens a NIC, so the transport's name is what runs, whatever
//! the environment said, and checks the opened device's kind: a build or
//! a host that cannot give that device refuses, it never measures another.
//!
//! Addresses are `HOST[:N]`: the server waits on discriminator
//! `viabench-N` (N = `serve --port`, default 0) on its NIC's address; the
//! client resolves HOST with `VipNSGetHostByName` rules. Settings, as
//! environment variables read by the core (docs/udp.md, docs/ether.md):
//! `OPENVIA_BENCH_DEVICE` (`udp`: default `/dev/via_udp`; `ether`: default
//! `/dev/via_<first interface with a non-loopback address>`),
//! `OPENVIA_BENCH_RELIABILITY` (`ur`, `rd` default, `rr`), and the
//! devices' own (`OPENVIA_UDP_SEGMENT`, `OPENVIA_UDP_MTU`, ...).

use std::sync::Arc;
use std::time::Duration;

use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi};
use openvia_core::{connect_request, Address};

use super::via_endpoint::{accept_endpoint, open_vi, via, ViaEndpoint};
use super::{Endpoint, EndpointOptions, ListenOptions, Listener, Transport, WaitMode};
use crate::error::{BenchError, Result};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// CAP_NET_RAW's bit in the capability sets (linux/capability.h).
const CAP_NET_RAW: u32 = 13;

/// How the Ethernet device reaches the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtherPath {
    /// An AF_PACKET socket (frame ring).
    Packet,
    /// An AF_XDP socket (UMEM, XDP program on the interface).
    Xdp,
}

impl EtherPath {
    /// As `OPENVIA_ETHER_PATH` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            EtherPath::Packet => "packet",
            EtherPath::Xdp => "xdp",
        }
    }
}

/// Which network device a transport measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetDevice {
    Udp,
    Ether(EtherPath),
}

impl NetDevice {
    /// The device's `DeviceInfo::short_name`, and `OPENVIA_NET_DEVICE`'s value.
    fn kind(self) -> &'static str {
        match self {
            NetDevice::Udp => "udp",
            NetDevice::Ether(_) => "ether",
        }
    }
}

pub struct NetTransport {
    name: &'static str,
    device: NetDevice,
}

impl NetTransport {
    pub fn udp() -> Self {
        NetTransport {
            name: "udp",
            device: NetDevice::Udp,
        }
    }

    /// `ether` (AF_PACKET) or `ether-xdp` (AF_XDP).
    pub fn ether(path: EtherPath) -> Self {
        NetTransport {
            name: match path {
                EtherPath::Packet => "ether",
                EtherPath::Xdp => "ether-xdp",
            },
            device: NetDevice::Ether(path),
        }
    }

    /// The device name this transport opens.
    fn device_name(&self) -> std::result::Result<String, String> {
        if let Ok(name) = std::env::var("OPENVIA_BENCH_DEVICE") {
            return Ok(name);
        }
        match self.device {
            NetDevice::Udp => Ok("/dev/via_udp".to_string()),
            NetDevice::Ether(_) => openvia_core::sys::net::first_non_loopback()
                .map(|(ifname, _)| format!("/dev/via_{ifname}"))
                .ok_or_else(|| {
                    "no interface with a non-loopback address (set OPENVIA_BENCH_DEVICE=/dev/via_<ifname>)"
                        .to_string()
                }),
        }
    }

    /// Makes the core open this transport's device for `/dev/via_<ifname>`
    /// (see the module comment). The core reads these when a NIC opens;
    /// std's environment lock orders this write against its reads.
    fn select(&self) {
        std::env::set_var("OPENVIA_NET_DEVICE", self.device.kind());
        if let NetDevice::Ether(path) = self.device {
            std::env::set_var("OPENVIA_ETHER_PATH", path.as_str());
        }
    }

    /// Why the Ethernet device cannot run here, found before opening it,
    /// so the refusal names the cause rather than a socket error.
    fn ether_precheck(&self, device: &str) -> std::result::Result<(), String> {
        let ifname = device
            .strip_prefix("/dev/via_")
            .or_else(|| device.strip_prefix("via_"))
            .unwrap_or("");
        if ifname.is_empty() || matches!(ifname, "udp" | "lo" | "shm") {
            return Err(format!(
                "{} needs an interface: OPENVIA_BENCH_DEVICE=/dev/via_<ifname>, not {device}",
                self.name
            ));
        }
        if loopback_interface(ifname) {
            return Err(format!(
                "{ifname} is a loopback interface; the Ethernet device needs a real link (e.g. veth)"
            ));
        }
        if !has_net_raw() {
            return Err(format!(
                "{} needs CAP_NET_RAW (raw Ethernet frames): run as root or `setcap cap_net_raw+ep` viabench",
                self.name
            ));
        }
        Ok(())
    }

    /// Opens the NIC this transport measures, checking that it is the
    /// device asked for.
    fn open_nic(&self) -> Result<Nic> {
        let device = self.device_name().map_err(BenchError::Unavailable)?;
        if matches!(self.device, NetDevice::Ether(_)) {
            self.ether_precheck(&device)
                .map_err(BenchError::Unavailable)?;
        }
        self.select();
        let nic = Nic::open(Some(&device)).map_err(|e| {
            BenchError::Unavailable(format!(
                "openvia {} device {device}: {e}",
                self.device.kind()
            ))
        })?;
        let info = nic.shared().device().info();
        if info.short_name != self.device.kind() {
            let opened = info.short_name;
            let _ = nic.close();
            return Err(BenchError::Unavailable(format!(
                "{device} opened the {opened} device, not the {} device (this build has none?)",
                self.device.kind()
            )));
        }
        Ok(nic)
    }

    fn setup(&self, opts: &EndpointOptions) -> Result<(Nic, PtagId, Arc<Vi>)> {
        let nic = self.open_nic()?;
        open_vi(
            nic,
            bench_reliability(),
            Some(opts.max_message.max(4096) as u64),
            opts,
        )
    }
}

fn bench_reliability() -> u16 {
    match std::env::var("OPENVIA_BENCH_RELIABILITY").as_deref() {
        Ok("ur") | Ok("unreliable") => reliability::UNRELIABLE,
        Ok("rr") | Ok("reception") => reliability::RELIABLE_RECEPTION,
        _ => reliability::RELIABLE_DELIVERY,
    }
}

/// Whether this process holds CAP_NET_RAW (its effective set, as
/// /proc/self/status shows it).
fn has_net_raw() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_NET_RAW) != 0)
}

/// Whether `ifname` is a loopback interface (IFF_LOOPBACK), in this
/// process's network namespace.
fn loopback_interface(ifname: &str) -> bool {
    let Ok(name) = std::ffi::CString::new(ifname) else {
        return false;
    };
    // SAFETY: plain socket(2); the descriptor is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes_with_nul();
    if bytes.len() > req.ifr_name.len() {
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        return false;
    }
    for (dst, &src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags of `req`,
    // which lives across the call; then the descriptor is closed.
    let flags = unsafe {
        let rc = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req);
        libc::close(fd);
        if rc != 0 {
            return false;
        }
        req.ifr_ifru.ifru_flags
    };
    flags as libc::c_int & libc::IFF_LOOPBACK != 0
}

impl Transport for NetTransport {
    fn name(&self) -> &'static str {
        self.name
    }

    fn available(&self) -> std::result::Result<(), String> {
        match self.open_nic() {
            Ok(nic) => nic.close().map_err(|e| e.to_string()),
            Err(BenchError::Unavailable(why)) => Err(why),
            Err(e) => Err(e.to_string()),
        }
    }

    fn default_mode(&self) -> WaitMode {
        WaitMode::Spin
    }

    /// A frame sent on an interface does not come back to its host: the
    /// Ethernet device reaches other hosts only.
    fn reaches_this_host(&self) -> bool {
        self.device == NetDevice::Udp
    }

    fn listen(&self, opts: &ListenOptions) -> Result<Box<dyn Listener>> {
        let n = if opts.scope == super::BindScope::Loopback && opts.port == 0 {
            // A local server spawned per run: a discriminator of its own.
            std::process::id() as u16
        } else {
            opts.port
        };
        let nic = self.open_nic()?;
        let ip = openvia_core::ns::address_ip(&nic.query().address).ok_or_else(|| {
            via(
                "own address",
                openvia_core::ViaError::NameService("unknown host address".into()),
            )
        })?;
        let _ = nic.close();
        Ok(Box::new(NetListener {
            transport: NetTransport {
                name: self.name,
                device: self.device,
            },
            disc: format!("viabench-{n}"),
            announce: if ip.contains(':') {
                format!("[{ip}]:{n}")
            } else {
                format!("{ip}:{n}")
            },
            opts: opts.endpoint.clone(),
        }))
    }

    fn connect(&self, address: &str, opts: &EndpointOptions) -> Result<Box<dyn Endpoint>> {
        let (host, n) = super::split_host_port(address, 18515)?;
        let (nic, ptag, vi) = self.setup(opts)?;
        let mine = nic.query().address;
        let host = openvia_core::ns::get_host_by_name(&nic, &host)
            .map_err(|e| via("resolve", e))?
            .to_vec();
        let remote = Address {
            host,
            discriminator: format!("viabench-{n}").into_bytes(),
        };
        let local = Address {
            host: mine.to_vec(),
            discriminator: format!("viabench-client-{}", std::process::id()).into_bytes(),
        };
        connect_request(&vi, &local, &remote, Some(CONNECT_TIMEOUT))
            .map_err(|e| via("connect", e))?;
        let mut ep = ViaEndpoint::new(nic, ptag, vi, opts)?;
        ep.prepost = true;
        Ok(Box::new(ep))
    }
}

struct NetListener {
    transport: NetTransport,
    disc: String,
    announce: String,
    opts: EndpointOptions,
}

impl Listener for NetListener {
    fn address(&self) -> String {
        self.announce.clone()
    }

    fn accept(&mut self) -> Result<Box<dyn Endpoint>> {
        let (nic, ptag, vi) = self.transport.setup(&self.opts)?;
        let mut ep = accept_endpoint(nic, ptag, vi, &self.disc, &self.opts)?;
        ep.prepost = true;
        Ok(Box::new(ep))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ether_refuses_names_without_an_interface() {
        let t = NetTransport::ether(EtherPath::Packet);
        for name in ["/dev/via_udp", "/dev/via_lo", "via_", "/dev/eth0"] {
            let why = t.ether_precheck(name).unwrap_err();
            assert!(why.contains("needs an interface"), "{name}: {why}");
        }
    }

    #[test]
    fn loopback_is_recognised() {
        assert!(loopback_interface("lo"));
        assert!(!loopback_interface("no-such-if0"));
    }
}
