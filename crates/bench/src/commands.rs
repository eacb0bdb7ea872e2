//! The `latency`, `bandwidth` and `transports` subcommands.

use crate::cli::{BandwidthArgs, LatencyArgs, RunArgs, TransportsArgs};
use crate::driver_bandwidth::{self, BandwidthParams};
use crate::driver_latency::{self, LatencyParams};
use crate::error::{BenchError, Result};
use crate::measure::{self, progress, RunLabels};
use crate::peer::Connection;
use crate::pinning::{allowed_cpus, resolve};
use crate::report::{render_records, Record};
use crate::serve::ENDPOINT_TIMEOUT;
use crate::transports::{self, EndpointOptions, Transport};
use std::io::Write;

/// Everything a run needs before its first test.
struct Setup {
    transport: Box<dyn Transport>,
    opts: EndpointOptions,
    pin: crate::pinning::PinPlan,
}

fn setup(run: &RunArgs, max_window: u32) -> Result<Setup> {
    let transport = transports::find(&run.transport)?;
    if run.peer.is_some() && !transport.supports_remote() {
        return Err(BenchError::Usage(format!(
            "{} cannot reach another host (--peer)",
            transport.name()
        )));
    }
    if run.peer.is_none() && !transport.reaches_this_host() {
        return Err(BenchError::Usage(format!(
            "{} reaches other hosts only: run `viabench serve -t {0}` there and give --peer              (scripts/net_compare.sh does so across two namespaces)",
            transport.name()
        )));
    }
    let pin = resolve(run.cpu, run.peer.is_some(), &allowed_cpus()?)?;
    let opts = EndpointOptions {
        mode: run.mode.unwrap_or_else(|| transport.default_mode()),
        max_message: run.size.0.iter().copied().max().unwrap_or(1),
        max_window,
        timeout: ENDPOINT_TIMEOUT,
    };
    Ok(Setup {
        transport,
        opts,
        pin,
    })
}

/// Prints a JSON line at once (so partial runs still leave data), or keeps
/// the record for the table.
fn emit(json: bool, record: Record, table: &mut Vec<Record>) {
    if json {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", record.to_json_line());
        let _ = out.flush();
    } else {
        table.push(record);
    }
}

pub fn latency(args: &LatencyArgs) -> Result<()> {
    let run = &args.run;
    let s = setup(run, 1)?;
    let mut conn = Connection::open(s.transport.as_ref(), &s.opts, run.peer.as_deref(), &s.pin)?;
    let labels = RunLabels {
        transport: s.transport.as_ref(),
        mode: s.opts.mode,
        pin: s.pin.describe(),
    };
    let mut table = Vec::new();
    for &size in &run.size.0 {
        let iters = run
            .iters
            .unwrap_or_else(|| driver_latency::default_iters(size));
        let warmup = run
            .warmup
            .unwrap_or_else(|| driver_latency::default_warmup(iters));
        progress(
            false,
            format_args!("{} latency {size} B x {iters}", labels.transport.name()),
        );
        let record = measure::latency(
            &labels,
            conn.endpoint.as_mut(),
            &LatencyParams {
                size,
                iters,
                warmup,
            },
        )?;
        emit(run.json, record, &mut table);
    }
    conn.close()?;
    print!("{}", render_records(&table));
    Ok(())
}

pub fn bandwidth(args: &BandwidthArgs) -> Result<()> {
    let run = &args.run;
    let s = setup(run, args.window)?;
    let mut conn = Connection::open(s.transport.as_ref(), &s.opts, run.peer.as_deref(), &s.pin)?;
    let labels = RunLabels {
        transport: s.transport.as_ref(),
        mode: s.opts.mode,
        pin: s.pin.describe(),
    };
    let mut table = Vec::new();
    for &size in &run.size.0 {
        let messages = run
            .iters
            .unwrap_or_else(|| driver_bandwidth::default_messages(size));
        let warmup = run
            .warmup
            .unwrap_or_else(|| driver_bandwidth::default_warmup(messages, args.window));
        progress(
            false,
            format_args!(
                "{} bandwidth {size} B x {messages}",
                labels.transport.name()
            ),
        );
        let params = BandwidthParams {
            size,
            messages,
            warmup,
            window: args.window,
            verify: args.verify,
        };
        let record = measure::bandwidth(&labels, conn.endpoint.as_mut(), &params)?;
        emit(run.json, record, &mut table);
    }
    conn.close()?;
    print!("{}", render_records(&table));
    Ok(())
}

pub fn list_transports(args: &TransportsArgs) -> Result<()> {
    let all = transports::registry();
    if args.json {
        for t in &all {
            let line = serde_json::json!({
                "name": t.name(),
                "available": t.available().is_ok(),
                "reason": t.available().err(),
                "default_mode": t.default_mode(),
                "remote": t.supports_remote(),
                "local": t.reaches_this_host(),
            });
            println!("{line}");
        }
        return Ok(());
    }
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|t| {
            vec![
                t.name().to_string(),
                t.default_mode().as_str().to_string(),
                match t.available() {
                    Ok(()) => "yes".to_string(),
                    Err(why) => format!("no: {why}"),
                },
            ]
        })
        .collect();
    print!(
        "{}",
        crate::report::render_table(&["transport", "mode", "available"], &rows, 3)
    );
    Ok(())
}
