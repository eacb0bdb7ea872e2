//! UDP sockets as the device uses them: non-blocking, large buffers,
//! recv/recvmsg/recvmmsg, UDP GSO switched on for `tx` (one call hands the
//! kernel a run of equal-sized datagrams, `UDP_SEGMENT`) and GRO on
//! receive while datagrams come in numbers (`UDP_GRO`: the kernel may
//! hand back several datagrams glued together, with their size in a
//! control message; off, a lone datagram is read with a plain recv).
//! Interface queries (address, MTU) live here too since they are socket
//! ioctls.

use std::cell::Cell;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::devices::rum::rx::{RxBatch, RX_BATCH};
use crate::sys::cvt;
pub use crate::sys::net::{
    first_non_loopback, host_bytes, host_ip, interface_addresses, interface_info, interface_mtu,
    interface_of,
};

pub(super) const SOL_UDP: libc::c_int = 17;
pub(super) const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Receive buffers per recvmmsg call.
/// One receive buffer holds a whole GRO super-datagram.
pub const RX_BUF: usize = 65536;

fn to_raw(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn from_raw(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let sin = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                0,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: passing a pointer to a live c_int of the stated size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// A non-blocking UDP socket.
pub struct UdpSock {
    fd: OwnedFd,
    /// The kernel took UDP_SEGMENT on this socket.
    pub gso: bool,
    /// The kernel took UDP_GRO on this socket (see [`UdpSock::set_gro`]).
    gro_capable: bool,
    /// UDP_GRO is on now: a receive may hold several datagrams, told
    /// apart only by its control data.
    gro: Cell<bool>,
}

impl UdpSock {
    /// Binds to `addr` (port 0: any). `reuseport`: join the port's group.
    pub fn bind(addr: SocketAddr, reuseport: bool) -> io::Result<UdpSock> {
        let domain = if addr.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // SAFETY: plain syscall with constant arguments.
        let fd = cvt(unsafe {
            libc::socket(
                domain,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: a fresh descriptor we own. A VI's socket lives as long as
        // its connection: at the descriptor floor where one is set.
        let fd = crate::sys::floor::lift(unsafe { OwnedFd::from_raw_fd(fd) });
        let raw = fd.as_raw_fd();
        if reuseport {
            setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1);
        }
        if domain == libc::AF_INET6 && addr.ip().is_unspecified() {
            setsockopt_int(raw, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0);
        }
        // Bursts of a whole window arrive between two polls: give the
        // kernel room (FORCE works for root, else the capped request does).
        let bytes = 8 << 20;
        if !setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes) {
            setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes);
        }
        if !setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, bytes) {
            setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_SNDBUF, bytes);
        }
        let (ss, len) = to_raw(&addr);
        // SAFETY: `ss` holds a valid address of `len` bytes.
        cvt(unsafe { libc::bind(raw, (&ss as *const libc::sockaddr_storage).cast(), len) })?;
        Ok(UdpSock {
            fd,
            gso: false,
            gro_capable: false,
            gro: Cell::new(false),
        })
    }

    /// Turns on GSO/GRO where the kernel has them (the flags record which).
    /// (The first socket of the host to take UDP_GRO switches the kernel's
    /// UDP encapsulation path on, and the last to close switches it off:
    /// see [`gro_keeper`].)
    pub fn enable_offloads(&mut self, gso: bool, gro: bool) {
        let raw = self.fd.as_raw_fd();
        self.gro_capable = gro && setsockopt_int(raw, SOL_UDP, UDP_GRO, 1);
        self.gro.set(self.gro_capable);
        // Probe GSO with a harmless socket-wide default of 0 (off).
        self.gso = gso && setsockopt_int(raw, SOL_UDP, UDP_SEGMENT, 0);
    }

    /// Turns GRO off, for the plain recv, if the queue is empty once it
    /// is: then nothing glued is left in it (with GRO off the kernel cuts
    /// bursts apart as it queues them). Otherwise GRO goes back on and the
    /// answer is false. GRO lets one receive take a whole GSO burst of the
    /// peer's, which streams want; but a socket with GRO needs recvmsg and
    /// its control data on every receive, while a ping-pong polling for
    /// lone datagrams does better with a plain recv. What remains: a burst
    /// the kernel had begun to queue as GRO went off, in the few hundred
    /// nanoseconds between its check of the setting and its taking the
    /// queue's lock; it would be read as one datagram, malformed, and
    /// dropped.
    pub fn gro_off_if_quiet(&self) -> bool {
        if !self.gro.get() {
            return true;
        }
        self.set_gro(false);
        if self.gro.get() {
            return false;
        }
        let mut probe = [0u8; 1];
        // SAFETY: peeking into a one-byte buffer we own.
        let queued = unsafe {
            libc::recv(
                self.raw_fd(),
                probe.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        } >= 0;
        if queued {
            self.set_gro(true);
        }
        !queued
    }

    /// Turns GRO on or off (where the kernel took it); see
    /// [`UdpSock::gro_off_if_quiet`] for turning it off safely.
    pub fn set_gro(&self, on: bool) {
        if !self.gro_capable || self.gro.get() == on {
            return;
        }
        if setsockopt_int(self.raw_fd(), SOL_UDP, UDP_GRO, i32::from(on)) {
            self.gro.set(on);
        }
    }

    /// Whether GRO is on now.
    #[cfg(test)]
    pub fn gro(&self) -> bool {
        self.gro.get()
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        // SAFETY: getsockname writes at most `len` bytes into `ss`.
        let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        cvt(unsafe {
            libc::getsockname(
                self.raw_fd(),
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        })?;
        from_raw(&ss).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
    }

    /// Fixes the peer: the kernel then drops datagrams from anyone else.
    pub fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        let (ss, len) = to_raw(&peer);
        // SAFETY: `ss` holds a valid address of `len` bytes.
        cvt(unsafe {
            libc::connect(
                self.raw_fd(),
                (&ss as *const libc::sockaddr_storage).cast(),
                len,
            )
        })?;
        Ok(())
    }

    pub fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        let (ss, len) = to_raw(&to);
        // SAFETY: `buf` and `ss` are valid for their lengths.
        let n = unsafe {
            libc::sendto(
                self.raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                0,
                (&ss as *const libc::sockaddr_storage).cast(),
                len,
            )
        };
        cvt(n as i32).map(|_| n as usize)
    }

    /// Sends on a connected socket.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for its length.
        let n = unsafe { libc::send(self.raw_fd(), buf.as_ptr().cast(), buf.len(), 0) };
        cvt(n as i32).map(|_| n as usize)
    }

    /// One datagram, without waiting; None if nothing is queued.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        // SAFETY: recvfrom writes at most buf.len() bytes and `len` address bytes.
        let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let n = unsafe {
            libc::recvfrom(
                self.raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                // A previous send hit a closed port: not this datagram's fault.
                Some(libc::ECONNREFUSED) => Ok(None),
                _ => Err(e),
            };
        }
        let from = from_raw(&ss).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))?;
        Ok(Some((n as usize, from)))
    }

    /// Waits until readable or `timeout` passes; true if readable.
    pub fn wait_readable(&self, timeout: Duration) -> bool {
        let mut p = libc::pollfd {
            fd: self.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one pollfd we own.
        unsafe { libc::poll(&mut p, 1, ms.max(if timeout.is_zero() { 0 } else { 1 })) > 0 }
    }

    /// One datagram, the common case of a small message and of an ack: a
    /// plain send, without building a message vector (`tx::send_batch`'s
    /// result and error rules).
    pub(super) fn send_one(&self, datagram: &[u8]) -> io::Result<usize> {
        loop {
            return match self.send(datagram) {
                Ok(_) => Ok(1),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) => Ok(0),
                    _ => Err(e),
                },
            };
        }
    }

    /// Receives what is queued, without waiting, into at most `max` (1 to
    /// [`RX_BATCH`]) buffers of `rx`; returns the number filled. With
    /// `max` 1 this is one recvmsg: recvmmsg, having filled a buffer, goes
    /// back to the queue for the next and finds it empty, a second trip
    /// through the socket's receive path on every reply of a ping-pong.
    pub fn recv_batch(&self, rx: &mut RxBatch, max: usize) -> io::Result<usize> {
        let max = max.clamp(1, RX_BATCH);
        rx.ready(max);
        let cmsg_space = {
            // SAFETY: pure computation.
            unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize }
        };
        let stride = cmsg_space.div_ceil(8);
        if rx.control.len() < RX_BATCH * stride {
            rx.control = vec![0u64; RX_BATCH * stride];
        }
        if max == 1 {
            return self.recv_one(rx, cmsg_space);
        }
        // On the stack: the device polls this on every progress call, and
        // a busy-polling program calls progress back to back.
        let mut iovs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; RX_BATCH];
        for (iov, b) in iovs.iter_mut().zip(rx.bufs.iter_mut()) {
            iov.iov_base = b.as_mut_ptr().cast();
            iov.iov_len = b.len();
        }
        // SAFETY: all-zero is a valid mmsghdr.
        let mut msgs: [libc::mmsghdr; RX_BATCH] = unsafe { zeroed() };
        for (k, m) in msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_iov = &mut iovs[k];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = rx.control[k * stride..].as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = cmsg_space;
        }
        // SAFETY: every header points at a live buffer and control area.
        let r = unsafe {
            libc::recvmmsg(
                self.raw_fd(),
                msgs.as_mut_ptr(),
                max as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return nothing_or_error();
        }
        let r = r as usize;
        for (k, m) in msgs.iter().take(r).enumerate() {
            record(rx, k, m.msg_len as usize, &m.msg_hdr);
        }
        Ok(r)
    }

    /// `recv_batch` for one buffer, for the busy poll of a ping-pong: a
    /// plain recv where no control data can come (GRO off), which spares
    /// the kernel copying in and checking a message header on every poll;
    /// otherwise one message header, not a vector of them to clear.
    fn recv_one(&self, rx: &mut RxBatch, cmsg_space: usize) -> io::Result<usize> {
        if !self.gro.get() {
            let buf = &mut rx.bufs[0];
            // SAFETY: receiving into a buffer we own, of its length.
            let n = unsafe {
                libc::recv(
                    self.raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                return nothing_or_error();
            }
            // MSG_TRUNC: the datagram's whole length, even past the buffer.
            let whole = n as usize;
            rx.lens[0] = (whole.min(buf.len()), 0);
            rx.truncated[0] = whole > buf.len();
            return Ok(1);
        }
        let mut iov = libc::iovec {
            iov_base: rx.bufs[0].as_mut_ptr().cast(),
            iov_len: rx.bufs[0].len(),
        };
        // SAFETY: all-zero is a valid msghdr.
        let mut hdr: libc::msghdr = unsafe { zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = rx.control.as_mut_ptr().cast();
        hdr.msg_controllen = cmsg_space;
        // SAFETY: the header points at a live buffer and control area.
        let n = unsafe { libc::recvmsg(self.raw_fd(), &mut hdr, libc::MSG_DONTWAIT) };
        if n < 0 {
            return nothing_or_error();
        }
        record(rx, 0, n as usize, &hdr);
        Ok(1)
    }
}

/// A failed receive: nothing there is no error. ECONNREFUSED is: an
/// ICMP port (or protocol) unreachable answered a datagram of this
/// connected socket (the kernel reports such hard errors on a connected
/// UDP socket once, on its next receive or send) — see [`refused`].
fn nothing_or_error() -> io::Result<usize> {
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
        _ => Err(e),
    }
}

