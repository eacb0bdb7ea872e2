//! Patterns under loss, duplication, reordering, delay and jitter: many
//! seeds × loss rates × message sizes. Reliable levels must deliver every
//! message intact, in order, exactly once; the unreliable level may lose
//! messages but never corrupt or duplicate one, and counts what it lost.

mod support;

use std::time::Duration;

use openvia_proto::{Config, FlowMode, Reliability};
use support::{content, fnv1a, LinkConfig, Sim};

const SIZES: [usize; 8] = [0, 1, 1471, 1472, 1473, 4096, 65536, 1 << 20];
const LOSSES: [f64; 4] = [0.001, 0.01, 0.05, 0.2];

fn config(reliability: Reliability, flow_mode: FlowMode) -> Config {
    Config {
        reliability,
        flow_mode,
        rdma_read: reliability != Reliability::Unreliable,
        ..Config::default()
    }
}

/// Sends every size from a to b (and a few small ones b to a), then checks.
fn run_pattern(seed: u64, loss: f64, reliability: Reliability, flow_mode: FlowMode) -> u64 {
    run_pattern_placing(seed, loss, reliability, flow_mode, false)
}

/// [`run_pattern`]; with `placing` both ends take segments as they arrive
/// (direct placement), the rest at delivery.
fn run_pattern_placing(
    seed: u64,
    loss: f64,
    reliability: Reliability,
    flow_mode: FlowMode,
    placing: bool,
) -> u64 {
    let cfg = config(reliability, flow_mode);
    let mut sim = Sim::new(seed, LinkConfig::lossy(loss), cfg.clone(), cfg);
    sim.a.sink.placing = placing;
    sim.b.sink.placing = placing;
    let stream_a = seed;
    let stream_b = seed ^ 0xB;
    let mut sent_a = Vec::new();
    for (i, &len) in SIZES.iter().enumerate() {
        let id = sim.send_a(content(stream_a, i as u64, len));
        sent_a.push((id, fnv1a(&content(stream_a, i as u64, len)), len));
    }
    let connected = sim.run_until(Duration::from_secs(2), |s| s.b.conn.is_some());
    assert!(connected, "seed {seed} loss {loss}: no connection");
    let mut sent_b = Vec::new();
    for i in 0..3u64 {
        let data = content(stream_b, i, 100 * i as usize + 1);
        sent_b.push(sim.send_b(data));
    }
    let n = SIZES.len();
    let reliable = reliability != Reliability::Unreliable;
    let finished = sim.run_until(Duration::from_secs(120), |s| {
        let done_a = Sim::completions(&s.a).len() == n;
        let done_b = Sim::completions(&s.b).len() == 3;
        let delivered = s.b.sink.received.len() == n && s.a.sink.received.len() == 3;
        done_a
            && done_b
            && (delivered || (!reliable && s.link_idle()))
            && s.a.conn.as_ref().unwrap().pending_sends().is_empty()
    });
    let ctx = format!("seed {seed} loss {loss} {reliability:?} {flow_mode:?}");
    assert!(finished, "{ctx}: did not finish by {:?}", sim.now);
    if !reliable {
        // Let holes time out and probes settle what was lost.
        let settle = Duration::from_nanos(sim.now.as_nanos()) + Duration::from_millis(200);
        sim.run_until(settle, |_| false);
    }
    assert_eq!(Sim::lost(&sim.a), None, "{ctx}");
    assert_eq!(Sim::lost(&sim.b), None, "{ctx}");
    // Completions come in posting order.
    assert_eq!(
        Sim::completions(&sim.a),
        (0..n as u64).collect::<Vec<_>>(),
        "{ctx}"
    );

    // Every message received is intact, ids strictly increase (in order,
    // never duplicated).
    let mut last: Option<u64> = None;
    for (info, bytes) in &sim.b.sink.received {
        let (id, sum, len) = sent_a[info.msg_id as usize];
        assert_eq!(info.msg_id, id);
        assert_eq!(bytes.len(), len, "{ctx}: length of message {id}");
        assert_eq!(fnv1a(bytes), sum, "{ctx}: contents of message {id}");
        assert!(
            last.is_none_or(|l| l < id),
            "{ctx}: order/duplicate at {id}"
        );
        last = Some(id);
    }
    for (info, bytes) in &sim.a.sink.received {
        let i = info.msg_id;
        assert_eq!(bytes, &content(stream_b, i, 100 * i as usize + 1), "{ctx}");
    }
    let counters_b = *sim.b().counters();
    let ctx = format!("{ctx} placing {placing}");
    if placing && reliable {
        // Most segments arrive in order, even at 20 % loss.
        assert!(counters_b.segments_placed > 0, "{ctx}: nothing placed");
    } else {
        assert_eq!(counters_b.segments_placed, 0, "{ctx}");
        assert_eq!(sim.b.sink.placed_bytes, 0, "{ctx}");
    }
    if reliable {
        assert_eq!(sim.b.sink.received.len(), n, "{ctx}: exactly once");
        assert_eq!(sim.a.sink.received.len(), 3, "{ctx}");
        assert_eq!(counters_b.messages_dropped, 0);
    } else {
        // Losses before the last delivered message are all counted.
        let delivered = sim.b.sink.received.len() as u64;
        if let Some(l) = last {
            assert_eq!(counters_b.messages_dropped + delivered, l + 1, "{ctx}");
        }
    }
    if loss >= 0.05 && reliable {
        assert!(
            sim.a().counters().retransmissions > 0,
            "{ctx}: no loss seen?"
        );
    }
    if std::env::var("RUM_DEBUG").is_ok() {
        eprintln!(
            "{ctx}: delivered {} a={:?} b={counters_b:?}",
            sim.b.sink.received.len(),
            sim.a().counters()
        );
    }
    counters_b.messages_dropped
}

