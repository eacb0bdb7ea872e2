//! The two ends of a viabench connection over an openvia device, as a VIA
//! program writes them: one NIC and one VI per end, descriptors in
//! registered memory, receives posted ahead. Shared by the `shm` and the
//! network transports (`net`), which differ only in how they open the device and connect.
//!
//! The driver's message buffers are registered the first time they are
//! seen (a small registration cache, as UCX keeps one), so a message moves
//! without an extra copy. The bandwidth override posts a whole window of
//! sends before waiting and keeps several receives posted, which is how VIA
//! reaches full bandwidth.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use openvia_core::descriptor::{DataSegment, DescPtr, Descriptor};
use openvia_core::devices::ether::{EtherDevice, FramePath};
use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi, ViAttributes};
use openvia_core::ViaError;

use super::{
    CheckHook, DeviceNote, Endpoint, EndpointOptions, FillHook, StreamPlan, StreamReceipt,
    WaitMode, WINDOW_ACK_LEN,
};
use crate::error::{BenchError, Result};

/// Slots of 128 bytes: a control segment and up to six data segments.
const DESC_SLOT: usize = 128;
/// Most receives kept posted while streaming (each owns a buffer).
const MAX_RECV_BUFFERS: usize = 16;
/// A Wait that sees nothing for this long means the peer is stuck.
const WAIT_LIMIT: Duration = Duration::from_secs(60);

pub fn via(context: &str, e: ViaError) -> BenchError {
    match e {
        ViaError::Timeout => BenchError::Timeout(format!("{context}: timed out")),
        e => BenchError::Protocol(format!("{context}: {e}")),
    }
}

/// Server side: waits for a client on `disc` at this NIC's host and
/// accepts it on `vi`.
pub fn accept_on(
    nic: Nic,
    ptag: PtagId,
    vi: Arc<Vi>,
    disc: &str,
    opts: &EndpointOptions,
) -> Result<Box<dyn Endpoint>> {
    Ok(Box::new(accept_endpoint(nic, ptag, vi, disc, opts)?))
}

/// [`accept_on`], returning the endpoint itself. On an unreliable VI the
/// receive for the client's first request is posted before the accept:
/// posted afterwards, the request may arrive first and be dropped, and
/// both ends would wait for each other.
pub fn accept_endpoint(
    nic: Nic,
    ptag: PtagId,
    vi: Arc<Vi>,
    disc: &str,
    opts: &EndpointOptions,
) -> Result<ViaEndpoint> {
    let local = openvia_core::Address {
        host: nic.query().address.to_vec(),
        discriminator: disc.as_bytes().to_vec(),
    };
    let mut ep = ViaEndpoint::new(nic, ptag, vi.clone(), opts)?;
    if ep.lossy {
        ep.stage_first_request()?;
    }
    let req = openvia_core::connect_wait(ep.nic.shared(), &local, None)
        .map_err(|e| via("connect wait", e))?;
    req.accept(&vi).map_err(|e| via("accept", e))?;
    Ok(ep)
}

/// Makes one VI on `nic` with `reliability` carrying up to `max_transfer`
/// bytes (at most the NIC's maximum; None: that maximum), waiting as
/// `opts` says.
pub fn open_vi(
    nic: Nic,
    reliability: u16,
    max_transfer: Option<u64>,
    opts: &EndpointOptions,
) -> Result<(Nic, PtagId, Arc<Vi>)> {
    nic.set_spin_ns(match opts.mode {
        WaitMode::Spin => u64::MAX,
        WaitMode::Block => 0,
    });
    let ptag = nic.create_ptag().map_err(|e| via("ptag", e))?;
    let nic_max = nic.query().max_transfer_size;
    let max_transfer = max_transfer.map_or(nic_max, |m| m.min(nic_max));
    let attrs = ViAttributes {
        reliability,
        max_transfer,
        ptag,
        rdma_write: false,
        rdma_read: false,
    };
    let vi = nic
        .create_vi(attrs, None, None)
        .map_err(|e| via("create VI", e))?;
    Ok((nic, ptag, vi))
}

