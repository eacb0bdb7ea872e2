//! The VIA side: one NIC of the network device, and the links to peers.
//!
//! Each pair of instances uses two VIs, one per direction: an instance
//! connects a [`TxLink`] to every peer (client side, to the peer's
//! well-known discriminator) and accepts the peers' connections as
//! [`RxLink`]s. A direction then has one sender and one receiver and needs
//! no election of who connects; when a peer restarts, its new instance
//! connects afresh, and ours reconnects once its old link has failed.
//!
//! One IP packet is one VIA message. Connected mode: a reliable VI, the
//! overlay MTU up to 64 KiB. Datagram mode: an unreliable VI, the overlay
//! MTU what one datagram of the device carries. The message's immediate
//! data says its form: a bare IPv4 packet ([`Form::Bare`]), or the
//! packet behind its TUN offload header ([`Form::Vnet`], connected mode
//! with offloads; see `vnet.rs`).

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use openvia_core::descriptor::{status, DescPtr};
use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::slots::Slots;
use openvia_core::vi::{reliability, Vi, ViAttributes, ViState};
use openvia_core::{Address, ViaError};

use crate::peers::HostAddr;
use crate::wait::{now_ns, Sleep};

/// Sends in flight per link.
const TX_SLOTS: usize = 64;
/// Receives posted per link in connected mode (64 KiB each).
const RX_SLOTS: usize = 128;
/// Receives posted per link in datagram mode, where a datagram that finds
/// none posted is lost: a 64 KiB TCP burst is some 45 datagrams, and the
/// receiving thread may be off the CPU for a while (a datagram each).
const RX_SLOTS_DATAGRAM: usize = 1024;
/// The largest overlay MTU (an IPv4 packet's total length is 16 bits).
pub const MAX_MTU: usize = 65535;
/// Connected mode's default MTU (IPoIB's connected-mode MTU).
pub const CONNECTED_MTU: usize = 65520;
/// IPv4 and UDP headers of the underlay's datagrams.
const IPV4_UDP_OVERHEAD: usize = 28;
/// The immediate data of a bare IPv4 packet: a receiver drops a message
/// with neither mark as garbage.
const MAGIC_BARE: u32 = u32::from_be_bytes(*b"vIP4");
/// The immediate data of a packet behind its offload header.
const MAGIC_VNET: u32 = u32::from_be_bytes(*b"vIPv");

/// What a message holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// An IPv4 packet.
    Bare,
    /// A `virtio_net_hdr` (`vnet::LEN` bytes), then an IPv4 packet.
    Vnet,
}

impl Form {
    fn magic(self) -> u32 {
        match self {
            Form::Bare => MAGIC_BARE,
            Form::Vnet => MAGIC_VNET,
        }
    }

    fn of(imm: u32) -> Option<Form> {
        match imm {
            MAGIC_BARE => Some(Form::Bare),
            MAGIC_VNET => Some(Form::Vnet),
            _ => None,
        }
    }
}

/// How packets travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A reliable VI per peer, MTU up to 64 KiB.
    Connected,
    /// An unreliable VI per peer, the device's MTU.
    Datagram,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Connected => "connected",
            Mode::Datagram => "datagram",
        }
    }

    /// The discriminator every instance of this mode accepts on.
    pub fn discriminator(self) -> &'static [u8] {
        match self {
            Mode::Connected => b"viaip/connected",
            Mode::Datagram => b"viaip/datagram",
        }
    }

    fn reliability(self) -> u16 {
        match self {
            Mode::Connected => reliability::RELIABLE_DELIVERY,
            Mode::Datagram => reliability::UNRELIABLE,
        }
    }
}

/// Status bits, length and immediate data of a completed descriptor.
fn completion(d: DescPtr) -> (u32, usize, u32) {
    // SAFETY: the descriptor came back from the core, which wrote it last.
    let (len, imm) = unsafe { ((*d.0).cs.length, (*d.0).cs.immediate_data) };
    (d.status(), len as usize, imm)
}

/// The NIC and what every link shares.
pub struct Fabric {
    nic: Nic,
    ptag: PtagId,
    pub mode: Mode,
    pub mtu: usize,
    /// The largest message: the MTU (with offloads, and its header), or in
    /// connected mode with offloads a 64 KiB super-packet and its header
    /// whatever the MTU.
    pub max_message: usize,
    pub host: HostAddr,
    pub device: String,
}

