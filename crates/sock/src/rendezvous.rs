//! Finding out, without a byte in the TCP stream, whether both ends of a
//! connection run under viarun. Everything goes over abstract Unix sockets
//! (per network namespace, so per host) whose peers are checked with
//! `SO_PEERCRED` to be the same user:
//!
//! - a listener under viarun holds `openvia-viarun/<uid>/l/<port>`; a
//!   connector probes that it exists before it connects;
//! - a connector that found one binds its TCP socket (learning its port
//!   `P`) and listens on `openvia-viarun/<uid>/c/<P>` before `connect`;
//! - the process that accepts the TCP connection from port `P` connects to
//!   that name and answers yes (with a fresh token naming the VI
//!   rendezvous) or no; the connector reads the answer before its first
//!   byte. A connector whose probe failed, and an acceptor whose peer has
//!   no such socket, stay on the kernel without anyone waiting.

use libc::{c_int, sockaddr, sockaddr_storage, sockaddr_un, socklen_t};
use std::os::fd::RawFd;

use crate::holder;
use crate::real::real;

const MAGIC: u32 = 0x3152_564f; // "OVR1"

/// The acceptor's answer: 4 magic, 2 port, 1 yes, 1 pad, 8 token.
pub const ANSWER_LEN: usize = 16;

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The abstract Unix socket name of the library's endpoint `kind/id` for
/// this user (another user's processes use other names).
pub fn abstract_name(kind: &str, id: impl std::fmt::Display) -> String {
    name_for(uid(), kind, id)
}

fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

fn name_for(uid: u32, kind: &str, id: impl std::fmt::Display) -> String {
    format!("openvia-viarun/{uid}/{kind}/{id}")
}

fn unix_addr(kind: &str, port: u16) -> (sockaddr_un, socklen_t) {
    unix_addr_for(uid(), kind, port)
}

fn unix_addr_for(uid: u32, kind: &str, port: u16) -> (sockaddr_un, socklen_t) {
    let name = name_for(uid, kind, port);
    // SAFETY: sockaddr_un is plain data; zero is a valid value.
    let mut a: sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // Abstract name: a leading NUL, then the bytes (bounded by sun_path).
    for (i, b) in name.bytes().take(a.sun_path.len() - 1).enumerate() {
        a.sun_path[i + 1] = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len().min(a.sun_path.len() - 1);
    (a, len as socklen_t)
}

fn unix_socket() -> Option<RawFd> {
    // SAFETY: plain socket creation.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    (fd >= 0).then_some(fd)
}

/// `fd` moved to the library's descriptor floor (`fdroom`, through the
/// core's `sys::floor`), or itself.
fn lifted(fd: RawFd) -> RawFd {
    use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
    // SAFETY: a fresh descriptor of this module's, owned from here on and
    // handed back as the raw number the caller keeps.
    openvia_core::sys::floor::lift(unsafe { OwnedFd::from_raw_fd(fd) }).into_raw_fd()
}

fn close(fd: RawFd) {
    // SAFETY: closing a descriptor this module opened.
    unsafe { (real().close)(fd) };
}

/// A Unix socket listening on `kind/port`, or None (name taken, no fds).
fn listen_on(kind: &str, port: u16) -> Option<RawFd> {
    // Held until the answer comes, maybe long after: at the library's
    // floor, so that a client making many connections before it uses
    // them keeps its sockets where kernel TCP would put them.
    let fd = lifted(unix_socket()?);
    let (a, len) = unix_addr(kind, port);
    // SAFETY: `a` is a valid sockaddr_un of `len` bytes.
    let ok = unsafe {
        libc::bind(fd, &a as *const sockaddr_un as *const sockaddr, len) == 0
            && (real().listen)(fd, 1024) == 0
    };
    if ok {
        Some(fd)
    } else {
        close(fd);
        None
    }
}

/// Connected to `kind/port`, its peer checked to be our user; None if no
/// such listener or another user's.
/// A connection to the name `kind`/`port` of a process of our user, and
/// that process's pid.
fn connect_to(kind: &str, port: u16) -> Option<(RawFd, u32)> {
    let fd = unix_socket()?;
    let uid = uid();
    let (a, len) = unix_addr_for(uid, kind, port);
    // SAFETY: `a` is a valid sockaddr_un of `len` bytes.
    let r = unsafe { (real().connect)(fd, &a as *const sockaddr_un as *const sockaddr, len) };
    match (r, of_user(fd, uid)) {
        (0, Some(pid)) => Some((fd, pid)),
        _ => {
            close(fd);
            None
        }
    }
}

/// The peer's pid, if it is a process of our user.
fn same_user(fd: RawFd) -> Option<u32> {
    of_user(fd, uid())
}

/// The peer's pid, if it is a process of user `uid`.
fn of_user(fd: RawFd, uid: u32) -> Option<u32> {
    // SAFETY: ucred is plain data, getsockopt writes at most `len` bytes.
    unsafe {
        let mut c: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as socklen_t;
        (libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut c as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        ) == 0
            && c.uid == uid)
            .then_some(c.pid as u32)
    }
}