/// Registered memory of our own: 2 MiB aligned and advised for huge pages
/// (fewer page-table entries for the kernel to walk on every CMA copy).
pub(super) struct Region {
    map: usize,
    map_len: usize,
    pub(super) base: usize,
    pub(super) len: usize,
    pub(super) handle: u32,
}

const HUGE: usize = 2 << 20;

impl Region {
    pub(super) fn new(nic: &Nic, ptag: PtagId, len: usize) -> Result<Self> {
        let len = len.max(64);
        let map_len = (len + HUGE).next_multiple_of(HUGE);
        // SAFETY: an anonymous private mapping we own until Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(BenchError::io("mmap", std::io::Error::last_os_error()));
        }
        let map = p as usize;
        let base = map.next_multiple_of(HUGE);
        // SAFETY: advice on our own mapping (failure only loses the speed-up),
        // then touching it so no page fault lands inside a measurement.
        unsafe {
            libc::madvise(
                base as *mut libc::c_void,
                map_len - (base - map),
                libc::MADV_HUGEPAGE,
            );
            std::ptr::write_bytes(base as *mut u8, 0, len);
        }
        let mut region = Region {
            map,
            map_len,
            base,
            len,
            handle: 0,
        };
        region.handle = nic
            .register_mem(base as u64, len as u64, ptag, true, true)
            .map_err(|e| via("register", e))?;
        Ok(region)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

pub struct ViaEndpoint {
    nic: Nic,
    ptag: PtagId,
    pub(super) vi: Arc<Vi>,
    /// Latency round trips post the receive for the echo before the ping
    /// leaves (see `via_latency`); off, they are a send then a receive.
    pub(super) prepost: bool,
    /// The VI is unreliable: a message may be lost.
    pub(super) lossy: bool,
    /// Round trips that sent their ping again (see `via_latency`).
    pub(super) repeated: u64,
    /// A receive posted before the connection existed, for the first
    /// control message; the first `recv` takes it.
    staged: Option<Region>,
    descs: Region,
    free_descs: Vec<usize>,
    /// Registration cache: (address, length) → handle.
    registered: HashMap<(usize, usize), u32>,
    /// The last two hits, checked before the map (the drivers reuse one
    /// send and one receive buffer).
    recent: [(usize, usize, u32); 2],
    pub(super) recv_buffers: Vec<Region>,
    send_buffers: Vec<Region>,
    ack: Region,
}

impl ViaEndpoint {
    pub fn new(nic: Nic, ptag: PtagId, vi: Arc<Vi>, opts: &EndpointOptions) -> Result<Self> {
        let slots = 2 * opts.max_window as usize + 2 * MAX_RECV_BUFFERS + 8;
        let descs = Region::new(&nic, ptag, slots * DESC_SLOT)?;
        let ack = Region::new(&nic, ptag, 64)?;
        let lossy = vi.attributes().reliability == openvia_core::vi::reliability::UNRELIABLE;
        Ok(ViaEndpoint {
            prepost: false,
            lossy,
            repeated: 0,
            staged: None,
            free_descs: (0..slots).rev().collect(),
            descs,
            registered: HashMap::new(),
            recent: [(0, 0, 0); 2],
            recv_buffers: Vec::new(),
            send_buffers: Vec::new(),
            ack,
            nic,
            ptag,
            vi,
        })
    }

    /// The memory handle covering `buf`, registering it on first use.
    pub(super) fn handle_for(&mut self, addr: usize, len: usize) -> Result<u32> {
        if len == 0 {
            return Ok(0);
        }
        for &(a, l, h) in &self.recent {
            if a == addr && l == len {
                return Ok(h);
            }
        }
        if let Some(&h) = self.registered.get(&(addr, len)) {
            self.recent = [(addr, len, h), self.recent[0]];
            return Ok(h);
        }
        let h = self
            .nic
            .register_mem(addr as u64, len as u64, self.ptag, false, false)
            .map_err(|e| via("register buffer", e))?;
        self.registered.insert((addr, len), h);
        self.recent = [(addr, len, h), self.recent[0]];
        Ok(h)
    }

