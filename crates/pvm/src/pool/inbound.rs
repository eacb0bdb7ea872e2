//! Messages from other hosts straight into the pool. A link's receive
//! handler (on whichever thread drove the VI) writes the fragments of an
//! arriving message into a run of pool pages as they come, then hands the
//! head over: the receiver unpacks in place, exactly as for a message from
//! this host.
//!
//! Two owners use it. A pvmd's links queue the head on the receiving
//! task's ring, so the body never passes through the pvmd's loop or the
//! task's socket; the run is held by the pvmd's own slot while it is
//! written (a receiver dying meanwhile cannot free pages still being
//! written), posting adds the receiver's hold and the pvmd's is then
//! dropped. When the pool stays short the message goes the socket way
//! instead, and so does every later one to that task, so a task never sees
//! a later message before an earlier one.
//!
//! A task's direct links (PvmRouteDirect between hosts) write into runs
//! held by the task's own slot and hand each message, hold included,
//! through a channel the task drains in arrival order (the task decides
//! when a direct message may be seen, after everything its sender routed
//! through the pvmds before). There a short pool means a heap body through
//! the same channel, so order holds without pinning.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Body, Desc, Pool, PoolHandle, PostError, PAGE};
use crate::tid;

/// How long a link waits for pages before sending the message the socket
/// way (the link is stalled meanwhile, which holds the remote sender).
const SHORT_POOL_WAIT: Duration = Duration::from_millis(50);

/// A message a task's direct link received, in arrival order.
pub struct Arrival {
    pub src: i32,
    pub tag: i32,
    pub ctx: i32,
    pub enc: i32,
    /// Pool pages held by the task's slot, or the heap.
    pub body: Body,
}

/// Who owns the runs and where finished messages go.
enum Owner {
    /// A pvmd: messages for tasks of its host go on their rings.
    Daemon {
        host_num: u32,
        /// Tasks whose messages go the socket way from now on.
        pinned: Mutex<HashSet<i32>>,
    },
    /// A task: messages for itself go through `arrivals`.
    Task {
        tid: i32,
        arrivals: Mutex<Sender<Arrival>>,
    },
}

/// The receiving side of inbound delivery (a pvmd's or a task's).
pub struct Inbound {
    pool: Arc<Pool>,
    /// The owner's own slot, which holds runs while they are written.
    slot: usize,
    owner: Owner,
    /// Messages written into the pool, and messages left to the socket
    /// way (a task: to the heap).
    pub into_pool: AtomicU64,
    pub by_socket: AtomicU64,
}

/// A message being written: into a run of pool pages, or (a task's link,
/// pool short) onto the heap.
pub struct InboundRun {
    slot: usize,
    dst: i32,
    head: Desc,
    written: usize,
    heap: Option<Vec<u8>>,
}

impl Inbound {
    /// A pvmd's: `slot` is the pvmd's own.
    pub fn new(pool: Arc<Pool>, slot: usize, host_num: u32) -> Inbound {
        Inbound {
            pool,
            slot,
            owner: Owner::Daemon {
                host_num,
                pinned: Mutex::new(HashSet::new()),
            },
            into_pool: AtomicU64::new(0),
            by_socket: AtomicU64::new(0),
        }
    }

    /// A task's: messages for `tid` (whose slot is `slot`) come out of the
    /// returned channel, each followed by a ring of the slot's doorbell.
    pub fn for_task(pool: Arc<Pool>, slot: usize, tid: i32) -> (Inbound, Receiver<Arrival>) {
        let (tx, rx) = mpsc::channel();
        let inb = Inbound {
            pool,
            slot,
            owner: Owner::Task {
                tid,
                arrivals: Mutex::new(tx),
            },
            into_pool: AtomicU64::new(0),
            by_socket: AtomicU64::new(0),
        };
        (inb, rx)
    }

    /// Starts a message of `len` body bytes for task `dst`; None when it
    /// must go the socket way (not a task of this host with a slot, larger
    /// than the pool, the pool short for too long) or, for a task, is not
    /// addressed to it.
    pub fn begin(
        &self,
        src: i32,
        dst: i32,
        tag: i32,
        ctx: i32,
        enc: i32,
        len: usize,
    ) -> Option<InboundRun> {
        let r = self.begin_run(src, dst, (tag, ctx, enc), len);
        let counter = if r.as_ref().is_some_and(|r| r.heap.is_none()) {
            &self.into_pool
        } else {
            &self.by_socket
        };
        counter.fetch_add(1, Ordering::Relaxed);
        r
    }

