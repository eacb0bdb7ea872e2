//! This host's network interfaces and the 16-byte VIA host address: what
//! the name service and every network device need to know of IP, with no
//! device's sockets involved.

use std::mem::zeroed;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::{Result, ViaError};

/// A 16-byte VIA host address: IPv6, or IPv4 mapped into IPv6.
pub fn host_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address a 16-byte VIA host address stands for (mapped → IPv4).
pub fn host_ip(host: &[u8]) -> Option<IpAddr> {
    let b: [u8; 16] = host.try_into().ok()?;
    let v6 = Ipv6Addr::from(b);
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    })
}

/// An interface's IP address (IPv4 preferred) and MTU.
pub fn interface_info(ifname: &str) -> Option<(IpAddr, usize)> {
    let mut v4 = None;
    let mut v6 = None;
    for (name, ip) in interface_addresses() {
        if name != ifname {
            continue;
        }
        match ip {
            IpAddr::V4(_) if v4.is_none() => v4 = Some(ip),
            IpAddr::V6(a) if v6.is_none() && (a.segments()[0] & 0xffc0) != 0xfe80 => v6 = Some(ip),
            _ => {}
        }
    }
    let ip = v4.or(v6)?;
    Some((ip, interface_mtu(ifname).unwrap_or(1500)))
}

/// The first interface with a non-loopback IPv4 address (else IPv6).
pub fn first_non_loopback() -> Option<(String, IpAddr)> {
    let all = interface_addresses();
    all.iter()
        .find(|(_, ip)| ip.is_ipv4() && !ip.is_loopback())
        .or_else(|| {
            all.iter().find(|(_, ip)| match ip {
                IpAddr::V6(a) => !a.is_loopback() && (a.segments()[0] & 0xffc0) != 0xfe80,
                _ => false,
            })
        })
        .cloned()
}

/// The interface holding `ip`, if any.
pub fn interface_of(ip: IpAddr) -> Option<String> {
    interface_addresses()
        .into_iter()
        .find(|(_, a)| *a == ip)
        .map(|(n, _)| n)
}

/// (interface name, address) for every address of this host.
pub fn interface_addresses() -> Vec<(String, IpAddr)> {
    let mut out = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below; we read only
    // sockaddr fields whose family says what they are, and NUL-terminated names.
    unsafe {
        if libc::getifaddrs(&mut ifa) != 0 {
            return out;
        }
        let mut p = ifa;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            if !a.is_null() && !(*p).ifa_name.is_null() {
                let name = std::ffi::CStr::from_ptr((*p).ifa_name)
                    .to_string_lossy()
                    .into_owned();
                let ss = &*(a as *const libc::sockaddr_storage);
                if matches!(
                    (*a).sa_family as libc::c_int,
                    libc::AF_INET | libc::AF_INET6
                ) {
                    if let Some(sa) = from_raw_prefix(a, ss) {
                        out.push((name, sa));
                    }
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(ifa);
    }
    out
}

/// Reads the address of a sockaddr of known family without assuming the
/// kernel allocated a whole sockaddr_storage behind it.
///
/// # Safety
/// `a` must point at a sockaddr_in or sockaddr_in6 as its family says.
unsafe fn from_raw_prefix(
    a: *const libc::sockaddr,
    _ss: &libc::sockaddr_storage,
) -> Option<IpAddr> {
    match (*a).sa_family as libc::c_int {
        libc::AF_INET => {
            let sin = &*(a as *const libc::sockaddr_in);
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))))
        }
        libc::AF_INET6 => {
            let sin6 = &*(a as *const libc::sockaddr_in6);
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// The MTU of interface `ifname` (SIOCGIFMTU).
pub fn interface_mtu(ifname: &str) -> Option<usize> {
    if ifname.len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: a throwaway datagram socket for the ioctl; the ifreq is
    // zeroed and gets a NUL-terminated name shorter than IFNAMSIZ.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let fd = OwnedFd::from_raw_fd(fd);
        let mut req: libc::ifreq = zeroed();
        for (d, s) in req.ifr_name.iter_mut().zip(ifname.bytes()) {
            *d = s as libc::c_char;
        }
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req) != 0 {
            return None;
        }
        Some(req.ifr_ifru.ifru_mtu as usize)
    }
}

/// The name `VipNSGetHostByAddr` gives a 16-byte host address of a
/// network device: its IP address as text.
pub fn host_name(addr: &[u8]) -> Result<String> {
    host_ip(addr)
        .map(|ip| ip.to_string())
        .ok_or_else(|| ViaError::NameService("unknown host address".into()))
}

/// Resolves `name` (host name or IPv4/IPv6 literal) to a 16-byte address.
pub fn resolve(name: &str) -> Result<[u8; 16]> {
    let name = name.trim();
    let literal = name.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return Ok(host_bytes(ip));
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
        .map(|ip| host_bytes(*ip))
        .ok_or_else(|| ViaError::NameService(format!("{name}: no address")))
}

#[cfg(test)]
mod tests {
    use super::*;

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
