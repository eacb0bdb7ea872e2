//! `viabench overhead`: what posting costs the program — VipPostSend plus
//! VipSendDone per descriptor, the figure seed 001 measured (1.5 µs at user
//! level against 29 µs through a system call).
//!
//! Two NICs in this process, connected over the shared-memory device; a
//! receiver thread pinned to the other CPU keeps receives posted and drains
//! them. The sender thread times batches of `post_send` immediately
//! followed by `send_done` of 8-byte messages (sends complete at post, as
//! they do on the reliable-delivery level), so the figure is the provider's
//! own work per descriptor, not the peer's speed. Median and p99 over
//! batches, after a warm-up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openvia_core::descriptor::{DataSegment, Descriptor};
use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi, ViAttributes};
use openvia_core::{connect_request, connect_wait, Address};

use crate::cli::OverheadArgs;
use crate::error::{BenchError, Result};
use crate::pinning::pin_current_thread;

const BATCH: usize = 64;
const SLOT: usize = 128;

struct Mem {
    _buf: Vec<u8>,
    base: usize,
    handle: u32,
}

fn mem(nic: &Nic, ptag: PtagId, len: usize) -> Result<Mem> {
    let buf = vec![0u8; len + 64];
    let base = (buf.as_ptr() as usize + 63) & !63;
    let handle = nic
        .register_mem(base as u64, len as u64, ptag, false, false)
        .map_err(|e| BenchError::Protocol(format!("register: {e}")))?;
    Ok(Mem {
        _buf: buf,
        base,
        handle,
    })
}

fn desc(m: &Mem, i: usize, data: usize, len: u32) -> *mut Descriptor {
    let d = (m.base + i * SLOT) as *mut Descriptor;
    // SAFETY: slot `i` lies inside the registered region `m`.
    unsafe {
        std::ptr::write_bytes(d as *mut u8, 0, 64);
        (*d).cs.seg_count = 1;
        (*d).ds[0] = DataSegment {
            data: data as u64,
            handle: m.handle,
            length: len,
        };
    }
    d
}

/// Two connected NICs: (sender NIC, receiver NIC, sender VI, receiver VI,
/// sender ptag, receiver ptag).
type Pair = (Nic, Nic, Arc<Vi>, Arc<Vi>, PtagId, PtagId);

fn pair() -> Result<Pair> {
    let err = |e: openvia_core::ViaError| BenchError::Protocol(e.to_string());
    let (na, nb) = (Nic::open(None).map_err(err)?, Nic::open(None).map_err(err)?);
    let (pa, pb) = (
        na.create_ptag().map_err(err)?,
        nb.create_ptag().map_err(err)?,
    );
    let attrs = |ptag| ViAttributes {
        reliability: reliability::RELIABLE_DELIVERY,
        max_transfer: 1 << 20,
        ptag,
        rdma_write: false,
        rdma_read: false,
    };
    let a = na.create_vi(attrs(pa), None, None).map_err(err)?;
    let b = nb.create_vi(attrs(pb), None, None).map_err(err)?;
    let host = na.query().address.to_vec();
    let disc = format!("viabench-overhead-{}", std::process::id());
    let server = Address {
        host: host.clone(),
        discriminator: disc.clone().into_bytes(),
    };
    let client = Address {
        host,
        discriminator: format!("{disc}-c").into_bytes(),
    };
    let (nbs, b2, s2) = (nb.shared().clone(), b.clone(), server.clone());
    let t = std::thread::spawn(move || {
        connect_wait(&nbs, &s2, Some(Duration::from_secs(10))).and_then(|r| r.accept(&b2))
    });
    connect_request(&a, &client, &server, Some(Duration::from_secs(10))).map_err(err)?;
    t.join()
        .map_err(|_| BenchError::Protocol("accept thread".into()))?
        .map_err(err)?;
    Ok((na, nb, a, b, pa, pb))
}

pub fn run(args: &OverheadArgs) -> Result<()> {
    let (na, nb, a, b, pa, pb) = pair()?;
    na.set_spin_ns(u64::MAX);
    nb.set_spin_ns(u64::MAX);
    // The sender leaving at the end breaks the connection on purpose.
    nb.set_error_handler(Some(Arc::new(|_: &openvia_core::nic::AsyncError| {})))
        .map_err(|e| BenchError::Protocol(e.to_string()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let (stop2, b2, nb2) = (stop.clone(), b.clone(), nb.clone());
    let cpus = (args.cpu_sender, args.cpu_receiver);
    let receiver = std::thread::spawn(move || -> Result<u64> {
        if let Some(c) = cpus.1 {
            pin_current_thread(c)?;
        }
        let m = mem(&nb2, pb, 512 * SLOT + 512 * 64)?;
        let data = m.base + 512 * SLOT;
        for i in 0..512 {
            b2.post_recv(desc(&m, i, data + i * 64, 64), m.handle)
                .map_err(|e| BenchError::Protocol(e.to_string()))?;
        }
        let mut got = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            if let Ok(d) = b2.recv_done() {
                got += 1;
                b2.post_recv(d.0, m.handle)
                    .map_err(|e| BenchError::Protocol(e.to_string()))?;
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(got)
    });
    if let Some(c) = cpus.0 {
        pin_current_thread(c)?;
    }
    let m = mem(&na, pa, BATCH * SLOT + 64)?;
    let data = m.base + BATCH * SLOT;
    let descs: Vec<*mut Descriptor> = (0..BATCH).map(|i| desc(&m, i, data, 8)).collect();
    let mut samples = Vec::with_capacity(args.batches as usize);
    let total = args.batches + args.warmup;
    for round in 0..total {
        let t0 = Instant::now();
        for &d in &descs {
            a.post_send(d, m.handle)
                .map_err(|e| BenchError::Protocol(format!("post: {e}")))?;
            // Completes at once unless the ring is full (receiver behind).
            while a.send_done().is_err() {
                std::hint::spin_loop();
            }
        }
        let ns = t0.elapsed().as_nanos() as f64 / BATCH as f64;
        if round >= args.warmup {
            samples.push(ns);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let received = receiver
        .join()
        .map_err(|_| BenchError::Protocol("receiver thread".into()))??;
    samples.sort_by(|x, y| x.total_cmp(y));
    let median = samples[samples.len() / 2];
    let p99 = samples[(samples.len() * 99 / 100).min(samples.len() - 1)];
    let pin = match cpus {
        (Some(s), Some(r)) => format!("sender:{s},receiver:{r}"),
        _ => "none".to_string(),
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "transport": "shm", "test": "post_send+send_done", "size": 8,
                "batches": samples.len(), "batch": BATCH,
                "median_ns": median, "p99_ns": p99, "pin": pin, "received": received,
            })
        );
    } else {
        println!("# VipPostSend + VipSendDone per descriptor, 8-byte sends, batches of {BATCH}; pin={pin}");
        println!("median_ns  p99_ns  batches");
        println!("{median:9.1}  {p99:6.1}  {}", samples.len());
    }
    drop((na, nb));
    Ok(())
}
