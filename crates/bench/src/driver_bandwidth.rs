//! The bandwidth test: a windowed stream, as OSU's osu_bw measures it.
//!
//! The client (sender) keeps `window` messages in flight and waits for the
//! receiver's small acknowledgement after each window; the clock runs from
//! the first measured message to the acknowledgement of the last, on the
//! sender. A warm-up stream runs first, unmeasured. GB/s counts the bytes the
//! receiver reports as delivered (equal to all bytes sent on reliable
//! transports; fewer when UDP drops datagrams, and the loss is reported).
//!
//! With `--verify` the sender fills each message with the pattern of its
//! index (see [`crate::pattern`]) and the receiver checks every byte; both
//! costs are inside the measurement, so verified runs are slower by design.

use crate::error::{BenchError, Result};
use crate::pattern::{self, Verifier};
use crate::session::{recv_control, send_control, start_test, ReceiverReport, Reply, Request};
use crate::transports::{CheckHook, Endpoint, FillHook, StreamPlan, StreamReceipt};
use std::time::Instant;

/// About 1 GiB per size, between 256 and 100000 messages.
pub fn default_messages(size: usize) -> u64 {
    ((1u64 << 30) / size as u64).clamp(256, 100_000)
}

/// Warm-up messages: a tenth of the run, at least one window, at most 1000.
pub fn default_warmup(messages: u64, window: u32) -> u64 {
    (messages / 10)
        .max(u64::from(window))
        .min(1000)
        .min(messages)
}

#[derive(Clone, Copy, Debug)]
pub struct BandwidthParams {
    pub size: usize,
    pub messages: u64,
    pub warmup: u64,
    pub window: u32,
    pub verify: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct BandwidthOutcome {
    pub seconds: f64,
    pub delivered: StreamReceipt,
}

impl BandwidthOutcome {
    pub fn gbytes_per_s(&self) -> f64 {
        self.delivered.bytes as f64 / self.seconds / 1e9
    }

    pub fn msgs_per_s(&self) -> f64 {
        self.delivered.messages as f64 / self.seconds
    }
}

fn plans(p: &BandwidthParams) -> (StreamPlan, StreamPlan) {
    let warm = StreamPlan {
        size: p.size,
        count: p.warmup,
        window: p.window,
        first_index: 0,
    };
    let measured = StreamPlan {
        size: p.size,
        count: p.messages,
        window: p.window,
        first_index: p.warmup,
    };
    (warm, measured)
}

/// Client side: streams, times, and collects the receiver's report.
pub fn run(ep: &mut dyn Endpoint, p: &BandwidthParams) -> Result<BandwidthOutcome> {
    if p.messages == 0 {
        return Err(BenchError::Usage("--iters must be at least 1".into()));
    }
    start_test(
        ep,
        &Request::Bandwidth {
            size: p.size as u64,
            warmup: p.warmup,
            count: p.messages,
            window: p.window,
            verify: p.verify,
        },
    )?;
    let (warm, measured) = plans(p);
    // Written once so every page is mapped before the clock starts.
    let mut buf = vec![0xa5u8; p.size];
    let mut fill = pattern::fill;
    if warm.count > 0 {
        ep.stream_send(
            &warm,
            &mut buf,
            p.verify.then_some(&mut fill as FillHook<'_>),
        )?;
    }
    let start = Instant::now();
    ep.stream_send(
        &measured,
        &mut buf,
        p.verify.then_some(&mut fill as FillHook<'_>),
    )?;
    let seconds = start.elapsed().as_secs_f64();
    let report = ReceiverReport::decode(&recv_control(ep)?)?;
    // Every message sent is accounted for: delivered, or (a transport that
    // may lose messages) reported lost. A shortfall is a failure of the
    // run, never a figure.
    let r = report.receipt;
    if r.messages + r.lost_messages != p.messages {
        return Err(BenchError::Protocol(format!(
            "receiver accounts for {} delivered + {} lost of {} messages sent",
            r.messages, r.lost_messages, p.messages
        )));
    }
    if report.mismatches > 0 {
        let (index, offset) = report.first_mismatch.unwrap_or((0, 0));
        return Err(BenchError::VerifyFailed {
            mismatches: report.mismatches,
            detail: format!("first bad byte: message {index}, offset {offset}"),
        });
    }
    Ok(BandwidthOutcome {
        seconds,
        delivered: report.receipt,
    })
}

/// Server side: receives both streams, checks them if asked, reports back.
pub fn respond(ep: &mut dyn Endpoint, p: &BandwidthParams) -> Result<()> {
    send_control(ep, &Reply::Ready.encode())?;
    let (warm, measured) = plans(p);
    let mut buf = vec![0u8; p.size];
    let mut verifier = Verifier::default();
    let mut check = |index: u64, offset: usize, bytes: &[u8]| verifier.check(index, offset, bytes);
    if warm.count > 0 {
        ep.stream_recv(
            &warm,
            &mut buf,
            p.verify.then_some(&mut check as CheckHook<'_>),
        )?;
    }
    let receipt = ep.stream_recv(
        &measured,
        &mut buf,
        p.verify.then_some(&mut check as CheckHook<'_>),
    )?;
    if let Some((index, offset)) = verifier.first {
        eprintln!(
            "viabench serve: --verify: {} corrupted message part(s), first at message {index} offset {offset}",
            verifier.mismatches
        );
    }
    let report = ReceiverReport {
        receipt,
        mismatches: verifier.mismatches,
        first_mismatch: verifier.first,
    };
    send_control(ep, &report.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_move_about_a_gibibyte() {
        assert_eq!(default_messages(65536), 16384);
        assert_eq!(default_messages(4 << 20), 256);
        assert_eq!(default_messages(8), 100_000);
        assert_eq!(default_warmup(16384, 64), 1000);
        assert_eq!(default_warmup(256, 64), 64);
        assert_eq!(default_warmup(50, 64), 50);
    }
}
