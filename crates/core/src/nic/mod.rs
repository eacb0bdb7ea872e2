//! The NIC: what a process opens to use a device. It owns the protection
//! tags, the registered memory, the VIs and CQs created on it, the doorbell
//! page peers ring, and a progress thread.
//!
//! The progress thread is what makes a posted descriptor complete even if
//! the application never calls in again (VIA semantics: the NIC works on
//! its own). It stays out of the way of an application that polls: while
//! the application is active it only looks in every few milliseconds; when
//! the application goes quiet it arms the doorbell and sleeps in epoll
//! until a peer writes, a connection socket hangs up, or a CQ/VI notify
//! handler is installed.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

mod exit;
mod notices;
mod progress;
use notices::NoticeTable;
use progress::progress_loop;
use std::time::Duration;

use crate::config::Config;
use crate::cq::{CompletionQueue, CqNotify};
use crate::descriptor::{DescPtr, MAX_SEGMENTS};
use crate::device::{Device, Drive};
use crate::doorbell::LocalDoorbell;
use crate::error::{Result, ViaError};
use crate::mem::{MemoryRegistry, PtagId, MAX_REGIONS, MAX_REGISTER_BLOCK};
use crate::sys::poll::Epoll;
use crate::vi::{reliability, Vi, ViAttributes, ViState, MAX_DESCRIPTORS_PER_QUEUE};

/// Descriptors one connected shared-memory VI holds: its socket, and at
/// most one peer process's eventfd (shared by every connection to that
/// process; the region's and the doorbell page's memfds are closed once
/// mapped).
const FDS_PER_VI: usize = 2;
/// Most CQs per NIC. (Most VIs: the `OPENVIA_MAX_VI` setting.)
pub const MAX_CQ: usize = 4096;
pub const MAX_PTAGS: usize = 1024;
/// Host addresses are 16 bytes: IPv6, or IPv4 mapped into IPv6.
pub const NIC_ADDRESS_LEN: usize = 16;
pub const MAX_DISCRIMINATOR_LEN: usize = openvia_wire::handshake::MAX_DISCRIMINATOR_LEN;

/// `VIP_RESOURCE_CODE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceCode {
    Nic = 0,
    Vi = 1,
    Cq = 2,
    Descriptor = 3,
}

/// `VIP_ERROR_CODE`, in the order of the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    PostDesc = 0,
    ConnLost = 1,
    RecvqEmpty = 2,
    ViOverrun = 3,
    RdmawProt = 4,
    RdmawData = 5,
    RdmawAbort = 6,
    RdmarProt = 7,
    CompProt = 8,
    RdmaTransport = 9,
    Catastrophic = 10,
}

/// An asynchronous error, as given to the error callback.
#[derive(Clone, Debug)]
pub struct AsyncError {
    pub vi_id: Option<u64>,
    /// The C shell's handle of the VI (0 if none).
    pub vi_token: u64,
    pub cq_token: u64,
    pub desc: Option<DescPtr>,
    pub op_code: u64,
    pub resource: ResourceCode,
    pub code: ErrorCode,
}

pub type ErrorHandler = Arc<dyn Fn(&AsyncError) + Send + Sync>;

/// What `VipQueryNic` reports.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct NicAttributes {
    pub name: String,
    pub hardware_version: u64,
    pub provider_version: u64,
    pub address: [u8; NIC_ADDRESS_LEN],
    pub thread_safe: bool,
    pub max_discriminator_len: u16,
    pub max_register_bytes: u64,
    pub max_register_regions: u64,
    pub max_register_block_bytes: u64,
    pub max_vi: u64,
    pub max_descriptors_per_queue: u64,
    pub max_segments_per_desc: u64,
    pub max_cq: u64,
    pub max_cq_entries: u64,
    pub max_transfer_size: u64,
    pub native_mtu: u64,
    pub max_ptags: u64,
    pub reliability_support: u16,
    pub rdma_read_support: u16,
}

/// Bumped in a fork() child, so handles inherited from the parent refuse.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK: std::sync::Once = std::sync::Once::new();
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Epoll token of the NIC's own eventfd.
const TOKEN_EVENT: u64 = 0;

