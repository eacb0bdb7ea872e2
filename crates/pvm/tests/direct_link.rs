//! A task's direct link on loopback, both ends in one process: message
//! bodies handed to the sender as pool bodies arrive, in order and intact,
//! in the receiving task's own pool pages (heap when larger than the
//! pool), each arrival ringing the task's doorbell; every page comes back
//! once the bodies are dropped.

mod common;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use openvia_pvm::link::{LinkNic, Waker};
use openvia_pvm::pool::inbound::Inbound;
use openvia_pvm::pool::{Body, Pool};

const A: i32 = 0x40001;
const B: i32 = 0x80001;
const B_SLOT: usize = 3;

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

#[test]
fn bodies_land_in_the_receivers_pool_in_order() {
    common::udp_env();
    let pool = Arc::new(Pool::create(512).expect("pool")); // 4 MiB
    let a_nic = LinkNic::open().expect("open A");
    let b_nic = Arc::new(LinkNic::open().expect("open B"));
    let a_pl = a_nic.prepare(a_nic.new_vi().unwrap()).unwrap();
    let b_pl = b_nic.prepare(b_nic.new_vi().unwrap()).unwrap();
    let disc_b = format!("dl-b-{}", std::process::id()).into_bytes();
    let disc_a = format!("dl-a-{}", std::process::id()).into_bytes();
    let waiter = {
        let (nic, vi, disc) = (b_nic.clone(), b_pl.vi().clone(), disc_b.clone());
        std::thread::spawn(move || nic.accept_on(&vi, &disc, Duration::from_secs(10)))
    };
    a_nic
        .connect_on(
            a_pl.vi(),
            &disc_a,
            (&b_nic.address(), &disc_b),
            Duration::from_secs(10),
        )
        .expect("connect");
    waiter.join().unwrap().expect("accept");

    let (inb, arrivals) = Inbound::for_task(pool.clone(), B_SLOT, B);
    let inb = Arc::new(inb);
    let waker = Waker::new().unwrap();
    let (a_tx, _a_rx) = mpsc::channel();
    let (b_tx, b_rx) = mpsc::channel();
    let a = a_pl
        .run((B as u32, A as u32), a_tx, waker.clone(), None)
        .unwrap();
    let _b = b_pl
        .run((A as u32, B as u32), b_tx, waker.clone(), Some(inb.clone()))
        .unwrap();

    let bell = pool.bell(B_SLOT);
    // Sizes: empty, one fragment, many, larger than the whole pool.
    let sizes = [0usize, 1, 100, 65_536, 300_000, 3 << 20, 5 << 20];
    for (i, &n) in sizes.iter().enumerate() {
        let body = Body::from_vec(bytes(n, i as u8), None);
        assert!(a.send_msg((A as u32, B as u32), [A, B, i as i32, 7, 0], body));
    }
    let mut got = Vec::new();
    for _ in &sizes {
        let m = arrivals
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|e| {
                panic!("no arrival ({e}); link events: {}", b_rx.try_iter().count())
            });
        got.push(m);
    }
    for (i, (m, &n)) in got.iter().zip(&sizes).enumerate() {
        assert_eq!((m.src, m.tag, m.ctx, m.enc), (A, i as i32, 7, 0));
        assert_eq!(
            &m.body[..],
            &bytes(n, i as u8)[..],
            "message {i} ({n} bytes)"
        );
        assert_eq!(
            m.body.in_pool(),
            n > 0 && n <= 4 << 20,
            "message {i} placement"
        );
    }
    assert!(pool.bell(B_SLOT).wrapping_sub(bell) >= sizes.len() as u32);
    assert!(pool.free_pages() < pool.npages());
    drop(got);
    assert_eq!(pool.free_pages(), pool.npages(), "every page back");
}
