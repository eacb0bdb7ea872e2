//! Unix sequenced-packet sockets in the abstract namespace.
//!
//! Abstract names vanish with the last socket bound to them, so a crashed
//! server leaves nothing in the file system. Message boundaries are kept,
//! file descriptors travel as SCM_RIGHTS, and SO_PEERCRED tells who is on
//! the other end, so only the same user may connect. The socket doubles as
//! the liveness channel: the kernel closes it when a process dies.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::cvt;

/// Who is on the other end of a connected socket.
#[derive(Clone, Copy, Debug)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
}

/// A connected or listening SOCK_SEQPACKET socket.
pub struct SeqPacket(OwnedFd);

fn abstract_addr(name: &[u8]) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if name.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket name too long",
        ));
    }
    // sun_path[0] stays 0: the abstract namespace.
    for (i, b) in name.iter().enumerate() {
        addr.sun_path[i + 1] = *b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    Ok((addr, len as libc::socklen_t))
}

fn new_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments.
    let fd =
        cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Waits until `fd` is readable (or hung up); false on time-out.
pub fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(std::time::Instant::now());
                left.as_millis().min(i32::MAX as u128) as i32
            }
        };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(n > 0);
    }
}

impl SeqPacket {
    /// Binds and listens on an abstract name. `AddrInUse` if taken.
    pub fn listen(name: &[u8]) -> io::Result<Self> {
        let fd = new_socket()?;
        let (addr, len) = abstract_addr(name)?;
        // SAFETY: `addr` is a valid sockaddr_un of length `len`.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        })?;
        // SAFETY: `fd` is a bound socket.
        cvt(unsafe { libc::listen(fd.as_raw_fd(), 64) })?;
        Ok(Self(fd))
    }

    /// Accepts one connection, waiting at most `timeout`; Ok(None) on time-out.
    pub fn accept(&self, timeout: Option<Duration>) -> io::Result<Option<Self>> {
        if !wait_readable(self.0.as_raw_fd(), timeout)? {
            return Ok(None);
        }
        // SAFETY: accepting on a listening socket; we do not need the address.
        let fd = unsafe {
            libc::accept4(
                self.0.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) {
                return Ok(None);
            }
            return Err(e);
        }
        // SAFETY: a fresh descriptor we own.
        Ok(Some(Self(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Connects to an abstract name. `ConnectionRefused` if nobody listens.
    pub fn connect(name: &[u8]) -> io::Result<Self> {
        let fd = new_socket()?;
        let (addr, len) = abstract_addr(name)?;
        // SAFETY: `addr` is a valid sockaddr_un of length `len`.
        cvt(unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        })?;
        Ok(Self(fd))
    }

    /// This socket at the descriptor floor or above (`super::floor`), for
    /// one a connection keeps for its life.
    pub fn lifted(self) -> Self {
        Self(super::floor::lift(self.0))
    }

    pub fn peer_cred(&self) -> io::Result<PeerCred> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid out-pointers of the right size.
        cvt(unsafe {
            libc::getsockopt(
                self.0.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        })?;
        Ok(PeerCred {
            pid: cred.pid,
            uid: cred.uid,
        })
    }

    /// Sends one message with the given descriptors attached.
    pub fn send(&self, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let fd_bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
        let mut cbuf = vec![0u64; space.div_ceil(8).max(1)];
        // SAFETY: msghdr is plain data; zero is a valid start.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            // SAFETY: the control buffer is large enough for one cmsg holding
            // `fds`, as computed by CMSG_SPACE above.
            unsafe {
                let cm = libc::CMSG_FIRSTHDR(&msg);
                (*cm).cmsg_level = libc::SOL_SOCKET;
                (*cm).cmsg_type = libc::SCM_RIGHTS;
                (*cm).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
                std::ptr::copy_nonoverlapping(
                    fds.as_ptr().cast::<u8>(),
                    libc::CMSG_DATA(cm),
                    fd_bytes,
                );
            }
        }
        loop {
            // SAFETY: `msg` points at live buffers for the duration of the call.
            let n = unsafe { libc::sendmsg(self.0.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Receives one message (up to `buf.len()` bytes) and any descriptors.
    /// Returns Ok(0) with no fds when the peer has closed.
    pub fn recv(&self, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut cbuf = [0u64; 16];
        // SAFETY: msghdr is plain data; zero is a valid start.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = loop {
            // SAFETY: `msg` points at live buffers for the duration of the call.
            let n = unsafe { libc::recvmsg(self.0.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        // SAFETY: walking the control messages the kernel wrote into `cbuf`;
        // every SCM_RIGHTS payload holds whole ints that are fresh descriptors.
        unsafe {
            let mut cm = libc::CMSG_FIRSTHDR(&msg);
            while !cm.is_null() {
                if (*cm).cmsg_level == libc::SOL_SOCKET && (*cm).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cm);
                    let bytes = (*cm).cmsg_len as usize - (data as usize - cm as usize);
                    let count = bytes / std::mem::size_of::<RawFd>();
                    for i in 0..count {
                        let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                cm = libc::CMSG_NXTHDR(&msg, cm);
            }
        }
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message truncated",
            ));
        }
        Ok(n)
    }

    /// Receives one message, waiting at most `timeout`; Ok(None) on time-out.
    pub fn recv_timeout(
        &self,
        buf: &mut [u8],
        fds: &mut Vec<OwnedFd>,
        timeout: Option<Duration>,
    ) -> io::Result<Option<usize>> {
        if !wait_readable(self.0.as_raw_fd(), timeout)? {
            return Ok(None);
        }
        self.recv(buf, fds).map(Some)
    }

    /// Shuts down both directions, so the peer sees end-of-file at once.
    pub fn shutdown(&self) {
        // SAFETY: shutdown on a socket we own.
        unsafe { libc::shutdown(self.0.as_raw_fd(), libc::SHUT_RDWR) };
    }

    pub fn raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_descriptors_and_credentials() {
        let name = format!(
            "openvia-test-{}-{}",
            crate::sys::pid(),
            crate::sys::random_u64()
        );
        let l = SeqPacket::listen(name.as_bytes()).unwrap();
        assert!(
            SeqPacket::listen(name.as_bytes()).is_err(),
            "name is exclusive"
        );
        let c = SeqPacket::connect(name.as_bytes()).unwrap();
        let s = l.accept(Some(Duration::from_secs(5))).unwrap().unwrap();
        let ev = crate::sys::poll::EventFd::new().unwrap();
        c.send(b"hello", &[ev.fd().as_raw_fd()]).unwrap();
        let mut buf = [0u8; 64];
        let mut fds = Vec::new();
        let n = s.recv(&mut buf, &mut fds).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        let cred = s.peer_cred().unwrap();
        assert_eq!(cred.uid, crate::sys::uid());
        assert_eq!(cred.pid, crate::sys::pid());
        drop(c);
        fds.clear();
        assert_eq!(s.recv(&mut buf, &mut fds).unwrap(), 0, "EOF after close");
    }
}
