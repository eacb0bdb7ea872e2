//! One connected VI pair over shared memory.
//!
//! The connection region holds two rings, one per direction. Small
//! messages travel inside ring records (sender copies in, receiver copies
//! out: the fastest way for a few KiB). Large ones (and smaller ones while
//! the receiver finds the ring slow) take one copy: the record carries the
//! sender's buffer list, and both processes copy pieces of it straight into
//! the posted buffer, the receiver with process_vm_readv, the sender with
//! process_vm_writev (see `shared_copy`; RDMA reads: the target pushes with
//! process_vm_writev). When the kernel refuses CMA the
//! same messages are cut into chunks that stream through the ring, which
//! then acts as a pipelined bounce buffer.
//!
//! Nothing here blocks or enters the kernel on the fast path, except a
//! wake-up of a peer that is asleep (see `doorbell`).
//!
//! Memory a peer's RDMA operation names is looked up again for every chunk
//! that touches it: it may be deregistered between two (see `mem`).

use std::collections::VecDeque;
use std::os::fd::RawFd;

use openvia_wire::handshake::{Message, Reason, ViAttrs};
use openvia_wire::shm::{
    self as rec, Op, RecordHeader, RecordKind, FLAG_CMA, FLAG_IMMEDIATE, FLAG_WAKE,
};

use super::region::ConnRegion;
use super::ring::{Consumer, Producer};
use super::shared_copy::{self, CopySlot, RingPace};
use crate::config::Config;
use crate::descriptor::{status, OpKind, WorkRequest};
use crate::device::{Channel, ChannelFailed, Completion, PeerEvent};
use crate::doorbell::PeerDoorbell;
use crate::mem::MemoryRegistry;
use crate::ranges::{self, Range};
use crate::sys::seqpacket::SeqPacket;
use crate::vi::placement::{Fault, Placement};

mod receive;
mod shared;

/// Outbound work that did not fit in the ring at once.
enum Pending {
    /// A message whose bytes stream through the ring (or one CMA record).
    Data {
        header: RecordHeader,
        source: Vec<Range>,
        offset: u64,
        started: bool,
        /// Counts towards `sent` when done (responses do too: every First
        /// record is one message for the peer's consumed count).
        seq: u64,
        /// A response to the peer's RDMA read: the handle of the region
        /// `source` lies in, checked before each chunk is read.
        rdma_source: Option<u32>,
    },
    /// A control record (Nack, ReadDone).
    Control(RecordHeader),
    /// A data-less message (an RDMA read request without CMA).
    Request { header: RecordHeader, seq: u64 },
}

/// A message whose chunks are still arriving.
#[derive(Clone, Copy)]
enum Inbound {
    Recv {
        total: u64,
        offset: u64,
        imm: Option<u32>,
    },
    RdmaWrite {
        addr: u64,
        handle: u32,
        seq: u64,
        total: u64,
        offset: u64,
        imm: Option<u32>,
    },
    ReadResponse {
        seq: u64,
        total: u64,
        offset: u64,
    },
    Discard {
        total: u64,
        offset: u64,
    },
}

pub struct ShmChannel {
    tx: Producer,
    rx: Consumer,
    peer: PeerDoorbell,
    peer_pid: i32,
    /// The peer may copy from/to our memory with CMA.
    cma: bool,
    sock: SeqPacket,
    remote: ViAttrs,
    next_seq: u64,
    sent: u64,
    pending: VecDeque<Pending>,
    inbound: Option<Inbound>,
    cfg: &'static Config,
    closed: bool,
    /// Messages delivered whose count waits for a refusal (Nack) to be
    /// written first, so the peer never sees the count before the refusal.
    owed: u64,
    /// How many `Pending::Control` entries are queued.
    controls_queued: usize,
    /// Records were written since the peer was last rung.
    ring_due: bool,
    /// The region a response to the peer's RDMA read was being read from
    /// was deregistered mid-way: the response cannot go on.
    source_refused: bool,
    /// The shared-copy slot of our transmit ring: the peer announces there
    /// the CMA message it is pulling, and we push pieces of it.
    tx_copy: CopySlot,
    /// The slot of our receive ring, which we open for the CMA message we
    /// pull.
    rx_copy: CopySlot,
    /// Generation of the last transfer we opened in `rx_copy` (never 0).
    copy_gen: u32,
    /// Our CMA sends the peer has not consumed yet: (message, source), for
    /// pushing pieces of them when the peer asks.
    cma_sent: VecDeque<(u64, Vec<Range>)>,
    /// How fast the ring brings us larger messages (we tell the sender).
    pace: RingPace,
    /// When the message now streaming in through the ring began (ns).
    streaming_since: Option<u64>,
    /// Messages we sent by CMA because the peer said the ring ran slow.
    diverted: u64,
    // Declared last: the rings point into it.
    _region: ConnRegion,
}

