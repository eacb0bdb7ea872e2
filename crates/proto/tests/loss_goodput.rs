//! Goodput and exact delivery under independent per-datagram loss on a
//! rate-limited link (the simulator's bottleneck, with a send buffer that
//! holds the sender rather than dropping), and when a reliable send may be
//! reported complete: only once the peer holds its data.
//!
//! The goodput floors are fractions of what the link can carry after the
//! loss itself (`rate × (1 − loss)`): a sender that recovers only a few
//! holes per round trip, or waits out timeouts, falls far below them.

mod support;

use std::time::Duration;

use openvia_proto::{Config, Event, Reliability, State, Time};
use support::{content, fnv1a, LinkConfig, Sim};

/// The levels that promise delivery.
const RELIABLE: [Reliability; 2] = [
    Reliability::ReliableDelivery,
    Reliability::ReliableReception,
];

/// Both ends have finished the handshake.
fn connected(s: &Sim) -> bool {
    s.a.conn
        .as_ref()
        .is_some_and(|c| c.state() == State::Connected)
        && s.b.conn.is_some()
}

/// 1 GB/s each way: what the veth carries for one busy core.
const RATE: u64 = 1_000_000_000;
const MIB: usize = 1 << 20;
/// The device's cap on bytes in flight (`DEFAULT_INFLIGHT_BYTES`).
const INFLIGHT: usize = 2 << 20;

/// The UDP device's settings for an MTU (segment payload, 8 MiB window,
/// 10 ms minimum RTO).
fn device_config(segment_size: usize, reliability: Reliability) -> Config {
    Config {
        reliability,
        segment_size,
        max_transfer_size: 4 << 20,
        recv_window: ((8 << 20) / segment_size).max(1024) as u32,
        max_inflight: INFLIGHT,
        min_rto: Duration::from_millis(10),
        ..Config::default()
    }
}

struct Outcome {
    seconds: f64,
    bytes: usize,
    /// Most payload bytes the sender had in flight at once in the second
    /// half of the stream (the first loss, and the cap, may come late).
    max_pipe: usize,
}

/// Streams `total` bytes as 1 MiB messages from a to b, `window` messages
/// posted at a time (as `viabench bandwidth -w`), and checks that every
/// message arrived once, in order, intact, and that every send completed.
fn stream(seed: u64, loss: f64, segment_size: usize, total: usize, limit: Duration) -> Outcome {
    stream_queued(seed, loss, segment_size, total, limit, 1 << 20)
}

/// [`stream`] with `queue` bytes of buffer before the bottleneck.
fn stream_queued(
    seed: u64,
    loss: f64,
    segment_size: usize,
    total: usize,
    limit: Duration,
    queue: u64,
) -> Outcome {
    let cfg = device_config(segment_size, Reliability::ReliableDelivery);
    let link = LinkConfig {
        txqueue: queue,
        ..LinkConfig::bottleneck(0.0, RATE)
    };
    let mut sim = Sim::new(seed, link, cfg.clone(), cfg);
    assert!(sim.run_until(Duration::from_secs(1), connected));
    sim.link.loss = loss;
    let start = sim.now;
    let count = total / MIB;
    let window = 16;
    let mut posted = 0u64;
    let mut max_pipe = 0;
    let ctx = format!("seed {seed} loss {loss} segment {segment_size}");
    let end = Duration::from_nanos(start.as_nanos()) + limit;
    while sim.now < Time::ZERO + end {
        let done = Sim::completions(&sim.a).len() as u64;
        while posted < count as u64 && posted - done < window {
            sim.send_a(content(seed, posted, MIB));
            posted += 1;
        }
        if sim.b.sink.received.len() == count && done == count as u64 {
            break;
        }
        assert_eq!(Sim::lost(&sim.a), None, "{ctx}");
        assert_eq!(Sim::lost(&sim.b), None, "{ctx}");
        if sim.b.sink.received.len() >= count / 2 {
            max_pipe = max_pipe.max(sim.a().bytes_in_flight());
        }
        if !sim.step() {
            break;
        }
    }
    // Until the last completion (recorded when it happened: the loop may
    // see it one step, possibly a long idle one, later).
    let finished = sim
        .a
        .events
        .iter()
        .filter(|(_, e)| matches!(e, Event::SendCompleted(_)))
        .map(|(t, _)| *t)
        .max()
        .unwrap_or(sim.now);
    let elapsed = finished.saturating_since(start);
    assert_eq!(
        sim.b.sink.received.len(),
        count,
        "{ctx}: delivered after {elapsed:?} (a: {:?})",
        sim.a().counters()
    );
    assert_eq!(Sim::completions(&sim.a).len(), count, "{ctx}");
    for (k, (info, bytes)) in sim.b.sink.received.iter().enumerate() {
        assert_eq!(info.msg_id, k as u64, "{ctx}");
        assert_eq!(fnv1a(bytes), fnv1a(&content(seed, k as u64, MIB)), "{ctx}");
    }
    if std::env::var("RUM_DEBUG").is_ok() {
        eprintln!(
            "{ctx}: {elapsed:?}, {:.0} MB/s, a={:?}",
            total as f64 / elapsed.as_secs_f64() / 1e6,
            sim.a().counters()
        );
    }
    Outcome {
        seconds: elapsed.as_secs_f64(),
        bytes: total,
        max_pipe,
    }
}

