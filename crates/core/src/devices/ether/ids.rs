//! Connection ids of the Ethernet device: 16 bits (the destination id of
//! every frame, `openvia_wire::ether`), unique per interface on a host,
//! whichever process holds them.
//!
//! A process claims an id by binding the abstract Unix socket
//! `openvia-ether-<ifindex>-<id>`: the kernel refuses a second bind of a
//! name, so two processes never hold one id, and frees the name when the
//! socket closes, also when the process dies, so ids are never leaked and
//! nothing needs cleaning up. Abstract names belong to the network
//! namespace, as interface indexes do. Id 0 is the host's agent
//! (`agent`): claiming it makes a process the one that answers resolution
//! requests.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};

/// The agent's id.
pub const AGENT_ID: u16 = openvia_wire::ether::AGENT_ID;

/// An id held by this process until dropped.
#[derive(Debug)]
pub struct IdClaim {
    id: u16,
    _sock: UnixDatagram,
}

impl IdClaim {
    pub fn id(&self) -> u16 {
        self.id
    }
}

fn name(ifindex: i32, id: u16) -> Vec<u8> {
    format!("openvia-ether-{ifindex}-{id}").into_bytes()
}

/// Claims `id` on interface `ifindex`; `Ok(None)` if another socket holds it.
pub fn claim_exact(ifindex: i32, id: u16) -> io::Result<Option<IdClaim>> {
    let addr = UnixAddr::from_abstract_name(name(ifindex, id))?;
    match UnixDatagram::bind_addr(&addr) {
        Ok(sock) => Ok(Some(IdClaim { id, _sock: sock })),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Ok(None),
        Err(e) => Err(e),
    }
}

/// Claims a free connection id (1..=65535) on interface `ifindex`,
/// starting the search at a random one so that an id just released is
/// not at once handed out again (a late frame of its old connection then
/// finds no one, or a keyed peer's tag fails).
pub fn claim(ifindex: i32) -> io::Result<IdClaim> {
    let start = (crate::sys::random_u64() % 0xFFFF) as u32;
    for k in 0..0xFFFFu32 {
        let id = ((start + k) % 0xFFFF + 1) as u16;
        if let Some(c) = claim_exact(ifindex, id)? {
            return Ok(c);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "all 65535 Ethernet connection ids are in use",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_held_once_and_freed_on_drop() {
        // An interface index no real interface has, so that tests running
        // beside a live device never meet its ids.
        let ifindex = -7;
        let a = claim(ifindex).unwrap();
        assert_ne!(a.id(), AGENT_ID);
        assert!(claim_exact(ifindex, a.id()).unwrap().is_none());
        let b = claim(ifindex).unwrap();
        assert_ne!(a.id(), b.id());
        let id = a.id();
        drop(a);
        assert!(claim_exact(ifindex, id).unwrap().is_some());
    }

    #[test]
    fn the_agent_id_is_claimed_by_one_holder() {
        let ifindex = -8;
        let first = claim_exact(ifindex, AGENT_ID).unwrap();
        assert!(first.is_some());
        assert!(claim_exact(ifindex, AGENT_ID).unwrap().is_none());
        drop(first);
        assert!(claim_exact(ifindex, AGENT_ID).unwrap().is_some());
    }
}
