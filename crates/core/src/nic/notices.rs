//! Polling a CQ by notices instead of by looking at every VI.
//!
//! Each VI whose queues feed a CQ gets a *notice key* (a slot in this
//! table, plus one), published to its peer in the connection region. A
//! peer that gives such a VI work pushes the key into our notice ring
//! (`transport::shm::notice`); a CQ poll pops the keys and drives only the
//! VIs they name, so its cost follows the traffic, not the number of
//! connections. A dropped notice (full ring) costs one round over every VI
//! with a CQ. The network device has no notice ring: its CQs drive their
//! members.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::{Device, NicShared};
use crate::cq::{CompletionQueue, CqEntry};
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
    /// notices name (or, on the network device, every member).
    pub(crate) fn cq_poll(&self, cq: &Arc<CompletionQueue>) -> Option<CqEntry> {
        if let Some(e) = cq.pop() {
            return Some(e);
        }
        if self.device == Device::Udp {
            for vi in cq.members() {
                vi.poke(false);
            }
            return cq.pop();
        }
        // The last VI noticed first: its next message is seen one cache
        // miss sooner than through its notice (taken later, while idle).
        if let Some(vi) = cq.hot() {
            if vi.poke(true) {
                if let Some(e) = cq.pop() {
                    return Some(e);
                }
            }
        }
        self.drive_noticed(cq);
        cq.pop()
    }

    /// Drives the VIs named by waiting notices (every VI with a CQ after
    /// notices were dropped).
    fn drive_noticed(&self, cq: &Arc<CompletionQueue>) {
        let ring = self.doorbell.notices();
        if !ring.ready() {
            let idle = self.notice_idle.fetch_add(1, Ordering::Relaxed);
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
        let vis: [Option<Arc<Vi>>; BATCH] = {
            let t = self.notice.lock().unwrap_or_else(|e| e.into_inner());
            std::array::from_fn(|i| if i < n { t.get(keys[i]) } else { None })
        };
        for vi in vis.iter().flatten() {
            vi.poke(false);
        }
        if let Some(vi) = vis[..n].iter().rev().flatten().next() {
            cq.set_hot(vi);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::descriptor::{DataSegment, Descriptor};
    use crate::nic::Nic;
    use crate::vi::{reliability, Vi, ViAttributes};
    use crate::{connect_request, connect_wait, Address};

    fn attrs(nic: &Nic) -> ViAttributes {
        ViAttributes {
            reliability: reliability::RELIABLE_DELIVERY,
            max_transfer: 1 << 20,
            ptag: nic.create_ptag().unwrap(),
            rdma_write: false,
            rdma_read: false,
        }
    }

    /// A CQ fed by many VIs drives the one whose peer wrote, not the rest:
    /// its cost follows the traffic, not the number of connections.
    #[test]
    fn a_cq_drives_only_the_vis_notices_name() {
        const N: usize = 32;
        // Declared first, dropped last: posted receives point into it.
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
        let (ch, sh) = (
            client
                .register_mem(base as u64, 64 * (N + 2) as u64, ca.ptag, false, false)
                .unwrap(),
            server
                .register_mem(base as u64, 64 * (N + 2) as u64, sa.ptag, false, false)
                .unwrap(),
        );
        let desc = |i: usize| {
            let d = (base + 64 * i) as *mut Descriptor;
            // SAFETY: slot i of the registered buffer; the data goes to
            // the last slot (8 bytes).
            unsafe {
                std::ptr::write_bytes(d as *mut u8, 0, 64);
                (*d).cs.seg_count = 1;
                (*d).ds[0] = DataSegment {
                    data: (base + 64 * N) as u64,
                    handle: 0,
                    length: 8,
                };
            }
            d
        };
        let host = server.query().address.to_vec();
        let disc = format!("notices-{}", std::process::id());
        let (saddr, caddr) = (
            Address {
                host: host.clone(),
                discriminator: disc.clone().into_bytes(),
            },
            Address {
                host,
                discriminator: format!("{disc}-c").into_bytes(),
            },
        );
        for (i, s) in svis.iter().enumerate() {
            let d = desc(i);
            // SAFETY: `d` is the descriptor just written.
            unsafe { (*d).ds[0].handle = sh };
            s.post_recv(d, sh).unwrap();
        }
        let (shared, svis2, saddr2) = (server.shared().clone(), svis.clone(), saddr.clone());
        let t = std::thread::spawn(move || {
            for s in &svis2 {
                let req = connect_wait(&shared, &saddr2, Some(Duration::from_secs(20))).unwrap();
                req.accept(s).unwrap();
            }
        });
        for c in &cvis {
            connect_request(c, &caddr, &saddr, Some(Duration::from_secs(20))).unwrap();
        }
        t.join().unwrap();
        // Nothing arrived: polling touches no VI.
        for v in &svis {
            v.pokes.store(0, Ordering::Relaxed);
        }
        for _ in 0..100 {
            assert!(server.cq_done(&cq).is_err());
        }
        let idle: u64 = svis.iter().map(|v| v.pokes.load(Ordering::Relaxed)).sum();
        assert_eq!(idle, 0, "an empty CQ poll drove {idle} idle VIs");
        for (round, k) in [7usize, 19, 7, 3].into_iter().enumerate() {
            let d = desc(N + 1);
            // SAFETY: as in `desc`.
            unsafe { (*d).ds[0].handle = ch };
            cvis[k].post_send(d, ch).unwrap();
            let e = server.cq_wait(&cq, Some(Duration::from_secs(10))).unwrap();
            assert_eq!(e.vi_id, svis[k].id(), "round {round}");
            assert!(e.recv);
            svis[k].recv_done().unwrap();
            cvis[k].send_wait(Some(Duration::from_secs(10))).unwrap();
            let d = desc(k);
            // SAFETY: as in `desc`.
            unsafe { (*d).ds[0].handle = sh };
            svis[k].post_recv(d, sh).unwrap();
        }
        let others: u64 = svis
            .iter()
            .enumerate()
            .filter(|(i, _)| ![7, 19, 3].contains(i))
            .map(|(_, v)| v.pokes.load(Ordering::Relaxed))
            .sum();
        assert_eq!(others, 0, "VIs nobody wrote to were driven {others} times");
    }
}
