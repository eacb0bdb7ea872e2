//! Placement on arrival through a channel: in-order data lands in the
//! posted receive as it comes, out-of-order data is buffered and placed at
//! delivery, and nothing is written where no receive can take it: past a
//! receive's end, into a receive not posted yet, or twice over the same
//! bytes.

use openvia_proto::{Connection, OutgoingMessage, Payload, ViaOp};
use openvia_wire::rum::{Body, Repr};

use super::{connected, now, progress_into, RumChannel, ScriptedLink};
use crate::descriptor::{status, DescPtr, Descriptor};
use crate::mem::HeldUses;
use crate::ranges::Range;
use crate::vi::queues::{RecvEntry, RecvQueue};

/// Bytes after each receive's end that nothing may touch.
const CANARY: usize = 64;

/// Receives posted in buffers of their capacity plus a canary.
struct Posted {
    rq: RecvQueue,
    bufs: Vec<Vec<u8>>,
    caps: Vec<usize>,
    // Boxed: a posted descriptor must not move when the list grows.
    #[allow(clippy::vec_box)]
    descs: Vec<Box<Descriptor>>,
}

impl Posted {
    fn new() -> Self {
        Self {
            rq: RecvQueue::default(),
            bufs: Vec::new(),
            caps: Vec::new(),
            descs: Vec::new(),
        }
    }

    fn post(&mut self, cap: usize) {
        let mut buf = vec![0u8; cap + CANARY];
        buf[cap..].fill(0xAA);
        let mut desc = Box::new(Descriptor::default());
        self.rq.entries.push_back(RecvEntry {
            desc: DescPtr(&mut *desc),
            ranges: vec![Range {
                addr: buf.as_mut_ptr() as u64,
                len: cap as u64,
            }],
            capacity: cap as u64,
            error: 0,
            uses: HeldUses::default(),
        });
        // The heap buffer does not move when the Vec itself does.
        self.bufs.push(buf);
        self.caps.push(cap);
        self.descs.push(desc);
    }

    /// Receive `k`'s completion: (status bits, length).
    fn completion(&self, k: usize) -> (u32, u32) {
        let d = &self.descs[k];
        (DescPtr(&**d as *const _ as *mut _).status(), d.cs.length)
    }