/// A socket that takes UDP_GRO and nothing else, held open for the NIC's
/// life. The first socket of the host with UDP_GRO switches the kernel's
/// UDP encapsulation path on (a static key: the kernel rewrites its own
/// code and interrupts every CPU), and the last one closed switches it
/// off again. A process whose VI sockets were the only ones paid that
/// twice per connection: creating and closing a socket with UDP_GRO took
/// ~95 µs against ~7 µs with another one open, on every connection's two
/// ends. None where the kernel refuses UDP_GRO.
pub fn gro_keeper() -> Option<OwnedFd> {
    // SAFETY: plain syscall with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor we own; it lives as long as the NIC, at
    // the descriptor floor where one is set.
    let fd = crate::sys::floor::lift(unsafe { OwnedFd::from_raw_fd(fd) });
    setsockopt_int(fd.as_raw_fd(), SOL_UDP, UDP_GRO, 1).then_some(fd)
}

/// Whether a send or receive failed because the peer's host said its
/// port is closed (ICMP port unreachable): the peer process is gone.
pub fn refused(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ECONNREFUSED)
}

/// Notes what the kernel wrote into buffer `k`: its length, whether
/// it was cut short, and the GRO segment size from its control data.
fn record(rx: &mut RxBatch, k: usize, len: usize, hdr: &libc::msghdr) {
    let mut seg = 0usize;
    // SAFETY: walking the control messages the kernel wrote, within
    // msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == SOL_UDP && (*c).cmsg_type == UDP_GRO {
                seg = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int) as usize;
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    rx.lens[k] = (len, seg);
    rx.truncated[k] = hdr.msg_flags & libc::MSG_TRUNC != 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keeper is a socket with UDP_GRO on (the kernel of every
    /// supported system takes it, as `pair(true)` below assumes too).
    #[test]
    fn the_gro_keeper_holds_udp_gro() {
        let keeper = gro_keeper().expect("a socket with UDP_GRO");
        let mut on: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: reading an int option into our own int.
        let rc = unsafe {
            libc::getsockopt(
                keeper.as_raw_fd(),
                SOL_UDP,
                UDP_GRO,
                (&mut on as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!((rc, on), (0, 1));
    }

    fn pair(gro: bool) -> (UdpSock, UdpSock) {
        let lo = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut rx = UdpSock::bind(lo, false).unwrap();
        rx.enable_offloads(false, gro);
        assert_eq!(rx.gro(), gro, "UDP_GRO not taken");
        let tx = UdpSock::bind(lo, false).unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        (rx, tx)
    }

    /// Both single-receive paths (plain recv without GRO, a message
    /// header with it) and the batch: exact bytes, nothing when empty, and
    /// a datagram longer than the buffer flagged as cut short.
    #[test]
    fn single_and_batch_receives_report_length_and_truncation() {
        for gro in [false, true] {
            let (rx, tx) = pair(gro);
            let mut b = RxBatch::new(100);
            assert_eq!(rx.recv_batch(&mut b, 1).unwrap(), 0, "gro {gro}");
            let small: Vec<u8> = (0..60u8).collect();
            let big = vec![7u8; 300];
            for max in [1, RX_BATCH] {
                tx.send(&small).unwrap();
                tx.send(&big).unwrap();
                assert!(rx.wait_readable(Duration::from_secs(5)));
                let mut got = Vec::new();
                while got.len() < 2 {
                    let n = rx.recv_batch(&mut b, max).unwrap();
                    for k in 0..n {
                        let d: Vec<u8> = b.datagrams(k).flat_map(|d| d.to_vec()).collect();
                        got.push((d, b.truncated[k]));
                    }
                }
                assert_eq!(got[0], (small.clone(), false), "gro {gro} max {max}");
                assert_eq!(got[1], (vec![7u8; 100], true), "gro {gro} max {max}");
                assert_eq!(rx.recv_batch(&mut b, max).unwrap(), 0);
            }
        }
    }

    /// Reads every datagram queued (waiting for the first), one buffer
    /// per call when `max` is 1.
    fn drain(rx: &UdpSock, b: &mut RxBatch, max: usize, want: usize) -> Vec<Vec<u8>> {
        assert!(rx.wait_readable(Duration::from_secs(5)));
        let mut got = Vec::new();
        let start = std::time::Instant::now();
        while got.len() < want {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "got {}",
                got.len()
            );
            let n = rx.recv_batch(b, max).unwrap();
            for k in 0..n {
                got.extend(b.datagrams(k).map(|d| d.to_vec()));
            }
        }
        got
    }

    /// A GRO receiver, a sender of 1000-byte GSO segments, a burst of three
    /// and its datagrams.
    fn gso_pair() -> (UdpSock, UdpSock, Vec<u8>, Vec<Vec<u8>>) {
        let (rx, tx) = pair(true);
        assert!(setsockopt_int(tx.raw_fd(), SOL_UDP, UDP_SEGMENT, 1000));
        let burst: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let want = burst.chunks(1000).map(|c| c.to_vec()).collect();
        (rx, tx, burst, want)
    }

    /// A GSO burst of three datagrams reaches a GRO socket glued and is
    /// split by its control data; with GRO off the kernel cuts it apart
    /// and the plain recv reads the pieces; GRO back on, glued again.
    #[test]
    fn gro_toggles_between_glued_and_cut_bursts() {
        let (rx, tx, burst, want) = gso_pair();
        let mut b = RxBatch::new(RX_BUF);
        for (gro, max) in [(true, 1), (false, 1), (false, RX_BATCH), (true, RX_BATCH)] {
            if gro {
                rx.set_gro(true);
            } else {
                assert!(rx.gro_off_if_quiet(), "nothing is queued");
            }
            assert_eq!(rx.gro(), gro);
            tx.send(&burst).unwrap();
            assert_eq!(drain(&rx, &mut b, max, 3), want, "gro {gro} max {max}");
            assert_eq!(rx.recv_batch(&mut b, max).unwrap(), 0);
        }
    }

    /// GRO stays on while something is queued (it may be a glued burst,
    /// which only GRO's control data can split).
    #[test]
    fn gro_stays_on_while_anything_is_queued() {
        let (rx, tx, burst, want) = gso_pair();
        let mut b = RxBatch::new(RX_BUF);
        tx.send(&burst).unwrap();
        assert!(rx.wait_readable(Duration::from_secs(5)));
        assert!(!rx.gro_off_if_quiet());
        assert!(rx.gro());
        assert_eq!(drain(&rx, &mut b, 1, 3), want);
        assert!(rx.gro_off_if_quiet());
        assert!(!rx.gro());
    }
}
