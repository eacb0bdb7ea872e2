//! `viabench scale`: many connections at once on the shared-memory device.
//!
//! Two processes (this binary re-executed as the server, `--role server`)
//! connect N VI pairs, timing every connect. Optionally each pair first
//! moves enough 16 KiB messages that both its rings wrap (`--wrap`), so
//! the memory figure is that of connections that have been busy, not of
//! fresh ones. Then an 8-byte ping-pong goes round-robin over the N VIs:
//! round r uses VI r mod N, on both sides. How each side waits for a
//! receive is the measured variable (`--wait`): on the VI itself
//! (VipRecvWait), on one CQ that all receive queues feed (VipCQWait), or by
//! polling that CQ (VipCQDone). Spinning is on (a Wait never sleeps).
//!
//! Printed: one-way latency (median over batches of round trips / 2), the
//! connect time distribution, and both processes' resident memory.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openvia_core::cq::CompletionQueue;
use openvia_core::descriptor::{DataSegment, Descriptor};
use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi, ViAttributes};
use openvia_core::{connect_request, connect_wait, Address, ViaError};

use crate::cli::{PinRequest, ScaleArgs, ScaleRole, ScaleWait};
use crate::error::{BenchError, Result};
use crate::pinning::{allowed_cpus, pin_current_thread, resolve};

/// Descriptor slots: one receive and one send per VI.
const SLOT: usize = 64;
/// Message size of the `--wrap` phase (the inline maximum: one record each).
const WRAP_SIZE: usize = 16 * 1024;
const WAIT: Duration = Duration::from_secs(60);

fn via(what: &str) -> impl Fn(ViaError) -> BenchError + '_ {
    move |e| BenchError::Protocol(format!("{what}: {e}"))
}

/// One side's N VIs, their buffers and (in the CQ modes) the CQ.
struct Side {
    nic: Nic,
    vis: Vec<Arc<Vi>>,
    cq: Option<Arc<CompletionQueue>>,
    /// VI id → index, for CQ entries.
    index: HashMap<u64, usize>,
    mem: Vec<u8>,
    base: usize,
    handle: u32,
    /// Bytes of buffer per VI (receive buffer, then send buffer).
    buf: usize,
    wait: ScaleWait,
}

