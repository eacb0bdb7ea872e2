//! The kernel side: a non-persistent TUN interface (IFF_TUN | IFF_NO_PI,
//! one IP packet per read or write) and its configuration by ioctl on an
//! AF_INET socket — address, netmask, MTU, up — so no `ip` command is
//! needed. The interface exists while its descriptor is open: when the
//! process ends, however it ends, the kernel removes it with its routes.
//!
//! With offloads (`IFF_VNET_HDR`, TUNSETOFFLOAD checksum and TCP/IPv4
//! segmentation) every packet read or written is preceded by its
//! `virtio_net_hdr` (`vnet.rs`), and the kernel hands over TCP
//! super-packets of up to 64 KiB with their checksum left owed. The
//! descriptor is non-blocking: a reader takes every packet waiting and
//! sleeps in `poll`.

use std::ffi::CString;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An open TUN interface.
pub struct Tun {
    fd: OwnedFd,
    name: String,
    /// Each packet is preceded by its offload header (`vnet.rs`).
    vnet: bool,
}

fn ifreq_named(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?} (1 to 15 bytes)"),
        ));
    }
    // SAFETY: ifreq is plain data; all zeros is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn sockaddr_v4(addr: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(addr.octets()),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size; the bytes are
    // read as the generic form the ioctls take.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

impl Tun {
    /// Creates the interface `name` (fails if one by that name exists),
    /// with checksum and TCP/IPv4 segmentation offload when `offload`.
    /// (IPv6 is not carried, so TSO6 is not asked for.)
    pub fn create(name: &str, offload: bool) -> io::Result<Tun> {
        let mut req = ifreq_named(name)?;
        let path = CString::new("/dev/net/tun").expect("no NUL");
        // SAFETY: a valid C string; the result is checked.
        let raw = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned only here.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let vnet = if offload { libc::IFF_VNET_HDR } else { 0 };
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI | vnet) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes the ifreq we own.
        check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) })?;
        if offload {
            // The header travels between hosts: little-endian whatever
            // this host is (the size stays the default, vnet::LEN).
            let le: libc::c_int = 1;
            // SAFETY: TUNSETVNETLE reads one int we own.
            check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETLE, &le) })?;
            let features = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO_ECN;
            // SAFETY: TUNSETOFFLOAD takes the feature bits as its argument.
            check(unsafe {
                libc::ioctl(
                    fd.as_raw_fd(),
                    libc::TUNSETOFFLOAD,
                    features as libc::c_ulong,
                )
            })?;
        }
        Ok(Tun {
            fd,
            name: name.to_string(),
            vnet: offload,
        })
    }

    /// Whether each packet is preceded by its offload header.
    pub fn vnet(&self) -> bool {
        self.vnet
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Gives the interface `addr/prefix` and `mtu`, and brings it up. The
    /// kernel adds the subnet's route. IPv6 is switched off on it
    /// (best effort): viaip carries IPv4, and the kernel's IPv6 chatter
    /// would only be counted as drops.
    pub fn configure(&self, addr: Ipv4Addr, prefix: u8, mtu: u32) -> io::Result<()> {
        let _ = std::fs::write(
            format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", self.name),
            "1",
        );
        // SAFETY: socket has no pointer arguments.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned only here.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = sock.as_raw_fd();
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix))
        };
        let mut req = ifreq_named(&self.name)?;
        req.ifr_ifru.ifru_addr = sockaddr_v4(addr);
        // SAFETY: each ioctl reads (or fills) the ifreq we own.
        check(unsafe { libc::ioctl(s, libc::SIOCSIFADDR, &mut req) })?;
        req.ifr_ifru.ifru_netmask = sockaddr_v4(Ipv4Addr::from(mask));
        // SAFETY: as above.
        check(unsafe { libc::ioctl(s, libc::SIOCSIFNETMASK, &mut req) })?;
        req.ifr_ifru.ifru_mtu = mtu as libc::c_int;
        // SAFETY: as above.
        check(unsafe { libc::ioctl(s, libc::SIOCSIFMTU, &mut req) })?;
        // SAFETY: as above.
        check(unsafe { libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req) })?;
        // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
        let flags = unsafe { req.ifr_ifru.ifru_flags };
        req.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        // SAFETY: as above.
        check(unsafe { libc::ioctl(s, libc::SIOCSIFFLAGS, &mut req) })
    }

    /// Reads one packet (with its header, if [`Tun::vnet`]) without
    /// waiting: its length, or None when none waits.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: reading into a live buffer of the given length.
        let n = unsafe { libc::read(self.fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        }
    }

    /// Hands one packet to the kernel: `head` then `body` (the header
    /// first, if [`Tun::vnet`]; `head` may be empty). Any thread may
    /// write: each write is one whole packet.
    pub fn write(&self, head: &[u8], body: &[u8]) -> io::Result<()> {
        let iov = [
            libc::iovec {
                iov_base: head.as_ptr() as *mut libc::c_void,
                iov_len: head.len(),
            },
            libc::iovec {
                iov_base: body.as_ptr() as *mut libc::c_void,
                iov_len: body.len(),
            },
        ];
        // SAFETY: both iovecs name live slices; the kernel only reads.
        let n = unsafe { libc::writev(self.fd(), iov.as_ptr(), 2) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}