    fn begin_run(
        &self,
        src: i32,
        dst: i32,
        (tag, ctx, enc): (i32, i32, i32),
        len: usize,
    ) -> Option<InboundRun> {
        let slot = match &self.owner {
            Owner::Daemon { host_num, pinned } => {
                if tid::host_num(dst) != *host_num || dst & tid::DAEMON_BIT as i32 != 0 {
                    return None;
                }
                if pinned
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&dst)
                {
                    return None;
                }
                self.pool.find_slot(dst)?
            }
            Owner::Task { tid, .. } => {
                if dst != *tid {
                    return None;
                }
                self.slot
            }
        };
        let mut run = InboundRun {
            slot,
            dst,
            head: Desc {
                src,
                tag,
                ctx,
                enc,
                start: u32::MAX,
                pages: 0,
                len: len as u64,
            },
            written: 0,
            heap: None,
        };
        if len == 0 {
            return Some(run);
        }
        let pages = len.div_ceil(PAGE);
        let start = if pages > self.pool.npages() {
            None
        } else {
            let end = Instant::now() + SHORT_POOL_WAIT;
            loop {
                if let Some(s) = self.pool.try_alloc(self.slot, pages) {
                    break Some(s);
                }
                if Instant::now() >= end {
                    break None;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        };
        match (start, &self.owner) {
            (Some(start), _) => {
                run.head.start = start;
                run.head.pages = pages as u32;
                Some(run)
            }
            (None, Owner::Daemon { pinned, .. }) => {
                pinned.lock().unwrap_or_else(|e| e.into_inner()).insert(dst);
                None
            }
            (None, Owner::Task { .. }) => {
                run.heap = Some(Vec::with_capacity(len.min(16 << 20)));
                Some(run)
            }
        }
    }

    /// Appends body bytes; false if they overrun the announced length.
    pub fn write(&self, run: &mut InboundRun, data: &[u8]) -> bool {
        let len = run.head.len as usize;
        if data.len() > len - run.written {
            return false;
        }
        if let Some(v) = &mut run.heap {
            v.extend_from_slice(data);
        } else if !data.is_empty() {
            let at = self.pool.page_ptr(run.head.start);
            // SAFETY: the run holds `pages * PAGE >= len` bytes from `at`,
            // is held by our slot alone until handed over, and
            // written + data.len() <= len was checked above.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), at.add(run.written), data.len());
            }
        }
        run.written += data.len();
        true
    }

    /// Hands the complete message over: on the receiver's ring (a pvmd),
    /// or through the task's channel. False if the body was short or the
    /// receiver is gone (the message is dropped, as the socket way drops
    /// messages to dead tasks).
    pub fn finish(&self, run: InboundRun) -> bool {
        if run.written != run.head.len as usize {
            self.abandon(run);
            return false;
        }
        match &self.owner {
            Owner::Daemon { .. } => {
                let ok = loop {
                    match self.pool.post(run.slot, run.dst, &run.head) {
                        Ok(()) => break true,
                        Err(PostError::NoTask) => break false,
                        // The receiver's ring is full: wait for it to read,
                        // as a sender on this host would (the link holds
                        // the remote one).
                        Err(PostError::Full) => std::thread::sleep(Duration::from_micros(200)),
                    }
                };
                self.abandon(run);
                ok
            }
            Owner::Task { arrivals, .. } => {
                let home = PoolHandle {
                    pool: self.pool.clone(),
                    slot: self.slot,
                };
                let h = run.head;
                let body = match run.heap {
                    Some(v) => Body::from_vec(v, Some(home)),
                    None if h.start == u32::MAX => Body::new(Some(home)),
                    // The run's hold (our slot's) passes to the body.
                    None => Body::received(home, h.start, h.pages, h.len as usize),
                };
                let a = Arrival {
                    src: h.src,
                    tag: h.tag,
                    ctx: h.ctx,
                    enc: h.enc,
                    body,
                };
                let sent = arrivals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .send(a)
                    .is_ok();
                self.pool.ring_bell(self.slot);
                sent
            }
        }
    }

    /// Drops the owner's hold on the run.
    pub fn abandon(&self, run: InboundRun) {
        if run.head.start != u32::MAX && run.heap.is_none() {
            self.pool.release(run.head.start, self.slot);
        }
    }
}
