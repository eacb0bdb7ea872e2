//! A one-way stream of verified messages, the workhorse of several tests:
//! ring-wrap stress (many small messages of random sizes), back-pressure
//! (a receiver that posts its receives late), two servers at once, and
//! the crash tests, where one side is SIGKILLed mid-stream and the other
//! must see its VI break without any Wait hanging.
//!
//! Message `i` has a size drawn from a seeded generator (every
//! `large_every`-th one is `large` bytes, to take the CMA or bounce path)
//! and the pattern of `message_seed(seed, i)`; its immediate data is `i`.
//! The receiver regenerates both, so loss, corruption and reordering all
//! fail the check.
//!
//! Options: side, disc, rel, count (0: until broken), window, min, max,
//! large, large_every, seed, report (print PROGRESS every so many),
//! late (receiver: receives posted at first; then two more per arrival),
//! expect_break (survive the peer's death and report it), extra (sender:
//! receives posted that only the break completes), pause (receiver: after
//! so many messages, wait for the connection to break before going on).

use std::time::Instant;

use openvia_core::descriptor::{control, status};
use openvia_core::vi::ViState;
use openvia_tests::arena::{self, Arena};
use openvia_tests::pattern::{fill, first_mismatch, message_seed, Rng};

use crate::endpoint::{assert_clean, await_peer_close, send_done, Endpoint, Opts, WAIT};

struct Stream {
    count: u64,
    window: usize,
    min: u64,
    max: u64,
    large: u64,
    large_every: u64,
    seed: u64,
    report: u64,
    expect_break: bool,
}

impl Stream {
    fn new(o: &Opts) -> Stream {
        let s = Stream {
            count: o.u64_or("count", 1000),
            window: o.usize_or("window", 16),
            min: o.u64_or("min", 0),
            max: o.u64_or("max", 2048),
            large: o.u64_or("large", 0),
            large_every: o.u64_or("large_every", 0),
            seed: o.u64_or("seed", 1),
            report: o.u64_or("report", 0),
            expect_break: o.flag("expect_break"),
        };
        assert!(s.window > 0 && s.min <= s.max);
        s
    }

    fn endless(&self) -> bool {
        self.count == 0
    }

    /// Bytes of one slot: the largest message plus room to misalign it.
    fn slot_bytes(&self) -> usize {
        (self.max.max(self.large) as usize + 8 + 63) & !63
    }

    fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        let mut rng = Rng::new(self.seed);
        (1u64..).map(move |i| {
            let n = rng.range(self.min, self.max);
            if self.large_every > 0 && i % self.large_every == 0 {
                self.large
            } else {
                n
            }
        })
    }

    fn progress(&self, done: u64) {
        if self.report > 0 && done % self.report == 0 {
            println!("PROGRESS {done}");
        }
    }
}

