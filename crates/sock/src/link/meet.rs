//! The VI handshake of a connection both ends agreed on: each end names
//! its VI after the connection's token and its role, the acceptor waits
//! and the connector asks, while the kernel socket shows whether the
//! peer is still coming (its hello) or gone.

use std::os::fd::RawFd;
use std::sync::Arc;

use openvia_core::nic::Nic;
use openvia_core::vi::Vi;
use openvia_core::{Address, ViaError};

use super::{HandshakeEnd, HELLO, SLICE};
use crate::control::{Side, SWITCH_BYTE};
use crate::kernel;

fn disc(role_char: char, token: u64) -> Vec<u8> {
    format!("viarun-{role_char}-{token:016x}").into_bytes()
}

/// Connects `vi` to the peer's VI of the connection named by `token`, the
/// connector at the acceptor's `peer_host` (None: this host), while the
/// kernel socket shows the peer coming (its hello) or gone; then takes the
/// peer's hello, which heads our kernel stream. Our own hello is sent.
pub(crate) fn meet(
    fd: RawFd,
    nic: &Nic,
    vi: &Arc<Vi>,
    side: Side,
    token: u64,
    peer_host: Option<&[u8]>,
    switched: &dyn Fn() -> bool,
) -> Result<(), HandshakeEnd> {
    let host = nic.query().address.to_vec();
    let (mine, theirs) = match side {
        Side::Connector => ('c', 'a'),
        Side::Acceptor => ('a', 'c'),
    };
    let local = Address {
        host: host.clone(),
        discriminator: disc(mine, token),
    };
    let remote = Address {
        host: peer_host.map_or(host, <[u8]>::to_vec),
        discriminator: disc(theirs, token),
    };
    let met = loop {
        let r = match side {
            Side::Connector => {
                openvia_core::connect_request(vi, &local, &remote, Some(SLICE)).map(|_| ())
            }
            Side::Acceptor => openvia_core::connect_wait(nic.shared(), &local, Some(SLICE))
                .and_then(|req| req.accept(vi)),
        };
        match r {
            Ok(()) => break Ok(()),
            Err(ViaError::Timeout) if switched() => break Err(HandshakeEnd::Switched),
            Err(ViaError::Timeout) => match kernel::peek_state(fd) {
                // The peer's hello is there: it is on its way.
                kernel::Peek::Byte(HELLO) => {
                    if kernel::peer_hung_up(fd) {
                        break Err(HandshakeEnd::Broken);
                    }
                }
                kernel::Peek::Empty => {}
                kernel::Peek::Eof => break Err(HandshakeEnd::PeerNeverCame),
                _ => break Err(HandshakeEnd::Broken),
            },
            Err(_) => break Err(HandshakeEnd::Broken),
        }
    };
    if matches!(side, Side::Acceptor) {
        // The discriminator is this connection's alone: no wait on it
        // follows, and the device would keep its listener (a socket)
        // until the process ends.
        openvia_core::connect_wait_end(nic.shared(), &local);
    }
    met?;
    // A sibling that switched the connection meanwhile (above) put its
    // switch byte where the peer's hello was awaited: left for the
    // switched reader, which drops what comes before it and itself.
    loop {
        match kernel::peek_state(fd) {
            kernel::Peek::Byte(SWITCH_BYTE) if switched() => return Err(HandshakeEnd::Switched),
            kernel::Peek::Empty if switched() => return Err(HandshakeEnd::Switched),
            kernel::Peek::Empty => kernel::wait_readable(fd),
            _ => break,
        }
    }
    match kernel::take_byte(fd) {
        Ok(HELLO) => Ok(()),
        _ => Err(HandshakeEnd::Broken),
    }
}
