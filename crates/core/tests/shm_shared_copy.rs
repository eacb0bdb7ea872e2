//! The shared copy of the shared-memory device, forced by its settings
//! (every message from 64 KiB on takes the CMA path, in 16 KiB pieces):
//! both processes copy pieces of one message at once, every byte arrives
//! where it was posted, a ring the receiver finds slow makes the sender
//! use CMA below the threshold too, and a sender killed in the middle of a
//! transfer leaves its receiver with an error, not a hang.
//!
//! Its own test binary: the settings must be in place before the first NIC
//! of the process reads them.

mod scenarios;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openvia_core::descriptor::{status, Descriptor};
use openvia_core::devices::shm::shared_copy;
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi};
use openvia_core::{connect_request, connect_wait, Address, ViaError};
use scenarios::{attrs, set_desc, Arena, SHM};

/// The tests read the process-wide copy counters: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn shared_copy_settings() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::env::set_var("OPENVIA_CMA_MIN", "64K");
        std::env::set_var("OPENVIA_CMA_PIECE", "16K");
        // Both ends keep polling while the other copies (a waiter that
        // slept could not help).
        std::env::set_var("OPENVIA_SPIN_NS", "10000000000");
        // Every message through the ring counts as slow, so that the
        // sender soon sends the ones below OPENVIA_CMA_MIN by CMA too.
        std::env::set_var("OPENVIA_RING_SLOW_GBPS", "1000000");
    });
}

fn pattern(k: usize, i: usize) -> u8 {
    (i as u8).wrapping_mul(29).wrapping_add(k as u8) ^ (i >> 12) as u8
}

#[test]
fn every_size_through_the_cma_path() {
    let _one = serial();
    shared_copy_settings();
    scenarios::roundtrip_sizes(SHM, reliability::RELIABLE_DELIVERY, "t-share-sizes");
    scenarios::rdma_write_with_immediate_and_read(SHM, "t-share-rdma");
}

