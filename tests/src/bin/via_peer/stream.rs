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
use openvia_tests::arena::{self, set_desc, Arena};
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
        set_desc(mem.desc(s.window + r), 0, &[], 0);
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
        set_desc(
            mem.desc(i),
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
            let (rst, _, _) = arena::completion(d.0);
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
    let (st, _, imm) = arena::completion(d.0);
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
        set_desc(
            mem.desc(i),
            0,
            &[(mem.addr(off), mem.handle, (slot - 8) as u32)],
            0,
        );
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
    let mut got = 0u64;
    let started = Instant::now();
    let pause = opts.u64_or("pause", 0);
    while s.endless() || got < s.count {
        if pause > 0 && got == pause {
            // Stop taking completions until the peer is gone: what it
            // sent before must still land in the receives posted now.
            println!("PAUSED");
            ep.errors.first_for(vi.id(), WAIT);
        }
        let d = vi
            .recv_wait(Some(WAIT))
            .unwrap_or_else(|e| panic!("receive wait after {got} messages: {e}"));
        let i = (got % w) as usize;
        assert_eq!(d.0, mem.desc(i), "receive completions out of order");
        let (st, len, imm) = arena::completion(d.0);
        if st & status::ERROR_MASK != 0 {
            assert!(s.expect_break, "message {got}: status {st:#x}");
            survive_break(&ep, &vi, &mem, st, got, posted, w, started);
            return;
        }
        let n = sizes.next().unwrap_or(0);
        assert_eq!(st & status::OP_MASK, status::OP_RECEIVE);
        assert_eq!(len as u64, n, "message {got}: length");
        assert_eq!(imm as u64, got & 0xffff_ffff, "message {got}: out of order");
        let off = i * slot + (got % 5) as usize;
        // SAFETY: the receive completed; slot `i` is not posted.
        let data = unsafe { mem.bytes(off, n as usize) };
        if let Some(at) = first_mismatch(data, message_seed(s.seed, got)) {
            panic!("message {got} ({n} bytes): byte {at} differs");
        }
        got += 1;
        s.progress(got);
        let more = if late > 0 { 2 } else { 1 };
        for _ in 0..more {
            if room(posted, got) {
                post(&mut posted);
            }
        }
    }
    assert!(
        !s.expect_break,
        "all {got} messages arrived but the peer should have died"
    );
    let notice = mem.desc(s.window);
    set_desc(notice, control::IMMEDIATE, &[], s.count as u32);
    vi.post_send(notice, mem.handle).expect("post notice");
    assert_clean(send_done(&vi, notice), "notice");
    println!("RESULT received={got} ms={}", started.elapsed().as_millis());
    await_peer_close(&vi, &mem, s.window + 1);
}

/// The peer died: every receive still posted must come back flushed (the
/// first may carry a transport error if its data could not be fetched).
#[allow(clippy::too_many_arguments)]
fn survive_break(
    ep: &Endpoint,
    vi: &openvia_core::vi::Vi,
    mem: &Arena,
    first: u32,
    got: u64,
    posted: u64,
    w: u64,
    started: Instant,
) {
    assert_ne!(
        first & (status::DESC_FLUSHED_ERROR | status::TRANSPORT_ERROR),
        0,
        "first failed receive: {first:#x}"
    );
    let mut flushed = 1;
    for k in got + 1..posted {
        let d = vi
            .recv_wait(Some(WAIT))
            .unwrap_or_else(|e| panic!("receive wait for flushed receive {k}: {e}"));
        assert_eq!(d.0, mem.desc((k % w) as usize));
        let (st, _, _) = arena::completion(d.0);
        assert_ne!(
            st & status::DESC_FLUSHED_ERROR,
            0,
            "receive {k}: {st:#x}, after receive {got} failed with {first:#x}"
        );
        flushed += 1;
    }
    report_break(
        ep,
        vi,
        &[
            ("received", got.to_string()),
            ("first_error", format!("{first:#x}")),
            ("flushed_recvs", flushed.to_string()),
            ("ms", started.elapsed().as_millis().to_string()),
        ],
    );
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
