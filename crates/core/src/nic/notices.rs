//! Polling a CQ by notices instead of by looking at every VI.
//!
//! Each VI whose queues feed a CQ gets a *notice key* (a slot in this
//! table, plus one), published to its peer in the connection region. A
//! peer that gives such a VI work pushes the key into our notice ring
//! (`doorbell::notice`); a CQ poll pops the keys and drives only the
//! VIs they name, so its cost follows the traffic, not the number of
//! connections. A dropped notice (full ring) costs one round over every VI
//! with a CQ. The network device has no notice ring: its CQs drive their
//! members.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::NicShared;
use crate::cq::{CompletionQueue, CqEntry, HotCopy};
use crate::vi::Vi;

/// Notices taken per look: a bound on the work of one poll.
const BATCH: usize = 32;
/// Empty looks between checks for a slot that holds the ring up.
const UNSTICK_EVERY: u32 = 4096;

/// VIs by notice key (key = index + 1).
#[derive(Default)]
pub(crate) struct NoticeTable {
    slots: Vec<Weak<Vi>>,
    free: Vec<u32>,
    /// The ring's head at the last stuck check.
    last_head: u64,
}

impl NoticeTable {
    /// A key for a VI about to be created (filled in by [`Self::set`]).
    pub(crate) fn reserve(&mut self) -> u32 {
        if let Some(k) = self.free.pop() {
            return k;
        }
        self.slots.push(Weak::new());
        self.slots.len() as u32
    }

    pub(crate) fn set(&mut self, key: u32, vi: &Arc<Vi>) {
        if let Some(s) = self.slots.get_mut(key as usize - 1) {
            *s = Arc::downgrade(vi);
        }
    }

    pub(crate) fn release(&mut self, key: u32) {
        if let Some(s) = key
            .checked_sub(1)
            .and_then(|i| self.slots.get_mut(i as usize))
        {
            *s = Weak::new();
            self.free.push(key);
        }
    }

    /// The VI a key names (keys come from other processes: any value).
    fn get(&self, key: u32) -> Option<Arc<Vi>> {
        self.slots.get(key.checked_sub(1)? as usize)?.upgrade()
    }

    fn all(&self) -> Vec<Arc<Vi>> {
        self.slots.iter().filter_map(Weak::upgrade).collect()
    }
}

impl NicShared {
    /// `VipCQDone`'s work: the oldest entry, after driving the VIs that
    /// notices name (or, on the network device, every member). `hot`: the
    /// caller's copy of the CQ's hot VI, kept across the polls of a wait.
    pub(crate) fn cq_poll(&self, cq: &Arc<CompletionQueue>, hot: &mut HotCopy) -> Option<CqEntry> {
        if let Some(e) = cq.pop() {
            return Some(e);
        }
        if !self.drive.peer_doorbell {
            for vi in cq.members() {
                vi.poke(false);
            }
            return cq.pop();
        }
        // The last VI noticed first: its next message is seen one cache
        // miss sooner than through its notice (taken later, while idle).
        // A watched hot VI is always settled: it is looked at every time.
        let hot = if cq.hot_is_settled() {
            hot.get(cq)
        } else {
            None
        };
        if let Some(vi) = hot {
            if vi.poke(false) {
                // As good as a notice naming it (whose pop is left for
                // later: it would cost a cache miss now).
                if !cq.hot_is_watched() {
                    self.note_hot(cq, vi);
                }
                if let Some(e) = cq.pop() {
                    return Some(e);
                }
            }
        }
        self.drive_noticed(cq, hot);
        cq.pop()
    }