/// Sender and receiver on two threads, in rounds: the sender fills and
/// posts eight messages of 64 KiB to 6 MiB, then waits for them (polling,
/// so it can help) while the receiver takes them; every byte is checked
/// and the sender pushed pieces too. Whether the sender gets a piece in
/// a round depends on its thread running while the receiver copies: on
/// two CPUs shared with other work (CI's own builds, a benchmark) four
/// rounds once went by without it, so rounds go on (up to MAX_ROUNDS)
/// until both sides have copied.
#[test]
fn both_sides_copy_and_every_byte_arrives() {
    let _one = serial();
    shared_copy_settings();
    let p = Arc::new(scenarios::pair(
        SHM,
        reliability::RELIABLE_DELIVERY,
        "t-share-both",
        64 << 20,
    ));
    const WINDOW: usize = 8;
    const ROUNDS: usize = 4;
    const MAX_ROUNDS: usize = 40;
    const SLOT: usize = 7 << 20;
    let size = |k: usize| [65_536, 100_003, 1 << 20, 6 << 20][k % 4];
    let pushed_before = shared_copy::stats().pushed;
    // The receiver starts taking a round's messages once all are posted
    // and the sender is about to wait for them.
    let posted = Arc::new(std::sync::Barrier::new(2));
    // After each round the receiver says whether another follows.
    let round_done = Arc::new(std::sync::Barrier::new(2));
    let go_on = Arc::new(AtomicBool::new(true));
    let sender = {
        let (p, posted) = (p.clone(), posted.clone());
        let (round_done, go_on) = (round_done.clone(), go_on.clone());
        std::thread::spawn(move || {
            for round in 0..MAX_ROUNDS {
                for slot in 0..WINDOW {
                    let k = round * WINDOW + slot;
                    let src = p.ma.data(4096 + slot * SLOT);
                    for i in 0..size(k) {
                        // SAFETY: inside the arena.
                        unsafe { *src.add(i) = pattern(k, i) };
                    }
                }
                for slot in 0..WINDOW {
                    let k = round * WINDOW + slot;
                    let src = p.ma.data(4096 + slot * SLOT);
                    let sd = p.ma.desc(slot);
                    set_desc(sd, 0, &[(src as u64, p.ma.handle, size(k) as u32)], 0);
                    p.a.post_send(sd, p.ma.handle).unwrap();
                }
                posted.wait();
                for _ in 0..WINDOW {
                    let d = p.a.send_wait(Some(Duration::from_secs(60))).unwrap();
                    // SAFETY: a completed descriptor of ours.
                    assert_eq!(unsafe { (*d.0).cs.status } & status::ERROR_MASK, 0);
                }
                round_done.wait();
                if !go_on.load(Ordering::Acquire) {
                    break;
                }
            }
        })
    };
    for round in 0..MAX_ROUNDS {
        for slot in 0..WINDOW {
            let rd = p.mb.desc(slot);
            let dst = p.mb.data(4096 + slot * SLOT);
            // Three segments, the middle one odd-sized.
            let a = 12_345u32;
            let b = 1_000_001u32;
            let c = SLOT as u32 - a - b - 64;
            set_desc(
                rd,
                0,
                &[
                    (dst as u64, p.mb.handle, a),
                    (dst as u64 + a as u64, p.mb.handle, b),
                    (dst as u64 + (a + b) as u64, p.mb.handle, c),
                ],
                0,
            );
            p.b.post_recv(rd, p.mb.handle).unwrap();
        }
        posted.wait();
        for slot in 0..WINDOW {
            let got = p.b.recv_wait(Some(Duration::from_secs(60))).unwrap();
            let rd: *mut Descriptor = got.0;
            assert_eq!(rd, p.mb.desc(slot));
            let k = round * WINDOW + slot;
            // SAFETY: a completed descriptor of ours.
            let (st, len) = unsafe { ((*rd).cs.status, (*rd).cs.length) };
            assert_eq!(st & status::ERROR_MASK, 0, "message {k}: status {st:#x}");
            assert_eq!(len as usize, size(k));
        }
        for slot in 0..WINDOW {
            let k = round * WINDOW + slot;
            let dst = p.mb.data(4096 + slot * SLOT);
            for i in 0..size(k) {
                // SAFETY: inside the arena.
                let b = unsafe { *dst.add(i) };
                assert_eq!(
                    b,
                    pattern(k, i),
                    "message {k} ({} bytes), byte {i}",
                    size(k)
                );
            }
        }
        let now = shared_copy::stats();
        let shared = now.pushed > pushed_before && now.pulled > 0;
        let more = round + 1 < ROUNDS || (!shared && round + 1 < MAX_ROUNDS);
        go_on.store(more, Ordering::Release);
        round_done.wait();
        if !more {
            break;
        }
    }
    sender.join().unwrap();
    let after = shared_copy::stats();
    assert!(after.pulled > 0, "the receiver pulled no piece");
    assert!(
        after.pushed > pushed_before,
        "the sender never pushed a piece: the copy was not shared"
    );
}

