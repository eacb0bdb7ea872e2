//! When received data is acknowledged: every `ack_every` in-order
//! segments, at a message's end, `ack_delay` after held data came, and at
//! once for anything out of line.

mod support;

use std::time::Duration;

use openvia_proto::{Config, Time};
use openvia_wire::rum::{Body, Repr};
use support::{content, data_packet, LinkConfig, Sim};

const MSG: usize = 256 * 1024;
const MESSAGES: u64 = 16;

fn streamed(ack_every: u32) -> (u64, u64) {
    let cfg = Config {
        max_transfer_size: MSG as u32,
        recv_window: 4096,
        ack_every,
        ..Config::default()
    };
    // 10 GB/s: a segment every 0.14 µs, one datagram at a time.
    let mut sim = Sim::new(
        11,
        LinkConfig::bottleneck(0.0, 10_000_000_000),
        cfg.clone(),
        cfg,
    );
    for i in 0..MESSAGES {
        sim.send_a(content(9, i, MSG));
    }
    let done = sim.run_until(Duration::from_secs(5), |s| {
        Sim::completions(&s.a).len() == MESSAGES as usize
    });
    assert!(done, "stream did not complete");
    for (k, (_, bytes)) in sim.b.sink.received.iter().enumerate() {
        assert_eq!(bytes, &content(9, k as u64, MSG), "message {k}");
    }
    let b = *sim.b().counters();
    let segments = sim.a().counters().segments_sent;
    (b.acks_sent, segments)
}

#[test]
fn a_stream_is_acknowledged_every_ack_every_segments() {
    let (acks, segments) = streamed(64);
    eprintln!("ack_every 64: {acks} acks, {segments} segments");
    // One per 64 segments, one or two per message (its end, its
    // delivery), the handshake's and a few timer ones.
    let bound = segments / 64 + 2 * MESSAGES + 8;
    assert!(
        acks <= bound,
        "{acks} acks for {segments} segments (bound {bound})"
    );
    let (every, segments) = streamed(1);
    eprintln!("ack_every 1: {every} acks, {segments} segments");
    assert!(
        every >= segments / 2,
        "ack_every 1: {every} acks for {segments} segments"
    );
}

/// A receiver after one message: the next segment it expects is `seq`,
/// of message `msg_id`.
fn receiver(ack_every: u32) -> (Sim, u32, u32) {
    let cfg = Config {
        ack_every,
        ..Config::default()
    };
    let mut sim = Sim::new(12, LinkConfig::perfect(), cfg.clone(), cfg);
    sim.send_a(content(1, 0, 100));
    assert!(sim.run_until(Duration::from_secs(1), |s| {
        s.b.sink.received.len() == 1 && Sim::completions(&s.a).len() == 1
    }));
    (sim, 1, 1)
}

fn data(conn_id: u64, seq: u32, msg_id: u32, offset: u32, total: u32) -> Vec<u8> {
    data_packet(conn_id, seq, msg_id, offset, total, &[0x42u8; 1000])
}

fn sends_ack(sim: &mut Sim, now: Time) -> bool {
    let mut buf = vec![0u8; 65536];
    let Some(n) = sim.b().poll_transmit(now, &mut buf) else {
        return false;
    };
    matches!(Repr::parse(&buf[..n]).map(|r| r.body), Ok(Body::Ack(_)))
}

#[test]
fn held_data_is_acknowledged_within_ack_delay() {
    let (mut sim, seq, msg) = receiver(64);
    let now = sim.now;
    let cid = sim.b().local_conn_id();
    sim.b().handle_datagram(now, &data(cid, seq, msg, 0, 3000));
    assert!(!sends_ack(&mut sim, now), "first of three segments: held");
    let delay = sim.b().config().ack_delay;
    let due = sim.b().poll_timeout().expect("a timer runs");
    assert!(
        due <= now + delay,
        "acknowledgement due by {due:?}, not {:?}",
        now + delay
    );
    let at = now + delay;
    sim.b().handle_timeout(at);
    assert!(
        sends_ack(&mut sim, at),
        "held acknowledgement left at its deadline"
    );
    // The message's end goes at once.
    sim.b()
        .handle_datagram(at, &data(cid, seq + 1, msg, 1000, 3000));
    assert!(!sends_ack(&mut sim, at));
    sim.b()
        .handle_datagram(at, &data(cid, seq + 2, msg, 2000, 3000));
    assert!(
        sends_ack(&mut sim, at),
        "a message's last segment is acknowledged at once"
    );
}

#[test]
fn out_of_line_segments_are_acknowledged_at_once() {
    let (mut sim, seq, msg) = receiver(64);
    let now = sim.now;
    let cid = sim.b().local_conn_id();
    // A hole at `seq`: the sender learns of it from this acknowledgement.
    sim.b()
        .handle_datagram(now, &data(cid, seq + 1, msg, 1000, 4000));
    assert!(sends_ack(&mut sim, now), "a segment past a hole");
    // The hole filled: acknowledged at once too (recovery waits on it).
    sim.b().handle_datagram(now, &data(cid, seq, msg, 0, 4000));
    assert!(sends_ack(&mut sim, now), "the segment that fills a hole");
    // A duplicate: the sender may have missed the last acknowledgement.
    sim.b().handle_datagram(now, &data(cid, seq, msg, 0, 4000));
    assert!(sends_ack(&mut sim, now), "a duplicate");
}

#[test]
fn ack_every_one_acknowledges_each_segment() {
    let (mut sim, seq, msg) = receiver(1);
    let now = sim.now;
    let cid = sim.b().local_conn_id();
    sim.b().handle_datagram(now, &data(cid, seq, msg, 0, 3000));
    assert!(sends_ack(&mut sim, now));
}
