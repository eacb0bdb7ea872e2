//! Flow control holding a sender, dead-peer detection, the
//! flow-control-only mode, handshake outcomes and bad input.

mod support;

use std::time::Duration;

use openvia_proto::Counters;
use openvia_proto::{
    emit_reject, Config, Connection, Event, FlowMode, LostReason, Reliability, State, Time,
};
use openvia_wire::rum::{Body, Repr};
use support::{content, data_packet, LinkConfig, Rng, Sim};

fn small_window(mode: FlowMode, reliability: Reliability) -> Config {
    Config {
        flow_mode: mode,
        reliability,
        max_transfer_size: 16 * 1024,
        recv_window: 32,
        ..Config::default()
    }
}

fn receiver_stall_holds_sender(mode: FlowMode, reliability: Reliability) {
    let cfg = small_window(mode, reliability);
    let mut sim = Sim::new(5, LinkConfig::lossy(0.01), cfg.clone(), cfg);
    sim.b.sink.accepting = false;
    let total = 60u64;
    for i in 0..total {
        sim.send_a(content(3, i, 5000));
    }
    // Run long: the sender must stall, not lose or overrun anything.
    sim.run_until(Duration::from_secs(3), |_| false);
    let b = *sim.b().counters();
    let a = *sim.a().counters();
    assert_eq!(b.out_of_window, 0, "sender exceeded the window: {b:?}");
    assert!(a.window_stalls > 0, "{a:?}");
    assert!(
        a.segments_sent <= 32,
        "sent {} segments into a 32 window",
        a.segments_sent
    );
    assert!(sim.b.sink.received.is_empty());
    assert_eq!(
        Sim::lost(&sim.a),
        None,
        "a stalled receiver is not a dead peer"
    );
    if reliability == Reliability::ReliableReception {
        assert!(
            Sim::completions(&sim.a).is_empty(),
            "nothing placed, nothing complete"
        );
    }
    sim.b.sink.accepting = true;
    let ok = sim.run_until(Duration::from_secs(20), |s| {
        s.b.sink.received.len() == total as usize && Sim::completions(&s.a).len() == total as usize
    });
    assert!(ok, "resumed receiver got {}", sim.b.sink.received.len());
    for (k, (info, bytes)) in sim.b.sink.received.iter().enumerate() {
        assert_eq!(info.msg_id, k as u64);
        assert_eq!(bytes, &content(3, k as u64, 5000));
    }
}

#[test]
fn stalled_receiver_hetero() {
    receiver_stall_holds_sender(FlowMode::Hetero, Reliability::ReliableDelivery);
}

#[test]
fn stalled_receiver_homo_reception() {
    receiver_stall_holds_sender(FlowMode::Homo, Reliability::ReliableReception);
}

#[test]
fn hetero_window_follows_receiver() {
    let cfg = small_window(FlowMode::Hetero, Reliability::ReliableDelivery);
    let mut sim = Sim::new(8, LinkConfig::perfect(), cfg.clone(), cfg);
    sim.run_until(Duration::from_secs(1), |s| s.b.conn.is_some());
    sim.b().set_recv_window(4);
    sim.b.sink.accepting = false;
    sim.run_until(Duration::from_millis(10), |_| false);
    for i in 0..20 {
        sim.send_a(content(1, i, 1000));
    }
    sim.run_until(Duration::from_millis(500), |_| false);
    // Only the old promise (32) could be used, then 4 past consumed.
    assert!(sim.a().counters().segments_sent <= 32);
    sim.b.sink.accepting = true;
    assert!(sim.run_until(Duration::from_secs(5), |s| s.b.sink.received.len() == 20));
    assert_eq!(sim.b().counters().out_of_window, 0);
}

#[test]
fn dead_peer_detected_in_bounded_time() {
    let cfg = Config {
        keepalive_interval: Duration::from_millis(100),
        dead_peer_timeout: Duration::from_millis(700),
        ..Config::default()
    };
    for with_traffic in [false, true] {
        let mut sim = Sim::new(17, LinkConfig::perfect(), cfg.clone(), cfg.clone());
        sim.run_until(Duration::from_secs(1), |s| s.b.conn.is_some());
        sim.run_until(Duration::from_secs(2), |_| false); // idle: keepalives only
        assert_eq!(Sim::lost(&sim.a), None, "keepalives keep an idle link up");
        if with_traffic {
            sim.send_a(vec![1; 100_000]);
        }
        sim.link_up = false;
        let cut = sim.now;
        let ok = sim.run_until(Duration::from_secs(10), |s| Sim::lost(&s.a).is_some());
        assert!(ok);
        let (at, ev) = sim.a.events.last().copied().unwrap();
        assert!(matches!(
            ev,
            Event::ConnectionLost(LostReason::PeerSilent | LostReason::RetransmitLimit)
        ));
        let took = at.saturating_since(cut);
        assert!(took <= cfg.dead_peer_timeout, "took {took:?}");
        assert_eq!(sim.a().state(), State::Closed);
        assert!(sim.a().poll_timeout().is_none());
    }
}