impl Fabric {
    /// Opens `device`; the MTU is `mtu` or the mode's default, checked
    /// against what the mode carries. `offload`: messages carry TUN
    /// offload headers, and in connected mode super-packets.
    pub fn open(
        device: &str,
        mode: Mode,
        mtu: Option<usize>,
        offload: bool,
    ) -> Result<Fabric, String> {
        let nic = Nic::open(Some(device)).map_err(|e| format!("{device}: {e}"))?;
        if std::env::var_os("OPENVIA_SPIN_NS").is_none() {
            // A daemon beside the programs it serves: wait, do not spin.
            nic.set_spin_ns(0);
        }
        let attrs = nic.query();
        // Datagram mode: a message is one datagram, its offload header
        // included.
        let header = if offload { crate::vnet::LEN } else { 0 };
        let largest = match mode {
            Mode::Connected => MAX_MTU.min(attrs.max_transfer_size as usize),
            Mode::Datagram => (attrs.native_mtu as usize)
                .saturating_sub(IPV4_UDP_OVERHEAD + openvia_wire::rum::DATA_OVERHEAD + header),
        };
        let default = match mode {
            Mode::Connected => CONNECTED_MTU.min(largest),
            Mode::Datagram => largest,
        };
        let mtu = mtu.unwrap_or(default);
        if !(576..=largest).contains(&mtu) {
            return Err(format!(
                "MTU {mtu} out of range for {} mode on {device} (576..={largest})",
                mode.name()
            ));
        }
        let max_message = match mode {
            Mode::Connected if offload => MAX_MTU + header,
            _ => mtu + header,
        };
        if max_message as u64 > attrs.max_transfer_size {
            return Err(format!(
                "{device} carries at most {} bytes a message; offloads need {max_message}",
                attrs.max_transfer_size
            ));
        }
        let ptag = nic.create_ptag().map_err(|e| e.to_string())?;
        Ok(Fabric {
            host: attrs.address,
            nic,
            ptag,
            mode,
            mtu,
            max_message,
            device: device.to_string(),
        })
    }

    /// A VI for messages of up to `max_message` bytes.
    fn new_vi(&self, max_message: usize) -> Result<Arc<Vi>, ViaError> {
        let attrs = ViAttributes {
            reliability: self.mode.reliability(),
            max_transfer: max_message as u64,
            ptag: self.ptag,
            rdma_write: false,
            rdma_read: false,
        };
        self.nic.create_vi(attrs, None, None)
    }

    fn local(&self, disc: &[u8]) -> Address {
        Address {
            host: self.host.to_vec(),
            discriminator: disc.to_vec(),
        }
    }

    /// Connects a sending link to the instance on `peer`.
    pub fn connect(&self, peer: &HostAddr, timeout: Duration) -> Result<TxLink, ViaError> {
        let vi = self.new_vi(self.max_message)?;
        let link = TxLink {
            slots: Slots::new(&self.nic, self.ptag, TX_SLOTS, self.max_message, false)?,
            free: (0..TX_SLOTS).rev().collect(),
            nic: self.nic.clone(),
            vi,
        };
        let remote = Address {
            host: peer.to_vec(),
            discriminator: self.mode.discriminator().to_vec(),
        };
        let local = self.local(b"viaip/sender");
        openvia_core::connect_request(&link.vi, &local, &remote, Some(timeout))?;
        Ok(link)
    }