/// The registry entry of a listening TCP socket on `port`.
pub fn register_listener(port: u16) -> Option<RawFd> {
    listen_on("l", port)
}

/// The next connection queued on `listener` (one of ours: nonblocking),
/// None when there is none (or on an error: errno says which).
fn accept_queued(listener: RawFd) -> Option<RawFd> {
    // SAFETY: accept on our own listening socket, no address asked.
    let fd = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    };
    (fd >= 0).then_some(fd)
}

/// Takes and drops the probes queued on a registry socket (they carry no
/// data; draining keeps its backlog from filling).
pub fn drain_probes(registry: RawFd) {
    loop {
        let Some(fd) = accept_queued(registry) else {
            return;
        };
        close(fd);
    }
}

/// Whether a listener under viarun (our user) holds `port` on this host.
pub fn listener_exists(port: u16) -> bool {
    match connect_to("l", port) {
        Some((fd, _)) => {
            close(fd);
            true
        }
        None => false,
    }
}

/// The connector's socket for the acceptor's answer, named by its port.
pub fn connector_socket(local_port: u16) -> Option<RawFd> {
    listen_on("c", local_port)
}

/// Acceptor side: answers the connector at `peer_port` (if it is waiting
/// under viarun). `control` is asked for the connection's control page
/// only then (with the connector's pid); with one the answer is yes and
/// the page goes along. Some(token) when both agreed on openvia, None
/// otherwise.
pub fn answer(
    peer_port: u16,
    listen_port: u16,
    control: impl FnOnce(u32) -> Option<RawFd>,
) -> Option<u64> {
    let (fd, connector) = connect_to("c", peer_port)?;
    let control = control(connector);
    let token = openvia_core::sys::random_u64() | 1;
    let mut msg = [0u8; ANSWER_LEN];
    msg[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    msg[4..6].copy_from_slice(&listen_port.to_le_bytes());
    msg[6] = u8::from(control.is_some());
    msg[8..16].copy_from_slice(&token.to_le_bytes());
    let n = send_with_fd(fd, &msg, control);
    close(fd);
    (control.is_some() && n == ANSWER_LEN as isize).then_some(token)
}

/// Space for one descriptor's control message (aligned as a cmsghdr).
#[repr(C, align(8))]
struct FdCmsg {
    buf: [u8; 64],
}

/// Sends `msg` on `fd` (16 bytes fit any buffer), with `pass` as
/// SCM_RIGHTS when given.
fn send_with_fd(fd: RawFd, msg: &[u8], pass: Option<RawFd>) -> isize {
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // SAFETY: msghdr and the cmsg buffer are plain data, zero is valid.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    let mut cm = FdCmsg { buf: [0; 64] };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    if let Some(pass) = pass {
        // SAFETY: CMSG_SPACE/LEN of one int fit the 64-byte buffer; the
        // header pointer comes from our msghdr, which points at it.
        unsafe {
            h.msg_control = cm.buf.as_mut_ptr().cast();
            h.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<c_int>() as u32) as usize;
            let c = libc::CMSG_FIRSTHDR(&h);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<c_int>(), pass);
        }
    }
    // SAFETY: a valid msghdr describing our buffers.
    unsafe { libc::sendmsg(fd, &h, libc::MSG_NOSIGNAL) }
}

/// Reads into `buf` from `fd`; a descriptor passed along is stored in
/// `passed` (any further ones are closed).
fn recv_with_fd(fd: RawFd, buf: &mut [u8], passed: &mut Option<RawFd>) -> isize {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr and the cmsg buffer are plain data, zero is valid.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    let mut cm = FdCmsg { buf: [0; 64] };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = cm.buf.as_mut_ptr().cast();
    h.msg_controllen = std::mem::size_of::<FdCmsg>();
    // SAFETY: a valid msghdr describing our buffers.
    let n = unsafe { libc::recvmsg(fd, &mut h, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return n;
    }
    // SAFETY: walking the control messages the kernel wrote into our
    // buffer with the CMSG macros, which stay within msg_controllen; each
    // SCM_RIGHTS payload is read as whole ints inside its cmsg_len.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let header = libc::CMSG_LEN(0) as usize;
                let count = ((*c).cmsg_len as usize).saturating_sub(header) / 4;
                for i in 0..count {
                    let f = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<c_int>().add(i));
                    if passed.is_none() {
                        *passed = Some(f);
                    } else {
                        close(f);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&h, c);
        }
    }
    n
}