#[test]
fn reliable_delivery_hetero_all_losses() {
    for loss in LOSSES {
        for seed in 1..=3 {
            run_pattern(seed, loss, Reliability::ReliableDelivery, FlowMode::Hetero);
        }
    }
}

#[test]
fn reliable_reception_homo_all_losses() {
    for loss in LOSSES {
        for seed in 11..=13 {
            run_pattern(seed, loss, Reliability::ReliableReception, FlowMode::Homo);
        }
    }
}

#[test]
fn reliable_delivery_homo_and_reception_hetero() {
    for (i, loss) in LOSSES.iter().enumerate() {
        run_pattern(
            20 + i as u64,
            *loss,
            Reliability::ReliableDelivery,
            FlowMode::Homo,
        );
        run_pattern(
            30 + i as u64,
            *loss,
            Reliability::ReliableReception,
            FlowMode::Hetero,
        );
    }
}

#[test]
fn unreliable_never_corrupts_or_duplicates() {
    let mut dropped_at_20 = 0;
    for loss in LOSSES {
        for seed in 41..=43 {
            let d = run_pattern(seed, loss, Reliability::Unreliable, FlowMode::Hetero);
            if loss >= 0.2 {
                dropped_at_20 += d;
            }
        }
    }
    assert!(dropped_at_20 > 0, "20 % loss must cost unreliable messages");
}

#[test]
fn many_small_messages_in_order() {
    let cfg = Config::default();
    let mut sim = Sim::new(99, LinkConfig::lossy(0.05), cfg.clone(), cfg);
    for i in 0..2000u64 {
        sim.send_a(content(7, i, (i % 300) as usize));
    }
    let ok = sim.run_until(Duration::from_secs(60), |s| s.b.sink.received.len() == 2000);
    assert!(ok, "only {} delivered", sim.b.sink.received.len());
    for (k, (info, bytes)) in sim.b.sink.received.iter().enumerate() {
        assert_eq!(info.msg_id, k as u64);
        assert_eq!(bytes, &content(7, k as u64, k % 300));
    }
    let c = sim.a().counters();
    assert!(c.retransmissions > 0 && c.fast_retransmits > 0, "{c:?}");
}

#[test]
fn placing_on_arrival_delivers_every_message_intact_at_every_loss() {
    for loss in LOSSES {
        for seed in 51..=53 {
            run_pattern_placing(
                seed,
                loss,
                Reliability::ReliableDelivery,
                FlowMode::Hetero,
                true,
            );
            run_pattern_placing(
                seed + 10,
                loss,
                Reliability::ReliableReception,
                FlowMode::Homo,
                true,
            );
        }
    }
}

#[test]
fn unreliable_level_never_places_on_arrival() {
    for loss in [0.0, 0.05] {
        run_pattern_placing(71, loss, Reliability::Unreliable, FlowMode::Hetero, true);
    }
}

/// On a clean link every data segment of b is placed as it arrives: none
/// is copied into the connection's buffer.
#[test]
fn a_clean_link_places_every_segment_on_arrival() {
    let cfg = config(Reliability::ReliableDelivery, FlowMode::Hetero);
    let mut sim = Sim::new(81, LinkConfig::perfect(), cfg.clone(), cfg);
    sim.b.sink.placing = true;
    let mut bytes = 0u64;
    for (i, &len) in SIZES.iter().enumerate() {
        sim.send_a(content(81, i as u64, len));
        bytes += len as u64;
    }
    let ok = sim.run_until(Duration::from_secs(10), |s| {
        s.b.sink.received.len() == SIZES.len()
    });
    assert!(ok);
    for (info, got) in &sim.b.sink.received {
        assert_eq!(got, &content(81, info.msg_id, SIZES[info.msg_id as usize]));
    }
    assert_eq!(sim.b.sink.placed_bytes, bytes);
    assert!(sim.b.sink.arriving.is_empty());
}

/// A receiver that has not posted (the sink refuses) gets nothing placed;
/// once it posts, the buffered messages are delivered whole.
#[test]
fn nothing_is_placed_while_no_receive_is_posted() {
    let cfg = config(Reliability::ReliableReception, FlowMode::Hetero);
    let mut sim = Sim::new(82, LinkConfig::perfect(), cfg.clone(), cfg);
    sim.b.sink.placing = true;
    sim.b.sink.accepting = false;
    for i in 0..4u64 {
        sim.send_a(content(82, i, 70_000));
    }
    let settle = Duration::from_millis(50);
    sim.run_until(settle, |_| false);
    assert_eq!(sim.b.sink.placed_bytes, 0);
    assert!(sim.b.sink.received.is_empty());
    sim.b.sink.accepting = true;
    let ok = sim.run_until(Duration::from_secs(10), |s| s.b.sink.received.len() == 4);
    assert!(ok);
    for (info, got) in &sim.b.sink.received {
        assert_eq!(got, &content(82, info.msg_id, 70_000));
    }
}
