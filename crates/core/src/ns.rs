//! The name service: host names to VIA host addresses and back.
//!
//! A name that denotes this host (empty, `localhost`, the host name, or
//! any name whose addresses include a loopback address or one of this
//! host's interface addresses) gives the NIC's own address, whatever the
//! device. Other names are the device's business
//! ([`Device::resolve_remote`](crate::device::Device::resolve_remote)):
//! the shared-memory device reaches only this host and refuses them; the
//! UDP device resolves any host name or IPv4/IPv6 literal with
//! [`resolve`] (IPv4 mapped into IPv6, IPv4 preferred when a name has both).

use std::net::{IpAddr, ToSocketAddrs};

use crate::error::{Result, ViaError};
use crate::nic::{Nic, NIC_ADDRESS_LEN};

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

/// Resolves `name` (host name or IPv4/IPv6 literal) to a 16-byte address.
pub fn resolve(name: &str) -> Result<[u8; NIC_ADDRESS_LEN]> {
    let name = name.trim();
    let literal = name.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return Ok(crate::sys::net::host_bytes(ip));
    }
    let addrs: Vec<IpAddr> = (name, 0u16)
        .to_socket_addrs()
        .map_err(|e| ViaError::NameService(format!("{name}: {e}")))?
        .map(|a| a.ip())
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .map(|ip| crate::sys::net::host_bytes(*ip))
        .ok_or_else(|| ViaError::NameService(format!("{name}: no address")))
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

    #[test]
    fn literals_resolve_mapped() {
        let a = resolve("192.0.2.7").unwrap();
        assert_eq!(&a[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&a[12..], &[192, 0, 2, 7]);
        let b = resolve("[2001:db8::1]").unwrap();
        assert_eq!(b[0..2], [0x20, 0x01]);
        assert_eq!(b[15], 1);
        assert!(resolve("no-such-host.invalid").is_err());
    }
}
