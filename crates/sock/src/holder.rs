//! Which process on this host accepted the other end of a TCP connection,
//! and whether it runs under viarun.
//!
//! A connector that found a port's registration waits for the acceptor's
//! answer before its first byte. When another listener shares the port
//! (SO_REUSEPORT, or the same port on another local address) and its
//! program does not run under viarun, no answer ever comes. A process
//! without the library can never answer, so once the connection's other
//! end is seen accepted by such a process the connector may settle on
//! kernel TCP without any risk of disagreeing with its peer. The other end
//! is found in `/proc/net/tcp{,6}` (its inode is 0 until accepted), its
//! holder among `/proc/*/fd`, the library in the holder's `/proc/*/maps`.
//! A socket owned by another user (its uid in the same table) never
//! answers either: the rendezvous names and the answer's check are per
//! user. Only processes we may look into are found (the same user, or
//! root): anything else is [`Holder::Unknown`], and the connector goes on
//! waiting.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What is known of the process holding a connection's other end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Still in its listener's accept queue (or not found yet).
    Queued,
    /// Accepted by a process without viarun, or by another user: no
    /// answer will come.
    Plain,
    /// Accepted by a process with viarun: its answer is on its way.
    Viarun,
    /// Accepted, but by no process we may look into.
    Unknown,
}

/// The holder of the socket whose local address is `there` and whose peer
/// is `here` (the connector's own two addresses, the other way round).
/// An unspecified `there` address (a listener's on all addresses) matches
/// any local address with its port.
pub fn of_peer(here: SocketAddr, there: SocketAddr) -> Holder {
    let found = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .find_map(|table| inode_in(&table, there, here));
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    match found {
        None | Some((0, _)) => Holder::Queued,
        Some((_, uid)) if uid != me => Holder::Plain,
        Some((ino, _)) => match process_holding(ino) {
            None => Holder::Unknown,
            Some(pid) => match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
                Ok(maps) if maps.contains("libviarun") => Holder::Viarun,
                Ok(_) => Holder::Plain,
                Err(_) => Holder::Unknown,
            },
        },
    }
}

/// The inode and owner's uid of the socket in a `/proc/net/tcp{,6}` table
/// whose local address is `local` and remote `remote`.
fn inode_in(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<(u64, u32)> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (l, r, uid, ino) = (f.get(1)?, f.get(2)?, f.get(7)?, f.get(9)?);
        let l = parse_addr(l)?;
        let local_matches = if local.ip().is_unspecified() {
            l.port() == local.port()
        } else {
            same(l, local)
        };
        (local_matches && same(parse_addr(r)?, remote))
            .then(|| Some((ino.parse().ok()?, uid.parse().ok()?)))?
    })
}

/// Equal addresses, an IPv4-mapped IPv6 one equal to its IPv4 address.
fn same(a: SocketAddr, b: SocketAddr) -> bool {
    let plain = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    a.port() == b.port() && plain(a.ip()) == plain(b.ip())
}

/// `ADDR:PORT` as the kernel prints it: the address's 32-bit words in
/// hexadecimal, each in this host's byte order, then the port.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok()?;
        Some(w.to_ne_bytes())
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The process with a descriptor on socket `inode`, among those whose
/// descriptors we may read.
fn process_holding(inode: u64) -> Option<u32> {
    let want = format!("socket:[{inode}]");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let pid: u32 = p.file_name().to_str()?.parse().ok()?;
        let fds = std::fs::read_dir(p.path().join("fd")).ok()?;
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
            .then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn kernel_addresses_are_read_in_host_order() {
        let v4 = parse_addr(&format!("{:08X}:1F90", u32::from_ne_bytes([127, 0, 0, 1])));
        assert_eq!(v4, Some("127.0.0.1:8080".parse().unwrap()));
        let mapped: String = [
            [0u8, 0, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0xff, 0xff],
            [10, 0, 0, 2],
        ]
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
        let v6 = parse_addr(&format!("{mapped}:0016")).unwrap();
        assert!(same(v6, "10.0.0.2:22".parse().unwrap()));
        for bad in [
            "",
            "0100007F",
            "0100007F:",
            "XYZ:0016",
            "0100007F:10000",
            "01007F:0016",
        ] {
            assert_eq!(parse_addr(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_table_row_gives_inode_and_owner() {
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
        let lo = format!("{:08X}", u32::from_ne_bytes([127, 0, 0, 1]));
        let row = format!("   1: {lo}:1F90 {lo}:A000 01 00000000:00000000 00:00000000 00000000  1000        0 4242 1\n");
        let local = "127.0.0.1:8080".parse().unwrap();
        let remote = "127.0.0.1:40960".parse().unwrap();
        let table = format!("{header}{row}");
        assert_eq!(inode_in(&table, local, remote), Some((4242, 1000)));
        // A listener on every address matches by port.
        assert_eq!(
            inode_in(&table, "0.0.0.0:8080".parse().unwrap(), remote),
            Some((4242, 1000))
        );
        assert_eq!(inode_in(&table, remote, local), None);
        assert_eq!(inode_in("header only\n", local, remote), None);
        assert_eq!(
            inode_in(&format!("{header}   1: short row\n"), local, remote),
            None
        );
    }

    #[test]
    fn a_connection_is_queued_until_accepted_then_held_by_this_plain_process() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (here, there) = (c.local_addr().unwrap(), c.peer_addr().unwrap());
        assert_eq!(of_peer(here, there), Holder::Queued);
        let (s, _) = l.accept().unwrap();
        // The test binary does not map the library: a plain process.
        assert_eq!(of_peer(here, there), Holder::Plain);
        drop(s);
    }
}
