//! Raw socket calls shared by the kernel transports, in both wait modes.
//!
//! The standard library sets sockets up (bind, connect, accept, options);
//! the data path uses libc directly so the wait mode is exact: `spin` passes
//! `MSG_DONTWAIT` and retries on `EAGAIN` without leaving user space for
//! longer than one system call, `block` lets the call sleep (`MSG_WAITALL`
//! for stream reads, so a large message costs as few calls as possible).

use super::WaitMode;
use crate::error::{BenchError, Result};
use std::io;
use std::os::fd::RawFd;
use std::time::Instant;

fn mode_flags(mode: WaitMode) -> libc::c_int {
    match mode {
        WaitMode::Spin => libc::MSG_DONTWAIT,
        WaitMode::Block => 0,
    }
}

/// Whether a failed call should simply be retried (and is not an error).
fn should_retry(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR))
}

/// Writes all of `buf` to a stream socket.
pub fn send_all(fd: RawFd, mut buf: &[u8], mode: WaitMode) -> Result<()> {
    let flags = mode_flags(mode) | libc::MSG_NOSIGNAL;
    while !buf.is_empty() {
        // SAFETY: `buf` is a live slice; the kernel reads at most buf.len() bytes.
        let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), flags) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if should_retry(&err) {
                std::hint::spin_loop();
                continue;
            }
            if err.raw_os_error() == Some(libc::EPIPE)
                || err.raw_os_error() == Some(libc::ECONNRESET)
            {
                return Err(BenchError::PeerClosed(format!("send: {err}")));
            }
            return Err(BenchError::io("send", err));
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes from a stream socket.
pub fn recv_exact(fd: RawFd, buf: &mut [u8], mode: WaitMode) -> Result<()> {
    let flags = match mode {
        WaitMode::Spin => libc::MSG_DONTWAIT,
        WaitMode::Block => libc::MSG_WAITALL,
    };
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a live, writable slice; the kernel writes at most rest.len() bytes.
        let n = unsafe { libc::recv(fd, rest.as_mut_ptr().cast(), rest.len(), flags) };
        if n == 0 {
            return Err(BenchError::PeerClosed(format!(
                "EOF after {done} of {} bytes",
                buf.len()
            )));
        }
        if n < 0 {
            let err = io::Error::last_os_error();
            if should_retry(&err) {
                std::hint::spin_loop();
                continue;
            }
            if err.raw_os_error() == Some(libc::ECONNRESET) {
                return Err(BenchError::PeerClosed(format!("recv: {err}")));
            }
            return Err(BenchError::io("recv", err));
        }
        done += n as usize;
    }
    Ok(())
}

/// Sends one datagram made of `header` followed by `payload` (gathered by the
/// kernel, so the payload is never copied in user space).
pub fn send_datagram(fd: RawFd, header: &[u8], payload: &[u8], mode: WaitMode) -> Result<()> {
    let mut iov = [
        libc::iovec {
            iov_base: header.as_ptr() as *mut _,
            iov_len: header.len(),
        },
        libc::iovec {
            iov_base: payload.as_ptr() as *mut _,
            iov_len: payload.len(),
        },
    ];
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    let flags = mode_flags(mode) | libc::MSG_NOSIGNAL;
    loop {
        // SAFETY: msg points at two iovecs over live slices; the kernel only reads them.
        let n = unsafe { libc::sendmsg(fd, &msg, flags) };
        if n >= 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        // ENOBUFS: the local queue is momentarily full; the datagram was not sent.
        if should_retry(&err) || err.raw_os_error() == Some(libc::ENOBUFS) {
            std::hint::spin_loop();
            continue;
        }
        if err.raw_os_error() == Some(libc::ECONNREFUSED) {
            return Err(BenchError::PeerClosed(format!("sendmsg: {err}")));
        }
        return Err(BenchError::io("sendmsg", err));
    }
}

/// Receives one datagram, scattering its first `header.len()` bytes into
/// `header` and the rest into `payload`. Returns the bytes stored and whether
/// the datagram was cut short (larger than both buffers), or `None` if
/// nothing arrived by `deadline` (blocking sockets must carry a short
/// SO_RCVTIMEO so the deadline is re-checked).
pub fn recv_datagram(
    fd: RawFd,
    header: &mut [u8],
    payload: &mut [u8],
    mode: WaitMode,
    deadline: Instant,
) -> Result<Option<(usize, bool)>> {
    let mut iov = [
        libc::iovec {
            iov_base: header.as_mut_ptr().cast(),
            iov_len: header.len(),
        },
        libc::iovec {
            iov_base: payload.as_mut_ptr().cast(),
            iov_len: payload.len(),
        },
    ];
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    let flags = mode_flags(mode);
    let mut polls: u32 = 0;
    loop {
        // SAFETY: msg points at two iovecs over live, writable slices.
        let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
        if n >= 0 {
            return Ok(Some((n as usize, msg.msg_flags & libc::MSG_TRUNC != 0)));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ECONNREFUSED) {
            return Err(BenchError::PeerClosed(format!("recvmsg: {err}")));
        }
        if !should_retry(&err) {
            return Err(BenchError::io("recvmsg", err));
        }
        // Reading the clock costs far less than the system call, but there is
        // no need to read it on every spin.
        polls = polls.wrapping_add(1);
        if (mode == WaitMode::Block || polls & 63 == 0) && Instant::now() >= deadline {
            return Ok(None);
        }
        std::hint::spin_loop();
    }
}

/// Sets an integer socket option.
pub fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
    what: &str,
) -> Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(BenchError::last_os(format!("setsockopt {what}")));
    }
    Ok(())
}

/// Grows a socket buffer to `bytes`: the FORCE variant ignores the sysctl
/// ceiling (needs CAP_NET_ADMIN); without it we take what the ceiling allows.
pub fn grow_buffer(fd: RawFd, receive: bool, bytes: usize) {
    let bytes = bytes.min(i32::MAX as usize) as libc::c_int;
    let (force, plain) = if receive {
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)
    } else {
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)
    };
    if set_int_option(fd, libc::SOL_SOCKET, force, bytes, "SO_*BUFFORCE").is_err() {
        // Best effort: the run still works with a smaller buffer, an
        // unreliable transport then reports the loss it causes.
        let _ = set_int_option(fd, libc::SOL_SOCKET, plain, bytes, "SO_*BUF");
    }
}