/// Page-aligned, so the state sits on pages of its own: registration marks
/// whole pages `MADV_DONTFORK`, and a small buffer registered beside this
/// state would leave a fork() child's handle pointing at an unmapped page,
/// a crash instead of the `InvalidState` the fork check gives.
#[repr(align(4096))]
pub struct NicShared {
    /// The opened device (see `crate::device`).
    device: Arc<dyn Device>,
    /// How the core drives it (a copy of its `info().drive`, read on hot paths).
    pub(crate) drive: Drive,
    pub name: String,
    pub address: [u8; NIC_ADDRESS_LEN],
    pub config: &'static Config,
    spin_ns: AtomicU64,
    pub registry: MemoryRegistry,
    ptags: Mutex<HashSet<u32>>,
    next_ptag: AtomicU32,
    vis: Mutex<HashMap<u64, Weak<Vi>>>,
    cqs: Mutex<Vec<Weak<CompletionQueue>>>,
    /// VIs with a CQ, by the notice key their peers push (see `notices`).
    notice: Mutex<NoticeTable>,
    /// CQ polls that found no notice (see `notices`).
    notice_idle: AtomicU32,
    pub(crate) doorbell: LocalDoorbell,
    epoll: Arc<Epoll>,
    watched: Mutex<Watched>,
    activity: AtomicU64,
    /// The program never polls: the progress thread always watches (see
    /// [`Nic::set_event_driven`]).
    event_driven: AtomicBool,
    /// How long the progress thread may poll before it sleeps, and the
    /// pause that ends such a poll (see [`Nic::set_progress_spin`]).
    progress_spin_ns: AtomicU64,
    progress_contended_ns: AtomicU64,
    closed: AtomicBool,
    error_handler: Mutex<Option<ErrorHandler>>,
    fork_generation: u64,
    progress: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Opaque value for the C shell (its handle).
    pub token: AtomicU64,
}

/// The descriptors the progress thread sleeps on (VI id as token), and
/// whether they are in its epoll set now (see `watch_sockets`).
struct Watched {
    fds: Vec<(RawFd, u64)>,
    in_epoll: bool,
}

/// An open NIC. Dropping the last handle closes it.
#[derive(Clone)]
pub struct Nic {
    pub(crate) shared: Arc<NicShared>,
}

/// A thread of the program blocked outside a Wait (`Nic::blocked_elsewhere`).
pub struct BlockedElsewhere {
    shared: Arc<NicShared>,
}

impl Drop for BlockedElsewhere {
    fn drop(&mut self) {
        self.shared.doorbell.unblocked_elsewhere();
    }
}