    /// Drives the VIs named by waiting notices (every VI with a CQ after
    /// notices were dropped), and makes the last one of `cq` its hot VI.
    /// A notice naming only `hot` drives nothing: the caller looked at it
    /// just before, and every poll looks at it first while it stays hot.
    fn drive_noticed(&self, cq: &Arc<CompletionQueue>, hot: Option<&Arc<Vi>>) {
        let ring = self.doorbell.notices();
        if !ring.ready() {
            // Counted without a locked instruction: a lost count between
            // two pollers only delays the check.
            let idle = self.notice_idle.load(Ordering::Relaxed);
            self.notice_idle
                .store(idle.wrapping_add(1), Ordering::Relaxed);
            if idle % UNSTICK_EVERY == UNSTICK_EVERY - 1 {
                let mut t = self.notice.lock().unwrap_or_else(|e| e.into_inner());
                ring.unstick(&mut t.last_head);
            }
            return;
        }
        if ring.take_overflow() {
            let all = self.notice.lock().unwrap_or_else(|e| e.into_inner()).all();
            for vi in all {
                vi.poke(false);
            }
        }
        let mut keys = [0u32; BATCH];
        let mut n = 0;
        while n < BATCH {
            match ring.pop() {
                // Repeats of the key just taken add nothing.
                Some(k) if n > 0 && keys[n - 1] == k => {}
                Some(k) => {
                    keys[n] = k;
                    n += 1;
                }
                None => break,
            }
        }
        if n == 0 {
            return;
        }
        if let Some(h) = hot.filter(|h| n == 1 && h.notice_key() == keys[0]) {
            self.note_hot(cq, h);
            return;
        }
        let vis: [Option<Arc<Vi>>; BATCH] = {
            let t = self.notice.lock().unwrap_or_else(|e| e.into_inner());
            std::array::from_fn(|i| if i < n { t.get(keys[i]) } else { None })
        };
        for vi in vis.iter().flatten() {
            vi.poke(false);
        }
        let mine = |vi: &&Arc<Vi>| {
            [&vi.recv_cq, &vi.send_cq]
                .into_iter()
                .flatten()
                .any(|c| Arc::ptr_eq(c, cq))
        };
        if let Some(last) = vis[..n].iter().rev().flatten().find(mine) {
            self.note_hot(cq, last);
        }
    }