pub fn sender(opts: &Opts) {
    let s = Stream::new(opts);
    let extra = opts.usize_or("extra", 0);
    let ep = Endpoint::open();
    let vi = ep.vi(opts.reliability());
    let slot = s.slot_bytes();
    // Slots: the send window, then the receive for the receiver's "all
    // verified" notice, then the extra receives.
    let mem = Arena::new(
        &ep.nic,
        ep.ptag,
        s.window + 1 + extra,
        s.window * slot,
        false,
        false,
    );
    for r in 0..=extra {
        mem.set_desc(s.window + r, 0, &[], 0);
        vi.post_recv(mem.desc(s.window + r), mem.handle)
            .expect("post recv");
    }
    ep.establish(opts, &vi);

    let mut sizes = s.sizes();
    let (mut posted, mut completed) = (0u64, 0u64);
    let mut first_error: Option<(u64, u32)> = None;
    let reap = |completed: &mut u64, first_error: &mut Option<(u64, u32)>| {
        let d = mem.desc((*completed % s.window as u64) as usize);
        let st = send_done(&vi, d);
        match (st & status::ERROR_MASK != 0, *first_error) {
            (true, None) => *first_error = Some((*completed, st)),
            (false, Some((at, e))) => panic!(
                "send {} completed cleanly after send {at} failed with {e:#x}",
                *completed
            ),
            _ => {}
        }
        *completed += 1;
    };
    while (s.endless() || posted < s.count) && first_error.is_none() {
        if posted - completed == s.window as u64 {
            reap(&mut completed, &mut first_error);
            continue;
        }
        let n = sizes.next().unwrap_or(0) as usize;
        let i = posted as usize % s.window;
        let off = i * slot + (posted % 8) as usize;
        // SAFETY: slot `i` is not posted (the window was reaped above).
        fill(unsafe { mem.bytes(off, n) }, message_seed(s.seed, posted));
        mem.set_desc(
            i,
            control::IMMEDIATE,
            &[(mem.addr(off), mem.handle, n as u32)],
            posted as u32,
        );
        vi.post_send(mem.desc(i), mem.handle).expect("post send");
        posted += 1;
        s.progress(posted);
    }
    while completed < posted {
        reap(&mut completed, &mut first_error);
    }

    if s.expect_break {
        let (at, st) = first_error.expect("the stream ended but the connection never broke");
        // Receives complete in order: the notice, then the extra ones.
        let mut flushed = 0;
        for r in 0..=extra {
            let d = vi
                .recv_wait(Some(WAIT))
                .expect("receive wait after the break");
            assert_eq!(d.0, mem.desc(s.window + r));
            let (rst, _, _) = arena::completion(d);
            assert_ne!(rst & status::DESC_FLUSHED_ERROR, 0, "receive {r}: {rst:#x}");
            flushed += 1;
        }
        report_break(
            &ep,
            &vi,
            &[
                ("sent_ok", at.to_string()),
                ("first_error", format!("{st:#x}")),
                ("flushed_sends", (posted - at).to_string()),
                ("flushed_recvs", flushed.to_string()),
            ],
        );
        return;
    }
    if let Some((at, st)) = first_error {
        panic!("send {at} failed with status {st:#x}");
    }
    let d = vi
        .recv_wait(Some(WAIT))
        .expect("wait for the receiver's notice");
    let (st, _, imm) = arena::completion(d);
    assert_clean(st, "notice");
    assert_eq!(
        imm as u64, s.count,
        "the receiver verified a different count"
    );
    println!("RESULT sent={posted}");
    vi.disconnect().expect("disconnect");
}

