//! The kernel's neighbour table (ARP for IPv4, NDP for IPv6), read with
//! one netlink RTM_GETNEIGH dump in the calling thread's namespace: a
//! second source of peer MACs for the Ethernet device, beside its own
//! resolution exchange. Messages come from the kernel but are parsed with
//! bounds checks all the same.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::sys::frames::Mac;

const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// NUD states whose link-layer address is usable: REACHABLE, STALE,
/// DELAY, PROBE, PERMANENT (not INCOMPLETE, FAILED, NOARP).
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x80;
const NLMSG_HDR: usize = 16;
const NDMSG_LEN: usize = 12;

/// The MAC the neighbour table holds for `ip` on interface `ifindex`.
pub fn lookup(ip: IpAddr, ifindex: i32) -> io::Result<Option<Mac>> {
    // SAFETY: socket has no memory preconditions.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    let fd = crate::sys::cvt(fd)?;
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let family = match ip {
        IpAddr::V4(_) => libc::AF_INET,
        IpAddr::V6(_) => libc::AF_INET6,
    } as u8;
    let mut req = [0u8; NLMSG_HDR + NDMSG_LEN];
    req[0..4].copy_from_slice(&((NLMSG_HDR + NDMSG_LEN) as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[NLMSG_HDR] = family;
    // SAFETY: `req` is readable for its length; the kernel is the peer.
    let sent = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 << 10];
    let mut found = None;
    loop {
        // SAFETY: `buf` is writable for its length across the call.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        match scan(&buf[..n as usize], ip, ifindex) {
            Scan::More(hit) => found = found.or(hit),
            Scan::Done(hit) => return Ok(found.or(hit)),
            Scan::Error => return Err(io::Error::other("netlink neighbour dump failed")),
        }
    }
}

/// What one batch of a dump held.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    /// The dump goes on (with the address, if this batch had it).
    More(Option<Mac>),
    Done(Option<Mac>),
    Error,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Walks the netlink messages of `b` looking for a usable entry of `ip`.
fn scan(mut b: &[u8], ip: IpAddr, ifindex: i32) -> Scan {
    let (v4, v6);
    let want: &[u8] = match ip {
        IpAddr::V4(a) => {
            v4 = a.octets();
            &v4
        }
        IpAddr::V6(a) => {
            v6 = a.octets();
            &v6
        }
    };
    let mut hit = None;
    while b.len() >= NLMSG_HDR {
        let (Some(len), Some(ty)) = (u32_at(b, 0), u16_at(b, 4)) else {
            return Scan::Error;
        };
        let len = len as usize;
        if len < NLMSG_HDR || len > b.len() {
            return Scan::Error;
        }
        let msg = &b[NLMSG_HDR..len];
        match ty {
            NLMSG_DONE => return Scan::Done(hit),
            NLMSG_ERROR => return Scan::Error,
            RTM_NEWNEIGH if hit.is_none() => hit = entry(msg, want, ifindex),
            _ => {}
        }
        b = b.get((len + 3) & !3..).unwrap_or(&[]);
    }
    Scan::More(hit)
}

/// The MAC of one RTM_NEWNEIGH body, if it is a usable entry of `want`
/// on `ifindex`.
fn entry(m: &[u8], want: &[u8], ifindex: i32) -> Option<Mac> {
    let index = i32::from_ne_bytes(m.get(4..8)?.try_into().ok()?);
    let state = u16_at(m, 8)?;
    if index != ifindex || state & NUD_USABLE == 0 {
        return None;
    }
    let (mut dst, mut mac) = (None, None);
    let mut at = NDMSG_LEN;
    while at + 4 <= m.len() {
        let (len, ty) = (u16_at(m, at)? as usize, u16_at(m, at + 2)?);
        if len < 4 || at + len > m.len() {
            return None;
        }
        let value = &m[at + 4..at + len];
        match ty {
            NDA_DST => dst = Some(value),
            NDA_LLADDR if value.len() == 6 => mac = value.try_into().ok(),
            _ => {}
        }
        at += (len + 3) & !3;
    }
    (dst? == want).then_some(mac?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One RTM_NEWNEIGH message as the kernel writes it.
    fn neigh(ifindex: i32, state: u16, dst: &[u8], mac: &[u8]) -> Vec<u8> {
        let mut body = vec![0u8; NDMSG_LEN];
        body[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        body[8..10].copy_from_slice(&state.to_ne_bytes());
        for (ty, v) in [(NDA_DST, dst), (NDA_LLADDR, mac)] {
            body.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
            body.extend_from_slice(&ty.to_ne_bytes());
            body.extend_from_slice(v);
            while !body.len().is_multiple_of(4) {
                body.push(0);
            }
        }
        let mut m = vec![0u8; NLMSG_HDR];
        m[0..4].copy_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&RTM_NEWNEIGH.to_ne_bytes());
        m.extend(body);
        m
    }

    #[test]
    fn a_dump_gives_the_usable_entry_of_the_address_on_the_interface() {
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        let mac = [2, 0xaa, 0, 0, 0, 7];
        let mut dump = neigh(3, 0x02, &[10, 0, 0, 9], &[9; 6]);
        dump.extend(neigh(4, 0x02, &[10, 0, 0, 2], &[4; 6])); // other interface
        dump.extend(neigh(3, 0x01, &[10, 0, 0, 2], &[1; 6])); // incomplete
        assert_eq!(scan(&dump, ip, 3), Scan::More(None));
        dump.extend(neigh(3, 0x04, &[10, 0, 0, 2], &mac));
        assert_eq!(scan(&dump, ip, 3), Scan::More(Some(mac)));
        let mut done = dump.clone();
        done.extend_from_slice(&[16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(scan(&done, ip, 3), Scan::Done(Some(mac)));
        // Every truncation is an error or a miss, never a panic.
        for cut in 0..dump.len() {
            let _ = scan(&dump[..cut], ip, 3);
        }
    }
}