    /// Takes the next peer's connection, if one comes within `timeout`:
    /// its receives are posted before it is accepted, so what the peer
    /// sends at once finds room. A request of another mode is refused.
    pub fn accept(&self, timeout: Duration) -> Result<Option<RxLink>, ViaError> {
        let local = self.local(self.mode.discriminator());
        let req = match openvia_core::connect_wait(self.nic.shared(), &local, Some(timeout)) {
            Ok(r) => r,
            Err(ViaError::Timeout) => return Ok(None),
            Err(e) => return Err(e),
        };
        let theirs = req.remote_attrs();
        if theirs.reliability != self.mode.reliability()
            || theirs.max_transfer > (MAX_MTU + crate::vnet::LEN) as u64
        {
            let _ = req.reject();
            return Ok(None);
        }
        let mut peer = [0u8; 16];
        let host = &req.remote_address().host;
        if host.len() == 16 {
            peer.copy_from_slice(host);
        }
        // Room for what the peer may send, which may be more than we would.
        let size = self.max_message.max(theirs.max_transfer as usize);
        let vi = self.new_vi(size)?;
        let n = match self.mode {
            Mode::Connected => RX_SLOTS,
            Mode::Datagram => RX_SLOTS_DATAGRAM,
        };
        let slots = Slots::new(&self.nic, self.ptag, n, size, false)?;
        for i in 0..n {
            slots.prepare(i, size, None);
            vi.post_recv(slots.desc(i), slots.desc_handle())?;
        }
        let link = RxLink {
            nic: self.nic.clone(),
            vi,
            slots,
            peer,
            reliable: self.mode == Mode::Connected,
        };
        req.accept(&link.vi)?;
        // Our answers travel on our own link to the peer: an
        // acknowledgement held here for a reply would only wait.
        let _ = link.vi.set_no_replies(true);
        Ok(Some(link))
    }
}

/// Why a send did not go.
#[derive(Debug, PartialEq, Eq)]
pub enum SendFailure {
    /// Every slot stayed in flight for the whole wait.
    QueueFull,
    /// The link failed; it must be replaced.
    Down,
}

/// Our sending VI to one peer.
pub struct TxLink {
    vi: Arc<Vi>,
    slots: Slots,
    free: Vec<usize>,
    nic: Nic,
}

// SAFETY: the slots are plain heap memory used by the one thread that owns
// the link; the core reads a posted descriptor only while it is posted.
unsafe impl Send for TxLink {}

impl TxLink {
    /// False once the VI has failed (peer gone, dead-peer timeout).
    pub fn alive(&self) -> bool {
        self.vi.state() == ViState::Connected
    }

    /// Drives the VI from the calling thread: takes the peer's
    /// acknowledgements, sends what the window held back, runs due
    /// protocol timers, and frees the slots of finished sends.
    pub fn drive(&mut self) -> Result<(), SendFailure> {
        loop {
            match self.vi.send_done() {
                Ok(d) => {
                    let (st, _, _) = completion(d);
                    self.free.push(self.slots.index_of(d));
                    if st & status::ERROR_MASK != 0 {
                        return Err(SendFailure::Down);
                    }
                }
                Err(ViaError::NotDone) => return Ok(()),
                Err(_) => return Err(SendFailure::Down),
            }
        }
    }

    /// What the sending loop sleeps on for this link: the VI's descriptor
    /// (acknowledgements) and its next protocol timer. None once the VI
    /// is not connected.
    pub fn wait_hint(&self) -> Option<(RawFd, Option<u64>)> {
        self.vi.wait_hint()
    }

    /// Whether the sending loop should wake when the peer acknowledges:
    /// only once many sends are in flight (slots running short, or the
    /// protocol's window holding messages back). With few in flight the
    /// next send takes the acknowledgements in, and a wake-up for each
    /// would only take the CPU from the programs (the protocol's timers
    /// still wake the loop: a lost datagram is resent on time).
    pub fn wants_acks(&self) -> bool {
        TX_SLOTS - self.free.len() >= TX_SLOTS / 4
    }

    /// The free slot the next packet may be read into, to be posted from
    /// there ([`TxLink::post_staged`]) without a copy; None when no slot
    /// is free.
    pub fn staging(&mut self) -> Option<&mut [u8]> {
        if self.free.is_empty() {
            // A failure shows on the next send.
            let _ = self.drive();
        }
        let i = *self.free.last()?;
        // SAFETY: slot i is free (not posted): its `size` bytes are ours.
        Some(unsafe { std::slice::from_raw_parts_mut(self.slots.data(i), self.slots.size()) })
    }

    /// Posts the first `len` bytes of the slot [`TxLink::staging`] gave,
    /// a packet of the given form.
    pub fn post_staged(&mut self, len: usize, form: Form) -> Result<(), SendFailure> {
        let i = self.free.pop().ok_or(SendFailure::QueueFull)?;
        self.slots.prepare(i, len, Some(form.magic()));
        self.vi
            .post_send(self.slots.desc(i), self.slots.desc_handle())
            .map_err(|_| SendFailure::Down)
    }