    /// Records that a notice named `vi` (of `cq`) last. A VI named many
    /// times in a row has its peer stop the notices (the poll looks at it
    /// first anyway: a steady ping-pong then costs no notice at all); when
    /// another VI takes its place they resume, and since the peer may have
    /// skipped one just before, the old VI is looked at after a fence.
    fn note_hot(&self, cq: &CompletionQueue, vi: &Arc<Vi>) {
        if let Some(old) = cq.noticed(vi) {
            self.doorbell.sleeper_fence();
            old.poke(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::cq::CompletionQueue;
    use crate::descriptor::{DataSegment, Descriptor};
    use crate::nic::Nic;
    use crate::vi::{Vi, ViAttributes};
    use crate::{connect_request, connect_wait, Address};

    const N: usize = 32;
    const WAIT: Option<Duration> = Some(Duration::from_secs(10));

    fn attrs(nic: &Nic) -> ViAttributes {
        ViAttributes::reliable_for_tests(nic)
    }

    /// N connected pairs in this process; the server's receive queues
    /// feed one CQ and each has a receive posted.
    struct Fixture {
        base: usize,
        handles: (u32, u32),
        _client: Nic,
        server: Nic,
        cq: Arc<CompletionQueue>,
        cvis: Vec<Arc<Vi>>,
        svis: Vec<Arc<Vi>>,
        // Posted receives point into it: see the Drop below.
        _mem: Vec<u8>,
    }

    impl Drop for Fixture {
        /// Flushes every posted receive while the memory it names is
        /// still there. Dropping the NICs does not: a progress thread
        /// that sees the peer's VIs go away flushes the server's receives
        /// after the fixture has gone (ASan: a use after free of `_mem`).
        fn drop(&mut self) {
            for vi in self.svis.iter().chain(&self.cvis) {
                let _ = vi.disconnect();
            }
        }
    }

    impl Fixture {
        fn new(tag: &str) -> Fixture {
            let mut mem = vec![0u8; 64 * (N + 2) + 64];
            let (client, server) = (Nic::open(None).unwrap(), Nic::open(None).unwrap());
            let cq = server.create_cq(4 * N).unwrap();
            let (ca, sa) = (attrs(&client), attrs(&server));
            let cvis: Vec<Arc<Vi>> = (0..N)
                .map(|_| client.create_vi(ca, None, None).unwrap())
                .collect();
            let svis: Vec<Arc<Vi>> = (0..N)
                .map(|_| server.create_vi(sa, None, Some(cq.clone())).unwrap())
                .collect();
            let base = (mem.as_mut_ptr() as usize).next_multiple_of(64);
            let len = 64 * (N + 2) as u64;
            let handles = (
                client
                    .register_mem(base as u64, len, ca.ptag, false, false)
                    .unwrap(),
                server
                    .register_mem(base as u64, len, sa.ptag, false, false)
                    .unwrap(),
            );
            let host = server.query().address.to_vec();
            let disc = format!("{tag}-{}", std::process::id());
            let saddr = Address {
                host: host.clone(),
                discriminator: disc.clone().into_bytes(),
            };
            let caddr = Address {
                host,
                discriminator: format!("{disc}-c").into_bytes(),
            };
            let f = Fixture {
                _mem: mem,
                base,
                handles,
                _client: client,
                server,
                cq,
                cvis,
                svis,
            };
            for i in 0..N {
                f.repost(i);
            }
            let (shared, svis, saddr2) = (f.server.shared().clone(), f.svis.clone(), saddr.clone());
            let t = std::thread::spawn(move || {
                for s in &svis {
                    let req = connect_wait(&shared, &saddr2, WAIT).unwrap();
                    req.accept(s).unwrap();
                }
            });
            for c in &f.cvis {
                connect_request(c, &caddr, &saddr, WAIT).unwrap();
            }
            t.join().unwrap();
            f
        }

        /// Descriptor slot `i` for 8 bytes of data, under `handle`.
        fn desc(&self, i: usize, handle: u32) -> *mut Descriptor {
            let d = (self.base + 64 * i) as *mut Descriptor;
            // SAFETY: slot i of the registered buffer; the data goes to
            // the last slot. The descriptor is not posted while rewritten.
            unsafe {
                std::ptr::write_bytes(d as *mut u8, 0, 64);
                (*d).cs.seg_count = 1;
                (*d).ds[0] = DataSegment {
                    data: (self.base + 64 * N) as u64,
                    handle,
                    length: 8,
                };
            }
            d
        }

        fn repost(&self, k: usize) {
            let h = self.handles.1;
            self.svis[k].post_recv(self.desc(k, h), h).unwrap();
        }

        /// One message on pair `k`, taken through the CQ.
        fn exchange(&self, k: usize, what: &str) {
            let h = self.handles.0;
            self.cvis[k].post_send(self.desc(N + 1, h), h).unwrap();
            let e = self.server.cq_wait(&self.cq, WAIT).unwrap();
            assert_eq!(e.vi_id, self.svis[k].id(), "{what}");
            assert!(e.recv);
            self.svis[k].recv_done().unwrap();
            self.cvis[k].send_wait(WAIT).unwrap();
            self.repost(k);
        }

        /// Notices pushed into the server's ring so far.
        fn notices(&self) -> u64 {
            self.server.shared.doorbell.notices().pushed()
        }
    }

    /// A CQ fed by many VIs drives the one whose peer wrote, not the rest:
    /// its cost follows the traffic, not the number of connections.
    #[test]
    fn a_cq_drives_only_the_vis_notices_name() {
        let f = Fixture::new("notices-only");
        // Nothing arrived: polling touches no VI.
        for v in &f.svis {
            v.pokes.store(0, Ordering::Relaxed);
        }
        for _ in 0..100 {
            assert!(f.server.cq_done(&f.cq).is_err());
        }
        let idle: u64 = f.svis.iter().map(|v| v.pokes.load(Ordering::Relaxed)).sum();
        assert_eq!(idle, 0, "an empty CQ poll drove {idle} idle VIs");
        for (round, k) in [7usize, 19, 7, 3].into_iter().enumerate() {
            f.exchange(k, &format!("round {round}"));
        }
        let others: u64 = f
            .svis
            .iter()
            .enumerate()
            .filter(|(i, _)| ![7, 19, 3].contains(i))
            .map(|(_, v)| v.pokes.load(Ordering::Relaxed))
            .sum();
        assert_eq!(others, 0, "VIs nobody wrote to were driven {others} times");
    }

    /// A steady ping-pong on one VI ends its notices (the CQ looks at it
    /// first anyway); when traffic moves to another VI they resume, and
    /// nothing sent meanwhile is missed.
    #[test]
    fn a_steadily_hot_vi_needs_no_notices_and_loses_none_when_it_cools() {
        let f = Fixture::new("notices-hot");
        for r in 0..200 {
            f.exchange(7, &format!("warm-up {r}"));
        }
        let before = f.notices();
        for r in 0..100 {
            f.exchange(7, &format!("steady {r}"));
        }
        assert_eq!(f.notices(), before, "notices for a VI the CQ watches");
        // Traffic moves: the first message elsewhere is noticed, and the
        // watched VI's next one is still found.
        f.exchange(19, "the other VI");
        f.exchange(7, "back on the watched VI");
        assert!(f.notices() > before, "notices did not resume");
        let mut x: u64 = 12345;
        for r in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Runs on one VI long enough to be watched, then switches.
            let k = [7, 19, 3][(x % 3) as usize];
            for _ in 0..(x % 100) {
                f.exchange(k, &format!("mixed {r}"));
            }
        }
    }
}