pub struct ChannelParts {
    pub region: ConnRegion,
    pub is_client: bool,
    pub peer: PeerDoorbell,
    pub peer_pid: i32,
    pub cma: bool,
    pub sock: SeqPacket,
    pub remote: ViAttrs,
}

impl ShmChannel {
    pub fn new(p: ChannelParts) -> Self {
        let (tx, rx) = p.region.rings(p.is_client);
        let (tx_copy, rx_copy) = p.region.copy_slots(p.is_client);
        Self {
            tx: Producer::new(tx),
            rx: Consumer::new(rx),
            peer: p.peer,
            peer_pid: p.peer_pid,
            cma: p.cma && Config::global().cma,
            // Kept for the connection's life: out of the program's way.
            sock: p.sock.lifted(),
            remote: p.remote,
            next_seq: 0,
            sent: 0,
            pending: VecDeque::new(),
            inbound: None,
            cfg: Config::global(),
            closed: false,
            owed: 0,
            controls_queued: 0,
            ring_due: false,
            source_refused: false,
            tx_copy,
            rx_copy,
            copy_gen: 0,
            cma_sent: VecDeque::new(),
            pace: RingPace::new(Config::global().ring_slow_gbps),
            streaming_since: None,
            diverted: 0,
            _region: p.region,
        }
    }

    fn first_header(&self, wr: &WorkRequest, seq: u64) -> RecordHeader {
        let op = match wr.op {
            OpKind::Send => Op::Send,
            OpKind::RdmaWrite => Op::RdmaWrite,
            OpKind::RdmaRead => Op::ReadRequest,
        };
        let mut h = RecordHeader::new(RecordKind::First, op);
        h.total_len = wr.total_len;
        h.msg_seq = seq;
        if let Some(imm) = wr.immediate {
            h.flags |= FLAG_IMMEDIATE;
            h.immediate = imm;
        }
        if let Some((addr, handle)) = wr.remote {
            h.remote_addr = addr;
            h.remote_handle = handle;
        }
        h
    }

    /// Writes a CMA record naming `source`; false if the ring is full.
    fn push_cma(&mut self, mut h: RecordHeader, source: &[Range]) -> bool {
        // The sender's buffer is busy until the peer has pulled it.
        h.flags |= FLAG_CMA | FLAG_WAKE;
        h.iov_count = source.len() as u32;
        h.payload_len = (source.len() * rec::IOV_ENTRY) as u32;
        let pushed = self.tx.push(&h, |buf| {
            for (chunk, r) in buf.chunks_exact_mut(rec::IOV_ENTRY).zip(source) {
                chunk[..8].copy_from_slice(&r.addr.to_ne_bytes());
                chunk[8..].copy_from_slice(&r.len.to_ne_bytes());
            }
        });
        if pushed && h.op != Op::ReadRequest && self.cfg.cma_piece != 0 {
            self.cma_sent.push_back((h.msg_seq, source.to_vec()));
        }
        pushed
    }