impl Nic {
    /// `VipOpenNic`: NULL, "" and "/dev/via_lo" open the shared-memory device.
    pub fn open(device_name: Option<&str>) -> Result<Nic> {
        let config = Config::global();
        let device = crate::device::registry::open(device_name, config)?;
        let info = device.info();
        let (name, address, drive) = (info.name.clone(), info.address, info.drive);
        ATFORK.call_once(|| {
            // SAFETY: registering a plain extern "C" function with no
            // captured state; it only touches an atomic.
            unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        });
        // Each connection holds a descriptor or two (`FDS_PER_VI`): make
        // room for a full NIC's worth
        // now, not in the middle of a connect (see `reserve_fds`: only
        // while the process has a single thread).
        crate::sys::reserve_fds(FDS_PER_VI * config.max_vi + 256);
        let doorbell = LocalDoorbell::new(!drive.peer_doorbell)
            .map_err(|_| ViaError::Resource("shared memory"))?;
        let epoll = Arc::new(Epoll::new().map_err(|_| ViaError::Resource("epoll"))?);
        // The progress thread's nap while the program polls: only our own
        // eventfd wakes it (a thread about to block, a handler installed).
        let nap = Epoll::new().map_err(|_| ViaError::Resource("epoll"))?;
        nap.add(doorbell.event().fd().as_raw_fd(), TOKEN_EVENT)
            .map_err(|_| ViaError::Resource("epoll"))?;
        epoll
            .add(doorbell.event().fd().as_raw_fd(), TOKEN_EVENT)
            .map_err(|_| ViaError::Resource("epoll"))?;
        let shared = Arc::new(NicShared {
            device,
            drive,
            name,
            address,
            config,
            spin_ns: AtomicU64::new(config.spin_ns),
            registry: MemoryRegistry::new(),
            ptags: Mutex::new(HashSet::new()),
            next_ptag: AtomicU32::new((crate::sys::random_u64() as u32 & 0xffff) | 1),
            vis: Mutex::new(HashMap::new()),
            cqs: Mutex::new(Vec::new()),
            notice: Mutex::new(NoticeTable::default()),
            notice_idle: AtomicU32::new(0),
            doorbell,
            epoll: epoll.clone(),
            watched: Mutex::new(Watched {
                fds: Vec::new(),
                in_epoll: true,
            }),
            activity: AtomicU64::new(0),
            event_driven: AtomicBool::new(false),
            progress_spin_ns: AtomicU64::new(0),
            progress_contended_ns: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            error_handler: Mutex::new(None),
            fork_generation: FORK_GENERATION.load(Ordering::SeqCst),
            progress: Mutex::new(None),
            token: AtomicU64::new(0),
        });
        exit::track(&shared);
        let weak = Arc::downgrade(&shared);
        let handle = crate::sys::thread::spawn_quiet("openvia-progress", move || {
            progress_loop(weak, epoll, nap)
        })
        .map_err(|_| ViaError::Resource("progress thread"))?;
        *shared.progress.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        Ok(Nic { shared })
    }

    pub fn shared(&self) -> &Arc<NicShared> {
        &self.shared
    }

    /// `VipCloseNic`: closes every VI and stops the progress thread.
    pub fn close(&self) -> Result<()> {
        self.shared.check_owner()?;
        self.shared.shutdown();
        Ok(())
    }

    pub fn query(&self) -> NicAttributes {
        let info = self.shared.device.info();
        NicAttributes {
            name: self.shared.name.clone(),
            hardware_version: 1,
            provider_version: 0x0001_0000,
            address: self.shared.address,
            thread_safe: true,
            max_discriminator_len: MAX_DISCRIMINATOR_LEN as u16,
            max_register_bytes: MAX_REGISTER_BLOCK,
            max_register_regions: (MAX_REGIONS - 1) as u64,
            max_register_block_bytes: MAX_REGISTER_BLOCK,
            max_vi: self.shared.config.max_vi as u64,
            max_descriptors_per_queue: MAX_DESCRIPTORS_PER_QUEUE as u64,
            max_segments_per_desc: MAX_SEGMENTS as u64,
            max_cq: MAX_CQ as u64,
            max_cq_entries: crate::cq::MAX_CQ_ENTRIES as u64,
            max_transfer_size: self.shared.max_transfer(),
            native_mtu: info.native_mtu,
            max_ptags: MAX_PTAGS as u64,
            reliability_support: info.reliability,
            rdma_read_support: info.rdma_read,
        }
    }

    /// The calling thread blocks outside the VIPL's Waits (in poll or
    /// epoll on descriptors of its own) while the guard lives. The
    /// progress thread takes a program that made calls lately for one
    /// that polls, and then leaves protocol timers to it (acknowledgements
    /// held for a reply among them) for up to `progress_interval_us`; a
    /// thread asleep elsewhere runs none, so it says so here.
    pub fn blocked_elsewhere(&self) -> BlockedElsewhere {
        self.shared.doorbell.blocked_elsewhere();
        BlockedElsewhere {
            shared: self.shared.clone(),
        }
    }

    /// Sets how long Waits spin before blocking (ns); `u64::MAX` never blocks.
    pub fn set_spin_ns(&self, ns: u64) {
        self.shared.spin_ns.store(ns, Ordering::Relaxed);
    }