    /// Copies `msg` (a packet of the given form) into a free slot and
    /// posts it, waiting up to `wait` for a slot: asleep on the VI,
    /// driving it whenever the peer answers.
    pub fn send(&mut self, msg: &[u8], form: Form, wait: Duration) -> Result<(), SendFailure> {
        debug_assert!(msg.len() <= self.slots.size());
        self.drive()?;
        let deadline = now_ns() + wait.as_nanos() as u64;
        let mut sleep = Sleep::new();
        while self.free.is_empty() {
            if now_ns() >= deadline {
                return Err(SendFailure::QueueFull);
            }
            sleep.clear();
            sleep.hint(self.wait_hint().ok_or(SendFailure::Down)?);
            sleep.until(deadline);
            sleep.sleep(wait);
            self.drive()?;
        }
        let i = self.free.pop().ok_or(SendFailure::QueueFull)?;
        // SAFETY: slot i is not posted and holds `size` >= msg.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), self.slots.data(i), msg.len()) };
        self.slots.prepare(i, msg.len(), Some(form.magic()));
        self.vi
            .post_send(self.slots.desc(i), self.slots.desc_handle())
            .map_err(|_| SendFailure::Down)
    }
}

impl Drop for TxLink {
    fn drop(&mut self) {
        let _ = self.vi.disconnect();
        let _ = self.nic.destroy_vi(&self.vi);
    }
}

/// The link failed, and why.
#[derive(Debug, PartialEq, Eq)]
pub struct LinkDown(pub String);

/// A message taken from a link.
pub enum Arrival<'a> {
    /// A packet of the given form, in the receive's slot (the receiver
    /// may change the bytes: the slot is its own until it returns).
    Packet(&'a mut [u8], Form),
    /// A message without viaip's mark or with an error status, on a link
    /// that goes on (datagram mode).
    Garbage,
}

/// A peer's sending VI, accepted by us.
pub struct RxLink {
    vi: Arc<Vi>,
    slots: Slots,
    nic: Nic,
    pub peer: HostAddr,
    reliable: bool,
}

// SAFETY: as for TxLink: one thread owns the link and its slots.
unsafe impl Send for RxLink {}

impl RxLink {
    /// Takes up to `max` messages that have arrived, without waiting,
    /// driving the VI from the calling thread; hands each to `deliver`
    /// and posts its receive again afterwards. How many there were.
    pub fn drain(
        &self,
        max: usize,
        deliver: &mut dyn FnMut(Arrival<'_>),
    ) -> Result<usize, LinkDown> {
        for n in 0..max {
            let d = match self.vi.recv_done() {
                Ok(d) => d,
                Err(ViaError::NotDone) => return Ok(n),
                Err(e) => return Err(LinkDown(e.to_string())),
            };
            let i = self.slots.index_of(d);
            let (st, len, imm) = completion(d);
            let failed = st & status::ERROR_MASK != 0;
            let form = Form::of(imm).filter(|_| !failed && len <= self.slots.size());
            match form {
                // SAFETY: the completed receive wrote `len` bytes into
                // slot i, which is not posted again until `deliver`
                // returns.
                Some(form) => deliver(Arrival::Packet(
                    unsafe { std::slice::from_raw_parts_mut(self.slots.data(i), len) },
                    form,
                )),
                None if self.reliable && failed => {
                    return Err(LinkDown(format!("receive status {st:#x}")));
                }
                None => deliver(Arrival::Garbage),
            }
            self.slots.prepare(i, self.slots.size(), None);
            self.vi
                .post_recv(self.slots.desc(i), self.slots.desc_handle())
                .map_err(|e| LinkDown(e.to_string()))?;
        }
        Ok(max)
    }

    /// What the receiving thread sleeps on: the VI's descriptor and its
    /// next protocol timer (an acknowledgement owed). None once the VI is
    /// not connected.
    pub fn wait_hint(&self) -> Option<(RawFd, Option<u64>)> {
        self.vi.wait_hint()
    }
}

impl Drop for RxLink {
    fn drop(&mut self) {
        let _ = self.vi.disconnect();
        let _ = self.nic.destroy_vi(&self.vi);
    }
}