    fn desc(&mut self) -> Result<DescPtr> {
        let i = self
            .free_descs
            .pop()
            .ok_or_else(|| BenchError::Protocol("out of descriptors".into()))?;
        Ok(DescPtr(
            (self.descs.base + i * DESC_SLOT) as *mut Descriptor,
        ))
    }

    pub(super) fn release(&mut self, d: DescPtr) {
        self.free_descs
            .push((d.0 as usize - self.descs.base) / DESC_SLOT);
    }

    fn fill_desc(d: DescPtr, addr: usize, len: usize, handle: u32) {
        // SAFETY: `d` is a free 128-byte slot of our registered descriptor region.
        unsafe {
            std::ptr::write_bytes(d.0 as *mut u8, 0, 64);
            (*d.0).cs.seg_count = u16::from(len > 0);
            (*d.0).ds[0] = DataSegment {
                data: addr as u64,
                handle,
                length: len as u32,
            };
        }
    }

    pub(super) fn post_send(&mut self, addr: usize, len: usize, handle: u32) -> Result<()> {
        let d = self.desc()?;
        Self::fill_desc(d, addr, len, handle);
        self.vi
            .post_send(d.0, self.descs.handle)
            .map_err(|e| via("post send", e))
    }

    pub(super) fn post_recv(&mut self, addr: usize, len: usize, handle: u32) -> Result<()> {
        let d = self.desc()?;
        Self::fill_desc(d, addr, len, handle);
        self.vi
            .post_recv(d.0, self.descs.handle)
            .map_err(|e| via("post recv", e))
    }

    /// Posts a receive for the first control message into our own buffer.
    fn stage_first_request(&mut self) -> Result<()> {
        let r = Region::new(&self.nic, self.ptag, crate::session::CONTROL_LEN)?;
        self.post_recv(r.base, crate::session::CONTROL_LEN, r.handle)?;
        self.staged = Some(r);
        Ok(())
    }

    /// Takes one completed send, checking its status.
    pub(super) fn reap_send(&mut self) -> Result<()> {
        let d = self
            .vi
            .send_wait(Some(WAIT_LIMIT))
            .map_err(|e| via("send wait", e))?;
        let st = d.status();
        self.release(d);
        if st & openvia_core::descriptor::status::ERROR_MASK != 0 {
            return Err(BenchError::Protocol(format!(
                "send completed with status {st:#x}"
            )));
        }
        Ok(())
    }

    /// Takes one completed receive: (descriptor address, length).
    pub(super) fn reap_recv(&mut self) -> Result<(usize, usize)> {
        self.reap_recv_within(WAIT_LIMIT)?
            .ok_or_else(|| BenchError::Timeout("receive wait: timed out".into()))
    }

    /// Like `reap_recv`, but `None` when nothing completed within `limit`
    /// (the receive stays posted).
    pub(super) fn reap_recv_within(&mut self, limit: Duration) -> Result<Option<(usize, usize)>> {
        let d = match self.vi.recv_wait(Some(limit)) {
            Ok(d) => d,
            Err(ViaError::Timeout) => return Ok(None),
            Err(e) => return Err(via("receive wait", e)),
        };
        let st = d.status();
        // SAFETY: the descriptor is ours and completed.
        let (len, addr) = unsafe { ((*d.0).cs.length as usize, (*d.0).ds[0].data as usize) };
        self.release(d);
        if st & openvia_core::descriptor::status::ERROR_MASK != 0 {
            return Err(BenchError::PeerClosed(format!(
                "receive completed with status {st:#x}"
            )));
        }
        Ok(Some((addr, len)))
    }

