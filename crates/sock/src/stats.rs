//! `viarun --stats`: each process appends one line per connection it
//! set up — `<device> <key>` with device `shm`/`udp`/`ether` or `tcp` for
//! the kernel, and the connection's two addresses sorted as key (both ends
//! of one connection under one viarun give one key) — to the file that
//! `VIARUN_STATS_FILE` names; the launcher counts the distinct keys.

use std::io::Write;
use std::os::fd::RawFd;

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

pub fn record(device: &str, key: &str) {
    let Some(path) = std::env::var_os("VIARUN_STATS_FILE") else {
        return;
    };
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) {
        // One write of one short line: appends from many processes stay whole.
        let _ = f.write_all(format!("{device} {key}\n").as_bytes());
    }
}
