//! The pvmd-to-pvmd link on loopback: two daemons' ends in one process,
//! connected over openvia's UDP device. Frames of every size class (one
//! fragment, many fragments, more than the whole window) cross intact and
//! in order; closing one end reports the link down at the other.

mod common;

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use openvia_core::vi::Vi;
use openvia_pvm::frame::{Frame, Msg};
use openvia_pvm::link::{Link, LinkEvent, LinkNic, Waker};

fn msg(len: usize, seed: u8) -> Frame {
    Frame::Msg(Msg {
        src: 0x40001,
        dst: 0x80001,
        tag: len as i32,
        ctx: 0,
        enc: 0,
        body: (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect(),
    })
}

fn next_frame(rx: &mpsc::Receiver<LinkEvent>) -> (u32, u32, Frame) {
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(LinkEvent::Frame {
            src, dst, frame, ..
        }) => (src, dst, frame),
        Ok(LinkEvent::Down { why, .. }) => panic!("link down: {why}"),
        Err(e) => panic!("no frame: {e}"),
    }
}

/// Two daemons' link ends in this process, A connected to B at
/// discriminator `tag`-<pid>.
fn connected_pair(tag: &str) -> (LinkNic, Arc<Vi>, LinkNic, Arc<Vi>) {
    common::udp_env();
    let a_nic = LinkNic::open().expect("open A");
    let b_nic = LinkNic::open().expect("open B");
    let disc = format!("{tag}-{}", std::process::id());
    let b_addr = b_nic.address();
    let acceptor = {
        let disc = disc.clone();
        std::thread::spawn(move || {
            let vi = b_nic.accept(disc.as_bytes(), Duration::from_secs(10));
            (b_nic, vi)
        })
    };
    let a_vi = a_nic
        .connect(&b_addr, disc.as_bytes(), Duration::from_secs(10))
        .expect("connect");
    let (b_nic, b_vi) = acceptor.join().unwrap();
    (a_nic, a_vi, b_nic, b_vi.expect("accept"))
}

/// Both ends started: A is daemon 1 reaching 2 through link 2, B the
/// other way; each end's events come on its receiver.
struct Started {
    a: Link,
    b: Link,
    a_rx: mpsc::Receiver<LinkEvent>,
    b_rx: mpsc::Receiver<LinkEvent>,
    b_nic: LinkNic,
    // Kept for the test's length (bind it, not `..`, which drops it).
    _a_nic: LinkNic,
}

fn started_pair(tag: &str) -> Started {
    let (a_nic, a_vi, b_nic, b_vi) = connected_pair(tag);
    let waker = Waker::new().unwrap();
    let (a_tx, a_rx) = mpsc::channel();
    let (b_tx, b_rx) = mpsc::channel();
    let a = a_nic
        .start(a_vi, (2, 1), a_tx, waker.clone(), None)
        .unwrap();
    let b = b_nic
        .start(b_vi, (1, 2), b_tx, waker.clone(), None)
        .unwrap();
    Started {
        a,
        b,
        a_rx,
        b_rx,
        b_nic,
        _a_nic: a_nic,
    }
}

#[test]
fn frames_cross_intact_in_order_and_close_is_seen() {
    let Started {
        a,
        b,
        a_rx,
        b_rx,
        b_nic: _b_nic,
        _a_nic,
    } = started_pair("link-test");

    let sizes = [0usize, 1, 100, 65_000, 65_536, 300_000, 4 << 20];
    for (i, &n) in sizes.iter().enumerate() {
        assert!(a.send_own(2, &msg(n, i as u8)));
    }
    for (i, &n) in sizes.iter().enumerate() {
        let (src, dst, f) = next_frame(&b_rx);
        assert_eq!((src, dst), (1, 2));
        assert_eq!(f, msg(n, i as u8), "frame {i} ({n} bytes)");
    }
    // A hub relays with the original source in the envelope.
    assert!(b.send(3, 1, &msg(10, 9)));
    assert_eq!(next_frame(&a_rx), (3, 1, msg(10, 9)));

    // Ping-pong: small frames answer in well under a millisecond here.
    let mut rtts = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        a.send_own(2, &msg(16, 1));
        next_frame(&b_rx);
        b.send_own(1, &msg(16, 2));
        next_frame(&a_rx);
        rtts.push(t.elapsed());
    }
    rtts.sort();
    eprintln!("link 16 B round trip median {:?}", rtts[rtts.len() / 2]);

    // Bulk: 4 MB frames one way.
    let big = msg(4 << 20, 3);
    let t = Instant::now();
    for _ in 0..10 {
        a.send_own(2, &big);
    }
    for _ in 0..10 {
        assert_eq!(next_frame(&b_rx).2, big);
    }
    eprintln!(
        "link 4 MB frames: {:.2} GB/s",
        10.0 * (4 << 20) as f64 / t.elapsed().as_secs_f64() / 1e9
    );

    b.close_after_queue();
    match a_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(LinkEvent::Down { via, .. }) => assert_eq!(via, 2),
        Ok(LinkEvent::Frame { .. }) => panic!("unexpected frame"),
        Err(e) => panic!("close not seen: {e}"),
    }
}

/// What a task does while it spins on a direct VI (`wait_direct`): the
/// progress thread leaves the link alone (not event-driven) and the owner
/// drives the VI itself with `Link::poll` in a loop, so the receive
/// handler runs on the owner's thread (a spinning pvmd polls its links
/// the same way, the progress thread watching too). Frames of every size
/// class still cross intact and in order, nothing is lost or doubled.
#[test]
fn frames_cross_in_order_when_the_owner_drives_the_link() {
    let Started {
        a,
        b,
        a_rx: _a_rx,
        b_rx,
        b_nic,
        _a_nic,
    } = started_pair("link-drive-test");
    b_nic.set_event_driven(false);

    let sizes = [0usize, 16, 4096, 65_536, 300_000, 16, 1 << 20, 100];
    for round in 0..20u8 {
        for (i, &n) in sizes.iter().enumerate() {
            assert!(a.send_own(2, &msg(n, round ^ i as u8)));
        }
        for (i, &n) in sizes.iter().enumerate() {
            let t = Instant::now();
            let got = loop {
                assert!(b.poll(), "link failed");
                match b_rx.try_recv() {
                    Ok(LinkEvent::Frame {
                        src, dst, frame, ..
                    }) => break (src, dst, frame),
                    Ok(LinkEvent::Down { why, .. }) => panic!("link down: {why}"),
                    Err(_) => {
                        assert!(t.elapsed() < Duration::from_secs(20), "frame {i} lost");
                        std::thread::yield_now();
                    }
                }
            };
            assert_eq!(
                got,
                (1, 2, msg(n, round ^ i as u8)),
                "round {round} frame {i}"
            );
        }
    }
    assert!(b_rx.try_recv().is_err(), "nothing more than was sent");
    b_nic.set_event_driven(true);
    a.close_and_join();
    b.close_and_join();
}
