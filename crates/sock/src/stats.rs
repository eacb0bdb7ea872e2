//! `viarun --stats`: each process appends one line per connection it
//! set up — `<device> <key> <side>` with device `shm`/`udp`/`ether` or
//! `tcp` for the kernel, the connection's two addresses sorted as key
//! (both ends of one connection under one viarun give one key), and `c`
//! or `a` for the connector's or the acceptor's end — to the file that
//! `VIARUN_STATS_FILE` names. The launcher counts, per key, the larger of
//! its two ends' lines: a key seen twice from one end is two connections
//! (a port used again once the first was closed).

use std::io::Write;
use std::os::fd::RawFd;

use crate::control::Side;
use crate::rendezvous::{name_of, text_of};

pub fn key(local: String, peer: String) -> String {
    if local <= peer {
        format!("{local}-{peer}")
    } else {
        format!("{peer}-{local}")
    }
}

/// Key of a connected (or connecting) socket; `peer` if getpeername
/// cannot tell yet.
pub fn key_of(fd: RawFd, peer: Option<String>) -> String {
    let local = name_of(fd, false).map_or(String::from("?"), |a| text_of(&a));
    let peer = peer
        .or_else(|| name_of(fd, true).map(|a| text_of(&a)))
        .unwrap_or_else(|| String::from("?"));
    key(local, peer)
}

/// Notes that this process, on `side` of the connection `key`, set it up
/// over `device`.
pub fn record(device: &str, key: &str, side: Side) {
    let Some(path) = std::env::var_os("VIARUN_STATS_FILE") else {
        return;
    };
    let side = match side {
        Side::Connector => 'c',
        Side::Acceptor => 'a',
    };
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) {
        // One write of one short line: appends from many processes stay whole.
        let _ = f.write_all(format!("{device} {key} {side}\n").as_bytes());
    }
}
