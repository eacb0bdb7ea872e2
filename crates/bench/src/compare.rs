//! `viabench compare`: the standard sweep over every transport available
//! here, in one table, with ratios against kernel TCP (and against shm once
//! it is registered).
//!
//! Each transport gets its own server process and connection, all sizes run
//! over it, in the transport's default wait mode. A failure (say, a UDP
//! datagram lost in a latency run) costs only that test: it is reported, the
//! connection is rebuilt, and the sweep goes on.

use crate::cli::CompareArgs;
use crate::driver_bandwidth::{self, BandwidthParams};
use crate::driver_latency::{self, LatencyParams};
use crate::error::{BenchError, Result};
use crate::measure::{self, progress, RunLabels};
use crate::peer::Connection;
use crate::pinning::{allowed_cpus, resolve, PinPlan};
use crate::report::{gbs, human_size, render_table, Figures, Record, TestKind};
use crate::serve::ENDPOINT_TIMEOUT;
use crate::transports::{self, EndpointOptions, Transport};
use std::fmt::Write as _;

pub const LATENCY_SIZES: [usize; 5] = [8, 64, 4096, 65536, 1 << 20];
pub const BANDWIDTH_SIZES: [usize; 3] = [65536, 1 << 20, 4 << 20];
const WINDOW: u32 = 64;
const BASELINE: &str = "kernel-tcp";
const SHM: &str = "shm";

#[derive(Clone, Copy, Debug)]
enum Test {
    Latency(usize),
    Bandwidth(usize),
}

impl Test {
    fn all() -> Vec<Test> {
        let lat = LATENCY_SIZES.iter().map(|&s| Test::Latency(s));
        lat.chain(BANDWIDTH_SIZES.iter().map(|&s| Test::Bandwidth(s)))
            .collect()
    }

    fn describe(&self) -> (TestKind, usize) {
        match *self {
            Test::Latency(s) => (TestKind::Latency, s),
            Test::Bandwidth(s) => (TestKind::Bandwidth, s),
        }
    }
}

/// A test that did not produce a record.
struct Failure {
    transport: String,
    test: TestKind,
    size: usize,
    error: String,
}

pub fn run(args: &CompareArgs) -> Result<()> {
    let pin = resolve(args.cpu, false, &allowed_cpus()?)?;
    let mut chosen: Vec<Box<dyn Transport>> = Vec::new();
    let mut skipped = Vec::new();
    for t in transports::registry() {
        if !args.only.is_empty() && !args.only.iter().any(|n| n == t.name()) {
            continue;
        }
        if !t.reaches_this_host() {
            skipped.push(format!("{} (reaches other hosts only)", t.name()));
            continue;
        }
        match t.available() {
            Ok(()) => chosen.push(t),
            Err(why) => skipped.push(format!("{} ({why})", t.name())),
        }
    }
    if chosen.is_empty() {
        return Err(BenchError::Usage(
            "no transport selected is available".into(),
        ));
    }
    let mut records = Vec::new();
    let mut failures = Vec::new();
    for t in &chosen {
        sweep(t.as_ref(), &pin, args.quick, &mut records, &mut failures);
    }
    add_speedups(&mut records);
    if args.json {
        for r in &records {
            println!("{}", r.to_json_line());
        }
        for f in &failures {
            let line = serde_json::json!({
                "transport": f.transport, "test": f.test, "size": f.size, "error": f.error,
                "pin": pin.describe(),
            });
            println!("{line}");
        }
    } else {
        print!("{}", render(&records, &failures, &pin, &skipped));
    }
    match failures.len() {
        0 => Ok(()),
        n => Err(BenchError::Server(format!("{n} test(s) failed; see above"))),
    }
}

fn latency_iters(size: usize, quick: bool) -> u64 {
    let full = driver_latency::default_iters(size);
    if quick {
        (full / 20).max(100)
    } else {
        full
    }
}

fn bandwidth_messages(size: usize, quick: bool) -> u64 {
    if quick {
        ((64u64 << 20) / size as u64).clamp(16, 10_000)
    } else {
        driver_bandwidth::default_messages(size)
    }
}

