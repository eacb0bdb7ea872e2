//! The name service: host names to VIA host addresses and back.
//!
//! The shared-memory device reaches only this host, so there a name
//! resolves if it denotes this host: empty, `localhost`, the host name, or
//! any name whose addresses include a loopback address or one of this
//! host's interface addresses. The network device resolves any host name
//! or IPv4/IPv6 literal to 16 bytes (IPv4 mapped into IPv6, IPv4 preferred
//! when a name has both); a name of this host gives the NIC's own address.

use std::net::{IpAddr, ToSocketAddrs};

use crate::error::{Result, ViaError};
use crate::nic::NIC_ADDRESS_LEN;

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

/// The IP addresses of this host's interfaces.
fn interface_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below; we only read
    // sockaddr fields whose family says what they are.
    unsafe {
        if libc::getifaddrs(&mut ifa) != 0 {
            return out;
        }
        let mut p = ifa;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            if !a.is_null() {
                match (*a).sa_family as i32 {
                    libc::AF_INET => {
                        let sin = &*(a as *const libc::sockaddr_in);
                        out.push(IpAddr::from(
                            u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                        ));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(a as *const libc::sockaddr_in6);
                        out.push(IpAddr::from(sin6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(ifa);
    }
    out
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
    let mine = interface_addresses();
    addrs
        .map(|a| a.ip())
        .any(|ip| ip.is_loopback() || mine.contains(&ip))
}

/// Resolves `name` (host name or IPv4/IPv6 literal) to a 16-byte address.
pub fn resolve(name: &str) -> Result<[u8; NIC_ADDRESS_LEN]> {
    let name = name.trim();
    let literal = name.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return Ok(crate::devices::udp::socket::host_bytes(ip));
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
        .map(|ip| crate::devices::udp::socket::host_bytes(*ip))
        .ok_or_else(|| ViaError::NameService(format!("{name}: no address")))
}

/// `VipNSGetHostByName`. `local` is the NIC's address: the shared-memory
/// device's (loopback) accepts only names of this host.
pub fn get_host_by_name(name: &str, local: [u8; NIC_ADDRESS_LEN]) -> Result<[u8; NIC_ADDRESS_LEN]> {
    if is_local_name(name) {
        return Ok(local);
    }
    if local == crate::nic::local_host_address() {
        return Err(ViaError::NameService(format!(
            "{name} is not this host (shared-memory device)"
        )));
    }
    resolve(name)
}

/// `VipNSGetHostByAddr`.
pub fn get_host_by_addr(addr: &[u8], local: [u8; NIC_ADDRESS_LEN]) -> Result<String> {
    if addr == local {
        return Ok(hostname());
    }
    if local == crate::nic::local_host_address() || addr.len() != NIC_ADDRESS_LEN {
        return Err(ViaError::NameService("unknown host address".into()));
    }
    crate::devices::udp::socket::host_ip(addr)
        .map(|ip| ip.to_string())
        .ok_or_else(|| ViaError::NameService("unknown host address".into()))
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