/// Goodput of a `mib` MiB stream must reach `floor` of what the link
/// carries after the loss.
fn goodput_floor(loss: f64, segment_size: usize, mib: usize, floor: f64) {
    for seed in [1, 2] {
        let o = stream(seed, loss, segment_size, mib * MIB, Duration::from_secs(60));
        let goodput = o.bytes as f64 / o.seconds;
        let ceiling = RATE as f64 * (1.0 - loss);
        assert!(
            goodput >= floor * ceiling,
            "seed {seed} loss {loss} segment {segment_size}: {:.0} MB/s, floor {:.0} MB/s",
            goodput / 1e6,
            floor * ceiling / 1e6
        );
    }
}

/// (At 1 % the old 16-block SACK already kept up on this link; at 5 % it
/// gave a few percent of the link.)
#[test]
fn goodput_at_one_and_five_percent_loss() {
    goodput_floor(0.01, 1408, 16, 0.85);
    goodput_floor(0.01, 8958, 16, 0.85);
    goodput_floor(0.05, 1408, 16, 0.8);
    goodput_floor(0.05, 8958, 16, 0.8);
}

/// A receiver slower than the sender queues what the sender's window
/// lets it send: on the device, datagrams wait in the receiving socket's
/// buffer (forced to megabytes). With the whole 8 MiB window in that
/// queue, each retransmission waited behind it and the receiver held
/// thousands of segments out of order, which both ends walked on every
/// acknowledgement (1 % loss cost the device far more CPU per byte). While
/// loss is being found the sender keeps at most `max_inflight` bytes in
/// the pipe (retransmissions, not held by the cap, may add a few
/// segments), whatever the window and the queue would take, and goodput
/// holds. Without loss the whole window may be in flight: the deep queue
/// is what carries a stream across a loaded host's scheduling gaps.
#[test]
fn under_loss_the_pipe_stays_within_its_cap_behind_a_deep_queue() {
    for (loss, segment_size) in [(0.0, 8958), (0.01, 1408), (0.01, 8958), (0.05, 8958)] {
        let o = stream_queued(
            3,
            loss,
            segment_size,
            16 * MIB,
            Duration::from_secs(60),
            64 << 20,
        );
        let slack = 16 * segment_size;
        if loss == 0.0 {
            assert!(
                o.max_pipe > 2 * INFLIGHT,
                "lossless: {} bytes in flight at most, the window is 8 MiB",
                o.max_pipe
            );
        } else {
            assert!(
                o.max_pipe <= INFLIGHT + slack,
                "loss {loss} segment {segment_size}: {} bytes in flight, cap {INFLIGHT}",
                o.max_pipe
            );
        }
        let goodput = o.bytes as f64 / o.seconds;
        assert!(
            goodput >= 0.8 * RATE as f64 * (1.0 - loss),
            "loss {loss} segment {segment_size}: {:.0} MB/s",
            goodput / 1e6
        );
    }
}

