//! The peers file: which underlay host holds each overlay address.
//!
//! One peer a line, `OVERLAY_IPV4 UNDERLAY_HOST`, where the underlay host is
//! an IPv4 or IPv6 address or a name; `#` starts a comment. Every instance
//! may read the same file: a line naming its own overlay address is
//! skipped.

use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};

/// A NIC address of the network device: 16 bytes, IPv6 or IPv4-mapped.
pub type HostAddr = [u8; 16];

pub fn host_addr(ip: IpAddr) -> HostAddr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The underlay host as text (IPv4 shown plainly).
pub fn host_text(h: &HostAddr) -> String {
    let v6 = std::net::Ipv6Addr::from(*h);
    match v6.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => v6.to_string(),
    }
}

fn resolve(host: &str) -> Result<IpAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ip);
    }
    (host, 0)
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .map(|a| a.ip())
        .ok_or_else(|| format!("{host}: no address"))
}

/// Parses the file's text; errors name the line.
pub fn parse(text: &str) -> Result<Vec<(Ipv4Addr, HostAddr)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(overlay), Some(host), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!(
                "line {}: expected `OVERLAY_IPV4 UNDERLAY_HOST`",
                n + 1
            ));
        };
        let overlay: Ipv4Addr = overlay
            .parse()
            .map_err(|_| format!("line {}: {overlay:?} is not an IPv4 address", n + 1))?;
        let ip = resolve(host).map_err(|e| format!("line {}: {e}", n + 1))?;
        out.push((overlay, host_addr(ip)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_and_comments() {
        let p = parse("# peers\n10.0.0.1 192.168.1.1\n\n10.0.0.2  ::1 # v6\n").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].0, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(host_text(&p[0].1), "192.168.1.1");
        assert_eq!(host_text(&p[1].1), "::1");
    }

    #[test]
    fn names_the_bad_line() {
        let e = parse("10.0.0.1 1.2.3.4\n10.0.0.x 1.2.3.4\n").unwrap_err();
        assert!(e.starts_with("line 2"), "{e}");
        assert!(parse("10.0.0.1\n").is_err());
        assert!(parse("10.0.0.1 1.2.3.4 extra\n").is_err());
    }
}