/// The first word of a control page stashed on a connector's answer
/// socket (`stash_page`).
const STASH: &[u8; 8] = b"viarunS1";

/// Connector side, in a program that took an unused connection up from
/// an exec record (`inherit`) and got the acceptor's answer: leaves a copy
/// of the control page `page` queued on the answer socket `listener`,
/// which the record's holders (the program's parent) keep open. A program
/// the parent runs on the socket later (a shell's second command) finds
/// the record used, takes the page from there (`unstash_page`) and hands
/// the connection back to the kernel through it, instead of refusing it.
pub fn stash_page(listener: RawFd, page: RawFd) {
    // SAFETY: sockaddr_un is plain data; getsockname writes at most `len`.
    let mut a: sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<sockaddr_un>() as socklen_t;
    // SAFETY: our listener and our buffer of `len` bytes.
    if unsafe { libc::getsockname(listener, (&mut a as *mut sockaddr_un).cast(), &mut len) } != 0 {
        return;
    }
    let Some(fd) = unix_socket() else { return };
    // SAFETY: the address the kernel just gave, `len` bytes of it.
    let r = unsafe { (real().connect)(fd, (&a as *const sockaddr_un).cast(), len) };
    if r == 0 {
        // Queued whole or not at all (a Unix stream of 8 bytes).
        send_with_fd(fd, STASH, Some(page));
    }
    close(fd);
}

/// A control page stashed on `listener` (`stash_page`), taken off it and
/// left there again for the next program; None if there is none.
pub fn unstash_page(listener: RawFd) -> Option<RawFd> {
    loop {
        let fd = accept_queued(listener)?;
        let mut msg = [0u8; 8];
        let mut passed = None;
        let n = if same_user(fd).is_some() {
            recv_with_fd(fd, &mut msg, &mut passed)
        } else {
            -1
        };
        close(fd);
        match passed {
            Some(page) if n == msg.len() as isize && &msg == STASH => {
                stash_page(listener, page);
                return Some(page);
            }
            Some(other) => close(other),
            None => {}
        }
    }
}

/// Connector side: waits for the acceptor's answer on `listener`.
/// Some((token, control page fd)) for yes; None for no (or nonsense).
/// A TCP connection that fails meanwhile (`tcp` shows an error) gives no.
pub fn await_answer(listener: RawFd, dst_port: u16, tcp: RawFd) -> Option<(u64, RawFd)> {
    let mut gap = ASK_HOLDER_MS;
    loop {
        let mut p = [
            libc::pollfd {
                fd: listener,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: tcp,
                events: 0,
                revents: 0,
            },
        ];
        // SAFETY: two pollfds of ours.
        let ready = unsafe { (crate::real::real().poll)(p.as_mut_ptr(), 2, gap) };
        if ready == 0 {
            if accepted_by_a_plain_process(tcp) && !answer_waiting(listener) {
                return None;
            }
            gap = (gap * 2).min(ASK_HOLDER_MAX_MS);
            continue;
        }
        if p[1].revents & libc::POLLERR != 0 && p[0].revents & libc::POLLIN == 0 {
            return None;
        }
        let Some(fd) = accept_queued(listener) else {
            if errno() == libc::EAGAIN || errno() == libc::EINTR {
                continue;
            }
            return None;
        };
        if same_user(fd).is_none() {
            close(fd);
            continue;
        }
        let mut msg = [0u8; ANSWER_LEN];
        let mut got = 0;
        let mut passed = None;
        while got < ANSWER_LEN {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd of ours.
            unsafe { (crate::real::real().poll)(&mut p, 1, 1000) };
            let n = recv_with_fd(fd, &mut msg[got..], &mut passed);
            if n == 0 || (n < 0 && errno() != libc::EAGAIN && errno() != libc::EINTR) {
                break;
            }
            if n > 0 {
                got += n as usize;
            }
        }
        close(fd);
        let valid = got == ANSWER_LEN
            && msg[0..4] == MAGIC.to_le_bytes()
            && u16::from_le_bytes([msg[4], msg[5]]) == dst_port;
        if !valid {
            if let Some(f) = passed {
                close(f);
            }
            continue;
        }
        let token = u64::from_le_bytes(msg[8..16].try_into().unwrap_or([0; 8]));
        return match (msg[6] == 1, passed) {
            (true, Some(f)) => Some((token, f)),
            (_, f) => {
                if let Some(f) = f {
                    close(f);
                }
                None
            }
        };
    }
}