    /// Registered buffers of ours, at least `count` of `size` bytes, for
    /// sending (`send`) or receiving.
    pub(super) fn ensure_buffers(&mut self, count: usize, size: usize, send: bool) -> Result<()> {
        let (nic, ptag) = (self.nic.clone(), self.ptag);
        let list = if send {
            &mut self.send_buffers
        } else {
            &mut self.recv_buffers
        };
        if list.first().is_some_and(|r| r.len < size) {
            list.clear();
        }
        while list.len() < count {
            list.push(Region::new(&nic, ptag, size)?);
        }
        Ok(())
    }
}

impl Endpoint for ViaEndpoint {
    fn round_trip(&mut self, round: u64, ping: &[u8], pong: &mut [u8]) -> Result<usize> {
        if self.prepost {
            self.preposted_round_trip(round, ping, pong)
        } else {
            super::send_then_recv(self, ping, pong)
        }
    }

    fn echo_rounds(&mut self, size: usize, rounds: u64) -> Result<()> {
        if self.prepost {
            return self.preposted_echo(size, rounds);
        }
        super::recv_then_send(self, size, rounds)
    }

    fn loses_messages(&self) -> bool {
        self.lossy
    }

    fn device_note(&self) -> Option<DeviceNote> {
        let device = self.nic.shared().device();
        let info = device.info();
        let link = info.link.as_ref();
        let mut note = DeviceNote {
            name: info.name.clone(),
            kind: info.short_name,
            reliability: match self.vi.attributes().reliability {
                reliability::UNRELIABLE => "ur",
                reliability::RELIABLE_RECEPTION => "rr",
                _ => "rd",
            },
            interface: link.and_then(|l| l.interface.clone()),
            path: None,
            mtu: link.map(|l| l.mtu),
            segment_policy: link.map(|l| l.segment_policy.clone()),
            segment_bytes: link.map(|l| l.segment_bytes),
            shm_paths: None,
        };
        if info.short_name == "shm" {
            let c = openvia_core::config::Config::global();
            let s = openvia_core::devices::shm::shared_copy::stats();
            note.shm_paths = Some(super::ShmPaths {
                inline_max: c.inline_max,
                cma_min: c.cma_min,
                cma_piece: c.cma_piece,
                ring_slow_gbps: c.ring_slow_gbps,
                pieces_pulled: s.pulled,
                pieces_pushed: s.pushed,
                diverted_msgs: s.diverted,
            });
        }
        // The Ethernet device's way onto the wire, and its segment policy
        // as the setting spells it (its link info shows both in one string).
        if let Some(ether) = device.as_any().downcast_ref::<EtherDevice>() {
            note.path = Some(
                match ether.medium.path {
                    FramePath::Packet => "packet",
                    FramePath::Xdp => "xdp",
                    FramePath::Auto => "auto",
                }
                .to_string(),
            );
            note.segment_policy = Some(ether.medium.settings.segment.to_string());
        }
        Some(note)
    }

    fn repeated_round_trips(&self) -> u64 {
        self.repeated
    }

