//! Payloads sent from the caller's memory (`Payload::External`) and
//! payloads sent scatter-gather (`poll_transmit_split`), under loss: every
//! byte arrives, and an external message completes only when no segment
//! of it can be sent again — the simulator overwrites its buffer the
//! moment it completes, so a later retransmission would arrive corrupt.

mod support;

use std::time::Duration;

use openvia_proto::{Config, FlowMode, Reliability};
use support::{content, LinkConfig, Sim};

fn config(reliability: Reliability) -> Config {
    Config {
        reliability,
        flow_mode: FlowMode::Hetero,
        segment_size: 1400,
        max_transfer_size: 1 << 20,
        recv_window: 1024,
        rdma_read: reliability != Reliability::Unreliable,
        ..Config::default()
    }
}

/// Sizes: external ones from 64 KiB, owned ones below and above the split.
const SIZES: [(usize, bool); 8] = [
    (70_000, true),
    (300, false),
    (1 << 20, true),
    (5_000, false),
    (200_000, true),
    (1, false),
    (65_536, true),
    (100_000, false),
];

fn run(seed: u64, loss: f64, reliability: Reliability) {
    let ctx = format!("seed {seed} loss {loss} {reliability:?}");
    let cfg = config(reliability);
    let mut sim = Sim::new(seed, LinkConfig::lossy(loss), cfg.clone(), cfg);
    sim.split_min = 1024;
    let mut want = Vec::new();
    for (i, &(len, external)) in SIZES.iter().enumerate() {
        let data = content(seed, i as u64, len);
        let id = if external {
            sim.send_a_external(data.clone())
        } else {
            sim.send_a(data.clone())
        };
        assert_eq!(id, i as u64);
        want.push(data);
    }
    let n = SIZES.len();
    let done = sim.run_until(Duration::from_secs(120), |s| {
        Sim::completions(&s.a).len() == n && s.b.sink.received.len() == n
    });
    assert!(done, "{ctx}: did not finish by {:?}", sim.now);
    assert_eq!(Sim::lost(&sim.a), None, "{ctx}");
    assert_eq!(
        Sim::completions(&sim.a),
        (0..n as u64).collect::<Vec<_>>(),
        "{ctx}"
    );
    for (info, bytes) in &sim.b.sink.received {
        assert!(
            bytes == &want[info.msg_id as usize],
            "{ctx}: message {} arrived corrupt",
            info.msg_id
        );
    }
    if loss >= 0.05 {
        assert!(
            sim.a().counters().retransmissions > 0,
            "{ctx}: no loss seen?"
        );
    }
}

#[test]
fn external_and_split_payloads_survive_loss_reliable_delivery() {
    for seed in 1..=6 {
        for loss in [0.0, 0.01, 0.05, 0.2] {
            run(seed, loss, Reliability::ReliableDelivery);
        }
    }
}

#[test]
fn external_and_split_payloads_survive_loss_reliable_reception() {
    for seed in 1..=4 {
        for loss in [0.0, 0.05, 0.2] {
            run(seed, loss, Reliability::ReliableReception);
        }
    }
}

/// Without retransmission (unreliable, flow-control-only) an external
/// message is read in place too, and completes as soon as its last segment
/// has been taken: the simulator copies a datagram's payload when it takes
/// it and overwrites the buffer at completion, so a completion before the
/// last segment was taken would deliver corrupt bytes.
#[test]
fn external_payloads_without_retransmission_complete_once_taken() {
    for (name, cfg) in [
        ("unreliable", config(Reliability::Unreliable)),
        (
            "flow-control-only",
            Config {
                flow_control_only: true,
                ..config(Reliability::ReliableDelivery)
            },
        ),
    ] {
        for seed in 1..=3 {
            let mut sim = Sim::new(seed, LinkConfig::perfect(), cfg.clone(), cfg.clone());
            sim.split_min = 1024;
            let mut want = Vec::new();
            for (i, &(len, external)) in SIZES.iter().enumerate() {
                let data = content(seed, i as u64, len);
                if external {
                    sim.send_a_external(data.clone());
                } else {
                    sim.send_a(data.clone());
                }
                want.push(data);
            }
            let n = SIZES.len();
            let done = sim.run_until(Duration::from_secs(30), |s| {
                Sim::completions(&s.a).len() == n && s.b.sink.received.len() == n
            });
            assert!(done, "{name} seed {seed}: did not finish");
            for (info, bytes) in &sim.b.sink.received {
                assert_eq!(bytes, &want[info.msg_id as usize], "{name} seed {seed}");
            }
        }
    }
}