    /// Moves queued outbound work into the ring while it fits. A response
    /// to the peer's RDMA read moves only with `reg` given (its region is
    /// checked chunk by chunk); it waits otherwise.
    fn pump(&mut self, reg: Option<&MemoryRegistry>) -> bool {
        let mut did = false;
        let chunk_max = self.cfg.chunk_bytes as u64;
        while let Some(front) = self.pending.front_mut() {
            match front {
                Pending::Control(h) => {
                    let h = *h;
                    if !self.tx.push(&h, |_| {}) {
                        break;
                    }
                    self.pending.pop_front();
                    self.controls_queued -= 1;
                    did = true;
                }
                Pending::Request { header, seq } => {
                    let (h, s) = (*header, *seq);
                    if !self.tx.push(&h, |_| {}) {
                        break;
                    }
                    self.sent = s;
                    self.pending.pop_front();
                    did = true;
                }
                Pending::Data {
                    header,
                    source,
                    offset,
                    started,
                    seq,
                    rdma_source,
                } => {
                    if header.flags & FLAG_CMA != 0 {
                        let (h, src, s) = (*header, std::mem::take(source), *seq);
                        if !self.push_cma(h, &src) {
                            if let Some(Pending::Data { source, .. }) = self.pending.front_mut() {
                                *source = src;
                            }
                            break;
                        }
                        self.sent = s;
                        self.pending.pop_front();
                        did = true;
                        continue;
                    }
                    let total = header.total_len;
                    let mut finished = false;
                    loop {
                        let remaining = total - *offset;
                        let room = self.tx.room() as u64;
                        let n = remaining.min(chunk_max).min(room);
                        if (n == 0 && remaining > 0) || (room == 0 && !*started) {
                            break;
                        }
                        let mut h = if *started {
                            RecordHeader::new(RecordKind::Cont, header.op)
                        } else {
                            *header
                        };
                        h.payload_len = n as u32;
                        let off = *offset;
                        let src: &[Range] = source;
                        if let Some(handle) = *rdma_source {
                            let live = reg.map(|r| r.lookup(handle));
                            match live {
                                None => break,
                                Some(Some(r)) if r.rdma_read && source_inside(&r, src) => {}
                                Some(_) => {
                                    self.source_refused = true;
                                    break;
                                }
                            }
                        }
                        // SAFETY: `source` ranges were validated against the
                        // registry: our own registered memory, a posted
                        // descriptor's (held in use) or, for a peer's RDMA
                        // read, looked up just above under the VI's lock.
                        let ok = self.tx.push(&h, |buf| unsafe {
                            ranges::gather(src, off, buf);
                        });
                        if !ok {
                            break;
                        }
                        *offset += n;
                        *started = true;
                        did = true;
                        if *offset == total {
                            finished = true;
                            break;
                        }
                    }
                    if !finished {
                        break;
                    }
                    self.sent = *seq;
                    self.pending.pop_front();
                }
            }
        }
        did
    }

    /// Publishes delivered-message counts once no refusal is queued ahead.
    #[inline]
    fn settle_owed(&mut self, reg: &MemoryRegistry) {
        if self.owed == 0 {
            return;
        }
        if self
            .pending
            .iter()
            .any(|p| matches!(p, Pending::Control(_)))
        {
            self.pump(Some(reg));
            if self
                .pending
                .iter()
                .any(|p| matches!(p, Pending::Control(_)))
            {
                return;
            }
        }
        for _ in 0..self.owed {
            self.rx.message_delivered();
        }
        self.owed = 0;
    }

    /// Whether a message of `len` bytes (above the inline size) goes by
    /// CMA: from `OPENVIA_CMA_MIN` on, or below it while the peer says the
    /// ring runs slow (all but one in `PROBE_EVERY`, which keeps the peer
    /// timing the ring).
    fn by_cma(&mut self, len: u64) -> bool {
        if len >= self.cfg.cma_min as u64 {
            return true;
        }
        let slow = self.tx_copy.ring_slow();
        // While the peer times our probes, no page of the ring may fault
        // in again under them.
        self.tx.set_keep_pages(slow);
        if !slow {
            return false;
        }
        self.diverted += 1;
        if self.diverted.is_multiple_of(shared_copy::PROBE_EVERY) {
            return false;
        }
        shared_copy::count_diverted();
        true
    }

    /// Receiver: a message that streamed through the ring is complete;
    /// times it (see `RingPace`).
    fn streamed(&mut self, total: u64) {
        if let Some(t0) = self.streaming_since.take() {
            let ns = crate::sys::now_ns().saturating_sub(t0);
            if let Some(slow) = self.pace.observe(total, ns) {
                self.rx_copy.set_ring_slow(slow);
            }
        }
    }

    fn queue_control(&mut self, kind: RecordKind, seq: u64, status_bits: u32) {
        let mut h = RecordHeader::new(kind, Op::Send);
        h.msg_seq = seq;
        h.status = status_bits;
        self.pending.push_back(Pending::Control(h));
        self.controls_queued += 1;
    }
}

/// Whether every range of `src` lies inside `region`.
fn source_inside(region: &crate::mem::Region, src: &[Range]) -> bool {
    src.iter().all(|r| region.contains(r.addr, r.len))
}