pub fn receiver(opts: &Opts) {
    let s = Stream::new(opts);
    let late = opts.u64_or("late", 0);
    let ep = Endpoint::open();
    let vi = ep.vi(opts.reliability());
    let slot = s.slot_bytes();
    let w = s.window as u64;
    // Slots: the receive window, the notice we send, the closing receive.
    let mem = Arena::new(
        &ep.nic,
        ep.ptag,
        s.window + 2,
        s.window * slot,
        false,
        false,
    );
    let mut posted = 0u64;
    let post = |posted: &mut u64| {
        let i = (*posted % w) as usize;
        let off = i * slot + (*posted % 5) as usize;
        mem.set_desc(i, 0, &[(mem.addr(off), mem.handle, (slot - 8) as u32)], 0);
        vi.post_recv(mem.desc(i), mem.handle).expect("post recv");
        *posted += 1;
    };
    let room = |posted: u64, got: u64| posted < got + w && (s.endless() || posted < s.count);
    let initial = if late > 0 { late.min(w) } else { w };
    while posted < initial && room(posted, 0) {
        post(&mut posted);
    }
    ep.establish(opts, &vi);

    let mut sizes = s.sizes();
    let started = Instant::now();
    let pause = opts.u64_or("pause", 0);
    // After the first failed receive (the peer died) no receive is posted
    // any more, and every one still posted must come back.
    let mut broken: Option<(u64, u32)> = None;
    let mut after = BreakCounts::default();
    let mut k = 0u64;
    while (s.endless() || k < s.count) && (broken.is_none() || k < posted) {
        if broken.is_none() && pause > 0 && k == pause {
            // Stop taking completions until the peer is gone: what it
            // sent before must still land in the receives posted now.
            println!("PAUSED");
            ep.errors.first_for(vi.id(), WAIT);
        }
        let d = vi
            .recv_wait(Some(WAIT))
            .unwrap_or_else(|e| panic!("receive wait for message {k}: {e}"));
        let i = (k % w) as usize;
        assert_eq!(d.0, mem.desc(i), "receive completions out of order");
        let (st, len, imm) = arena::completion(d);
        let n = sizes.next().unwrap_or(0);
        if st & status::ERROR_MASK != 0 {
            assert!(s.expect_break, "message {k}: status {st:#x}");
            broken.get_or_insert((k, st));
            after.count_error(k, st);
            k += 1;
            continue;
        }
        assert_eq!(st & status::OP_MASK, status::OP_RECEIVE);
        assert_eq!(len as u64, n, "message {k}: length");
        assert_eq!(imm as u64, k & 0xffff_ffff, "message {k}: out of order");
        let off = i * slot + (k % 5) as usize;
        // SAFETY: the receive completed; slot `i` is not posted.
        let data = unsafe { mem.bytes(off, n as usize) };
        if let Some(at) = first_mismatch(data, message_seed(s.seed, k)) {
            panic!("message {k} ({n} bytes): byte {at} differs");
        }
        k += 1;
        if broken.is_some() {
            // Delivered although an earlier message of this reliable
            // stream was lost: a hole.
            after.holes += 1;
            continue;
        }
        s.progress(k);
        let more = if late > 0 { 2 } else { 1 };
        for _ in 0..more {
            if room(posted, k) {
                post(&mut posted);
            }
        }
    }
    if s.expect_break {
        let (at, first) = broken.expect("all messages arrived but the peer should have died");
        report_break(
            &ep,
            &vi,
            &[
                ("received", at.to_string()),
                ("first_error", format!("{first:#x}")),
                ("flushed_recvs", after.flushed.to_string()),
                ("transport_errors", after.transport.to_string()),
                ("holes", after.holes.to_string()),
                ("ms", started.elapsed().as_millis().to_string()),
            ],
        );
        return;
    }
    let notice = mem.desc(s.window);
    mem.set_desc(s.window, control::IMMEDIATE, &[], s.count as u32);
    vi.post_send(notice, mem.handle).expect("post notice");
    assert_clean(send_done(&vi, notice), "notice");
    println!("RESULT received={k} ms={}", started.elapsed().as_millis());
    await_peer_close(&vi, &mem, s.window + 1);
}

/// What the receives still posted at a break came back with.
#[derive(Default)]
struct BreakCounts {
    flushed: u64,
    /// Data that could not be fetched from the dead peer.
    transport: u64,
    /// Clean receives after a failed one.
    holes: u64,
}

impl BreakCounts {
    fn count_error(&mut self, k: u64, st: u32) {
        if st & status::DESC_FLUSHED_ERROR != 0 {
            self.flushed += 1;
        } else if st & status::TRANSPORT_ERROR != 0 {
            self.transport += 1;
        } else {
            panic!("receive {k}: unexpected error status {st:#x}");
        }
    }
}

/// Prints what the survivor of a broken connection saw: the VI's state and
/// the asynchronous error the handler got.
fn report_break(ep: &Endpoint, vi: &openvia_core::vi::Vi, extra: &[(&str, String)]) {
    let state = match vi.state() {
        ViState::Error => "Error",
        ViState::Idle => "Idle",
        ViState::Connected => "Connected",
        ViState::ConnectPending => "ConnectPending",
    };
    let code = ep
        .errors
        .first_for(vi.id(), std::time::Duration::from_secs(5))
        .map_or("none".to_string(), |c| format!("{c:?}"));
    let mut line = format!("RESULT broken=1 state={state} code={code}");
    for (k, v) in extra {
        line.push_str(&format!(" {k}={v}"));
    }
    println!("{line}");
}
