//! The name service: host names to VIA host addresses and back.
//!
//! The shared-memory device reaches only this host, so a name resolves if
//! it denotes this host: empty, `localhost`, the host name, or any name
//! whose addresses include a loopback address or one of this host's
//! interface addresses.

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

/// `VipNSGetHostByName` for the shared-memory device.
pub fn get_host_by_name(name: &str, local: [u8; NIC_ADDRESS_LEN]) -> Result<[u8; NIC_ADDRESS_LEN]> {
    if is_local_name(name) {
        Ok(local)
    } else {
        Err(ViaError::NameService(format!(
            "{name} is not this host (shared-memory device)"
        )))
    }
}

/// `VipNSGetHostByAddr`.
pub fn get_host_by_addr(addr: &[u8], local: [u8; NIC_ADDRESS_LEN]) -> Result<String> {
    if addr == local {
        Ok(hostname())
    } else {
        Err(ViaError::NameService("unknown host address".into()))
    }
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
