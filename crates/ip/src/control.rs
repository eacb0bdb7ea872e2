//! `viaip show`: each running instance listens on the abstract Unix socket
//! `viaip/<ifname>` and writes its report to whoever connects. Abstract
//! names belong to the network namespace and vanish with the process, so
//! nothing is left behind however it ends; `show` finds the instances of
//! its namespace in /proc/net/unix.

use std::io::{self, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

const PREFIX: &str = "viaip/";

fn address(ifname: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("{PREFIX}{ifname}"))
}

/// Binds the instance's socket; fails if another instance has the name.
pub fn bind(ifname: &str) -> io::Result<UnixListener> {
    UnixListener::bind_addr(&address(ifname)?)
}

/// Answers every connection with `report()` until the process ends.
pub fn serve(listener: UnixListener, report: impl Fn() -> String) {
    for mut conn in listener.incoming().flatten() {
        let _ = conn.write_all(report().as_bytes());
    }
}

/// The interfaces with a running instance in this namespace.
pub fn instances() -> io::Result<Vec<String>> {
    let table = std::fs::read_to_string("/proc/net/unix")?;
    let mut names: Vec<String> = table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter_map(|p| p.strip_prefix('@')?.strip_prefix(PREFIX))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// The report of the instance carrying `ifname`.
pub fn query(ifname: &str) -> io::Result<String> {
    let mut s = UnixStream::connect_addr(&address(ifname)?)?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}
