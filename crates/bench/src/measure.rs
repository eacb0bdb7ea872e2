//! One test at one size over an open connection, turned into a [`Record`].
//! Shared by `latency`, `bandwidth` and `compare`, so every command measures
//! and labels results the same way.

use crate::driver_bandwidth::{self, BandwidthParams};
use crate::driver_latency::{self, LatencyParams};
use crate::error::Result;
use crate::report::{Figures, Record, TestKind};
use crate::transports::{DeviceNote, Endpoint, Transport, WaitMode};
use std::io::IsTerminal;

/// What every record of a run shares.
pub struct RunLabels<'a> {
    pub transport: &'a dyn Transport,
    pub mode: WaitMode,
    pub pin: String,
}

impl RunLabels<'_> {
    fn record(
        &self,
        test: TestKind,
        size: usize,
        iters: u64,
        warmup: u64,
        figures: Figures,
        device: Option<DeviceNote>,
    ) -> Record {
        Record {
            transport: self.transport.name().to_string(),
            test,
            size,
            iters,
            warmup,
            figures,
            mode: self.mode.as_str(),
            pin: self.pin.clone(),
            note: self.transport.framing_note(size),
            device,
            speedup_vs_kernel_tcp: None,
            speedup_vs_shm: None,
        }
    }
}

pub fn latency(
    labels: &RunLabels<'_>,
    ep: &mut dyn Endpoint,
    params: &LatencyParams,
) -> Result<Record> {
    let outcome = driver_latency::run(ep, params)?;
    let s = outcome.summary;
    let figures = Figures::Latency {
        repeated: outcome.repeated,
        min_ns: s.min_ns,
        median_ns: s.median_ns,
        p99_ns: s.p99_ns,
        mean_ns: (s.mean_ns * 10.0).round() / 10.0,
    };
    Ok(labels.record(
        TestKind::Latency,
        params.size,
        params.iters,
        params.warmup,
        figures,
        ep.device_note(),
    ))
}

pub fn bandwidth(
    labels: &RunLabels<'_>,
    ep: &mut dyn Endpoint,
    params: &BandwidthParams,
) -> Result<Record> {
    let outcome = driver_bandwidth::run(ep, params)?;
    let figures = Figures::Bandwidth {
        gbytes_per_s: outcome.gbytes_per_s(),
        msgs_per_s: outcome.msgs_per_s(),
        seconds: outcome.seconds,
        window: params.window,
        verify: params.verify,
        delivered_msgs: outcome.delivered.messages,
        lost_msgs: params.messages.saturating_sub(outcome.delivered.messages),
    };
    Ok(labels.record(
        TestKind::Bandwidth,
        params.size,
        params.messages,
        params.warmup,
        figures,
        ep.device_note(),
    ))
}

/// Progress on stderr, for people watching a terminal (or always, when `force`).
pub fn progress(force: bool, what: std::fmt::Arguments<'_>) {
    if force || std::io::stderr().is_terminal() {
        eprintln!("viabench: {what}");
    }
}
