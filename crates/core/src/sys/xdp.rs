//! AF_XDP: raw frames through an XDP socket's rings, bypassing the
//! kernel's network stack on receive and the qdisc layer on send.
//!
//! One link is one XDP socket bound to one (interface, queue), with its
//! own UMEM: half the frames are lent to the kernel through the fill ring
//! for receiving, half are ours for sending. The steering program
//! ([`super::bpf`]) sends frames of our EtherType on that queue to the
//! socket and everything else to the kernel. The kernel chooses zero-copy
//! where the driver supports it and copies otherwise (veth copies); see
//! docs/xdp.md for what each mode needs.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::bpf::{XdpMode, XdpSteering};
use super::frames::{FrameError, FrameFilter, FrameIo, Mac, ETH_HEADER_LEN};
use super::xsk_ring::{Ring, RingOffsets, Umem};

/// Bytes per UMEM frame: one page. Zero-copy drivers accept only
/// power-of-two chunks from 2048 to the page size; a page holds a
/// 1500-byte frame with room to spare and also the 3 KiB segments of the
/// page-aligned policy (a 2048-byte chunk would cap frames at 1792 bytes
/// once the kernel's 256-byte XDP headroom is taken).
pub const FRAME_SIZE: usize = 4096;
/// Headroom the kernel keeps in front of every received frame
/// (XDP_PACKET_HEADROOM).
const XDP_PACKET_HEADROOM: usize = 256;
/// The largest frame payload (the MTU) an AF_XDP link carries: what a
/// UMEM frame holds after the kernel's headroom and the Ethernet header.
pub const MAX_MTU: usize = FRAME_SIZE - XDP_PACKET_HEADROOM - ETH_HEADER_LEN;
/// Frames in the UMEM, half lent for receiving, half ours for sending:
/// 32 MiB, 4096 frames to receive into, so that a stream's window (8 MiB,
/// 5800 frames at MTU 1500, sent in bursts of hundreds) finds room where
/// 512 overflowed and lost frames; where the UMEM's locked memory is not
/// allowed (it is charged to RLIMIT_MEMLOCK, 8 MiB by default, unless the
/// process has CAP_IPC_LOCK), [`SMALL_UMEM_FRAMES`].
const UMEM_FRAMES: usize = 8192;
/// Frames in the UMEM when [`UMEM_FRAMES`] cannot be locked: 4 MiB.
const SMALL_UMEM_FRAMES: usize = 1024;
/// Kicks per send before leaving the rest for the next call: in copy mode
/// the kernel sends at most 32 frames per kick.
const MAX_KICKS: usize = 64;

/// How to open an AF_XDP link.
#[derive(Clone, Copy, Debug, Default)]
pub struct XdpOptions {
    /// The interface's receive queue to bind (frames arriving on other
    /// queues go to the kernel).
    pub queue: u32,
    /// Where the steering program must run; None: natively where the
    /// driver can, generic otherwise.
    pub mode: Option<XdpMode>,
}

/// An AF_XDP link on one interface queue.
pub struct XdpLink {
    // Field order is drop order: the program goes first, so no frame is
    // steered to a socket being torn down.
    _steering: XdpSteering,
    mode: XdpMode,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fill: Ring<u64>,
    completion: Ring<u64>,
    socket: OwnedFd,
    umem: Umem,
    /// Frames of ours free for sending.
    tx_free: Vec<u64>,
    zero_copy: bool,
    mac: Mac,
    mtu: usize,
    queue: u32,
    rx_queues: Option<u32>,
    /// Written into every frame sent: the filter's.
    ethertype: u16,
}

fn sockopt<T>(fd: RawFd, opt: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live `T` of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            value as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    super::cvt(r).map(drop)
}

/// C structures of integers only, for which all-zero bytes are a value.
trait PlainInts {}
impl PlainInts for libc::xdp_mmap_offsets {}
impl PlainInts for libc::xdp_options {}
impl PlainInts for libc::xdp_statistics {}

fn getsockopt<T: PlainInts>(fd: RawFd, opt: libc::c_int) -> io::Result<T> {
    // SAFETY: `T` is made of integers only (PlainInts), so zero is valid.
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a writable `T` of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            &mut value as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    super::cvt(r).map(|_| value)
}

/// What open needs to know of an interface.
struct Interface {
    index: u32,
    mac: Mac,
    mtu: usize,
    /// Receive queues (ETHTOOL_GCHANNELS), when the driver says.
    rx_queues: Option<u32>,
}

