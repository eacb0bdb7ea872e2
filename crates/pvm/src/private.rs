//! Per-user files that only their user may touch. The pvmd's log holds what
//! tasks printed and its socket hands out the pool (every local message),
//! so both are mode 0600 whatever the umask, the log is never reached
//! through a symbolic link or opened if someone else owns it, and the pvmd
//! talks only to connections of its own user.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

/// The only mode a per-user file may have.
pub const MODE: u32 = 0o600;

fn cvt(n: libc::c_int) -> io::Result<libc::c_int> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n)
    }
}

fn c_path(p: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// Opens `path` for appending, creating it 0600. An existing file must be
/// a regular file of ours with one link; a wider mode is narrowed to 0600.
/// A symbolic link there is removed (if we may) and the file made afresh,
/// never followed.
pub fn open_append(path: &Path) -> io::Result<File> {
    let c = c_path(path)?;
    let flags =
        libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid C path; the mode is an int.
    let mut fd = unsafe { libc::open(c.as_ptr(), flags, MODE as libc::c_uint) };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ELOOP) {
        // A link in the log's place: unlink it (in a sticky /tmp only its
        // owner can) and create exclusively, so no one slips one in again.
        std::fs::remove_file(path)?;
        // SAFETY: as above.
        fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_EXCL, MODE as libc::c_uint) };
    }
    cvt(fd)?;
    // SAFETY: a fresh descriptor we own.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata()?;
    let st = std::os::unix::fs::MetadataExt::uid(&meta);
    if !meta.is_file() || st != uid() || std::os::unix::fs::MetadataExt::nlink(&meta) != 1 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: not a private file of this user; remove it",
                path.display()
            ),
        ));
    }
    if meta.permissions().mode() & 0o777 != MODE {
        file.set_permissions(std::fs::Permissions::from_mode(MODE))?;
    }
    Ok(file)
}

/// A listening Unix stream socket at `path` whose file is 0600 from the
/// moment it exists: the mode is set on the socket before bind, which
/// gives it to the file it creates (the umask can only narrow it).
pub fn listen(path: &Path) -> io::Result<UnixListener> {
    // SAFETY: plain socket creation.
    let fd =
        cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: a fresh descriptor we own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: changing the mode of our own socket.
    cvt(unsafe { libc::fchmod(sock.as_raw_fd(), MODE as libc::mode_t) })?;
    // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: addr is a valid sockaddr_un of at least `len` bytes.
    cvt(unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    })?;
    // SAFETY: a bound socket.
    cvt(unsafe { libc::listen(sock.as_raw_fd(), 128) })?;
    Ok(UnixListener::from(sock))
}

/// The uid of the process at the other end of a Unix socket.
pub fn peer_uid(fd: RawFd) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are valid out-pointers of the stated size.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(cred.uid)
}

/// True when a peer of `fd` runs as this process's user.
pub fn same_user(fd: RawFd) -> bool {
    peer_uid(fd).map(|u| u == uid()).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("openvia-private-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o777
    }

    #[test]
    fn a_new_log_is_0600_and_an_old_wide_one_is_narrowed() {
        let d = dir("log");
        let p = d.join("log");
        open_append(&p).unwrap();
        assert_eq!(mode(&p), 0o600);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        open_append(&p).unwrap();
        assert_eq!(mode(&p), 0o600);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_link_in_the_logs_place_is_not_followed() {
        let d = dir("link");
        let target = d.join("victim");
        std::fs::write(&target, b"keep").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let p = d.join("log");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        use std::io::Write;
        open_append(&p).unwrap().write_all(b"secret").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert_eq!(mode(&target), 0o644);
        assert!(std::fs::symlink_metadata(&p).unwrap().is_file());
        assert_eq!(mode(&p), 0o600);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_hard_link_is_refused() {
        let d = dir("hard");
        let other = d.join("other");
        std::fs::write(&other, b"x").unwrap();
        let p = d.join("log");
        std::fs::hard_link(&other, &p).unwrap();
        assert!(open_append(&p).is_err());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn the_socket_is_0600_and_its_peers_are_ours() {
        let d = dir("sock");
        let p = d.join("s");
        let l = listen(&p).unwrap();
        assert_eq!(mode(&p), 0o600);
        let c = std::os::unix::net::UnixStream::connect(&p).unwrap();
        let (s, _) = l.accept().unwrap();
        assert!(same_user(s.as_raw_fd()));
        drop(c);
        std::fs::remove_dir_all(d).unwrap();
    }
}
