//! AF_PACKET: raw frames of one EtherType on one interface, through the
//! kernel's packet socket ([`super::frames::FrameIo`]).
//!
//! The socket is bound to (interface, EtherType), so frames the kernel
//! must see (ARP, IP) pass by untouched. A hand-assembled classic BPF
//! program keeps only our EtherType and, when the [`FrameFilter`] names a
//! connection id, only frames carrying it: one socket per connection, the
//! kernel demultiplexing across processes. Frames arrive through a
//! memory-mapped ring (no copy, no system call per frame: TPACKET_V3
//! blocks for streams, TPACKET_V2 slots for latency, see `ring`) or
//! through plain `recv` (one copy): the caller picks with [`RxPath`].
//! Sends bypass the qdisc and go out in
//! batches with one `sendmmsg`, each frame gathered from the caller's
//! parts behind the Ethernet header.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

mod neigh;
mod ring;

use super::frames::{FrameError, FrameFilter, FrameIo, Mac, ETH_HEADER_LEN};

const SOL_PACKET: libc::c_int = 263;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_STATISTICS: libc::c_int = 6;

/// Frames per `sendmmsg` call.
const SEND_BATCH: usize = 256;
/// Bytes of a frame's Ethernet header and first part copied into one
/// iovec: the device's longest frame header (50) fits.
const TX_HEAD_ROOM: usize = 80;

/// How frames are received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxPath {
    /// Memory-mapped TPACKET_V3 ring: no copy, frames handed over in
    /// blocks (when full or after 1 ms): for streams, not ping-pong.
    BlockRing,
    /// Memory-mapped TPACKET_V2 ring: no copy, each frame handed over at
    /// once.
    FrameRing,
    /// `recv` per frame into the link's buffer: one copy, no block delay.
    Copy,
}

/// Bytes of headroom in front of every payload handed to
/// [`PacketLink::recv_in_place`]'s callback, at least.
pub const RX_HEADROOM: usize = 48;

/// What [`PacketLink::recv_in_place`] calls per frame: (source MAC,
/// buffer, payload start, payload length).
pub type InPlace<'a> = dyn FnMut(Mac, &mut [u8], usize, usize) + 'a;

/// The interface's index, MAC and MTU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    pub ifindex: i32,
    pub mac: Mac,
    pub mtu: usize,
}

fn socket_error(e: io::Error) -> FrameError {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => FrameError::Permission("CAP_NET_RAW"),
        Some(libc::EAFNOSUPPORT) => FrameError::Unsupported("AF_PACKET"),
        _ => FrameError::Io(e),
    }
}

/// The index, MAC (SIOCGIFHWADDR) and MTU (SIOCGIFMTU) of `name` in the
/// calling thread's network namespace.
pub fn interface_info(name: &str) -> Result<InterfaceInfo, FrameError> {
    let cname = std::ffi::CString::new(name).map_err(|_| FrameError::NoInterface)?;
    if name.len() >= libc::IFNAMSIZ {
        return Err(FrameError::NoInterface);
    }
    // SAFETY: `cname` is a valid NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(FrameError::NoInterface);
    }
    // SAFETY: socket has no memory preconditions.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    let fd = super::cvt(fd)?;
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // struct ifreq: 16 bytes of name, then a 24-byte union.
    let ioctl = |req: libc::c_ulong| -> io::Result<[u8; 40]> {
        let mut ifr = [0u8; 40];
        ifr[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: `ifr` is as large as struct ifreq and lives across the call.
        super::cvt(unsafe { libc::ioctl(fd.as_raw_fd(), req as _, ifr.as_mut_ptr()) })?;
        Ok(ifr)
    };
    let hw = ioctl(libc::SIOCGIFHWADDR)?;
    let mtu = ioctl(libc::SIOCGIFMTU)?;
    let mut mac = [0u8; 6];
    // The union holds a sockaddr: family (2 bytes), then the address.
    mac.copy_from_slice(&hw[18..24]);
    let mtu = i32::from_ne_bytes([mtu[16], mtu[17], mtu[18], mtu[19]]);
    Ok(InterfaceInfo {
        ifindex: ifindex as i32,
        mac,
        mtu: mtu.max(0) as usize,
    })
}