    fn send(&mut self, msg: &[u8]) -> Result<()> {
        let h = self.handle_for(msg.as_ptr() as usize, msg.len())?;
        self.post_send(msg.as_ptr() as usize, msg.len(), h)?;
        // The buffer is the caller's again only once the send completed.
        self.reap_send()
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize> {
        if let Some(r) = self.staged.take() {
            let (at, n) = self.reap_recv()?;
            if n > buf.len() {
                return Err(BenchError::Protocol(format!(
                    "first message of {n} bytes, expected at most {}",
                    buf.len()
                )));
            }
            // SAFETY: our staged buffer, its receive completed.
            buf[..n].copy_from_slice(unsafe { std::slice::from_raw_parts(at as *const u8, n) });
            drop(r);
            return Ok(n);
        }
        let h = self.handle_for(buf.as_ptr() as usize, buf.len())?;
        self.post_recv(buf.as_ptr() as usize, buf.len(), h)?;
        let (_, len) = self.reap_recv()?;
        Ok(len)
    }

    fn stream_send(
        &mut self,
        plan: &StreamPlan,
        buf: &mut [u8],
        mut fill: Option<FillHook<'_>>,
    ) -> Result<()> {
        let size = plan.size;
        let window = plan.window.max(1) as u64;
        // Without a pattern every send may share the driver's buffer (as OSU
        // does); with one, each outstanding send needs its own.
        let slots = if fill.is_some() {
            (window as usize).min(MAX_RECV_BUFFERS)
        } else {
            1
        };
        // Our own (huge-page) buffers rather than the driver's `buf`.
        let _ = buf;
        self.ensure_buffers(slots, size, true)?;
        let shared = (self.send_buffers[0].base, self.send_buffers[0].handle);
        let (ack_addr, ack_handle) = (self.ack.base, self.ack.handle);
        let mut index = plan.first_index;
        let mut outstanding = 0usize;
        let mut next_slot = 0usize;
        for w in 0..plan.windows() {
            self.post_recv(ack_addr, WINDOW_ACK_LEN, ack_handle)?;
            for _ in 0..plan.window_len(w) {
                let (addr, handle) = if let Some(f) = fill.as_mut() {
                    if outstanding >= slots {
                        self.reap_send()?;
                        outstanding -= 1;
                    }
                    let r = &self.send_buffers[next_slot];
                    next_slot = (next_slot + 1) % slots;
                    // SAFETY: the slot's region is ours and its last send completed.
                    let m = unsafe { std::slice::from_raw_parts_mut(r.base as *mut u8, size) };
                    f(index, m);
                    (r.base, r.handle)
                } else {
                    shared
                };
                self.post_send(addr, size, handle)?;
                outstanding += 1;
                index += 1;
            }
            while outstanding > 0 {
                self.reap_send()?;
                outstanding -= 1;
            }
            let (_, n) = self.reap_recv()?;
            // SAFETY: the ack region is ours and the receive completed.
            let acked = u64::from_le_bytes(unsafe { *(ack_addr as *const [u8; 8]) });
            if n != WINDOW_ACK_LEN || acked != w {
                return Err(BenchError::Protocol(format!(
                    "acknowledgement for window {acked}, expected {w}"
                )));
            }
        }
        Ok(())
    }

    fn stream_recv(
        &mut self,
        plan: &StreamPlan,
        _buf: &mut [u8],
        mut check: Option<CheckHook<'_>>,
    ) -> Result<StreamReceipt> {
        let size = plan.size;
        let nbuf = (plan.window.max(1) as usize).min(MAX_RECV_BUFFERS);
        self.ensure_buffers(nbuf, size, false)?;
        let mut receipt = StreamReceipt::default();
        let total = plan.count;
        let mut posted = 0u64;
        let mut slot = 0usize;
        while posted < total && (posted as usize) < nbuf {
            let r = &self.recv_buffers[slot];
            let (a, h) = (r.base, r.handle);
            self.post_recv(a, size, h)?;
            slot = (slot + 1) % nbuf;
            posted += 1;
        }
        let (ack_addr, ack_handle) = (self.ack.base, self.ack.handle);
        let mut index = plan.first_index;
        for w in 0..plan.windows() {
            for _ in 0..plan.window_len(w) {
                let (addr, n) = self.reap_recv()?;
                if let Some(c) = check.as_mut() {
                    // SAFETY: the receive buffer is ours and the receive completed.
                    let data = unsafe { std::slice::from_raw_parts(addr as *const u8, n) };
                    c(index, 0, data);
                }
                receipt.messages += 1;
                receipt.bytes += n as u64;
                index += 1;
                if posted < total {
                    let h = self
                        .recv_buffers
                        .iter()
                        .find(|r| r.base == addr)
                        .map(|r| r.handle)
                        .unwrap_or(0);
                    self.post_recv(addr, size, h)?;
                    posted += 1;
                }
            }
            // SAFETY: the ack region is ours; the previous ack send completed.
            unsafe { *(ack_addr as *mut [u8; 8]) = w.to_le_bytes() };
            self.post_send(ack_addr, WINDOW_ACK_LEN, ack_handle)?;
            self.reap_send()?;
        }
        Ok(receipt)
    }
}

impl Drop for ViaEndpoint {
    fn drop(&mut self) {
        let _ = self.vi.disconnect();
        let _ = self.nic.close();
    }
}