#[test]
fn flow_control_only_lossless_delivers_everything() {
    let cfg = Config {
        flow_control_only: true,
        ..Config::default()
    };
    let mut sim = Sim::new(21, LinkConfig::perfect(), cfg.clone(), cfg);
    for (i, len) in [0usize, 1, 1473, 65536, 1 << 20].into_iter().enumerate() {
        sim.send_a(content(9, i as u64, len));
    }
    assert!(sim.run_until(Duration::from_secs(10), |s| s.b.sink.received.len() == 5));
    assert_eq!(sim.a().counters().retransmissions, 0);
    assert_eq!(Sim::lost(&sim.a), None);
}

#[test]
fn flow_control_only_loss_is_an_error_never_corruption() {
    let cfg = Config {
        flow_control_only: true,
        keepalive_interval: Duration::from_millis(100),
        dead_peer_timeout: Duration::from_millis(800),
        ..Config::default()
    };
    for seed in 0..10 {
        let mut sim = Sim::new(100 + seed, LinkConfig::perfect(), cfg.clone(), cfg.clone());
        sim.run_until(Duration::from_secs(1), |s| s.b.conn.is_some());
        sim.link = LinkConfig {
            loss: 0.02,
            ..LinkConfig::perfect()
        };
        for i in 0..200u64 {
            sim.send_a(content(seed, i, 3000));
        }
        let ended = sim.run_until(Duration::from_secs(10), |s| {
            Sim::lost(&s.a).is_some() || s.b.sink.received.len() == 200
        });
        assert!(ended, "seed {seed}");
        let b_failed = Sim::lost(&sim.b).is_some();
        let a_failed = Sim::lost(&sim.a).is_some();
        assert!(a_failed || sim.b.sink.received.len() == 200, "seed {seed}");
        if a_failed {
            sim.run_until(Duration::from_secs(5), |s| Sim::lost(&s.b).is_some());
            assert!(b_failed || Sim::lost(&sim.b).is_some(), "seed {seed}");
        }
        for (k, (info, bytes)) in sim.b.sink.received.iter().enumerate() {
            assert_eq!(info.msg_id, k as u64, "seed {seed}");
            assert_eq!(bytes, &content(seed, k as u64, 3000), "seed {seed}");
        }
    }
}

#[test]
fn connect_timeout_without_server() {
    let cfg = Config::default();
    let mut sim = Sim::new(3, LinkConfig::perfect(), cfg.clone(), cfg.clone());
    sim.link_up = false;
    assert!(sim.run_until(Duration::from_secs(10), |s| Sim::lost(&s.a).is_some()));
    let (at, ev) = *sim.a.events.last().unwrap();
    assert_eq!(ev, Event::ConnectionLost(LostReason::ConnectTimeout));
    assert!(at <= Time::ZERO + cfg.connect_timeout);
    assert!(sim.datagrams > 3, "the request is repeated");
}

#[test]
fn reject_and_mismatch() {
    let now = Time::ZERO;
    let client_cfg = Config::default();
    let mut client = Connection::connect(client_cfg, 42, b"d", now).unwrap();
    let mut buf = vec![0u8; client.max_datagram_len()];
    let n = client.poll_transmit(now, &mut buf).unwrap();
    let Repr {
        body: Body::ConnectRequest(req),
        ..
    } = Repr::parse(&buf[..n]).unwrap()
    else {
        panic!("not a request")
    };
    assert_eq!(req.user_data, b"d");
    let other = Config {
        reliability: Reliability::ReliableReception,
        ..Config::default()
    };
    assert!(Connection::accept(other, 7, &req, b"", now).is_err());
    let mut out = vec![0u8; 256];
    let m = emit_reject(&req, 9, false, &mut out).unwrap();
    client.handle_datagram(now, &out[..m]);
    assert_eq!(client.poll_event(), Some(Event::Rejected { reason: 9 }));
    assert_eq!(client.state(), State::Closed);
}