    /// Declares a program that takes its receives through notify handlers
    /// and sleeps outside this NIC's Waits (on a poll loop or a futex of
    /// its own). Its posts still look like polling, which would make the
    /// progress thread nap and stop watching the sockets; with this set it
    /// always watches them, so a datagram runs the handlers at once.
    /// Lets the progress thread poll its sockets for up to `limit` before
    /// it sleeps in epoll, in a window that adapts (`spin::Window`: it
    /// shrinks to nothing while events come later than `limit`, and grows
    /// back when one comes within it). For a daemon whose peer answers
    /// within tens of microseconds (PVM's pvmd and tasks): on a virtual
    /// machine an idle vCPU takes 5–50 µs to wake for a datagram, which a
    /// poll in progress does not pay. A pause longer than `contended_ns`
    /// between two looks (another process had the CPU) ends a poll. The
    /// default, 0, sleeps at once.
    pub fn set_progress_spin(&self, limit: Duration, contended_ns: u64) {
        let ns = limit.as_nanos().min(u128::from(crate::spin::MAX_SPIN_NS)) as u64;
        self.shared
            .progress_contended_ns
            .store(contended_ns, Ordering::Relaxed);
        self.shared.progress_spin_ns.store(ns, Ordering::Relaxed);
    }

    pub fn set_event_driven(&self, on: bool) {
        self.shared.event_driven.store(on, Ordering::SeqCst);
        if on {
            self.shared.wake_progress();
        }
    }

    /// Where the NIC's shared state lives, for the test that registers
    /// memory on its neighbourhood (see `NicShared`).
    #[doc(hidden)]
    pub fn state_address(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    pub fn create_ptag(&self) -> Result<PtagId> {
        self.shared.check_owner()?;
        let mut tags = self.shared.ptags.lock().unwrap_or_else(|e| e.into_inner());
        if tags.len() >= MAX_PTAGS {
            return Err(ViaError::Resource("protection tags"));
        }
        loop {
            let id = self.shared.next_ptag.fetch_add(1, Ordering::Relaxed);
            if id != 0 && tags.insert(id) {
                return Ok(PtagId(id));
            }
        }
    }

    pub fn destroy_ptag(&self, ptag: PtagId) -> Result<()> {
        self.shared.check_owner()?;
        if !self.shared.ptag_valid(ptag) {
            return Err(ViaError::InvalidPtag);
        }
        let in_use_by_vi = self
            .shared
            .live_vis()
            .iter()
            .any(|vi| vi.attributes().ptag == ptag);
        if in_use_by_vi || self.shared.registry.uses_ptag(ptag) {
            return Err(ViaError::Resource("protection tag in use"));
        }
        self.shared
            .ptags
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&ptag.0);
        Ok(())
    }

    /// `VipRegisterMem`.
    pub fn register_mem(
        &self,
        addr: u64,
        len: u64,
        ptag: PtagId,
        rdma_write: bool,
        rdma_read: bool,
    ) -> Result<u32> {
        self.shared.check_owner()?;
        if !self.shared.ptag_valid(ptag) {
            return Err(ViaError::InvalidPtag);
        }
        self.shared
            .registry
            .register(addr, len, ptag, rdma_write, rdma_read)
    }

    /// Registers memory that only local descriptors name (no RDMA)
    /// without locking its pages (see `MemoryRegistry::register_unlocked`):
    /// for a client that registers memory per short connection.
    pub fn register_mem_unlocked(&self, addr: u64, len: u64, ptag: PtagId) -> Result<u32> {
        self.shared.check_owner()?;
        if !self.shared.ptag_valid(ptag) {
            return Err(ViaError::InvalidPtag);
        }
        self.shared.registry.register_unlocked(addr, len, ptag)
    }

    /// `VipDeregisterMem`: refused (`InvalidState`) while a posted
    /// descriptor names the region or lies in it; once it returns success,
    /// nothing here touches the region again (see `mem`).
    pub fn deregister_mem(&self, addr: u64, handle: u32) -> Result<()> {
        self.shared.check_owner()?;
        let quiesce = || {
            for vi in self.shared.live_vis() {
                drop(vi.lock());
            }
        };
        self.shared.registry.deregister(addr, handle, &quiesce)
    }