/// Messages between the inline size and OPENVIA_CMA_MIN stream through
/// the ring until the receiver has timed two of them as slow; then all but
/// the probes go by CMA, and every byte still arrives.
#[test]
fn a_slow_ring_sends_by_cma() {
    let _one = serial();
    shared_copy_settings();
    let p = scenarios::pair(SHM, reliability::RELIABLE_DELIVERY, "t-share-slow", 1 << 20);
    let diverted_before = shared_copy::stats().diverted;
    const N: usize = 160;
    let n = 40_000usize;
    for k in 0..N {
        let src = p.ma.data(4096);
        for i in 0..n {
            // SAFETY: inside the arena.
            unsafe { *src.add(i) = pattern(k, i) };
        }
        let rd = p.mb.desc(1);
        let dst = p.mb.data(4096);
        set_desc(rd, 0, &[(dst as u64, p.mb.handle, n as u32)], 0);
        p.b.post_recv(rd, p.mb.handle).unwrap();
        let sd = p.ma.desc(1);
        set_desc(sd, 0, &[(src as u64, p.ma.handle, n as u32)], 0);
        p.a.post_send(sd, p.ma.handle).unwrap();
        p.b.recv_wait(Some(Duration::from_secs(10))).unwrap();
        // SAFETY: a completed descriptor of ours.
        assert_eq!(unsafe { (*rd).cs.status } & status::ERROR_MASK, 0);
        for i in 0..n {
            // SAFETY: inside the arena.
            assert_eq!(
                unsafe { *dst.add(i) },
                pattern(k, i),
                "message {k}, byte {i}"
            );
        }
        p.a.send_wait(Some(Duration::from_secs(10))).unwrap();
    }
    let diverted = shared_copy::stats().diverted - diverted_before;
    assert!(
        diverted >= N as u64 / 2,
        "only {diverted} of {N} went by CMA"
    );
}

/// The role of the child process in the tests below: the discriminator
/// to connect to.
const CHILD_ROLE: &str = "SHARED_COPY_TEST_CHILD";
/// How many messages the child sends (all posted at once).
const CHILD_MESSAGES: &str = "SHARED_COPY_TEST_MESSAGES";
const BIG: usize = 16 << 20;

/// A NIC with one reliable VI and room for `count` `BIG` messages.
fn endpoint(count: usize) -> (Nic, Arc<Vi>, Arena) {
    shared_copy_settings();
    let nic = Nic::open(Some(SHM)).unwrap();
    let ptag = nic.create_ptag().unwrap();
    let vi = nic
        .create_vi(attrs(ptag, reliability::RELIABLE_DELIVERY), None, None)
        .unwrap();
    let mem = Arena::new(&nic, ptag, count * BIG + 8192);
    (nic, vi, mem)
}

fn address(nic: &Nic, disc: &str) -> Address {
    Address {
        host: nic.query().address.to_vec(),
        discriminator: disc.as_bytes().to_vec(),
    }
}

/// Message `k`'s buffer in an arena of `endpoint`.
fn message(mem: &Arena, k: usize) -> *mut u8 {
    mem.data(4096 + k * BIG)
}

/// Run only as the child of the tests below: connects, posts its `BIG`
/// messages (message k filled with `pattern(k, _)`) at once, and spins in
/// its Wait until it is killed.
#[test]
#[ignore]
fn child_sender() {
    let Ok(disc) = std::env::var(CHILD_ROLE) else {
        return;
    };
    let count: usize = std::env::var(CHILD_MESSAGES).unwrap().parse().unwrap();
    let (nic, vi, mem) = endpoint(count);
    let server = address(&nic, &disc);
    let client = address(&nic, &format!("{disc}-c"));
    connect_request(&vi, &client, &server, Some(Duration::from_secs(10))).unwrap();
    for k in 0..count {
        let src = message(&mem, k);
        for i in 0..BIG {
            // SAFETY: inside the arena.
            unsafe { *src.add(i) = pattern(k, i) };
        }
        let sd = mem.desc(k);
        set_desc(sd, 0, &[(src as u64, mem.handle, BIG as u32)], 0);
        vi.post_send(sd, mem.handle).unwrap();
    }
    loop {
        let _ = vi.send_wait(Some(Duration::from_secs(60)));
    }
}

/// A receiver of `count` `BIG` messages, connected to a child process
/// that sends them.
struct ChildPair {
    _nic: Nic,
    vi: Arc<Vi>,
    mem: Arena,
    child: std::process::Child,
}