#[test]
fn garbage_and_foreign_datagrams_are_counted_not_delivered() {
    let cfg = Config::default();
    let mut sim = Sim::new(77, LinkConfig::perfect(), cfg.clone(), cfg);
    sim.run_until(Duration::from_secs(1), |s| s.b.conn.is_some());
    sim.send_a(content(1, 0, 5000));
    assert!(sim.run_until(Duration::from_secs(1), |s| s.b.sink.received.len() == 1));
    let now = sim.now;
    let mut rng = Rng(1);
    // Random bytes.
    for _ in 0..1000 {
        let len = rng.below(200) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        sim.b().handle_datagram(now, &bytes);
    }
    // A well-formed data packet for another connection id.
    let mut other = Connection::connect(Config::default(), 5, b"", now).unwrap();
    let mut buf = vec![0u8; 2000];
    let n = other.poll_transmit(now, &mut buf).unwrap();
    sim.b().handle_datagram(now, &buf[..n]);
    let c = *sim.b().counters();
    assert_eq!(c.parse_errors, 1000);
    assert_eq!(c.wrong_conn_id, 1);
    // Still works afterwards, and nothing extra was delivered.
    sim.send_a(content(1, 1, 5000));
    assert!(sim.run_until(Duration::from_secs(2), |s| s.b.sink.received.len() == 2));
    assert_eq!(sim.b.sink.received[1].1, content(1, 1, 5000));
}

/// A DATA packet with the right connection id and an in-window sequence
/// number but a message id far from the next one (a forgery without a
/// cluster key, or a corrupted packet): it must not be delivered, and the
/// dropped-message count must not jump by the id's distance (it read
/// 2 707 587 607 after one such packet).
fn forged_message_id(reliability: Reliability) -> (Counters, usize) {
    let cfg = Config {
        reliability,
        rdma_read: reliability.is_reliable(),
        ..Config::default()
    };
    let mut sim = Sim::new(78, LinkConfig::perfect(), cfg.clone(), cfg);
    sim.run_until(Duration::from_secs(1), |s| s.b.conn.is_some());
    sim.send_a(content(1, 0, 100));
    assert!(sim.run_until(Duration::from_secs(1), |s| s.b.sink.received.len() == 1));
    let now = sim.now;
    let cid = sim.b().local_conn_id();
    for seq in 0..4u32 {
        let payload = b"forged";
        let dg = data_packet(
            cid,
            seq,
            0xA163_0000 + seq,
            0,
            payload.len() as u32,
            payload,
        );
        sim.b().handle_datagram(now, &dg);
    }
    sim.run_until(Duration::from_millis(50), |_| false);
    let forged = sim
        .b
        .sink
        .received
        .iter()
        .filter(|(_, bytes)| bytes == b"forged")
        .count();
    let c = *sim.b.conn.as_ref().unwrap().counters();
    (c, forged)
}

#[test]
fn forged_message_id_is_not_delivered_reliable() {
    let (c, forged) = forged_message_id(Reliability::ReliableDelivery);
    assert_eq!(forged, 0, "{c:?}");
    assert_eq!(c.messages_dropped, 0, "{c:?}");
    assert!(c.protocol_violations >= 1, "{c:?}");
}

#[test]
fn forged_message_id_does_not_inflate_drops_unreliable() {
    let (c, forged) = forged_message_id(Reliability::Unreliable);
    assert_eq!(forged, 0, "{c:?}");
    assert!(c.messages_dropped <= 4, "{c:?}");
}

/// A connect request that reached no one (the acceptor not listening
/// yet) goes again after `handshake_resend` (2 ms), then after twice as
/// long each time: not after the data path's initial RTO (20 ms), which
/// a forking server under viarun paid on every connection.
#[test]
fn the_connect_request_goes_again_soon_then_backs_off() {
    let cfg = Config::default();
    assert_eq!(cfg.handshake_resend, Duration::from_millis(2));
    let mut client = Connection::connect(cfg, 7, b"d", Time::ZERO).unwrap();
    let mut buf = vec![0u8; client.max_datagram_len()];
    let mut sent_at = Vec::new();
    let mut now = Time::ZERO;
    while now < Time::ZERO + Duration::from_millis(40) {
        while client.poll_transmit(now, &mut buf).is_some() {
            sent_at.push(now.saturating_since(Time::ZERO).as_micros());
        }
        let next = client.poll_timeout().expect("a resend is due");
        now = next.max(now);
        client.handle_timeout(now);
    }
    assert_eq!(sent_at, [0, 2_000, 6_000, 14_000, 30_000]);
}