#[test]
fn twenty_percent_loss_moves_64_mib_quickly() {
    // The bar is 64 MiB in 60 s on the wire; on this link the
    // protocol must do far better than that. (64 MiB of small segments
    // takes minutes in an unoptimised test build: 16 MiB there.)
    goodput_floor(0.2, 8958, 64, 0.6);
    goodput_floor(0.2, 1408, 16, 0.6);
}

/// A reliable send completes only once the peer acknowledged it: with the
/// link cut after the handshake, nothing completes, and the loss of the
/// connection leaves the send pending (the device flushes it with an
/// error), on both reliable levels.
#[test]
fn reliable_send_completes_only_when_the_peer_holds_it() {
    for reliability in RELIABLE {
        let cfg = Config {
            reliability,
            keepalive_interval: Duration::from_millis(100),
            dead_peer_timeout: Duration::from_millis(700),
            ..Config::default()
        };
        let mut sim = Sim::new(61, LinkConfig::perfect(), cfg.clone(), cfg);
        assert!(sim.run_until(Duration::from_secs(1), connected));
        sim.link_up = false;
        for len in [100, 5000, 200_000] {
            sim.send_a(content(4, len as u64, len));
        }
        assert!(sim.run_until(Duration::from_secs(10), |s| Sim::lost(&s.a).is_some()));
        assert!(
            Sim::completions(&sim.a).is_empty(),
            "{reliability:?}: a send completed that the peer never got"
        );
        assert_eq!(sim.a().pending_sends(), vec![0, 1, 2], "{reliability:?}");
        assert!(sim.b.sink.received.is_empty());
    }
}

/// Over a lossy link a reliable-delivery send completes no earlier than
/// the acknowledgement of its last segment reaches the sender.
#[test]
fn delivery_completion_follows_the_acknowledgement() {
    let cfg = device_config(1408, Reliability::ReliableDelivery);
    let mut sim = Sim::new(62, LinkConfig::lossy(0.2), cfg.clone(), cfg);
    assert!(sim.run_until(Duration::from_secs(1), connected));
    for i in 0..40u64 {
        sim.send_a(content(5, i, 3000 * i as usize));
    }
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        // At every step: no more completions than messages the peer has
        // (placed, or complete in its buffer and acknowledged).
        let completed = Sim::completions(&s.a).len();
        let acked_msgs = s.b.sink.received.len();
        assert!(
            completed <= acked_msgs,
            "{completed} completions, {acked_msgs} messages at the peer"
        );
        completed == 40
    }));
    assert!(sim
        .a
        .events
        .iter()
        .all(|(_, e)| !matches!(e, Event::ConnectionLost(_))));
}

/// The peer's DISCONNECT carries its cumulative acknowledgement: a server
/// that closes right after taking our last message (its ACK lost) must
/// not leave that send to fail with the connection when the peer did get
/// it (viabench's final Bye failed this way at 20 % drop).
#[test]
fn a_disconnect_acknowledges_what_the_peer_received() {
    for reliability in RELIABLE {
        let cfg = Config {
            reliability,
            ..Config::default()
        };
        let mut sim = Sim::new(63, LinkConfig::perfect(), cfg.clone(), cfg);
        assert!(sim.run_until(Duration::from_secs(1), connected));
        sim.link_up_to_a = false;
        sim.send_a(content(6, 0, 64));
        assert!(sim.run_until(Duration::from_secs(1), |s| s.b.sink.received.len() == 1));
        assert!(Sim::completions(&sim.a).is_empty(), "{reliability:?}");
        sim.link_up_to_a = true;
        sim.b().close();
        assert!(sim.run_until(Duration::from_secs(1), |s| Sim::lost(&s.a).is_some()));
        assert_eq!(Sim::completions(&sim.a), vec![0], "{reliability:?}");
        assert!(matches!(
            Sim::lost(&sim.a),
            Some(Event::PeerDisconnected { .. })
        ));
    }
}
