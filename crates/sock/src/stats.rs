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
use crate::rendezvous::{name_of, text_of, write_address};

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

/// Whether lines are wanted (`viarun --stats`): a key costs two system
/// calls.
pub fn wanted() -> bool {
    std::env::var_os("VIARUN_STATS_FILE").is_some()
}

/// Notes that this process, on `side` of the connection `key`, set it up
/// over `device` (or `kept`: on a VI kept from an earlier connection,
/// besides its device's line; `back`: it stayed on the kernel after all).
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

/// A line built on the stack (`record_in_exec`); what does not fit is
/// an error.
struct StackText<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> StackText<N> {
    fn new() -> Self {
        Self {
            bytes: [0; N],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Appends another buffer's text; false if it does not fit.
    fn bytes_from<const M: usize>(&mut self, other: &StackText<M>) -> bool {
        let end = self.len + other.len;
        if end > N {
            return false;
        }
        self.bytes[self.len..end].copy_from_slice(other.as_bytes());
        self.len = end;
        true
    }
}

impl<const N: usize> std::fmt::Write for StackText<N> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > N {
            return Err(std::fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// `record` from an exec hook, which may run in a vfork child: nothing
/// is allocated (the file named by the C environment, the line made on
/// the stack, the key of the socket's two addresses as `key_of` makes it).
pub fn record_in_exec(device: &str, fd: RawFd, side: Side) {
    // SAFETY: getenv of a constant name; this thread, the only one that
    // would change the environment now, is about to exec.
    let path = unsafe { libc::getenv(c"VIARUN_STATS_FILE".as_ptr()) };
    if path.is_null() {
        return;
    }
    // SAFETY: a C string of the environment, unchanged until the exec.
    append_in_exec(unsafe { std::ffi::CStr::from_ptr(path) }, device, fd, side);
}

/// `record_in_exec`'s line, appended to the file `path`.
fn append_in_exec(path: &std::ffi::CStr, device: &str, fd: RawFd, side: Side) {
    use std::fmt::Write as _;
    let (Some(local), Some(peer)) = (name_of(fd, false), name_of(fd, true)) else {
        return;
    };
    let (mut a, mut b) = (StackText::<64>::new(), StackText::<64>::new());
    if write_address(&local, &mut a).is_err() || write_address(&peer, &mut b).is_err() {
        return;
    }
    let (low, high) = if a.as_bytes() <= b.as_bytes() {
        (a, b)
    } else {
        (b, a)
    };
    let side = match side {
        Side::Connector => 'c',
        Side::Acceptor => 'a',
    };
    let mut line = StackText::<160>::new();
    let made = line.write_str(device).is_ok()
        && line.write_str(" ").is_ok()
        && line.bytes_from(&low)
        && line.write_str("-").is_ok()
        && line.bytes_from(&high)
        && writeln!(line, " {side}").is_ok();
    if !made {
        return;
    }
    // SAFETY: opening the named file and one append of our own bytes,
    // as `record` does.
    unsafe {
        let f = libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC,
        );
        if f >= 0 {
            let _ = libc::write(f, line.bytes.as_ptr().cast(), line.len);
            libc::close(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line an exec hook writes names the connection as `key_of`
    /// does, so the launcher pairs it with the other lines of its key.
    #[test]
    fn a_line_written_in_exec_has_the_usual_key() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let file = std::env::temp_dir().join(format!("viarun-stats-test-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(file.as_os_str().as_bytes()).unwrap();
        let fd = client.as_raw_fd();
        append_in_exec(&path, "back", fd, Side::Connector);
        append_in_exec(&path, "udp", fd, Side::Acceptor);
        let text = std::fs::read_to_string(&file).unwrap();
        let _ = std::fs::remove_file(&file);
        let key = key_of(fd, None);
        assert_eq!(text, format!("back {key} c\nudp {key} a\n"));
    }
}