/// A live connection's keepalive and dead-peer times can be changed (an
/// owner that learns of its peer's death another way keeps an idle
/// connection quieter): keepalives follow the new interval, a silent
/// peer is given the new time, and a pair that cannot work is refused.
#[test]
fn liveness_set_on_a_live_connection_is_followed() {
    let cfg = Config {
        keepalive_interval: Duration::from_millis(50),
        dead_peer_timeout: Duration::from_millis(3000),
        ..Config::default()
    };
    let mut sim = Sim::new(23, LinkConfig::perfect(), cfg.clone(), cfg);
    sim.run_until(Duration::from_secs(1), |s| s.b.conn.is_some());
    let keepalive = Duration::from_secs(1);
    let dead = Duration::from_secs(10);
    for end in [&mut sim.a, &mut sim.b] {
        let conn = end.conn.as_mut().unwrap();
        assert!(conn.set_liveness(Duration::ZERO, dead).is_err());
        assert!(conn.set_liveness(dead, dead).is_err());
        conn.set_liveness(keepalive, dead).unwrap();
    }
    // (The simulation's limits are times since its start.)
    let before = sim.a().counters().keepalives_sent;
    let start = sim.now.saturating_since(openvia_proto::Time::ZERO);
    sim.run_until(start + Duration::from_secs(8), |_| false); // idle
    let sent = sim.a().counters().keepalives_sent - before;
    assert!((6..=9).contains(&sent), "{sent} keepalives in 8 s idle");
    assert_eq!(Sim::lost(&sim.a), None);
    sim.link_up = false;
    let cut = sim.now;
    let cut_at = cut.saturating_since(openvia_proto::Time::ZERO);
    sim.run_until(cut_at + Duration::from_secs(5), |_| false);
    assert_eq!(Sim::lost(&sim.a), None, "5 s of silence is not 10");
    assert!(
        sim.run_until(cut_at + Duration::from_secs(12), |s| Sim::lost(&s.a)
            .is_some())
    );
    let (at, _) = sim.a.events.last().copied().unwrap();
    let took = at.saturating_since(cut);
    assert!(took <= dead && took >= dead - keepalive, "took {took:?}");
}

/// A client connected at `t` (ns) and idle since: its next deadline.
fn idle_client_deadline(cfg: &Config, t: u64) -> openvia_proto::Time {
    use openvia_proto::{Connection, Time};
    let t = Time::from_nanos(t);
    let mut client = Connection::connect(cfg.clone(), 0x11, b"", t).unwrap();
    let mut buf = vec![0u8; client.max_datagram_len()];
    let n = client.poll_transmit(t, &mut buf).unwrap();
    let Body::ConnectRequest(h) = Repr::parse(&buf[..n]).unwrap().body else {
        panic!("not a connect request");
    };
    let mut server = Connection::accept(cfg.clone(), 0x22, &h, b"", t).unwrap();
    let n = server.poll_transmit(t, &mut buf).unwrap();
    client.handle_datagram(t, &buf[..n]);
    while let Some(n) = client.poll_transmit(t, &mut buf) {
        server.handle_datagram(t, &buf[..n]);
    }
    assert_eq!(client.state(), State::Connected);
    client.poll_timeout().expect("a keepalive to come")
}

/// Idle connections whose last sends lie within an eighth of the
/// keepalive interval come due at one time, on a grid of eighths, never before their own interval has passed: the process
/// that holds them wakes once for all of them, not once each.
#[test]
fn idle_keepalives_of_many_connections_come_due_together() {
    let cfg = Config {
        keepalive_interval: Duration::from_secs(1),
        dead_peer_timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let base: u64 = 40_000_000_000; // on the 125 ms grid
    let ms = 1_000_000u64;
    let due: Vec<u64> = [1, 60, 124]
        .iter()
        .map(|d| idle_client_deadline(&cfg, base + d * ms).as_nanos())
        .collect();
    assert_eq!(due, vec![base + 1125 * ms; 3], "one deadline for all");
    for (d, sent) in due.iter().zip([1, 60, 124]) {
        let exact = base + sent * ms + 1000 * ms;
        assert!(*d >= exact && *d < exact + 125 * ms);
    }
    // On the grid already: not put off.
    assert_eq!(
        idle_client_deadline(&cfg, base).as_nanos(),
        base + 1000 * ms
    );
}
