//! Messages from other hosts straight into the pool. A pvmd's link thread
//! writes the fragments of an arriving message into a run of pool pages as
//! they come, then queues the head on the receiver's ring: the receiver
//! unpacks in place, exactly as for a message from this host, and the body
//! never passes through the pvmd's loop or the task's socket.
//!
//! The run is held by the pvmd's own slot while it is written (a receiver
//! dying meanwhile cannot free pages still being written); posting adds the
//! receiver's hold and the pvmd's is then dropped. When the pool stays
//! short the message goes the socket way instead, and so does every later
//! one to that task, so a task never sees a later message before an
//! earlier one.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Desc, Pool, PostError, PAGE};
use crate::tid;

/// How long a link waits for pages before sending the message the socket
/// way (the link is stalled meanwhile, which holds the remote sender).
const SHORT_POOL_WAIT: Duration = Duration::from_millis(50);

/// The pvmd's side of inbound delivery.
pub struct Inbound {
    pool: Arc<Pool>,
    /// The pvmd's own slot, which holds runs while they are written.
    slot: usize,
    host_num: u32,
    /// Tasks whose messages go the socket way from now on.
    pinned: Mutex<HashSet<i32>>,
    /// Messages queued on a ring, and messages left to the socket way.
    pub into_pool: AtomicU64,
    pub by_socket: AtomicU64,
}

/// A message being written into the pool.
pub struct InboundRun {
    slot: usize,
    dst: i32,
    head: Desc,
    written: usize,
}

impl Inbound {
    pub fn new(pool: Arc<Pool>, slot: usize, host_num: u32) -> Inbound {
        Inbound {
            pool,
            slot,
            host_num,
            pinned: Mutex::new(HashSet::new()),
            into_pool: AtomicU64::new(0),
            by_socket: AtomicU64::new(0),
        }
    }

    /// Starts a message of `len` body bytes for task `dst`; None when it
    /// must go the socket way (not a task of this host with a slot, larger
    /// than the pool, the pool short for too long).
    pub fn begin(
        &self,
        src: i32,
        dst: i32,
        tag: i32,
        ctx: i32,
        enc: i32,
        len: usize,
    ) -> Option<InboundRun> {
        let r = self.begin_run(src, dst, tag, ctx, enc, len);
        let counter = if r.is_some() {
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
        tag: i32,
        ctx: i32,
        enc: i32,
        len: usize,
    ) -> Option<InboundRun> {
        if tid::host_num(dst) != self.host_num || dst & tid::DAEMON_BIT as i32 != 0 {
            return None;
        }
        if self
            .pinned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&dst)
        {
            return None;
        }
        let slot = self.pool.find_slot(dst)?;
        let mut head = Desc {
            src,
            tag,
            ctx,
            enc,
            start: u32::MAX,
            pages: 0,
            len: len as u64,
        };
        if len > 0 {
            let pages = len.div_ceil(PAGE);
            if pages > self.pool.npages() {
                self.pin(dst);
                return None;
            }
            let end = Instant::now() + SHORT_POOL_WAIT;
            let start = loop {
                if let Some(s) = self.pool.try_alloc(self.slot, pages) {
                    break s;
                }
                if Instant::now() >= end {
                    self.pin(dst);
                    return None;
                }
                std::thread::sleep(Duration::from_micros(200));
            };
            head.start = start;
            head.pages = pages as u32;
        }
        Some(InboundRun {
            slot,
            dst,
            head,
            written: 0,
        })
    }

    fn pin(&self, dst: i32) {
        self.pinned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dst);
    }

    /// Appends body bytes; false if they overrun the announced length.
    pub fn write(&self, run: &mut InboundRun, data: &[u8]) -> bool {
        let len = run.head.len as usize;
        if data.len() > len - run.written {
            return false;
        }
        if !data.is_empty() {
            let at = self.pool.page_ptr(run.head.start);
            // SAFETY: the run holds `pages * PAGE >= len` bytes from `at`,
            // is held by our slot alone until posted, and
            // written + data.len() <= len was checked above.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), at.add(run.written), data.len());
            }
        }
        run.written += data.len();
        true
    }

    /// Queues the complete message on the receiver's ring. False if the
    /// body was short or the receiver is gone (the message is dropped, as
    /// the socket way drops messages to dead tasks).
    pub fn finish(&self, run: InboundRun) -> bool {
        if run.written != run.head.len as usize {
            self.abandon(run);
            return false;
        }
        let ok = loop {
            match self.pool.post(run.slot, run.dst, &run.head) {
                Ok(()) => break true,
                Err(PostError::NoTask) => break false,
                // The receiver's ring is full: wait for it to read, as a
                // sender on this host would (the link holds the remote one).
                Err(PostError::Full) => std::thread::sleep(Duration::from_micros(200)),
            }
        };
        self.abandon(run);
        ok
    }

    /// Drops the pvmd's hold on the run.
    pub fn abandon(&self, run: InboundRun) {
        if run.head.start != u32::MAX {
            self.pool.release(run.head.start, self.slot);
        }
    }
}