/// How long a connector waits for an answer before it looks who took
/// its connection (holder.rs); the gap to the next look doubles up to
/// `ASK_HOLDER_MAX_MS`, since a look reads /proc (milliseconds where
/// many sockets are open) and a server slow to accept keeps many
/// connectors waiting.
const ASK_HOLDER_MS: c_int = 100;
const ASK_HOLDER_MAX_MS: c_int = 800;

/// Whether the other end of `tcp` was accepted by a process on this host
/// that does not run under viarun (a second listener on the port): it
/// will never answer.
fn accepted_by_a_plain_process(tcp: RawFd) -> bool {
    let here = name_of(tcp, false).and_then(|a| crate::remote::socket_addr(&a));
    let there = name_of(tcp, true).and_then(|a| crate::remote::socket_addr(&a));
    match (here, there) {
        (Some(here), Some(there)) => holder::of_peer(here, there) == holder::Holder::Plain,
        _ => false,
    }
}

/// Whether an answer waits on the connector's listener now.
fn answer_waiting(listener: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd: listener,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd of ours, no waiting.
    unsafe { (crate::real::real().poll)(&mut p, 1, 0) == 1 }
}

/// Port of a socket address (IPv4 or IPv6), None for other families.
pub fn port_of(a: &sockaddr_storage) -> Option<u16> {
    match c_int::from(a.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let s = unsafe { &*(a as *const sockaddr_storage as *const libc::sockaddr_in) };
            Some(u16::from_be(s.sin_port))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let s = unsafe { &*(a as *const sockaddr_storage as *const libc::sockaddr_in6) };
            Some(u16::from_be(s.sin6_port))
        }
        _ => None,
    }
}

/// Text of an address, for the statistics' connection key.
pub fn text_of(a: &sockaddr_storage) -> String {
    let mut s = String::new();
    let _ = write_address(a, &mut s);
    s
}

