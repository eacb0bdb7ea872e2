//! Placement on arrival (`SegmentPlacer`) under arbitrary data segments:
//! a connected server-side connection gets DATA packets built from the
//! input (sequence number, message id, offset, length, total, operation,
//! in any order, overlapping, duplicated, forged), and a placer that
//! models posted receives checks what the connection offers it: every
//! offered segment lies inside its message, no byte is offered twice, no
//! segment of a message already delivered is offered, and at delivery the
//! placed bytes and the held pieces together cover the message exactly
//! once — or, where the delivered message counts other placed bytes than
//! were placed under its id (forged segments), the model stops as the
//! device does (it fails the VI). Raw datagrams (records of kind 0xFF) are
//! mixed in. Nothing may
//! panic.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use openvia_proto::{
    ArrivingSegment, Config, Connection, MessageInfo, MessageSink, OutgoingMessage, Piece,
    Placement, SegmentPlacer, Time, ViaOp,
};
use openvia_wire::rum::{Body, DataRepr, HeaderRepr, Repr};

/// Bytes of the posted receive each message goes to: longer messages are
/// refused on arrival (buffered, then a length error at delivery).
const RECEIVE: u32 = 3000;

#[derive(Default)]
struct Model {
    /// Message id → which bytes were placed.
    placed: BTreeMap<u64, Vec<bool>>,
    delivered_next: u64,
    /// A delivered message counted other placed bytes than its id's: the
    /// device fails the VI there (`misplaced`, only ever for forged
    /// segments), so nothing after is checked.
    failed: bool,
}

impl SegmentPlacer for Model {
    fn place_segment(&mut self, seg: &ArrivingSegment<'_>) -> bool {
        if self.failed {
            return false;
        }
        let end = seg.offset as usize + seg.payload.len();
        assert!(end <= seg.total as usize, "offered past its message's end");
        assert!(!seg.payload.is_empty());
        assert!(seg.msg_id >= self.delivered_next, "offered after delivery");
        if seg.total > RECEIVE {
            return false;
        }
        let have = self
            .placed
            .entry(seg.msg_id)
            .or_insert_with(|| vec![false; seg.total as usize]);
        if have.len() != seg.total as usize {
            // Another length for the same message: a forgery the
            // connection catches at delivery; refuse it here.
            return false;
        }
        for b in &mut have[seg.offset as usize..end] {
            assert!(!*b, "a byte offered twice");
            *b = true;
        }
        true
    }
}

impl MessageSink for Model {
    fn place(&mut self, info: &MessageInfo, pieces: &[Piece<'_>]) -> Placement {
        if self.failed {
            return Placement::Placed;
        }
        let mut have = self
            .placed
            .remove(&info.msg_id)
            .unwrap_or_else(|| vec![false; info.len]);
        let placed = have.iter().filter(|&&b| b).count();
        if info.placed == 0 {
            // Bytes placed under this id by a segment that is not part of
            // the delivered message (a forged second start): the pieces
            // must cover it all, over them.
            have = vec![false; info.len];
        } else if have.len() != info.len || placed != info.placed {
            self.failed = true;
            return Placement::Placed;
        }
        for p in pieces {
            let at = p.offset as usize;
            for b in &mut have[at..at + p.data.len()] {
                assert!(!*b, "a byte both placed and held, or held twice");
                *b = true;
            }
        }
        assert!(have.iter().all(|&b| b), "the message is not covered");
        assert!(info.msg_id >= self.delivered_next);
        self.placed = self.placed.split_off(&(info.msg_id + 1));
        self.delivered_next = info.msg_id + 1;
        Placement::Placed
    }
}

/// A connected pair; returns the server and the header of the client's
/// first DATA packet (a valid acknowledgement to copy).
fn pair() -> (Connection, HeaderRepr) {
    let now = Time::ZERO;
    let mut client = Connection::connect(Config::default(), 0xC1, b"", now).unwrap();
    let mut buf = vec![0u8; client.max_datagram_len()];
    let n = client.poll_transmit(now, &mut buf).unwrap();
    let Ok(Repr { body: Body::ConnectRequest(req), .. }) = Repr::parse(&buf[..n]) else {
        unreachable!()
    };
    let mut server = Connection::accept(Config::default(), 0x5E5E, &req, b"", now).unwrap();
    let n = server.poll_transmit(now, &mut buf).unwrap();
    client.handle_datagram(now, &buf[..n]);
    client.send_message(OutgoingMessage::send(vec![1])).unwrap();
    let n = client.poll_transmit(now, &mut buf).unwrap();
    let header = Repr::parse(&buf[..n]).unwrap().header;
    (server, header)
}

fuzz_target!(|data: &[u8]| {
    let (mut conn, template) = pair();
    let mut model = Model::default();
    let mut buf = vec![0u8; 70_000];
    let payload = vec![0x5Au8; 4096];
    let mut now = 0u64;
    for r in data.chunks(8) {
        let &[kind, seq, msg, off_hi, off_lo, len, total, flags] = r else { break };
        now += 1_000;
        let t = Time::from_nanos(now);
        if kind == 0xFF {
            conn.handle_datagram_placing(t, &r[1..], Some(&mut model));
            continue;
        }
        let offset = u32::from(off_hi) << 8 | u32::from(off_lo);
        let offset = offset % 4096;
        let len = usize::from(len) * 8 % 1409;
        let total = match total % 4 {
            0 => offset + len as u32,
            1 => offset + len as u32 + u32::from(total),
            _ => u32::from(total) * 32,
        };
        let d = DataRepr {
            msg_id: u32::from(msg % 8),
            offset,
            total_len: total,
            op: if flags & 1 == 0 { ViaOp::Send } else { ViaOp::RdmaWrite },
            immediate: (flags & 2 != 0).then_some(7),
            mem_handle: 1,
            remote_addr: 0x1000,
            payload: &payload[..len],
        };
        let header = HeaderRepr {
            seq: template.seq.wrapping_add(u32::from(seq % 64)),
            ack_request: flags & 4 != 0,
            ..template
        };
        let Ok(n) = (Repr { header, body: Body::Data(d) }).emit(&mut buf) else { continue };
        let dg = buf[..n].to_vec();
        conn.handle_datagram_placing(t, &dg, Some(&mut model));
        if flags & 8 != 0 {
            while conn.poll_message(&mut model).is_some() {}
        }
        while conn.poll_transmit(t, &mut buf).is_some() {}
        while conn.poll_event().is_some() {}
    }
    while conn.poll_message(&mut model).is_some() {}
});