/// Receive queues of the interface `req` names, from ETHTOOL_GCHANNELS.
fn rx_queues(sock: RawFd, req: &mut libc::ifreq) -> Option<u32> {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    // struct ethtool_channels: cmd, max_rx, max_tx, max_other,
    // max_combined, rx_count, tx_count, other_count, combined_count.
    let mut channels = [0u32; 9];
    channels[0] = ETHTOOL_GCHANNELS;
    req.ifr_ifru.ifru_data = channels.as_mut_ptr().cast();
    // SAFETY: `req` names the interface and points at a writable
    // ethtool_channels, which outlives the call.
    let r = unsafe { libc::ioctl(sock, libc::SIOCETHTOOL, req as *mut libc::ifreq) };
    (r == 0).then(|| channels[5] + channels[8])
}

/// The interface `name` in the calling thread's namespace.
fn interface(name: &str) -> Result<Interface, FrameError> {
    let cname = CString::new(name).map_err(|_| FrameError::NoInterface)?;
    if name.len() >= libc::IFNAMSIZ {
        return Err(FrameError::NoInterface);
    }
    // SAFETY: `cname` is a valid C string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(FrameError::NoInterface);
    }
    // Any socket of the namespace answers interface ioctls; a UDP one
    // needs no privilege.
    // SAFETY: plain socket creation.
    let fd = super::cvt(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: socket() returned a fresh descriptor we now own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq naming the interface; the kernel
    // fills the hardware-address member.
    super::cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) })?;
    let mut mac = [0u8; 6];
    // SAFETY: SIOCGIFHWADDR filled `ifru_hwaddr`.
    let hw = unsafe { req.ifr_ifru.ifru_hwaddr };
    for (d, s) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *d = *s as u8;
    }
    // SAFETY: as above, for the MTU member.
    super::cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) })?;
    // SAFETY: SIOCGIFMTU filled `ifru_mtu`.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu }.max(0) as usize;
    Ok(Interface {
        index: ifindex,
        mac,
        mtu,
        rx_queues: rx_queues(sock.as_raw_fd(), &mut req),
    })
}

/// How long a bind waits for a queue that a closed socket still holds:
/// the kernel releases a socket's hold on its queue in deferred work, so
/// a link reopened right after another closed finds the queue busy for a
/// moment. A queue still busy after this has a live owner.
const BUSY_QUEUE_WAIT: Duration = Duration::from_millis(500);

/// Binds the socket to (interface, queue), waiting out a queue that a
/// just-closed socket is still releasing.
fn bind(fd: RawFd, addr: &libc::sockaddr_xdp) -> Result<(), FrameError> {
    let start = std::time::Instant::now();
    loop {
        // SAFETY: `addr` is a valid sockaddr_xdp of the size passed.
        let r = unsafe {
            libc::bind(
                fd,
                addr as *const libc::sockaddr_xdp as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EBUSY) if start.elapsed() < BUSY_QUEUE_WAIT => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Some(libc::EBUSY) => FrameError::Unsupported("queue busy"),
            Some(libc::EINVAL) => FrameError::Unsupported("no such queue on this interface"),
            _ => FrameError::Io(e),
        });
    }
}

/// Makes a UMEM of [`UMEM_FRAMES`] frames and registers it with socket
/// `fd`; one of [`SMALL_UMEM_FRAMES`] where the larger may not be locked.
fn register_umem(fd: RawFd) -> Result<Umem, FrameError> {
    let mut frames = UMEM_FRAMES;
    loop {
        let umem = Umem::new(frames, FRAME_SIZE)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.addr(),
            len: umem.len() as u64,
            chunk_size: FRAME_SIZE as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        match sockopt(fd, libc::XDP_UMEM_REG, &reg) {
            Ok(()) => return Ok(umem),
            Err(e) => match e.raw_os_error() {
                Some(libc::ENOBUFS) | Some(libc::ENOMEM) if frames > SMALL_UMEM_FRAMES => {
                    frames = SMALL_UMEM_FRAMES;
                }
                Some(libc::ENOBUFS) | Some(libc::ENOMEM) => {
                    return Err(FrameError::Io(io::Error::new(
                        e.kind(),
                        "AF_XDP UMEM exceeds RLIMIT_MEMLOCK (raise it or grant CAP_IPC_LOCK)",
                    )))
                }
                _ => return Err(FrameError::Io(e)),
            },
        }
    }
}

/// The socket's four rings, sized and mapped.
struct Rings {
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fill: Ring<u64>,
    completion: Ring<u64>,
}