/// The MAC the kernel's neighbour table (ARP, NDP) of the calling
/// thread's namespace holds for `ip` on `ifname`, if a usable entry
/// exists: a second source of peer MACs beside the device's own
/// resolution exchange.
pub fn neighbour_mac(ip: std::net::IpAddr, ifname: &str) -> Result<Option<Mac>, FrameError> {
    let info = interface_info(ifname)?;
    Ok(neigh::lookup(ip, info.ifindex)?)
}

/// The classic BPF program: accept frames of `filter.ethertype` (and, if
/// given, with the 16-bit id at its payload offset), drop the rest.
fn filter_program(filter: &FrameFilter) -> Vec<libc::sock_filter> {
    const LD_H_ABS: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut p = vec![op(LD_H_ABS, 0, 0, 12)];
    match filter.dst_id {
        None => p.push(op(JEQ_K, 0, 1, u32::from(filter.ethertype))),
        Some((offset, id)) => {
            p.push(op(JEQ_K, 0, 3, u32::from(filter.ethertype)));
            p.push(op(LD_H_ABS, 0, 0, (ETH_HEADER_LEN + offset) as u32));
            p.push(op(JEQ_K, 0, 1, u32::from(id)));
        }
    }
    p.push(op(RET_K, 0, 0, u32::MAX)); // whole frame
    p.push(op(RET_K, 0, 0, 0)); // drop
    p
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` points at a live value of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    super::cvt(r).map(drop)
}

/// One AF_PACKET socket on one interface.
pub struct PacketLink {
    // `ring` first: unmapped before the socket closes.
    ring: Option<ring::Ring>,
    fd: OwnedFd,
    info: InterfaceInfo,
    ethertype: u16,
    /// Receive buffer of the copy path (headroom, then one frame).
    rx_buf: Vec<u8>,
    /// Per frame of a send: its Ethernet header and short first part.
    tx_heads: Vec<[u8; TX_HEAD_ROOM]>,
    /// Frames the copy path dropped (cut short or runts).
    dropped: u64,
}

impl PacketLink {
    /// Opens a socket on interface `ifname` receiving what `filter` lets
    /// through, by `rx`, with room for a few thousand frames (4 MiB).
    /// Without CAP_NET_RAW: `FrameError::Permission`.
    pub fn open(ifname: &str, filter: FrameFilter, rx: RxPath) -> Result<Self, FrameError> {
        Self::open_queued(ifname, filter, rx, 0)
    }

    /// As [`open`](Self::open), with room for at least `frames` frames of
    /// the interface MTU waiting to be read (the ring's slots, or the
    /// socket's buffer on the copy path), up to 64 MiB; 0: the default.
    /// A frame that finds no room is dropped by the kernel, so a stream's
    /// receiver wants its whole window's worth.
    pub fn open_queued(
        ifname: &str,
        filter: FrameFilter,
        rx: RxPath,
        frames: usize,
    ) -> Result<Self, FrameError> {
        let info = interface_info(ifname)?;
        let queue_bytes = match frames {
            0 => ring::DEFAULT_RING_BYTES,
            n => n.saturating_mul(ring::slot_size(info.mtu)),
        };
        // Protocol 0: nothing is queued until the filter is in place and
        // the bind names our EtherType.
        // SAFETY: socket has no memory preconditions.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        let fd = super::cvt(fd).map_err(socket_error)?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        let prog = filter_program(&filter);
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_ptr() as *mut _,
        };
        setsockopt(raw, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)?;
        setsockopt(raw, SOL_PACKET, PACKET_QDISC_BYPASS, &1i32)?;
        // Not to see our own frames again (Linux ≥ 4.20); older kernels
        // only lose the saving.
        if let Err(e) = setsockopt(raw, SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32) {
            if e.raw_os_error() != Some(libc::ENOPROTOOPT) {
                return Err(e.into());
            }
        }
        let ring = match rx {
            RxPath::Copy => {
                // Room for bursts of hundreds of frames between two polls;
                // the forced size needs CAP_NET_ADMIN, the plain one is capped.
                let want = i32::try_from(
                    queue_bytes.clamp(ring::DEFAULT_RING_BYTES, ring::MAX_RING_BYTES),
                )
                .unwrap_or(i32::MAX);
                if setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &want).is_err() {
                    setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, &want)?;
                }
                None
            }
            RxPath::BlockRing | RxPath::FrameRing => {
                Some(ring::map(raw, rx, info.mtu, queue_bytes)?)
            }
        };
        // SAFETY: sockaddr_ll is plain data; zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = filter.ethertype.to_be();
        sll.sll_ifindex = info.ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
        let r = unsafe {
            libc::bind(
                raw,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        super::cvt(r)?;
        let rx_buf = match rx {
            RxPath::Copy => vec![0u8; RX_HEADROOM + ETH_HEADER_LEN + info.mtu.max(1500)],
            RxPath::BlockRing | RxPath::FrameRing => Vec::new(),
        };
        Ok(PacketLink {
            ring,
            fd,
            info,
            ethertype: filter.ethertype,
            rx_buf,
            tx_heads: Vec::new(),
            dropped: 0,
        })
    }

    /// The interface this link is bound to.
    pub fn interface(&self) -> InterfaceInfo {
        self.info
    }

    /// Frames received but not handed over: larger than the interface
    /// MTU the link was opened with (the receive slots are sized by it),
    /// shorter than an Ethernet header, or malformed ring entries.
    pub fn dropped(&self) -> u64 {
        self.dropped + self.ring.as_ref().map_or(0, |r| r.dropped)
    }

    /// Takes up to `max` waiting frames without blocking and calls
    /// `each(source, buf, frame_start, frame_len)`: the payload after the
    /// Ethernet header is `buf[frame_start..frame_start + frame_len]`, and
    /// `buf[..frame_start]` (at least [`RX_HEADROOM`] bytes) may be
    /// overwritten, e.g. by `openvia_wire::ether::expand_in_place`.
    pub fn recv_in_place(&mut self, max: usize, each: &mut InPlace<'_>) -> io::Result<usize> {
        match self.ring.as_mut() {
            Some(ring) => Ok(ring.recv(max, each)),
            None => copy_recv(
                self.fd.as_raw_fd(),
                &mut self.rx_buf,
                &mut self.dropped,
                max,
                each,
            ),
        }
    }
}

fn copy_recv(
    fd: RawFd,
    buf: &mut [u8],
    dropped: &mut u64,
    max: usize,
    each: &mut InPlace<'_>,
) -> io::Result<usize> {
    let mut n = 0;
    while n < max {
        let room = &mut buf[RX_HEADROOM..];
        // SAFETY: `room` is writable for its length across the call.
        let got = unsafe {
            libc::recv(
                fd,
                room.as_mut_ptr().cast(),
                room.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(n),
                io::ErrorKind::Interrupted => continue,
                _ if n > 0 => Ok(n),
                _ => Err(e),
            };
        }
        let got = got as usize;
        // MSG_TRUNC: `got` is the frame's length, even past the buffer
        // (the MTU grew after the link was opened).
        if got < ETH_HEADER_LEN || got > buf.len() - RX_HEADROOM {
            *dropped += 1;
            continue;
        }
        let mut src = [0u8; 6];
        src.copy_from_slice(&buf[RX_HEADROOM + 6..RX_HEADROOM + 12]);
        let start = RX_HEADROOM + ETH_HEADER_LEN;
        each(src, buf, start, got - ETH_HEADER_LEN);
        n += 1;
    }
    Ok(n)
}

impl PacketLink {
    /// The kernel's count of (frames received, frames dropped for want of
    /// ring or buffer room) since the last call (PACKET_STATISTICS).
    pub fn kernel_stats(&self) -> io::Result<(u32, u32)> {
        let mut st = [0u32; 3];
        let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
        // SAFETY: `st` is writable for `len` bytes (struct tpacket_stats_v3
        // is the largest, 12 bytes; V2 writes 8).
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                st.as_mut_ptr().cast(),
                &mut len,
            )
        };
        super::cvt(r)?;
        Ok((st[0], st[1]))
    }
}

impl Drop for PacketLink {
    fn drop(&mut self) {
        if std::env::var_os("OPENVIA_DEBUG").is_some() {
            if let Ok((got, lost)) = self.kernel_stats() {
                eprintln!(
                    "openvia packet link: {got} frames received, {lost} dropped by the kernel"
                );
            }
        }
    }
}

impl FrameIo for PacketLink {
    fn local_mac(&self) -> Mac {
        self.info.mac
    }

    fn mtu(&self) -> usize {
        self.info.mtu
    }

    fn send(&mut self, dst: Mac, frames: &[&[&[u8]]]) -> io::Result<usize> {
        let mut eth = [0u8; ETH_HEADER_LEN];
        eth[0..6].copy_from_slice(&dst);
        eth[6..12].copy_from_slice(&self.info.mac);
        eth[12..14].copy_from_slice(&self.ethertype.to_be_bytes());
        let mut sent = 0;
        for batch in frames.chunks(SEND_BATCH) {
            // Each frame's Ethernet header and its first part, when short
            // (the device's frame header), copied together into one
            // iovec, and no iovec for an empty part: the kernel checks and
            // walks every iovec of every frame, and with the header, the
            // payload and empty slots for what a frame lacks, a stream's
            // frames had five iovecs where two do.
            let heads = &mut self.tx_heads;
            heads.clear();
            heads.resize(batch.len(), [0u8; TX_HEAD_ROOM]);
            let mut iovs: Vec<libc::iovec> = Vec::with_capacity(batch.len() * 3);
            let mut ranges = Vec::with_capacity(batch.len());
            for (parts, head) in batch.iter().zip(heads.iter_mut()) {
                let first = iovs.len();
                let mut rest = &parts[..];
                let mut head_len = ETH_HEADER_LEN;
                head[..ETH_HEADER_LEN].copy_from_slice(&eth);
                if let Some((p, more)) = rest.split_first() {
                    if p.len() <= TX_HEAD_ROOM - ETH_HEADER_LEN {
                        head[ETH_HEADER_LEN..ETH_HEADER_LEN + p.len()].copy_from_slice(p);
                        head_len += p.len();
                        rest = more;
                    }
                }
                iovs.push(libc::iovec {
                    iov_base: head.as_ptr() as *mut _,
                    iov_len: head_len,
                });
                iovs.extend(rest.iter().filter(|p| !p.is_empty()).map(|p| libc::iovec {
                    iov_base: p.as_ptr() as *mut _,
                    iov_len: p.len(),
                }));
                ranges.push(first..iovs.len());
            }
            let mut msgs: Vec<libc::mmsghdr> = ranges
                .iter()
                .map(|r| {
                    // SAFETY: msghdr is plain data; zero is a valid value.
                    let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                    m.msg_hdr.msg_iov = iovs[r.clone()].as_ptr() as *mut _;
                    m.msg_hdr.msg_iovlen = r.len() as _;
                    m
                })
                .collect();
            // SAFETY: every msghdr points at iovecs in `iovs`, which point
            // at `self.tx_heads` (not touched until the call returns) and
            // the caller's parts, all alive across the call.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    msgs.len() as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => Ok(sent),
                    _ if sent > 0 => Ok(sent),
                    _ => Err(e),
                };
            }
            sent += r as usize;
            if (r as usize) < batch.len() {
                break;
            }
        }
        Ok(sent)
    }

    fn recv(&mut self, max: usize, each: &mut dyn FnMut(Mac, &[u8])) -> io::Result<usize> {
        self.recv_in_place(max, &mut |src, buf, start, len| {
            each(src, &buf[start..start + len])
        })
    }

    fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn wait_readable(&self, timeout: Duration) -> bool {
        if self.ring.as_ref().is_some_and(|r| r.ready()) {
            return true;
        }
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_program_jumps_inside_itself() {
        for f in [
            FrameFilter {
                ethertype: 0x88B5,
                dst_id: None,
            },
            FrameFilter {
                ethertype: 0x88B5,
                dst_id: Some((0, 7)),
            },
        ] {
            let p = filter_program(&f);
            for (i, ins) in p.iter().enumerate() {
                if ins.code == 0x15 {
                    assert!(i + 1 + (ins.jf as usize) < p.len());
                    assert_eq!(p[i + 1 + ins.jf as usize].k, 0, "false leads to drop");
                }
            }
            assert_eq!(p.last().unwrap().k, 0);
        }
    }
}
