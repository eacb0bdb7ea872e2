//! Virtual-time simulator: two connections joined by a lossy, duplicating,
//! reordering link with delay and jitter, all drawn from a seeded PRNG so
//! every run is reproducible.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use openvia_proto::{
    ArrivingSegment, Config, Connection, Event, MessageInfo, MessageSink, OutgoingMessage, Payload,
    Piece, Placement, SegmentPlacer, Time, Transmit,
};
use openvia_wire::rum::{Body, DataRepr, HeaderRepr, Repr, ViaOp};

/// splitmix64.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    pub loss: f64,
    pub duplicate: f64,
    /// Chance that a datagram is held back by `reorder_delay` extra.
    pub reorder: f64,
    pub reorder_delay: Duration,
    pub delay: Duration,
    pub jitter: Duration,
    /// Bottleneck rate in bytes per second each way (0: unlimited). A
    /// datagram occupies the link for its length over the rate, in
    /// sending order, before its delay starts.
    pub rate: u64,
    /// Bytes a sender may have waiting for the bottleneck before it is
    /// held (a socket buffer: backpressure, not loss).
    pub txqueue: u64,
}

impl LinkConfig {
    pub fn perfect() -> Self {
        Self {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            delay: Duration::from_micros(50),
            jitter: Duration::ZERO,
            rate: 0,
            txqueue: 0,
        }
    }
    pub fn lossy(loss: f64) -> Self {
        Self {
            loss,
            duplicate: 0.01,
            reorder: 0.03,
            reorder_delay: Duration::from_micros(300),
            delay: Duration::from_micros(50),
            jitter: Duration::from_micros(20),
            rate: 0,
            txqueue: 0,
        }
    }
    /// Independent per-datagram loss on a link of `rate` bytes/s with a
    /// 100 µs one-way delay and a 1 MiB send buffer, nothing else.
    pub fn bottleneck(loss: f64, rate: u64) -> Self {
        Self {
            loss,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            delay: Duration::from_micros(100),
            jitter: Duration::ZERO,
            rate,
            txqueue: 1 << 20,
        }
    }
    /// How long `len` bytes occupy the bottleneck.
    fn serialization(&self, len: usize) -> Duration {
        match self.rate {
            0 => Duration::ZERO,
            r => Duration::from_nanos(len as u64 * 1_000_000_000 / r),
        }
    }
}

/// Deterministic message contents: a function of (stream, index, byte).
pub fn content(stream: u64, index: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(stream.wrapping_mul(0x1000_0001) ^ index.wrapping_mul(0x9E37));
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let w = r.next().to_le_bytes();
        let take = (len - v.len()).min(8);
        v.extend_from_slice(&w[..take]);
    }
    v
}

pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Collects received messages; can refuse them to model a receiver that
/// posts no descriptors. With `placing`, it also takes segments as they
/// arrive (direct placement) into one buffer per message, as a device
/// would into the posted receive, and checks that no byte is placed twice
/// and nothing is placed for a message already delivered.
#[derive(Debug, Default)]
pub struct CollectSink {
    pub accepting: bool,
    pub placing: bool,
    pub received: Vec<(MessageInfo, Vec<u8>)>,
    /// Message id → (its buffer, which bytes were placed).
    pub arriving: BTreeMap<u64, (Vec<u8>, Vec<bool>)>,
    pub placed_bytes: u64,
}
impl MessageSink for CollectSink {
    fn place(&mut self, info: &MessageInfo, pieces: &[Piece<'_>]) -> Placement {
        if !self.accepting {
            return Placement::NotNow;
        }
        let (mut bytes, mut have) = self
            .arriving
            .remove(&info.msg_id)
            .unwrap_or_else(|| (vec![0; info.len], vec![false; info.len]));
        assert_eq!(
            bytes.len(),
            info.len,
            "placed for a message of another length"
        );
        assert_eq!(
            have.iter().filter(|&&h| h).count(),
            info.placed,
            "placed bytes counted"
        );
        for p in pieces {
            copy_once(
                &mut bytes,
                &mut have,
                p.offset as usize,
                p.data,
                info.msg_id,
            );
        }
        assert!(
            have.iter().all(|&h| h),
            "pieces and placed bytes must cover the message"
        );
        if let Some((&stale, _)) = self.arriving.range(..info.msg_id).next() {
            panic!("message {stale} placed but never delivered");
        }
        self.received.push((*info, bytes));
        Placement::Placed
    }
}
/// Copies `data` to `at` in message `msg_id`'s bytes, checking that none
/// of them was written before.
fn copy_once(bytes: &mut [u8], have: &mut [bool], at: usize, data: &[u8], msg_id: u64) {
    for (k, &b) in data.iter().enumerate() {
        assert!(!have[at + k], "byte {} of message {msg_id} twice", at + k);
        have[at + k] = true;
        bytes[at + k] = b;
    }
}

impl SegmentPlacer for CollectSink {
    fn place_segment(&mut self, seg: &ArrivingSegment<'_>) -> bool {
        // A receiver with no descriptor posted has nowhere to place.
        if !self.placing || !self.accepting {
            return false;
        }
        let delivered = self.received.last().map_or(0, |(i, _)| i.msg_id + 1);
        assert!(
            seg.msg_id >= delivered,
            "segment of a delivered message offered"
        );
        let total = seg.total as usize;
        let (buf, have) = self
            .arriving
            .entry(seg.msg_id)
            .or_insert_with(|| (vec![0; total], vec![false; total]));
        assert_eq!(buf.len(), total, "one message, two lengths");
        copy_once(buf, have, seg.offset as usize, seg.payload, seg.msg_id);
        self.placed_bytes += seg.payload.len() as u64;
        true
    }
}

pub struct Endpoint {
    pub conn: Option<Connection>,
    pub sink: CollectSink,
    pub events: Vec<(Time, Event)>,
}

struct InFlightDatagram {
    at: Time,
    order: u64,
    to_b: bool,
    bytes: Vec<u8>,
}
impl PartialEq for InFlightDatagram {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.order) == (o.at, o.order)
    }
}
impl Eq for InFlightDatagram {}
impl PartialOrd for InFlightDatagram {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlightDatagram {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(o.at, o.order))
    }
}

pub struct Sim {
    pub now: Time,
    pub rng: Rng,
    pub link: LinkConfig,
    /// When false, every datagram is dropped (a dead link).
    pub link_up: bool,
    /// When false, every datagram from b to a is dropped.
    pub link_up_to_a: bool,
    pub a: Endpoint,
    pub b: Endpoint,
    server_config: Config,
    queue: BinaryHeap<Reverse<InFlightDatagram>>,
    order: u64,
    buf: Vec<u8>,
    pub datagrams: u64,
    /// When each direction's bottleneck is free again ([a→b, b→a]).
    busy_until: [Time; 2],
    /// Payloads from this size on leave through `poll_transmit_split`
    /// (usize::MAX: `poll_transmit`, payloads copied by the protocol).
    pub split_min: usize,
    /// The client's external payloads: (message id, bytes). The bytes are
    /// overwritten the moment the message completes, as an application
    /// reusing its buffer would: a segment read after that arrives
    /// corrupt.
    pub external: Vec<(u64, Box<[u8]>)>,
}

impl Sim {
    /// Client `a` connects to server `b` (created when the request arrives).
    pub fn new(seed: u64, link: LinkConfig, client: Config, server: Config) -> Self {
        let mut rng = Rng(seed);
        let cid = rng.next() | 1;
        let conn = Connection::connect(client, cid, b"disc", Time::ZERO).expect("connect");
        Self {
            now: Time::ZERO,
            rng,
            link,
            link_up: true,
            link_up_to_a: true,
            a: Endpoint {
                conn: Some(conn),
                sink: CollectSink {
                    accepting: true,
                    ..Default::default()
                },
                events: Vec::new(),
            },
            b: Endpoint {
                conn: None,
                sink: CollectSink {
                    accepting: true,
                    ..Default::default()
                },
                events: Vec::new(),
            },
            server_config: server,
            queue: BinaryHeap::new(),
            order: 0,
            buf: vec![0u8; 70_000],
            datagrams: 0,
            busy_until: [Time::ZERO; 2],
            split_min: usize::MAX,
            external: Vec::new(),
        }
    }