impl Rings {
    /// Sizes the rings of socket `fd` (after its UMEM is registered) and
    /// maps them where XDP_MMAP_OFFSETS says their parts lie.
    /// Each ring has `size` entries (a power of two).
    fn map(fd: RawFd, size: u32) -> io::Result<Rings> {
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            sockopt(fd, opt, &size)?;
        }
        let offs: libc::xdp_mmap_offsets = getsockopt(fd, libc::XDP_MMAP_OFFSETS)?;
        let o = |r: libc::xdp_ring_offset| RingOffsets {
            producer: r.producer,
            consumer: r.consumer,
            desc: r.desc,
            flags: r.flags,
        };
        let rx = Ring::map(fd, libc::XDP_PGOFF_RX_RING as u64, size, o(offs.rx), false)?;
        let tx = Ring::map(fd, libc::XDP_PGOFF_TX_RING as u64, size, o(offs.tx), true)?;
        let fill = Ring::map(fd, libc::XDP_UMEM_PGOFF_FILL_RING, size, o(offs.fr), true)?;
        let completion = Ring::map(
            fd,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            size,
            o(offs.cr),
            false,
        )?;
        Ok(Rings {
            rx,
            tx,
            fill,
            completion,
        })
    }
}

impl XdpLink {
    /// Opens an AF_XDP link on `ifname` (in the calling thread's network
    /// namespace) receiving the frames `filter` selects, on queue 0.
    pub fn open(ifname: &str, filter: FrameFilter) -> Result<XdpLink, FrameError> {
        Self::open_with(ifname, filter, &XdpOptions::default())
    }

    /// As [`XdpLink::open`], with options.
    ///
    /// Errors: `Permission("CAP_NET_RAW")` for the socket,
    /// `Permission("CAP_BPF")` / `Permission("CAP_NET_ADMIN")` for the
    /// program; `Unsupported("queue busy")` when another XDP socket has the
    /// queue; `Unsupported(..)` when the kernel has no AF_XDP or another
    /// XDP program holds the interface; `NoInterface`.
    pub fn open_with(
        ifname: &str,
        filter: FrameFilter,
        opts: &XdpOptions,
    ) -> Result<XdpLink, FrameError> {
        let Interface {
            index: ifindex,
            mac,
            mtu: if_mtu,
            rx_queues,
        } = interface(ifname)?;
        // SAFETY: plain socket creation.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => FrameError::Permission("CAP_NET_RAW"),
                Some(libc::EAFNOSUPPORT) => FrameError::Unsupported("no AF_XDP in this kernel"),
                _ => FrameError::Io(e),
            });
        }
        // SAFETY: socket() returned a fresh descriptor we now own.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };

        // The program before the queue: a process that may not load it
        // leaves no socket bound behind (its release is deferred, and
        // would keep the queue busy for a moment).
        let mut steering = XdpSteering::load(opts.queue.saturating_add(1), &filter)?;

        let umem = register_umem(fd)?;
        let frames = umem.len() / FRAME_SIZE;
        let Rings {
            rx,
            tx,
            mut fill,
            completion,
        } = Rings::map(fd, (frames / 2) as u32)?;
        // The first half of the frames is lent for receiving, the second
        // half kept for sending.
        let half = frames / 2;
        for i in 0..half {
            fill.put(i as u32, (i * FRAME_SIZE) as u64);
        }
        fill.submit(half as u32);
        let tx_free = (half..frames)
            .rev()
            .map(|i| (i * FRAME_SIZE) as u64)
            .collect();

        // Neither XDP_COPY nor XDP_ZEROCOPY: the kernel tries zero-copy
        // and falls back to copying when the driver cannot.
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: opts.queue,
            sxdp_shared_umem_fd: 0,
        };
        bind(fd, &addr)?;
        let options: libc::xdp_options = getsockopt(fd, libc::XDP_OPTIONS)?;
        let zero_copy = options.flags & libc::XDP_OPTIONS_ZEROCOPY != 0;

        // Registered before attaching, so the first steered frame finds it.
        steering.register(opts.queue, fd)?;
        let mode = steering.attach(ifindex, opts.mode)?;
        // Received frames land XDP_PACKET_HEADROOM into a frame; larger
        // ones would be dropped by the kernel.
        let mtu = if_mtu.min(MAX_MTU);
        Ok(XdpLink {
            _steering: steering,
            mode,
            rx,
            tx,
            fill,
            completion,
            socket,
            umem,
            tx_free,
            zero_copy,
            mac,
            mtu,
            queue: opts.queue,
            rx_queues,
            ethertype: filter.ethertype,
        })
    }

    /// Where the steering program runs (native on veth and most drivers).
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// Whether the driver moves frames in and out of the UMEM itself
    /// (false: the kernel copies, as on veth).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// The queue this link is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// The interface's receive queues, when the driver tells. Frames of
    /// ours that arrive on another queue than [`XdpLink::queue`] go to the
    /// kernel, not to this link: with more than one, the sender or the
    /// NIC's flow steering must put them on this queue (docs/xdp.md).
    pub fn rx_queues(&self) -> Option<u32> {
        self.rx_queues
    }

    /// Frames the kernel dropped for this socket (RX ring or fill ring
    /// empty, invalid descriptors), from XDP_STATISTICS.
    pub fn dropped(&self) -> io::Result<u64> {
        let s: libc::xdp_statistics = getsockopt(self.socket.as_raw_fd(), libc::XDP_STATISTICS)?;
        Ok(s.rx_dropped + s.rx_ring_full + s.rx_invalid_descs + s.tx_invalid_descs)
    }

    /// Takes sent frames back from the completion ring.
    fn reclaim(&mut self) {
        let n = self.completion.available();
        for i in 0..n {
            let addr = self.completion.get(i);
            self.tx_free.push(addr & !(FRAME_SIZE as u64 - 1));
        }
        self.completion.release(n);
    }

    /// Has the kernel send what the TX ring holds. Copy mode sends only
    /// in sendto and at most 32 frames per call, so it kicks until the
    /// ring drains or a kick makes no progress.
    fn kick_tx(&mut self) -> io::Result<()> {
        if self.zero_copy && !self.tx.needs_wakeup() {
            return Ok(());
        }
        for _ in 0..MAX_KICKS {
            let before = self.tx.pending();
            if before == 0 {
                break;
            }
            // SAFETY: a zero-length sendto with no buffer or address only
            // wakes the socket's transmit path.
            let r = unsafe {
                libc::sendto(
                    self.socket.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) => {}
                    Some(libc::ENETDOWN) => return Ok(()),
                    _ => return Err(e),
                }
            }
            if self.tx.pending() == before {
                break;
            }
        }
        Ok(())
    }
}