/// Runs every test over one transport, reconnecting after a failure.
fn sweep(
    t: &dyn Transport,
    pin: &PinPlan,
    quick: bool,
    records: &mut Vec<Record>,
    failures: &mut Vec<Failure>,
) {
    let opts = EndpointOptions {
        mode: t.default_mode(),
        max_message: BANDWIDTH_SIZES
            .iter()
            .chain(&LATENCY_SIZES)
            .copied()
            .max()
            .unwrap_or(1),
        max_window: WINDOW,
        timeout: ENDPOINT_TIMEOUT,
    };
    let labels = RunLabels {
        transport: t,
        mode: opts.mode,
        pin: pin.describe(),
    };
    let mut conn: Option<Connection> = None;
    for test in Test::all() {
        let (kind, size) = test.describe();
        progress(
            true,
            format_args!("compare: {} {kind:?} {}", t.name(), human_size(size)),
        );
        let outcome = (|| {
            let c = match conn.as_mut() {
                Some(c) => c,
                None => conn.insert(Connection::open(t, &opts, None, pin)?),
            };
            let ep = c.endpoint.as_mut();
            match test {
                Test::Latency(size) => {
                    let iters = latency_iters(size, quick);
                    let warmup = driver_latency::default_warmup(iters);
                    measure::latency(
                        &labels,
                        ep,
                        &LatencyParams {
                            size,
                            iters,
                            warmup,
                        },
                    )
                }
                Test::Bandwidth(size) => {
                    let messages = bandwidth_messages(size, quick);
                    let warmup = driver_bandwidth::default_warmup(messages, WINDOW);
                    let params = BandwidthParams {
                        size,
                        messages,
                        warmup,
                        window: WINDOW,
                        verify: false,
                    };
                    measure::bandwidth(&labels, ep, &params)
                }
            }
        })();
        match outcome {
            Ok(r) => records.push(r),
            Err(e) => {
                eprintln!("viabench: compare: {} {kind:?} {size}: {e}", t.name());
                failures.push(Failure {
                    transport: t.name().into(),
                    test: kind,
                    size,
                    error: e.to_string(),
                });
                conn = None; // the session state is unknown: start over
            }
        }
    }
    if let Some(c) = conn {
        if let Err(e) = c.close() {
            eprintln!("viabench: compare: closing {}: {e}", t.name());
        }
    }
}

/// Fills the ratio fields from the kernel-tcp and shm records of the same test and size.
fn add_speedups(records: &mut [Record]) {
    let find = |records: &[Record], name: &str, r: &Record| {
        records
            .iter()
            .find(|b| b.transport == name && b.test == r.test && b.size == r.size)
            .cloned()
    };
    for i in 0..records.len() {
        let base = find(records, BASELINE, &records[i]);
        let shm = find(records, SHM, &records[i]);
        let r = &mut records[i];
        r.speedup_vs_kernel_tcp = base.and_then(|b| r.speedup_over(&b));
        r.speedup_vs_shm = shm.and_then(|b| r.speedup_over(&b));
    }
}

fn ratio(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.2}x"))
}

fn render(records: &[Record], failures: &[Failure], pin: &PinPlan, skipped: &[String]) -> String {
    let has_shm = records.iter().any(|r| r.transport == SHM);
    let mut out = String::new();
    let _ = writeln!(out, "# viabench compare  pin={}", pin.describe());
    let _ = writeln!(
        out,
        "# latency: one-way median/p99 ns (lower is better); bandwidth: GB/s = 1e9 B/s (higher is better)"
    );
    let _ = writeln!(
        out,
        "# vs X: how many times better than X on the same test and size"
    );
    if !skipped.is_empty() {
        let _ = writeln!(out, "# not available here: {}", skipped.join(", "));
    }
    let mut headers = vec![
        "test",
        "size",
        "transport",
        "mode",
        "median_ns|GB/s",
        "p99_ns",
        "vs kernel-tcp",
    ];
    if has_shm {
        headers.push("vs shm");
    }
    headers.push("note");
    let mut rows = Vec::new();
    for kind in [TestKind::Latency, TestKind::Bandwidth] {
        let mut sizes: Vec<usize> = records
            .iter()
            .filter(|r| r.test == kind)
            .map(|r| r.size)
            .collect();
        sizes.extend(failures.iter().filter(|f| f.test == kind).map(|f| f.size));
        sizes.sort_unstable();
        sizes.dedup();
        for size in sizes {
            for r in records.iter().filter(|r| r.test == kind && r.size == size) {
                let (value, p99) = match r.figures {
                    Figures::Latency {
                        median_ns, p99_ns, ..
                    } => (format!("{median_ns:.1}"), format!("{p99_ns:.1}")),
                    Figures::Bandwidth {
                        gbytes_per_s,
                        lost_msgs,
                        ..
                    } => {
                        let lost = if lost_msgs > 0 {
                            format!(" ({lost_msgs} lost)")
                        } else {
                            String::new()
                        };
                        (format!("{}{lost}", gbs(gbytes_per_s)), "-".into())
                    }
                };
                let mut row = vec![
                    format!("{kind:?}").to_lowercase(),
                    human_size(size),
                    r.transport.clone(),
                    r.mode.to_string(),
                    value,
                    p99,
                    ratio(r.speedup_vs_kernel_tcp),
                ];
                if has_shm {
                    row.push(ratio(r.speedup_vs_shm));
                }
                row.push(r.note.clone().unwrap_or_default());
                rows.push(row);
            }
            for f in failures.iter().filter(|f| f.test == kind && f.size == size) {
                let mut row = vec![
                    format!("{kind:?}").to_lowercase(),
                    human_size(size),
                    f.transport.clone(),
                    "-".into(),
                    "FAILED".into(),
                    "-".into(),
                    "-".into(),
                ];
                if has_shm {
                    row.push("-".into());
                }
                row.push(f.error.clone());
                rows.push(row);
            }
        }
    }
    out.push_str(&render_table(&headers, &rows, 4));
    out
}
