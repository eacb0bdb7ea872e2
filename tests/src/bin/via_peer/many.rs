//! Many VIs at once: the client connects `vis` VIs and streams on all of
//! them concurrently (one thread each); the server spreads their receive
//! completions over `cqs` completion queues, one thread waiting on each,
//! and verifies every message of every VI in order. Each VI ends with a
//! notice from the server that all its messages checked out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use openvia_core::descriptor::{control, status};
use openvia_core::vi::Vi;
use openvia_tests::arena::{self, Arena};
use openvia_tests::pattern::{fill, first_mismatch, message_seed, Rng};

use crate::endpoint::{assert_clean, recv_done, send_done, Endpoint, Opts, WAIT};

const WINDOW: usize = 8;

struct Plan {
    vis: usize,
    cqs: usize,
    msgs: u64,
    max: u64,
    large: u64,
}

impl Plan {
    fn new(o: &Opts) -> Plan {
        Plan {
            vis: o.usize_or("vis", 16),
            cqs: o.usize_or("cqs", 2),
            msgs: o.u64_or("msgs", 200),
            max: o.u64_or("max", 3000),
            large: o.u64_or("large", 20_000),
        }
    }

    fn slot(&self) -> usize {
        (self.max.max(self.large) as usize + 64) & !63
    }

    /// Sizes of VI `vi`'s messages: every tenth is large.
    fn sizes(&self, vi: usize) -> impl Iterator<Item = u64> + '_ {
        let mut rng = Rng::new(vi as u64 * 7919 + 1);
        (1u64..).map(move |j| {
            let n = rng.range(1, self.max);
            if j % 10 == 0 {
                self.large
            } else {
                n
            }
        })
    }

    fn seed(vi: usize) -> u64 {
        1000 + vi as u64
    }
}

pub fn server(opts: &Opts) {
    let plan = Plan::new(opts);
    let ep = Endpoint::open();
    let rel = opts.reliability();
    let cqs: Vec<_> = (0..plan.cqs)
        .map(|_| {
            ep.nic
                .create_cq(plan.vis * WINDOW * 2 + 64)
                .expect("create CQ")
        })
        .collect();
    let vis: Vec<Arc<Vi>> = (0..plan.vis)
        .map(|i| ep.vi_with_cqs(rel, None, Some(cqs[i % plan.cqs].clone())))
        .collect();
    let slot = plan.slot();
    let mems: Vec<Arena> = (0..plan.vis)
        .map(|_| Arena::new(&ep.nic, ep.ptag, WINDOW + 2, WINDOW * slot, false, false))
        .collect();
    let post = |i: usize, j: u64| {
        let k = (j % WINDOW as u64) as usize;
        let m = &mems[i];
        m.set_desc(k, 0, &[(m.addr(k * slot), m.handle, slot as u32)], 0);
        vis[i].post_recv(m.desc(k), m.handle).expect("post recv");
    };
    for i in 0..plan.vis {
        for j in 0..WINDOW.min(plan.msgs as usize) {
            post(i, j as u64);
        }
    }
    let disc = opts.str("disc");
    ep.listen(disc).expect("listen");
    println!("READY");
    for vi in &vis {
        ep.accept(disc, vi);
    }
    let index: HashMap<u64, usize> = vis.iter().enumerate().map(|(i, v)| (v.id(), i)).collect();
    type Sizes<'a> = Box<dyn Iterator<Item = u64> + Send + 'a>;
    let state: Vec<Mutex<(u64, Sizes)>> = (0..plan.vis)
        .map(|i| Mutex::new((0, Box::new(plan.sizes(i)) as Sizes)))
        .collect();

    std::thread::scope(|sc| {
        for (c, cq) in cqs.iter().enumerate() {
            let (vis, mems, state, index, plan, ep) = (&vis, &mems, &state, &index, &plan, &ep);
            let post = &post;
            sc.spawn(move || {
                let members = (0..plan.vis).filter(|i| i % plan.cqs == c).count() as u64;
                let mut left = members * plan.msgs;
                while left > 0 {
                    let e = ep
                        .nic
                        .cq_wait(cq, Some(WAIT))
                        .unwrap_or_else(|err| panic!("CQ {c}: wait with {left} to go: {err}"));
                    assert!(e.recv, "CQ {c}: a send completion on a receive CQ");
                    let i = index[&e.vi_id];
                    assert_eq!(i % plan.cqs, c, "VI {i} completed on the wrong CQ");
                    let d = vis[i]
                        .recv_done()
                        .expect("CQ entry without a completed receive");
                    let mut g = state[i].lock().unwrap();
                    let j = g.0;
                    let k = (j % WINDOW as u64) as usize;
                    assert_eq!(d.0, mems[i].desc(k), "VI {i}: receive order");
                    let (st, len, imm) = arena::completion(d);
                    let what = format!("VI {i} message {j}");
                    assert_clean(st, &what);
                    let n = g.1.next().unwrap_or(0);
                    assert_eq!(len as u64, n, "{what}: length");
                    assert_eq!(imm as u64, j, "{what}: order");
                    // SAFETY: the receive completed and is not reposted yet.
                    let data = unsafe { mems[i].bytes(k * slot, n as usize) };
                    assert_eq!(
                        first_mismatch(data, message_seed(Plan::seed(i), j)),
                        None,
                        "{what}: data"
                    );
                    g.0 += 1;
                    left -= 1;
                    if j + (WINDOW as u64) < plan.msgs {
                        post(i, j + WINDOW as u64);
                    }
                    if g.0 == plan.msgs {
                        let notice = mems[i].desc(WINDOW);
                        mems[i].set_desc(WINDOW, control::IMMEDIATE, &[], plan.msgs as u32);
                        vis[i]
                            .post_send(notice, mems[i].handle)
                            .expect("post notice");
                        assert_clean(send_done(&vis[i], notice), "notice");
                    }
                }
            });
        }
    });
    println!(
        "RESULT vis={} received={}",
        plan.vis,
        plan.vis as u64 * plan.msgs
    );

    // Each client VI disconnects after its notice: the closing receives
    // come back flushed through the CQs.
    for (i, m) in mems.iter().enumerate() {
        m.set_desc(WINDOW + 1, 0, &[], 0);
        vis[i]
            .post_recv(m.desc(WINDOW + 1), m.handle)
            .expect("post closing recv");
    }
    for (c, cq) in cqs.iter().enumerate() {
        let members = (0..plan.vis).filter(|i| i % plan.cqs == c).count();
        for _ in 0..members {
            let e = ep
                .nic
                .cq_wait(cq, Some(WAIT))
                .expect("CQ wait for the disconnects");
            let i = index[&e.vi_id];
            let d = vis[i].recv_done().expect("closing receive");
            let (st, _, _) = arena::completion(d);
            assert_ne!(
                st & status::DESC_FLUSHED_ERROR,
                0,
                "VI {i} closing receive {st:#x}"
            );
        }
    }
}