    /// No datagram is on the link.
    pub fn link_idle(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn a(&mut self) -> &mut Connection {
        self.a.conn.as_mut().expect("client")
    }
    pub fn b(&mut self) -> &mut Connection {
        self.b.conn.as_mut().expect("server")
    }

    pub fn send_a(&mut self, data: Vec<u8>) -> u64 {
        self.a()
            .send_message(OutgoingMessage::send(data))
            .expect("send")
    }
    /// Sends `data` from a's own memory (an external payload).
    pub fn send_a_external(&mut self, data: Vec<u8>) -> u64 {
        let bytes = data.into_boxed_slice();
        let msg = OutgoingMessage {
            data: Payload::External {
                addr: bytes.as_ptr() as u64,
                len: bytes.len(),
            },
            ..OutgoingMessage::send(Vec::new())
        };
        let id = self.a().send_message(msg).expect("send");
        self.external.push((id, bytes));
        id
    }

    /// The `len` bytes at `addr` in one of the external payloads.
    fn external_bytes(&self, addr: u64, len: usize) -> Vec<u8> {
        for (_, b) in &self.external {
            let base = b.as_ptr() as u64;
            if addr >= base && addr + len as u64 <= base + b.len() as u64 {
                let at = (addr - base) as usize;
                return b[at..at + len].to_vec();
            }
        }
        panic!("payload at {addr:#x} is not an external buffer");
    }

    /// Sends what `to_b`'s sender has to send.
    fn transmit_all(&mut self, to_b: bool) {
        loop {
            if self.held(to_b) {
                break;
            }
            let now = self.now;
            let split_min = self.split_min;
            let ep = if to_b { &mut self.a } else { &mut self.b };
            let Some(c) = ep.conn.as_mut() else { break };
            let Some(Transmit { len, payload }) =
                c.poll_transmit_split(now, &mut self.buf, split_min)
            else {
                break;
            };
            let mut bytes = self.buf[..len].to_vec();
            if let Some(r) = payload {
                match r.external {
                    Some(base) => bytes.extend(self.external_bytes(base + r.offset as u64, r.len)),
                    None => bytes.extend_from_slice(c.payload_bytes(&r).expect("owned payload")),
                }
            }
            self.enqueue(to_b, bytes);
        }
    }

    pub fn send_b(&mut self, data: Vec<u8>) -> u64 {
        self.b()
            .send_message(OutgoingMessage::send(data))
            .expect("send")
    }

    /// The sender toward `to_b` has a full send buffer.
    fn held(&self, to_b: bool) -> bool {
        self.link.rate != 0
            && self.busy_until[to_b as usize]
                > self.now + self.link.serialization(self.link.txqueue as usize)
    }

    /// When the send buffer toward `to_b` has room again, if it is full.
    fn unheld_at(&self, to_b: bool) -> Option<Time> {
        self.held(to_b).then(|| {
            let backlog = self.link.serialization(self.link.txqueue as usize);
            Time::from_nanos(self.busy_until[to_b as usize].as_nanos() - backlog.as_nanos() as u64)
        })
    }

    fn enqueue(&mut self, to_b: bool, bytes: Vec<u8>) {
        self.datagrams += 1;
        // The bottleneck is taken whether or not the datagram is lost later.
        let start = self.busy_until[to_b as usize].max(self.now);
        let leaves = start + self.link.serialization(bytes.len());
        self.busy_until[to_b as usize] = leaves;
        if !self.link_up || (!to_b && !self.link_up_to_a) || self.rng.chance(self.link.loss) {
            return;
        }
        let copies = if self.rng.chance(self.link.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut delay = self.link.delay;
            let j = self.link.jitter.as_nanos() as u64;
            if j > 0 {
                delay += Duration::from_nanos(self.rng.below(j));
            }
            if self.rng.chance(self.link.reorder) {
                delay += self.link.reorder_delay;
            }
            self.order += 1;
            self.queue.push(Reverse(InFlightDatagram {
                at: leaves + delay,
                order: self.order,
                to_b,
                bytes: bytes.clone(),
            }));
        }
    }

    fn deliver(&mut self, to_b: bool, bytes: &[u8]) {
        let now = self.now;
        if to_b && self.b.conn.is_none() {
            if let Ok(Repr {
                body: Body::ConnectRequest(h),
                ..
            }) = Repr::parse(bytes)
            {
                let cid = self.rng.next() | 1;
                let c = Connection::accept(self.server_config.clone(), cid, &h, b"", now)
                    .expect("accept");
                self.b.conn = Some(c);
            }
            return;
        }
        let ep = if to_b { &mut self.b } else { &mut self.a };
        if let Some(c) = ep.conn.as_mut() {
            let placer: Option<&mut dyn SegmentPlacer> = ep.sink.placing.then_some(&mut ep.sink);
            c.handle_datagram_placing(now, bytes, placer);
        }
    }

    /// Drains transmissions, events and messages of both ends.
    fn drain(&mut self) {
        for to_b in [true, false] {
            self.transmit_all(to_b);
        }
        let now = self.now;
        for ep in [&mut self.a, &mut self.b] {
            let Some(c) = ep.conn.as_mut() else { continue };
            while let Some(e) = c.poll_event() {
                ep.events.push((now, e));
            }
            while c.poll_message(&mut ep.sink).is_some() {}
            // A delivery may have made an ACK due: send it now.
        }
        // The application reuses a completed external buffer at once.
        for (_, e) in &self.a.events {
            if let Event::SendCompleted(id) = e {
                for (eid, b) in self.external.iter_mut() {
                    if eid == id {
                        b.fill(0xEE);
                    }
                }
            }
        }
        for to_b in [true, false] {
            self.transmit_all(to_b);
        }
    }

    fn next_time(&self) -> Option<Time> {
        let q = self.queue.peek().map(|r| r.0.at);
        let ta = self.a.conn.as_ref().and_then(|c| c.poll_timeout());
        let tb = self.b.conn.as_ref().and_then(|c| c.poll_timeout());
        let ua = self.unheld_at(true);
        let ub = self.unheld_at(false);
        [q, ta, tb, ua, ub].into_iter().flatten().min()
    }

    /// One step of virtual time. Returns false when nothing is left to do.
    pub fn step(&mut self) -> bool {
        self.drain();
        let Some(t) = self.next_time() else {
            return false;
        };
        self.now = self.now.max(t);
        while let Some(Reverse(d)) = self.queue.peek() {
            if d.at > self.now {
                break;
            }
            let Reverse(d) = self.queue.pop().expect("peeked");
            self.deliver(d.to_b, &d.bytes);
        }
        let now = self.now;
        for ep in [&mut self.a, &mut self.b] {
            if let Some(c) = ep.conn.as_mut() {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
        }
        true
    }

    /// Steps until `done` holds or virtual time passes `limit`.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Sim) -> bool) -> bool {
        let end = Time::ZERO + limit;
        while self.now < end {
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
        done(self)
    }

    pub fn completions(ep: &Endpoint) -> Vec<u64> {
        ep.events
            .iter()
            .filter_map(|(_, e)| match e {
                Event::SendCompleted(id) => Some(*id),
                _ => None,
            })
            .collect()
    }

    pub fn lost(ep: &Endpoint) -> Option<Event> {
        ep.events
            .iter()
            .map(|(_, e)| *e)
            .find(|e| matches!(e, Event::ConnectionLost(_) | Event::PeerDisconnected { .. }))
    }
}

/// A SEND data packet as a peer would emit it, for tests that hand a
/// connection datagrams directly: acknowledging nothing (`ack` 0), with
/// a window of 64.
pub fn data_packet(
    conn_id: u64,
    seq: u32,
    msg_id: u32,
    offset: u32,
    total_len: u32,
    payload: &[u8],
) -> Vec<u8> {
    let repr = Repr {
        header: HeaderRepr {
            conn_id,
            ack_request: false,
            seq,
            ack: 0,
            consumed: 0,
            window: 64,
        },
        body: Body::Data(DataRepr {
            msg_id,
            offset,
            total_len,
            op: ViaOp::Send,
            immediate: None,
            mem_handle: 0,
            remote_addr: 0,
            payload,
        }),
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf).expect("room for the packet");
    buf.truncate(n);
    buf
}