    /// `VipQueryMem`: (ptag, rdma write, rdma read).
    pub fn query_mem(&self, addr: u64, handle: u32) -> Result<(PtagId, bool, bool)> {
        self.shared.check_owner()?;
        let r = self
            .shared
            .registry
            .lookup(handle)
            .ok_or(ViaError::InvalidParameter("memory handle"))?;
        if r.addr != addr {
            return Err(ViaError::InvalidParameter("address does not match handle"));
        }
        Ok((r.ptag, r.rdma_write, r.rdma_read))
    }

    pub fn set_mem_attributes(
        &self,
        addr: u64,
        handle: u32,
        ptag: PtagId,
        rdma_write: bool,
        rdma_read: bool,
    ) -> Result<()> {
        self.shared.check_owner()?;
        if !self.shared.ptag_valid(ptag) {
            return Err(ViaError::InvalidPtag);
        }
        self.shared
            .registry
            .set_attributes(addr, handle, ptag, rdma_write, rdma_read)
    }

    /// `VipCreateCQ`.
    pub fn create_cq(&self, entries: usize) -> Result<Arc<CompletionQueue>> {
        self.shared.check_owner()?;
        let mut cqs = self.shared.cqs.lock().unwrap_or_else(|e| e.into_inner());
        cqs.retain(|w| w.strong_count() > 0);
        if cqs.len() >= MAX_CQ {
            return Err(ViaError::Resource("completion queues"));
        }
        let cq = Arc::new(CompletionQueue::new(next_id(), entries)?);
        cqs.push(Arc::downgrade(&cq));
        Ok(cq)
    }

    /// `VipDestroyCQ`: refused while a VI still uses it.
    pub fn destroy_cq(&self, cq: &Arc<CompletionQueue>) -> Result<()> {
        self.shared.check_owner()?;
        if cq.in_use() {
            return Err(ViaError::InvalidState("CQ still attached to a VI"));
        }
        let mut cqs = self.shared.cqs.lock().unwrap_or_else(|e| e.into_inner());
        cqs.retain(|w| w.upgrade().is_some_and(|c| c.id() != cq.id()));
        Ok(())
    }

    /// `VipCreateVi`.
    pub fn create_vi(
        &self,
        attrs: ViAttributes,
        send_cq: Option<Arc<CompletionQueue>>,
        recv_cq: Option<Arc<CompletionQueue>>,
    ) -> Result<Arc<Vi>> {
        self.shared.check_owner()?;
        self.shared.check_vi_attrs(&attrs)?;
        for cq in [&send_cq, &recv_cq].into_iter().flatten() {
            if !self.owns_cq_id(cq.id()) {
                return Err(ViaError::InvalidParameter("CQ of another NIC"));
            }
        }
        let mut vis = self.shared.vis.lock().unwrap_or_else(|e| e.into_inner());
        vis.retain(|_, w| w.strong_count() > 0);
        if vis.len() >= self.shared.config.max_vi {
            return Err(ViaError::Resource(
                "VIs: the NIC has OPENVIA_MAX_VI of them (raise the setting)",
            ));
        }
        let key = if send_cq.is_some() || recv_cq.is_some() {
            let mut t = self.shared.notice.lock().unwrap_or_else(|e| e.into_inner());
            t.reserve()
        } else {
            0
        };
        let vi = Arc::new(Vi::new(
            next_id(),
            self.shared.clone(),
            attrs,
            send_cq.clone(),
            recv_cq.clone(),
            key,
        ));
        if key != 0 {
            let mut t = self.shared.notice.lock().unwrap_or_else(|e| e.into_inner());
            t.set(key, &vi);
        }
        vis.insert(vi.id(), Arc::downgrade(&vi));
        drop(vis);
        if let Some(cq) = &send_cq {
            cq.attach(&vi);
        }
        if let Some(cq) = &recv_cq {
            if send_cq.as_ref().is_none_or(|s| s.id() != cq.id()) {
                cq.attach(&vi);
            }
        }
        Ok(vi)
    }

