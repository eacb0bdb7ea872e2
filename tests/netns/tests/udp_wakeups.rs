//! Wake-ups on the network device after busy polling. While a program
//! polls, the progress thread takes the VIs' sockets out of its epoll set
//! (each datagram to a socket in a set runs the set's wake-up callback);
//! a program that then blocks must still be woken by the next datagram.
//! The block cap is raised and the protocol timers pushed out so that a
//! missed wake-up shows: the waiter would then sleep until the progress
//! thread's idle timeout (a second), not the sender's 50 ms.

#[path = "../../../crates/core/tests/scenarios/mod.rs"]
mod scenarios;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openvia_core::descriptor::status;
use openvia_core::vi::reliability;
use scenarios::{pair, set_desc, UDP};

#[test]
fn a_wait_after_busy_polling_is_woken_by_the_next_datagram() {
    std::env::set_var("OPENVIA_BLOCK_CAP_MS", "600000");
    std::env::set_var("OPENVIA_SPIN_NS", "0");
    // No protocol timer may stand in for the wake-up: keepalives and the
    // dead-peer limit far beyond the wait allowed below.
    scenarios::udp_env();
    std::env::set_var("OPENVIA_UDP_KEEPALIVE_MS", "10000");
    std::env::set_var("OPENVIA_UDP_DEAD_MS", "60000");
    let p = pair(UDP, reliability::RELIABLE_DELIVERY, "t-wake", 1 << 20);
    for round in 0..3u32 {
        let rd = p.mb.desc(1);
        set_desc(rd, 0, &[(p.mb.data(8192) as u64, p.mb.handle, 64)], 0);
        p.b.post_recv(rd, p.mb.handle).unwrap();
        // Poll long enough for the progress thread to see a busy program
        // (it looks every progress interval, 20 ms by default).
        let spin_until = Instant::now() + Duration::from_millis(150);
        while Instant::now() < spin_until {
            assert!(p.b.recv_done().is_err(), "nothing was sent yet");
        }
        let blocking = Arc::new(AtomicBool::new(false));
        let sd = p.ma.desc(1);
        set_desc(sd, 0, &[(p.ma.data(4096) as u64, p.ma.handle, 8)], round);
        let sender = {
            let (a, blocking) = (p.a.clone(), blocking.clone());
            let sd = sd as usize;
            let handle = p.ma.handle;
            std::thread::spawn(move || {
                while !blocking.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                // Past the flag the receiver is about to block; give it
                // the moment to get there (if it has not, the test only
                // covers less: it cannot pass wrongly).
                std::thread::sleep(Duration::from_millis(50));
                a.post_send(sd as *mut _, handle).unwrap();
            })
        };
        blocking.store(true, Ordering::SeqCst);
        let start = Instant::now();
        let got = p.b.recv_wait(Some(Duration::from_secs(30))).unwrap();
        let waited = start.elapsed();
        sender.join().unwrap();
        assert_eq!(got.0, rd);
        // SAFETY: the descriptor is ours and complete.
        assert_eq!(unsafe { (*rd).cs.status } & status::ERROR_MASK, 0);
        assert!(
            waited < Duration::from_millis(400),
            "round {round}: woken only after {waited:?}"
        );
        p.a.send_wait(Some(Duration::from_secs(5))).unwrap();
    }
}