impl ChildPair {
    fn start(name: &str, count: usize) -> Self {
        let disc = format!("t-share-{name}-{}", std::process::id());
        let (nic, vi, mem) = endpoint(count);
        for k in 0..count {
            let rd = mem.desc(k);
            set_desc(
                rd,
                0,
                &[(message(&mem, k) as u64, mem.handle, BIG as u32)],
                0,
            );
            vi.post_recv(rd, mem.handle).unwrap();
        }
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_sender", "--ignored", "--nocapture"])
            .env(CHILD_ROLE, &disc)
            .env(CHILD_MESSAGES, count.to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let server = address(&nic, &disc);
        let req = connect_wait(nic.shared(), &server, Some(Duration::from_secs(30))).unwrap();
        req.accept(&vi).unwrap();
        ChildPair {
            _nic: nic,
            vi,
            mem,
            child,
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for ChildPair {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `act` on another thread once the receiver has pulled a piece
/// after `pulled_before` (or once the test is done with the receive).
fn on_first_piece(pulled_before: u64, act: impl FnOnce() + Send + 'static) -> impl FnOnce() {
    let stop = Arc::new(AtomicBool::new(false));
    let t = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) && shared_copy::stats().pulled == pulled_before {
                std::hint::spin_loop();
            }
            act();
        })
    };
    move || {
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }
}

/// The sender is killed while both sides copy a 16 MiB message: the
/// receive completes (with an error, or whole if the kill came late)
/// within seconds; nothing hangs or crashes.
#[test]
fn sender_killed_mid_transfer() {
    let _one = serial();
    // Another test's piece may fire the kill earlier: any moment must end
    // cleanly.
    let pulled_before = shared_copy::stats().pulled;
    let p = ChildPair::start("kill", 1);
    let pid = p.pid();
    // SAFETY: signalling our own child.
    let done = on_first_piece(pulled_before, move || unsafe {
        libc::kill(pid, libc::SIGKILL);
    });
    let start = Instant::now();
    let got = p.vi.recv_wait(Some(Duration::from_secs(20)));
    done();
    assert!(start.elapsed() < Duration::from_secs(10));
    match got {
        Ok(d) => {
            // SAFETY: a completed descriptor of ours.
            let (st, len) = unsafe { ((*d.0).cs.status, (*d.0).cs.length) };
            assert!(
                st & status::ERROR_MASK != 0 || len as usize == BIG,
                "status {st:#x}, {len} bytes"
            );
        }
        Err(e) => assert!(!matches!(e, ViaError::Timeout), "the receive hung"),
    }
}

/// The sender is stopped (SIGSTOP) for 200 ms in the middle of four
/// 16 MiB messages: the receiver goes on copying alone meanwhile, and
/// once the sender runs again every byte of every message is in place.
#[test]
fn sender_stopped_mid_transfer() {
    let _one = serial();
    const COUNT: usize = 4;
    let p = ChildPair::start("stop", COUNT);
    let pid = p.pid();
    let pulled_before = shared_copy::stats().pulled;
    let while_stopped = Arc::new(AtomicU64::new(0));
    let done = {
        let while_stopped = while_stopped.clone();
        on_first_piece(pulled_before, move || {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            let at_stop = shared_copy::stats().pulled;
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(200) {
                std::hint::spin_loop();
            }
            while_stopped.store(shared_copy::stats().pulled - at_stop, Ordering::Relaxed);
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        })
    };
    for k in 0..COUNT {
        let d = p.vi.recv_wait(Some(Duration::from_secs(20))).unwrap();
        // SAFETY: a completed descriptor of ours.
        let (st, len) = unsafe { ((*d.0).cs.status, (*d.0).cs.length) };
        assert_eq!(st & status::ERROR_MASK, 0, "message {k}: status {st:#x}");
        assert_eq!(len as usize, BIG);
        let dst = message(&p.mem, k);
        for i in 0..BIG {
            // SAFETY: inside the arena.
            assert_eq!(
                unsafe { *dst.add(i) },
                pattern(k, i),
                "message {k}, byte {i}"
            );
        }
    }
    done();
    assert!(
        while_stopped.load(Ordering::Relaxed) > 0,
        "the receiver copied nothing while the sender was stopped"
    );
}