    fn canaries_intact(&self) -> bool {
        self.bufs
            .iter()
            .zip(&self.caps)
            .all(|(b, &c)| b[c..].iter().all(|&x| x == 0xAA))
    }
}

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// The peer's datagrams carrying `msgs` (1408-byte segments).
fn peer_sends(server: &mut Connection, msgs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let t = now();
    for m in msgs {
        server
            .send_message(OutgoingMessage {
                op: ViaOp::Send,
                immediate: None,
                mem_handle: 0,
                remote_addr: 0,
                data: Payload::Owned(m.clone()),
            })
            .unwrap();
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; server.max_datagram_len()];
    while let Some(n) = server.poll_transmit(t, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// Feeds `datagrams` to the channel and runs it until they are read.
fn run(
    ch: &mut RumChannel<ScriptedLink>,
    script: &super::Arc<super::Mutex<super::Script>>,
    posted: &mut Posted,
    datagrams: Vec<Vec<u8>>,
) -> bool {
    script
        .lock()
        .unwrap()
        .inbound
        .extend(datagrams.into_iter().map(Ok));
    let mut ok = true;
    for _ in 0..200 {
        ok &= progress_into(ch, &mut posted.rq).is_ok();
        if script.lock().unwrap().inbound.is_empty() {
            break;
        }
    }
    ok &= progress_into(ch, &mut posted.rq).is_ok();
    ok
}

fn placed(ch: &RumChannel<ScriptedLink>) -> u64 {
    ch.conn.counters().segments_placed
}

/// Messages in order: every segment is placed as it arrives and each
/// receive holds its message; placement off gives the same bytes, all
/// through the buffer.
#[test]
fn in_order_data_is_placed_on_arrival_and_delivered_whole() {
    for direct in [true, false] {
        let (ch, mut server, script) = connected();
        let mut ch = ch.with_direct(direct);
        let msgs = vec![bytes(1, 10_000), bytes(2, 1), bytes(3, 5000)];
        let mut posted = Posted::new();
        for _ in &msgs {
            posted.post(16_384);
        }
        let dgs = peer_sends(&mut server, &msgs);
        let segments = dgs.len() as u64;
        assert!(run(&mut ch, &script, &mut posted, dgs));
        assert_eq!(posted.rq.completed, 3, "direct {direct}");
        for (k, m) in msgs.iter().enumerate() {
            assert_eq!(&posted.bufs[k][..m.len()], &m[..], "direct {direct}");
            let (bits, len) = posted.completion(k);
            assert_eq!(bits & status::ERROR_MASK, 0);
            assert_eq!(len as usize, m.len());
        }
        assert!(posted.canaries_intact());
        assert_eq!(placed(&ch), if direct { segments } else { 0 });
    }
}

/// Segments behind a hole, the message after it and the segment that
/// fills the hole late are all placed where their message's layout puts
/// them; both messages complete intact and in order.
#[test]
fn segments_behind_a_hole_and_the_late_one_are_placed_too() {
    let (mut ch, mut server, script) = connected();
    let msgs = vec![bytes(4, 3 * 1408), bytes(5, 2 * 1408)];
    let mut posted = Posted::new();
    posted.post(8192);
    posted.post(8192);
    let dgs = peer_sends(&mut server, &msgs);
    assert_eq!(dgs.len(), 5);
    // Message 0's middle segment comes last.
    let order = [0, 2, 3, 4, 1];
    let reordered = order.iter().map(|&k| dgs[k].clone()).collect();
    assert!(run(&mut ch, &script, &mut posted, reordered));
    assert_eq!(posted.rq.completed, 2);
    assert_eq!(&posted.bufs[0][..msgs[0].len()], &msgs[0][..]);
    assert_eq!(&posted.bufs[1][..msgs[1].len()], &msgs[1][..]);
    assert!(posted.canaries_intact());
    assert_eq!(placed(&ch), 5);
}

/// A message longer than the receive posted for it is never written
/// there: it completes with a length error, the buffer untouched.
#[test]
fn a_message_longer_than_its_receive_is_not_placed() {
    let (mut ch, mut server, script) = connected();
    let mut posted = Posted::new();
    posted.post(1000);
    let dgs = peer_sends(&mut server, &[bytes(6, 3000)]);
    run(&mut ch, &script, &mut posted, dgs);
    assert_eq!(posted.rq.completed, 1);
    let (bits, _) = posted.completion(0);
    assert_ne!(bits & status::LENGTH_ERROR, 0);
    assert!(posted.bufs[0][..1000].iter().all(|&b| b == 0));
    assert!(posted.canaries_intact());
    assert_eq!(placed(&ch), 0);
}

/// Data for which no receive is posted yet is buffered, not written
/// anywhere; once a receive is posted the message lands there whole.
#[test]
fn nothing_is_placed_before_a_receive_is_posted() {
    let (mut ch, mut server, script) = connected();
    let mut posted = Posted::new();
    let msg = bytes(7, 4000);
    let dgs = peer_sends(&mut server, std::slice::from_ref(&msg));
    run(&mut ch, &script, &mut posted, dgs);
    assert_eq!(placed(&ch), 0);
    posted.post(4096);
    run(&mut ch, &script, &mut posted, Vec::new());
    assert_eq!(posted.rq.completed, 1);
    assert_eq!(&posted.bufs[0][..msg.len()], &msg[..]);
}

/// A forged first segment of message 1 (offset 0, a later sequence
/// number) is placed: the genuine one came before anything showed where
/// message 1 starts, and was buffered. The message delivered is the
/// genuine one, whose bytes cover it all.
#[test]
fn a_forged_second_start_is_overwritten_by_the_message_delivered() {
    let (mut ch, mut server, script) = connected();
    let mut posted = Posted::new();
    posted.post(8192);
    posted.post(8192);
    let msgs = vec![bytes(9, 2 * 1408), bytes(10, 1000)];
    let dgs = peer_sends(&mut server, &msgs);
    assert_eq!(dgs.len(), 3);
    let forged = forge(&dgs[2], |d| d, 0xEE, 1000, 1);
    let order = vec![dgs[2].clone(), dgs[0].clone(), forged, dgs[1].clone()];
    run(&mut ch, &script, &mut posted, order);
    assert_eq!(posted.rq.completed, 2);
    assert_eq!(&posted.bufs[0][..msgs[0].len()], &msgs[0][..]);
    assert_eq!(&posted.bufs[1][..msgs[1].len()], &msgs[1][..]);
    let (bits, len) = posted.completion(1);
    assert_eq!((bits & status::ERROR_MASK, len), (0, 1000));
    assert!(posted.canaries_intact());
    // Message 0's two segments and the forgery.
    assert_eq!(placed(&ch), 3);
}

/// `dg` with its payload replaced by `len` bytes of `fill`, its data
/// header changed by `change`, and its sequence number moved on by `seq_by`.
fn forge(
    dg: &[u8],
    change: impl Fn(openvia_wire::rum::DataRepr<'_>) -> openvia_wire::rum::DataRepr<'_>,
    fill: u8,
    len: usize,
    seq_by: u32,
) -> Vec<u8> {
    let r = Repr::parse(dg).unwrap();
    let Body::Data(d) = r.body else {
        panic!("not data")
    };
    let evil = vec![fill; len];
    let mut header = r.header;
    header.seq = header.seq.wrapping_add(seq_by);
    let f = Repr {
        header,
        body: Body::Data(change(openvia_wire::rum::DataRepr {
            payload: &evil,
            ..d
        })),
    };
    let mut b = vec![0u8; f.buffer_len()];
    let n = f.emit(&mut b).unwrap();
    b.truncate(n);
    b
}

/// A forged segment claiming bytes a placed segment already holds (offset
/// 0 of the same message again, with the next sequence number) is not
/// written over them; the inconsistent message then fails the connection.
#[test]
fn a_second_claim_on_placed_bytes_is_not_written() {
    let (mut ch, mut server, script) = connected();
    let mut posted = Posted::new();
    posted.post(8192);
    let msg = bytes(8, 2 * 1408);
    let dgs = peer_sends(&mut server, std::slice::from_ref(&msg));
    assert_eq!(dgs.len(), 2);
    let forged = forge(
        &dgs[1],
        |d| openvia_wire::rum::DataRepr { offset: 0, ..d },
        0xEE,
        1408,
        0,
    );
    let ok = run(&mut ch, &script, &mut posted, vec![dgs[0].clone(), forged]);
    assert_eq!(placed(&ch), 1, "only the genuine first segment");
    assert_eq!(&posted.bufs[0][..1408], &msg[..1408]);
    assert!(posted.canaries_intact());
    // The message cannot be completed from what came: never delivered.
    assert!(!ok || posted.rq.completed == 0);
}