    /// `VipDestroyVi`: refused while connected.
    pub fn destroy_vi(&self, vi: &Arc<Vi>) -> Result<()> {
        self.shared.check_owner()?;
        match vi.state() {
            ViState::Connected | ViState::ConnectPending => {
                return Err(ViaError::InvalidState("VI is connected"))
            }
            _ => {}
        }
        if vi.state() == ViState::Error {
            vi.disconnect()?;
        }
        vi.abandon_posted();
        self.shared.forget_vi(vi);
        Ok(())
    }

    /// `VipErrorCallback`: None restores the default (log to stderr, but
    /// lost connections only with `OPENVIA_DEBUG`).
    pub fn set_error_handler(&self, h: Option<ErrorHandler>) -> Result<()> {
        self.shared.check_owner()?;
        *self
            .shared
            .error_handler
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = h;
        Ok(())
    }

    /// `VipCQNotify`: `f` runs once with the next CQ entry.
    pub fn cq_notify(&self, cq: &Arc<CompletionQueue>, f: CqNotify) -> Result<()> {
        self.shared.check_owner()?;
        cq.set_notify(f);
        self.shared.fire_cq_notify(cq);
        self.shared.wake_progress();
        Ok(())
    }

    /// `VipCQDone`: the oldest entry, after driving the CQ's VIs.
    pub fn cq_done(&self, cq: &Arc<CompletionQueue>) -> Result<crate::cq::CqEntry> {
        self.shared.check_owner()?;
        self.shared.touch();
        self.shared
            .cq_poll(cq, &mut Default::default())
            .ok_or(ViaError::NotDone)
    }

    /// `VipCQWait`.
    pub fn cq_wait(
        &self,
        cq: &Arc<CompletionQueue>,
        timeout: Option<Duration>,
    ) -> Result<crate::cq::CqEntry> {
        self.shared.check_owner()?;
        // The VI to look at first, kept across the polls of this wait.
        let mut hot = Default::default();
        crate::wait::wait_for(&self.shared, timeout, || {
            self.shared.touch();
            self.shared.cq_poll(cq, &mut hot)
        })
    }

    /// Whether the CQ with this id was created on this NIC.
    pub fn owns_cq_id(&self, id: u64) -> bool {
        let cqs = self.shared.cqs.lock().unwrap_or_else(|e| e.into_inner());
        cqs.iter()
            .any(|w| w.upgrade().is_some_and(|c| c.id() == id))
    }

    /// Finds a VI of this NIC by id (CQ entries name VIs by id).
    pub fn vi_by_id(&self, id: u64) -> Option<Arc<Vi>> {
        self.shared.vi(id)
    }
}

impl Drop for NicShared {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        self.doorbell.event().signal();
    }
}

