//! The name service: host names to VIA host addresses and back.
//!
//! A name that denotes this host (empty, `localhost`, the host name, or
//! any name whose addresses include a loopback address or one of this
//! host's interface addresses) gives the NIC's own address, whatever the
//! device. Other names are the device's business
//! ([`Device::resolve_remote`](crate::device::Device::resolve_remote)):
//! the shared-memory device reaches only this host and refuses them; the
//! UDP device resolves any host name or IPv4/IPv6 literal with
//! [`resolve`](crate::sys::net::resolve) (IPv4 mapped into IPv6, IPv4 preferred when a name has both).

use std::net::{IpAddr, ToSocketAddrs};

use crate::error::Result;
use crate::nic::{Nic, NIC_ADDRESS_LEN};
pub use crate::sys::net::resolve;

/// This host's name (gethostname).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its full length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Whether `name` denotes this host.
pub fn is_local_name(name: &str) -> bool {
    let name = name.trim();
    if name.is_empty() || name.eq_ignore_ascii_case("localhost") || name == hostname() {
        return true;
    }
    let Ok(addrs) = (name, 0u16).to_socket_addrs() else {
        return false;
    };
    let mine: Vec<IpAddr> = crate::sys::net::interface_addresses()
        .into_iter()
        .map(|(_, ip)| ip)
        .collect();
    addrs
        .map(|a| a.ip())
        .any(|ip| ip.is_loopback() || mine.contains(&ip))
}

/// `VipNSGetHostByName` on `nic`.
pub fn get_host_by_name(nic: &Nic, name: &str) -> Result<[u8; NIC_ADDRESS_LEN]> {
    let shared = nic.shared();
    if is_local_name(name) {
        return Ok(shared.address);
    }
    shared.device().resolve_remote(name)
}

/// `VipNSGetHostByAddr` on `nic`.
pub fn get_host_by_addr(nic: &Nic, addr: &[u8]) -> Result<String> {
    let shared = nic.shared();
    if addr == shared.address {
        return Ok(hostname());
    }
    shared.device().remote_host_name(addr)
}

/// The IP address a 16-byte host address stands for, as text.
pub fn address_ip(addr: &[u8]) -> Option<String> {
    crate::sys::net::host_ip(addr).map(|ip| ip.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_names() {
        assert!(is_local_name("localhost"));
        assert!(is_local_name(""));
        assert!(is_local_name("127.0.0.1"));
        assert!(is_local_name(&hostname()));
        assert!(!is_local_name("192.0.2.77"), "TEST-NET address is not ours");
    }
}