impl FrameIo for XdpLink {
    fn local_mac(&self) -> Mac {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn send(&mut self, dst: Mac, frames: &[&[&[u8]]]) -> io::Result<usize> {
        let limit = ETH_HEADER_LEN + self.mtu;
        for parts in frames {
            let len = ETH_HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>();
            if len > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("frame of {len} bytes exceeds {limit}"),
                ));
            }
        }
        self.reclaim();
        let n = frames
            .len()
            .min(self.tx_free.len())
            .min(self.tx.free() as usize);
        for (i, parts) in frames[..n].iter().enumerate() {
            let Some(addr) = self.tx_free.pop() else {
                break;
            };
            let buf = self.umem.frame_mut(addr);
            buf[..6].copy_from_slice(&dst);
            buf[6..12].copy_from_slice(&self.mac);
            buf[12..14].copy_from_slice(&self.ethertype.to_be_bytes());
            let mut at = ETH_HEADER_LEN;
            for p in parts.iter() {
                buf[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            self.tx.put(
                i as u32,
                libc::xdp_desc {
                    addr,
                    len: at as u32,
                    options: 0,
                },
            );
        }
        self.tx.submit(n as u32);
        self.kick_tx()?;
        Ok(n)
    }

    fn recv(&mut self, max: usize, each: &mut dyn FnMut(Mac, &[u8])) -> io::Result<usize> {
        // Frames a send left in the TX ring (its kicks stopped making
        // progress) go out with the next call, whichever it is.
        if self.tx.pending() > 0 {
            self.kick_tx()?;
        }
        // The fill ring holds every receive frame, so it has room for all
        // those RX hands us; the bound only refreshes its consumer index.
        let n = self
            .rx
            .available()
            .min(max.min(u32::MAX as usize) as u32)
            .min(self.fill.free());
        for i in 0..n {
            let d = self.rx.get(i);
            if let Some(frame) = self.umem.frame(d.addr, d.len as usize) {
                if frame.len() >= ETH_HEADER_LEN {
                    let mut src = [0u8; 6];
                    src.copy_from_slice(&frame[6..12]);
                    each(src, &frame[ETH_HEADER_LEN..]);
                }
            }
            self.fill.put(i, d.addr & !(FRAME_SIZE as u64 - 1));
        }
        self.rx.release(n);
        self.fill.submit(n);
        if n == 0 && self.fill.needs_wakeup() {
            // Zero-copy drivers refill from the fill ring only when woken.
            // SAFETY: a zero-length non-blocking recvfrom only wakes the driver.
            unsafe {
                libc::recvfrom(
                    self.socket.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
        Ok(n as usize)
    }

    fn raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    fn wait_readable(&self, timeout: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        r > 0 && pfd.revents & libc::POLLIN != 0
    }
}