impl NicShared {
    /// The progress thread's poll before sleeping: (limit, contended) in ns.
    pub(crate) fn progress_spin(&self) -> (u64, u64) {
        (
            self.progress_spin_ns.load(Ordering::Relaxed),
            self.progress_contended_ns.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn check_owner(&self) -> Result<()> {
        if FORK_GENERATION.load(Ordering::Relaxed) != self.fork_generation {
            return Err(ViaError::InvalidState(
                "NIC belongs to the parent process (fork)",
            ));
        }
        if self.closed.load(Ordering::Relaxed) {
            return Err(ViaError::InvalidState("NIC closed"));
        }
        Ok(())
    }

    /// Records that the application called in (the progress thread backs off).
    #[inline]
    pub(crate) fn touch(&self) {
        let v = self.activity.load(Ordering::Relaxed);
        self.activity.store(v.wrapping_add(1), Ordering::Relaxed);
    }

    pub(crate) fn event_driven(&self) -> bool {
        self.event_driven.load(Ordering::Relaxed)
    }

    pub(crate) fn spin_ns(&self) -> u64 {
        self.spin_ns.load(Ordering::Relaxed)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    pub(crate) fn ptag_valid(&self, p: PtagId) -> bool {
        self.ptags
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&p.0)
    }

    pub(crate) fn check_vi_attrs(&self, a: &ViAttributes) -> Result<()> {
        match a.reliability {
            reliability::UNRELIABLE
            | reliability::RELIABLE_DELIVERY
            | reliability::RELIABLE_RECEPTION => {}
            _ => return Err(ViaError::InvalidReliability),
        }
        if a.max_transfer > self.max_transfer() {
            return Err(ViaError::InvalidMtu);
        }
        if !self.ptag_valid(a.ptag) {
            return Err(ViaError::InvalidPtag);
        }
        if a.rdma_read && a.reliability == reliability::UNRELIABLE {
            return Err(ViaError::InvalidRdmaRead);
        }
        Ok(())
    }

    /// Largest transfer one descriptor may carry on this NIC's device.
    pub(crate) fn max_transfer(&self) -> u64 {
        self.device.info().max_transfer
    }

    /// The opened device.
    pub fn device(&self) -> &dyn Device {
        &*self.device
    }

    pub(crate) fn vi(&self, id: u64) -> Option<Arc<Vi>> {
        self.vis
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .and_then(Weak::upgrade)
    }

    fn live_vis(&self) -> Vec<Arc<Vi>> {
        self.vis
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    fn live_cqs(&self) -> Vec<Arc<CompletionQueue>> {
        self.cqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    fn forget_vi(&self, vi: &Arc<Vi>) {
        self.vis
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&vi.id());
        if vi.notice_key() != 0 {
            self.notice
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .release(vi.notice_key());
        }
        if let Some(cq) = &vi.send_cq {
            cq.detach(vi.id());
        }
        if let Some(cq) = &vi.recv_cq {
            cq.detach(vi.id());
        }
    }

    pub(crate) fn watch(&self, fd: RawFd, vi_id: u64) {
        let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        w.fds.push((fd, vi_id));
        if w.in_epoll {
            let _ = self.epoll.add(fd, vi_id);
        }
    }

    pub(crate) fn unwatch(&self, fd: RawFd) {
        let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        w.fds.retain(|&(f, _)| f != fd);
        self.epoll.remove(fd);
    }

    /// Puts the VIs' descriptors into the progress thread's epoll set, or
    /// takes them out, on the network device. A datagram that arrives on
    /// a socket in an epoll set runs the set's wake-up callback, under an
    /// interrupt-disabling lock, on the sending CPU's path; and every
    /// datagram sent runs it again for the freed send buffer. While the
    /// program polls its sockets itself nobody needs that: it cost about a
    /// tenth of a microsecond per datagram. (The shared-memory device's
    /// descriptors carry only hang-ups and stay.)
    pub(crate) fn watch_sockets(&self, on: bool) {
        if !self.drive.costly_poll {
            return;
        }
        let mut w = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        if w.in_epoll == on {
            return;
        }
        for &(fd, id) in &w.fds {
            if on {
                let _ = self.epoll.add(fd, id);
            } else {
                self.epoll.remove(fd);
            }
        }
        w.in_epoll = on;
    }

    /// Makes the progress thread look at once (a handler was installed).
    pub(crate) fn wake_progress(&self) {
        self.doorbell.event().signal();
    }

    pub(crate) fn report_error(&self, e: AsyncError) {
        let h = self
            .error_handler
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match h {
            Some(h) => h(&e),
            // A peer that went away is the program's business (its VIs are
            // in the error state, its Waits return): without a callback it
            // is reported only when debugging, not once per VI on stderr.
            None if e.code == ErrorCode::ConnLost && !self.config.debug => {}
            None => eprintln!(
                "openvia: asynchronous error {:?} on {:?} (vi {:?})",
                e.code, e.resource, e.vi_id
            ),
        }
    }

    pub(crate) fn fire_cq_notify(&self, cq: &CompletionQueue) {
        if let Some((f, e)) = cq.take_notify_if_ready() {
            f(e);
        }
    }

    fn shutdown(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        for vi in self.live_vis() {
            let _ = vi.disconnect_internal();
        }
        self.device.close(self);
        self.registry.clear();
        self.doorbell.event().signal();
        let h = self
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}