impl Side {
    fn open(n: usize, wait: ScaleWait, msg: usize) -> Result<Side> {
        let nic = Nic::open(None).map_err(via("open NIC"))?;
        nic.set_spin_ns(u64::MAX);
        // The peer leaving at the end is expected.
        nic.set_error_handler(Some(Arc::new(|_: &openvia_core::nic::AsyncError| {})))
            .map_err(via("error handler"))?;
        let ptag = nic.create_ptag().map_err(via("ptag"))?;
        let cq = match wait {
            ScaleWait::Vi => None,
            _ => Some(nic.create_cq(2 * n + 64).map_err(via("create CQ"))?),
        };
        let attrs = ViAttributes {
            reliability: reliability::RELIABLE_DELIVERY,
            max_transfer: 1 << 20,
            ptag,
            rdma_write: false,
            rdma_read: false,
        };
        let vis = (0..n)
            .map(|_| nic.create_vi(attrs, None, cq.clone()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(via("create VI"))?;
        let index = vis.iter().enumerate().map(|(i, v)| (v.id(), i)).collect();
        let buf = msg.next_multiple_of(64);
        let len = n * (2 * SLOT + 2 * buf);
        let mem = vec![0u8; len + 64];
        let base = (mem.as_ptr() as usize).next_multiple_of(64);
        let handle = register(&nic, ptag, base, len)?;
        Ok(Side {
            nic,
            vis,
            cq,
            index,
            mem,
            base,
            handle,
            buf,
            wait,
        })
    }

    fn desc(&self, i: usize, send: bool, len: usize) -> *mut Descriptor {
        let n = self.vis.len();
        let slot = self.base + (2 * i + send as usize) * SLOT;
        let data = self.base + 2 * n * SLOT + (2 * i + send as usize) * self.buf;
        let d = slot as *mut Descriptor;
        debug_assert!(self.mem.len() >= 2 * n * (SLOT + self.buf));
        // SAFETY: slot and data lie inside `mem`, registered as `handle`;
        // the descriptor is not posted while it is rewritten.
        unsafe {
            std::ptr::write_bytes(d as *mut u8, 0, SLOT);
            (*d).cs.seg_count = 1;
            (*d).ds[0] = DataSegment {
                data: data as u64,
                handle: self.handle,
                length: len as u32,
            };
        }
        d
    }

    fn post_recv(&self, i: usize) -> Result<()> {
        let d = self.desc(i, false, self.buf);
        self.vis[i]
            .post_recv(d, self.handle)
            .map_err(via("post recv"))
    }

    fn send(&self, i: usize, len: usize) -> Result<()> {
        let d = self.desc(i, true, len);
        self.vis[i]
            .post_send(d, self.handle)
            .map_err(via("post send"))?;
        self.vis[i]
            .send_wait(Some(WAIT))
            .map_err(via("send wait"))?;
        Ok(())
    }

    /// Waits for VI `i`'s receive the measured way, then posts it again.
    fn recv(&self, i: usize) -> Result<()> {
        let vi = match (&self.cq, self.wait) {
            (None, _) => {
                self.vis[i]
                    .recv_wait(Some(WAIT))
                    .map_err(via("recv wait"))?;
                i
            }
            (Some(cq), ScaleWait::Cq) => {
                let e = self.nic.cq_wait(cq, Some(WAIT)).map_err(via("CQ wait"))?;
                self.take(e.vi_id)?
            }
            (Some(cq), _) => {
                let start = Instant::now();
                let e = loop {
                    match self.nic.cq_done(cq) {
                        Ok(e) => break e,
                        Err(ViaError::NotDone) if start.elapsed() < WAIT => std::hint::spin_loop(),
                        Err(e) => return Err(via("CQ done")(e)),
                    }
                };
                self.take(e.vi_id)?
            }
        };
        if vi != i {
            return Err(BenchError::Protocol(format!(
                "round for VI {i} completed on VI {vi}"
            )));
        }
        self.post_recv(i)
    }

    fn take(&self, vi_id: u64) -> Result<usize> {
        let i = *self
            .index
            .get(&vi_id)
            .ok_or_else(|| BenchError::Protocol(format!("CQ names unknown VI {vi_id}")))?;
        self.vis[i].recv_done().map_err(via("recv done"))?;
        Ok(i)
    }
}

fn register(nic: &Nic, ptag: PtagId, base: usize, len: usize) -> Result<u32> {
    nic.register_mem(base as u64, len as u64, ptag, false, false)
        .map_err(via("register"))
}

/// Resident and proportional memory of this process, in KiB.
fn memory_kib() -> (u64, u64) {
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    (field(&status, "VmRSS:"), field(&rollup, "Pss:"))
}

fn address(nic: &Nic, disc: &str) -> Address {
    Address {
        host: nic.query().address.to_vec(),
        discriminator: disc.as_bytes().to_vec(),
    }
}

/// Both sides, round `r` of `rounds`, use VI r mod N.
fn wrap_rounds(args: &ScaleArgs) -> usize {
    if args.wrap {
        // Records of a 16 KiB message take 16 KiB + one line; one more lap
        // than fits makes sure every ring wrapped.
        let ring = openvia_core::config::Config::global().ring_bytes;
        args.vis * (ring / WRAP_SIZE + 2)
    } else {
        0
    }
}

fn serve(args: &ScaleArgs) -> Result<()> {
    let side = Side::open(args.vis, args.wait, WRAP_SIZE.max(8))?;
    for i in 0..args.vis {
        side.post_recv(i)?;
    }
    let disc = args.disc.clone().unwrap_or_default();
    let local = address(&side.nic, &disc);
    // Binds the listener, so the client's first connect finds it.
    match connect_wait(side.nic.shared(), &local, Some(Duration::ZERO)) {
        Err(ViaError::Timeout) => {}
        other => return Err(BenchError::Protocol(format!("listen: {:?}", other.err()))),
    }
    println!("READY");
    for vi in &side.vis {
        let req = connect_wait(side.nic.shared(), &local, Some(WAIT)).map_err(via("accept"))?;
        req.accept(vi).map_err(via("accept"))?;
    }
    let n = args.vis;
    for r in 0..wrap_rounds(args) {
        side.recv(r % n)?;
        side.send(r % n, WRAP_SIZE)?;
    }
    for r in 0..(args.warmup + args.rounds) as usize {
        side.recv(r % n)?;
        side.send(r % n, 8)?;
    }
    let (rss, pss) = memory_kib();
    println!("MEMORY {rss} {pss}");
    // Stay connected until the client has read this (it closes stdin).
    let _ = std::io::stdin().read_line(&mut String::new());
    Ok(())
}

pub fn run(args: &ScaleArgs) -> Result<()> {
    if args.role == ScaleRole::Server {
        if let Some(c) = args.server_cpu {
            pin_current_thread(c)?;
        }
        return serve(args);
    }
    let plan = resolve(
        args.cpu.or(Some(PinRequest::Cpus {
            client: 0,
            server: 1,
        })),
        false,
        &allowed_cpus()?,
    )?;
    let disc = format!("viabench-scale-{}", std::process::id());
    let mut cmd =
        Command::new(std::env::current_exe().map_err(|e| BenchError::io("locating viabench", e))?);
    cmd.args(["scale", "--role", "server", "--disc", &disc])
        .args(["--vis", &args.vis.to_string()])
        .args(["--wait", args.wait.as_str()])
        .args(["--rounds", &args.rounds.to_string()])
        .args(["--warmup", &args.warmup.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if args.wrap {
        cmd.arg("--wrap");
    }
    if let Some(c) = plan.server {
        cmd.args(["--server-cpu", &c.to_string()]);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| BenchError::io("starting the server", e))?;
    let result = client(args, plan.client, &mut child, &disc);
    drop(child.stdin.take());
    let _ = child.wait();
    let (report, server_mem) = result?;
    print_report(args, &plan.describe(), &report, server_mem);
    Ok(())
}

struct Report {
    connect_us: Vec<f64>,
    one_way_ns: Vec<f64>,
    memory: (u64, u64),
}

fn client(
    args: &ScaleArgs,
    cpu: Option<usize>,
    child: &mut std::process::Child,
    disc: &str,
) -> Result<(Report, (u64, u64))> {
    if let Some(c) = cpu {
        pin_current_thread(c)?;
    }
    let mut out = BufReader::new(
        child
            .stdout
            .take()
            .ok_or(BenchError::Server("no server stdout".into()))?,
    );
    let mut line = String::new();
    out.read_line(&mut line)
        .map_err(|e| BenchError::io("server", e))?;
    if line.trim() != "READY" {
        return Err(BenchError::Server(format!("server said {line:?}")));
    }
    let side = Side::open(args.vis, args.wait, WRAP_SIZE.max(8))?;
    let local = address(&side.nic, &format!("{disc}-client"));
    let remote = address(&side.nic, disc);
    let mut connect_us = Vec::with_capacity(args.vis);
    for (i, vi) in side.vis.iter().enumerate() {
        side.post_recv(i)?;
        let t = Instant::now();
        connect_request(vi, &local, &remote, Some(WAIT)).map_err(via("connect"))?;
        connect_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let n = args.vis;
    for r in 0..wrap_rounds(args) {
        side.send(r % n, WRAP_SIZE)?;
        side.recv(r % n)?;
    }
    let batch = args.batch.max(1) as usize;
    let mut one_way_ns = Vec::new();
    let mut r = 0usize;
    let total = (args.warmup + args.rounds) as usize;
    while r < total {
        let t = Instant::now();
        let end = (r + batch).min(total);
        let count = end - r;
        while r < end {
            side.send(r % n, 8)?;
            side.recv(r % n)?;
            r += 1;
        }
        if end > args.warmup as usize {
            one_way_ns.push(t.elapsed().as_nanos() as f64 / count as f64 / 2.0);
        }
    }
    let memory = memory_kib();
    line.clear();
    out.read_line(&mut line)
        .map_err(|e| BenchError::io("server", e))?;
    let server_mem = line
        .strip_prefix("MEMORY ")
        .and_then(|m| {
            let mut it = m.split_whitespace().map(|v| v.parse::<u64>().ok());
            Some((it.next()??, it.next()??))
        })
        .ok_or_else(|| BenchError::Server(format!("server said {line:?}")))?;
    Ok((
        Report {
            connect_us,
            one_way_ns,
            memory,
        },
        server_mem,
    ))
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn print_report(args: &ScaleArgs, pin: &str, r: &Report, server_mem: (u64, u64)) {
    let mut lat = r.one_way_ns.clone();
    lat.sort_by(f64::total_cmp);
    let mut conn = r.connect_us.clone();
    conn.sort_by(f64::total_cmp);
    // Which connects were slowest (a stall at a table doubling shows as
    // indices 63, 127, ...).
    let mut slowest: Vec<(usize, f64)> = r.connect_us.iter().copied().enumerate().collect();
    slowest.sort_by(|a, b| b.1.total_cmp(&a.1));
    slowest.truncate(5);
    let slowest_text: Vec<String> = slowest
        .iter()
        .map(|(i, us)| format!("#{i}:{us:.0}"))
        .collect();
    let json = serde_json::json!({
        "transport": "shm", "test": "scale", "vis": args.vis, "wait": args.wait.as_str(),
        "wrapped": args.wrap, "rounds": args.rounds, "batch": args.batch, "pin": pin,
        "spin": true,
        "one_way_ns_median": quantile(&lat, 0.5),
        "one_way_ns_min": quantile(&lat, 0.0),
        "one_way_ns_p90": quantile(&lat, 0.9),
        "connect_us_median": quantile(&conn, 0.5),
        "connect_us_p99": quantile(&conn, 0.99),
        "connect_us_max": quantile(&conn, 1.0),
        "connect_us_total": conn.iter().sum::<f64>(),
        "connect_slowest": slowest,
        "client_rss_kib": r.memory.0, "client_pss_kib": r.memory.1,
        "server_rss_kib": server_mem.0, "server_pss_kib": server_mem.1,
    });
    if args.json {
        println!("{json}");
        return;
    }
    println!(
        "# shm, {} VIs, round-robin 8-byte ping-pong, wait={}, wrapped={}, spin, pin={pin}",
        args.vis,
        args.wait.as_str(),
        args.wrap
    );
    println!(
        "one-way ns: median {:.0}  min {:.0}  p90 {:.0}   ({} batches of {})",
        quantile(&lat, 0.5),
        quantile(&lat, 0.0),
        quantile(&lat, 0.9),
        lat.len(),
        args.batch
    );
    println!(
        "connect µs: median {:.0}  p99 {:.0}  max {:.0}  total {:.0}  slowest {}",
        quantile(&conn, 0.5),
        quantile(&conn, 0.99),
        quantile(&conn, 1.0),
        conn.iter().sum::<f64>(),
        slowest_text.join(" ")
    );
    println!(
        "memory KiB: client RSS {} PSS {}, server RSS {} PSS {}",
        r.memory.0, r.memory.1, server_mem.0, server_mem.1
    );
}