/// `text_of` into any writer (a buffer on the stack, where nothing may be
/// allocated: `stats::record_in_exec`).
pub fn write_address(a: &sockaddr_storage, out: &mut impl std::fmt::Write) -> std::fmt::Result {
    match c_int::from(a.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let s = unsafe { &*(a as *const sockaddr_storage as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
            write!(out, "{ip}:{}", u16::from_be(s.sin_port))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let s = unsafe { &*(a as *const sockaddr_storage as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(s.sin6_addr.s6_addr);
            let port = u16::from_be(s.sin6_port);
            match ip.to_ipv4_mapped() {
                Some(v4) => write!(out, "{v4}:{port}"),
                None => write!(out, "{ip}:{port}"),
            }
        }
        _ => out.write_str("?"),
    }
}

/// getsockname (`peer` false) or getpeername of `fd`.
pub fn name_of(fd: RawFd, peer: bool) -> Option<sockaddr_storage> {
    // SAFETY: sockaddr_storage is plain data and large enough for any name.
    unsafe {
        let mut a: sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<sockaddr_storage>() as socklen_t;
        let p = &mut a as *mut sockaddr_storage as *mut sockaddr;
        let r = if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        };
        (r == 0).then_some(a)
    }
}

/// Whether `addr` (of `len` bytes) is an address of this host: a datagram
/// socket can bind to it.
pub fn is_local(addr: *const sockaddr, len: socklen_t) -> bool {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sockaddr_in>() {
        return false;
    }
    // SAFETY: the caller's address of `len` bytes (checked non-null and at
    // least a sockaddr_in); copied into storage before it is changed.
    unsafe {
        let mut a: sockaddr_storage = std::mem::zeroed();
        let n = (len as usize).min(std::mem::size_of::<sockaddr_storage>());
        std::ptr::copy_nonoverlapping(
            addr.cast::<u8>(),
            (&mut a as *mut sockaddr_storage).cast::<u8>(),
            n,
        );
        let family = c_int::from(a.ss_family);
        if is_loopback(&a) {
            // Always this host's: spares the three system calls (a socket
            // made and freed) below, at each end of every connection.
            return true;
        }
        match family {
            libc::AF_INET => {
                (*(&mut a as *mut sockaddr_storage as *mut libc::sockaddr_in)).sin_port = 0
            }
            libc::AF_INET6 => {
                (*(&mut a as *mut sockaddr_storage as *mut libc::sockaddr_in6)).sin6_port = 0
            }
            _ => return false,
        }
        let fd = libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return false;
        }
        let ok = libc::bind(
            fd,
            &a as *const sockaddr_storage as *const sockaddr,
            n as socklen_t,
        ) == 0;
        close(fd);
        ok
    }
}

/// Whether `a` is a loopback address: 127.0.0.0/8, ::1, or 127.x mapped
/// into IPv6.
fn is_loopback(a: &sockaddr_storage) -> bool {
    let p = a as *const sockaddr_storage;
    match c_int::from(a.ss_family) {
        libc::AF_INET => {
            // SAFETY: an AF_INET name in storage large enough for any.
            let sin = unsafe { &*(p as *const libc::sockaddr_in) };
            std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).is_loopback()
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 name in storage large enough for any.
            let sin6 = unsafe { &*(p as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        _ => false,
    }
}

/// Binds `fd` (family `family`) to the wildcard address, port 0, so that
/// its port is known before `connect`.
pub fn bind_any(fd: RawFd, family: c_int) -> bool {
    // SAFETY: zeroed sockaddr_in/in6 are the wildcard address, port 0.
    unsafe {
        let mut a: sockaddr_storage = std::mem::zeroed();
        a.ss_family = family as libc::sa_family_t;
        let len = if family == libc::AF_INET {
            std::mem::size_of::<libc::sockaddr_in>()
        } else {
            std::mem::size_of::<libc::sockaddr_in6>()
        };
        libc::bind(
            fd,
            &a as *const sockaddr_storage as *const sockaddr,
            len as socklen_t,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(ip: [u8; 4]) -> sockaddr_storage {
        // SAFETY: plain data; an AF_INET name written into it.
        unsafe {
            let mut a: sockaddr_storage = std::mem::zeroed();
            let sin = &mut *(&mut a as *mut sockaddr_storage as *mut libc::sockaddr_in);
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from_be_bytes(ip).to_be();
            a
        }
    }

    fn v6(ip: std::net::Ipv6Addr) -> sockaddr_storage {
        // SAFETY: plain data; an AF_INET6 name written into it.
        unsafe {
            let mut a: sockaddr_storage = std::mem::zeroed();
            let sin6 = &mut *(&mut a as *mut sockaddr_storage as *mut libc::sockaddr_in6);
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_addr.s6_addr = ip.octets();
            a
        }
    }

    /// Loopback names are known local without a socket; others are asked
    /// of the kernel (an address no interface has is not local).
    #[test]
    fn loopback_is_local_without_asking_and_others_are_asked() {
        let local = |a: &sockaddr_storage| {
            is_local(
                (a as *const sockaddr_storage).cast(),
                std::mem::size_of::<sockaddr_storage>() as socklen_t,
            )
        };
        for a in [
            v4([127, 0, 0, 1]),
            v4([127, 1, 2, 3]),
            v6(std::net::Ipv6Addr::LOCALHOST),
            v6(std::net::Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped()),
        ] {
            assert!(is_loopback(&a) && local(&a));
        }
        // TEST-NET-3: documentation only, on no interface.
        let far = v4([203, 0, 113, 9]);
        assert!(!is_loopback(&far) && !local(&far));
    }

    /// A page stashed on an answer socket is there for every program that
    /// asks, one after another, and only a stash is taken for one.
    #[test]
    fn a_stashed_page_is_found_again_and_again() {
        let port = 40_000 + (std::process::id() % 20_000) as u16;
        let listener = connector_socket(port).expect("answer socket");
        assert!(unstash_page(listener).is_none(), "nothing stashed yet");
        // Something else queued first (a late answer's connection) is
        // passed over.
        let (stray, _) = connect_to("c", port).expect("connect");
        assert!(send_with_fd(stray, b"nonsense", None) > 0);
        close(stray);
        // SAFETY: a NUL-terminated name; the flags are valid.
        let page = unsafe { libc::memfd_create(c"viarun-control".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(page >= 0);
        stash_page(listener, page);
        let ino = crate::kernel::inode(page);
        for _ in 0..3 {
            let got = unstash_page(listener).expect("stashed");
            assert_eq!(crate::kernel::inode(got), ino, "the same page");
            close(got);
        }
        close(page);
        close(listener);
    }
}