impl Channel for ShmChannel {
    fn post(
        &mut self,
        wr: &WorkRequest,
        local: &[Range],
        track: bool,
    ) -> Result<(u64, Completion), ChannelFailed> {
        if self.closed {
            return Err(ChannelFailed("closed"));
        }
        let seq = self.next_seq + 1;
        // The common case, written straight into the ring: a small send.
        if wr.op == OpKind::Send
            && !track
            && self.pending.is_empty()
            && wr.total_len <= self.cfg.inline_max as u64
        {
            let mut flags = 0;
            let mut imm = 0;
            if let Some(i) = wr.immediate {
                flags |= FLAG_IMMEDIATE;
                imm = i;
            }
            // SAFETY: `local` ranges were validated against the registry.
            let pushed = self.tx.push_data(
                Op::Send,
                flags,
                wr.total_len as u32,
                imm,
                seq,
                |buf| unsafe {
                    ranges::gather(local, 0, buf);
                },
            );
            if pushed {
                self.next_seq = seq;
                self.sent = seq;
                self.peer.ring();
                return Ok((seq, Completion::Sent));
            }
        }
        let mut header = self.first_header(wr, seq);
        if track {
            header.flags |= FLAG_WAKE;
        }
        let use_cma = self.cma
            && local.len() <= rec::MAX_IOVS
            && (wr.op == OpKind::RdmaRead
                || (wr.total_len > self.cfg.inline_max as u64 && self.by_cma(wr.total_len)));
        let completion = match (wr.op, use_cma) {
            (OpKind::RdmaRead, _) => Completion::ReadDone,
            (_, true) => Completion::Consumed,
            (_, false) => Completion::Sent,
        };
        if self.pending.is_empty() {
            let pushed = if use_cma {
                self.push_cma(header, local)
            } else if wr.op != OpKind::RdmaRead && wr.total_len <= self.cfg.inline_max as u64 {
                let mut h = header;
                h.payload_len = wr.total_len as u32;
                // SAFETY: `local` ranges were validated against the registry.
                self.tx.push(&h, |buf| unsafe {
                    ranges::gather(local, 0, buf);
                })
            } else if wr.op == OpKind::RdmaRead {
                self.tx.push(&header, |_| {})
            } else {
                false
            };
            if pushed {
                self.next_seq = seq;
                self.sent = seq;
                self.peer.ring();
                return Ok((seq, completion));
            }
        }
        self.next_seq = seq;
        if use_cma {
            header.flags |= FLAG_CMA;
        }
        self.pending
            .push_back(if wr.op == OpKind::RdmaRead && !use_cma {
                Pending::Request { header, seq }
            } else {
                Pending::Data {
                    header,
                    source: local.to_vec(),
                    offset: 0,
                    started: false,
                    seq,
                    rdma_source: None,
                }
            });
        if self.pump(None) {
            self.peer.ring();
        }
        Ok((seq, completion))
    }

    fn progress(&mut self, place: &mut Placement) -> Result<bool, ChannelFailed> {
        let reg = place.registry;
        let mut did = if self.pending.is_empty() {
            false
        } else {
            self.pump(Some(reg))
        };
        if !self.cma_sent.is_empty() {
            did |= self.help_peer_copy();
        }
        self.settle_owed(reg);
        let mut delivered_any = false;
        // New records for the peer: it may be asleep waiting for them.
        let mut wake_peer = did;
        loop {
            let pk = match self.rx.peek() {
                Ok(Some(pk)) => pk,
                Ok(None) => break,
                Err(_) => return Err(ChannelFailed("malformed ring record")),
            };
            let faults_before = place.faults.len();
            let done = match pk.header.kind {
                RecordKind::First => {
                    if self.inbound.is_some() {
                        return Err(ChannelFailed("new message inside another"));
                    }
                    match self.on_first(&pk, place)? {
                        None => break,
                        Some(done) => done,
                    }
                }
                RecordKind::Cont => self.on_cont(pk.payload(), place)?,
                RecordKind::Nack => {
                    place.remote_refused(pk.header.msg_seq, pk.header.status);
                    false
                }
                RecordKind::ReadDone => {
                    place.read_done(pk.header.msg_seq, pk.header.status & status::ERROR_MASK);
                    false
                }
                RecordKind::Pad => false,
            };
            wake_peer |= self.rx.advance(&pk);
            if done {
                self.owed += 1;
            }
            self.settle_owed(reg);
            delivered_any = true;
            // After lost data, let the VI decide (on the reliable levels
            // nothing behind it may be delivered).
            if place.faults[faults_before..].iter().any(Fault::lost_data) {
                break;
            }
        }
        if delivered_any {
            did = true;
            if !self.pending.is_empty() && self.pump(Some(reg)) {
                wake_peer = true;
            }
            self.settle_owed(reg);
        }
        if std::mem::take(&mut self.source_refused) {
            // Deregistered under a response to the peer's RDMA read: as if
            // the read had been refused at once (the connection breaks;
            // RDMA reads exist only on the reliable levels).
            place.faults.push(Fault::RdmaReadProtection);
        }
        // The peer waits for ring space or a consumed count only on records
        // it flagged (the others spare us the fence), and for records we
        // just wrote.
        if wake_peer || self.ring_due {
            self.ring_due = false;
            self.peer.ring();
        }
        Ok(did)
    }

