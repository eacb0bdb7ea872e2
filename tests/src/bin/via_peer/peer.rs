//! Peer-to-peer: both processes call ConnectPeerRequest naming each other
//! and ConnectPeerWait; then they play ping-pong, each message verified,
//! some of them large enough for the CMA or bounce path.

use openvia_core::descriptor::control;
use openvia_core::{peer_request, peer_wait};
use openvia_tests::arena::Arena;
use openvia_tests::pattern::{fill, first_mismatch, message_seed, Rng};

use crate::endpoint::{assert_clean, await_peer_close, recv_done, send_done, Endpoint, Opts, WAIT};

const LARGE: usize = 100_000;

pub fn peer(opts: &Opts) {
    let ep = Endpoint::open();
    let vi = ep.vi(opts.reliability());
    let (local, remote) = (opts.str("local"), opts.str("remote"));
    let count = opts.u64_or("count", 200);
    // The side whose name sorts first speaks on even turns.
    let first = local < remote;
    let m = Arena::new(&ep.nic, ep.ptag, 3, 2 * (LARGE + 64), false, false);
    let post = || {
        m.set_desc(0, 0, &[(m.addr(LARGE + 64), m.handle, LARGE as u32)], 0);
        vi.post_recv(m.desc(0), m.handle).expect("post recv");
    };
    if !first {
        post();
    }
    peer_request(&vi, &ep.address(local), &ep.address(remote), Some(WAIT)).expect("peer request");
    let attrs = peer_wait(&vi).expect("peer wait");
    assert_eq!(attrs.reliability, opts.reliability());
    let mut rng = Rng::new(42);
    for j in 0..count {
        let n = if j % 10 == 9 {
            LARGE
        } else {
            rng.range(0, 4000) as usize
        };
        let seed = message_seed(77, j);
        if (j % 2 == 0) == first {
            // The peer's answer may come at once: its receive goes first.
            if j + 1 < count {
                post();
            }
            // SAFETY: the send buffer is not posted.
            fill(unsafe { m.bytes(1, n) }, seed);
            m.set_desc(
                1,
                control::IMMEDIATE,
                &[(m.addr(1), m.handle, n as u32)],
                j as u32,
            );
            vi.post_send(m.desc(1), m.handle).expect("post send");
            assert_clean(send_done(&vi, m.desc(1)), "send");
        } else {
            let (st, len, imm) = recv_done(&vi, m.desc(0));
            assert_clean(st, &format!("message {j}"));
            assert_eq!((len as usize, imm as u64), (n, j), "message {j}");
            // SAFETY: the receive completed.
            let got = unsafe { m.bytes(LARGE + 64, n) };
            assert_eq!(first_mismatch(got, seed), None, "message {j}");
        }
    }
    println!("RESULT exchanged={count}");
    // The side that received last hangs up; the other sees it go.
    let last_receiver_first = (count - 1) % 2 == 1;
    if last_receiver_first == first {
        vi.disconnect().expect("disconnect");
    } else {
        await_peer_close(&vi, &m, 2);
    }
}