pub fn client(opts: &Opts) {
    let plan = Plan::new(opts);
    let ep = Endpoint::open();
    let rel = opts.reliability();
    let slot = plan.slot();
    let vis: Vec<Arc<Vi>> = (0..plan.vis).map(|_| ep.vi(rel)).collect();
    let mems: Vec<Arena> = (0..plan.vis)
        .map(|_| Arena::new(&ep.nic, ep.ptag, WINDOW + 1, WINDOW * slot, false, false))
        .collect();
    for (vi, m) in vis.iter().zip(&mems) {
        m.set_desc(WINDOW, 0, &[], 0);
        vi.post_recv(m.desc(WINDOW), m.handle).expect("post recv");
    }
    for vi in &vis {
        ep.connect(vi, opts.str("disc"));
    }
    std::thread::scope(|sc| {
        for (i, (vi, m)) in vis.iter().zip(&mems).enumerate() {
            let plan = &plan;
            sc.spawn(move || {
                let mut sizes = plan.sizes(i);
                for j in 0..plan.msgs {
                    let k = (j % WINDOW as u64) as usize;
                    if j >= WINDOW as u64 {
                        assert_clean(send_done(vi, m.desc(k)), &format!("VI {i} send {j}"));
                    }
                    let n = sizes.next().unwrap_or(0) as usize;
                    // SAFETY: slot `k` was reaped above (or never posted).
                    fill(
                        unsafe { m.bytes(k * slot, n) },
                        message_seed(Plan::seed(i), j),
                    );
                    m.set_desc(
                        k,
                        control::IMMEDIATE,
                        &[(m.addr(k * slot), m.handle, n as u32)],
                        j as u32,
                    );
                    vi.post_send(m.desc(k), m.handle).expect("post send");
                }
                for j in plan.msgs.saturating_sub(WINDOW as u64)..plan.msgs {
                    let k = (j % WINDOW as u64) as usize;
                    assert_clean(send_done(vi, m.desc(k)), &format!("VI {i} send {j}"));
                }
                let (st, _, imm) = recv_done(vi, m.desc(WINDOW));
                assert_clean(st, "notice");
                assert_eq!(
                    imm as u64, plan.msgs,
                    "VI {i}: the server verified another count"
                );
                vi.disconnect().expect("disconnect");
            });
        }
    });
    println!(
        "RESULT vis={} sent={}",
        plan.vis,
        plan.vis as u64 * plan.msgs
    );
}