    fn take_simple_recv(&mut self, local: &[Range], capacity: u64) -> Option<(u64, Option<u32>)> {
        if !self.pending.is_empty() || self.owed != 0 || self.inbound.is_some() || !self.rx.ready()
        {
            return None;
        }
        let pk = self.rx.peek().ok()??;
        let h = pk.header;
        if h.kind != RecordKind::First
            || h.op != Op::Send
            || h.flags & FLAG_CMA != 0
            || h.payload_len as u64 != h.total_len
            || h.total_len > capacity
        {
            return None;
        }
        // SAFETY: `local` is the posted receive's validated buffer list.
        unsafe { ranges::scatter(local, 0, pk.payload()) };
        let imm = (h.flags & FLAG_IMMEDIATE != 0).then_some(h.immediate);
        if self.rx.advance(&pk) {
            self.rx.message_delivered();
            self.peer.ring();
        } else {
            self.rx.message_delivered();
        }
        Some((h.total_len, imm))
    }

    #[inline]
    fn has_work(&self) -> bool {
        self.rx.ready()
            || !self.pending.is_empty()
            || (!self.cma_sent.is_empty() && self.tx_copy.is_open())
    }

    fn sent(&self) -> u64 {
        self.sent
    }

    fn consumed(&self) -> u64 {
        self.tx.consumed()
    }

    /// The peer writes a refusal into the ring before it counts the
    /// message, so once the count is read every refusal up to it lies in
    /// the ring: walk the rest of the ring for them (data records are
    /// dropped, the connection breaks anyway). Without this, a send the
    /// peer had taken just before it sent the faulty record was flushed:
    /// the count read before the pass predates the record.
    fn settle_before_break(&mut self, place: &mut Placement) -> Option<u64> {
        let consumed = self.tx.consumed();
        while let Ok(Some(pk)) = self.rx.peek() {
            match pk.header.kind {
                RecordKind::Nack => place.remote_refused(pk.header.msg_seq, pk.header.status),
                RecordKind::ReadDone => {
                    place.read_done(pk.header.msg_seq, pk.header.status & status::ERROR_MASK)
                }
                RecordKind::First | RecordKind::Cont | RecordKind::Pad => {}
            }
            self.rx.advance(&pk);
        }
        Some(consumed)
    }

    fn remote_attrs(&self) -> ViAttrs {
        self.remote
    }

    fn liveness_fd(&self) -> RawFd {
        self.sock.raw_fd()
    }

    fn peer_event(&mut self) -> PeerEvent {
        let mut buf = [0u8; 64];
        let mut fds = Vec::new();
        match self
            .sock
            .recv_timeout(&mut buf, &mut fds, Some(std::time::Duration::ZERO))
        {
            Ok(None) => PeerEvent::Quiet,
            Ok(Some(0)) | Err(_) => PeerEvent::Gone,
            Ok(Some(n)) => match Message::parse(&buf[..n]) {
                Ok(Message::Disconnect(Reason::Broken)) => PeerEvent::Broken,
                Ok(Message::Disconnect(_)) => PeerEvent::Disconnected,
                _ => PeerEvent::Quiet,
            },
        }
    }

    fn set_watched(&mut self, on: bool) {
        self.peer.set_watched(on);
    }

    fn close(&mut self, broken: bool) {
        if self.closed {
            return;
        }
        self.closed = true;
        let reason = if broken {
            Reason::Broken
        } else {
            Reason::Disconnected
        };
        let _ = self.sock.send(&Message::Disconnect(reason).emit(), &[]);
        self.sock.shutdown();
        self.peer.ring();
    }
}
