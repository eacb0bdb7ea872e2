//! Completion queues: one place to learn which VI (and which of its two
//! queues) has a completed descriptor, so a server with many VIs waits on
//! one object instead of polling each.
//!
//! An entry only names the VI and the queue; the program then takes the
//! descriptor with SendDone/RecvDone on that VI, as VIA specifies.
//! Completions are produced by whoever drives a VI's progress; polling a
//! CQ drives the VIs its notices name (see `nic::notices`), the last one
//! first.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::error::{Result, ViaError};
use crate::vi::Vi;

/// Most entries a CQ may be created with.
pub const MAX_CQ_ENTRIES: usize = 1 << 20;

/// One completion notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEntry {
    pub vi_id: u64,
    /// The VI's opaque token (the C shell's handle).
    pub vi_token: u64,
    pub recv: bool,
}

/// Notices in a row for the hot VI after which its peer is told to stop
/// sending them (every poll looks at the hot VI anyway).
const WATCH_AFTER: u32 = 64;

/// The VI a poll looks at first, and how settled that choice is.
struct Hot {
    vi: Weak<Vi>,
    /// Notices in a row that named it.
    streak: u32,
    /// Its peer was told to send no notices for it.
    watched: bool,
}

/// A poller's copy of the CQ's hot VI, refreshed when it changes.
pub(crate) struct HotCopy {
    gen: u64,
    vi: Option<Arc<Vi>>,
}

impl Default for HotCopy {
    fn default() -> Self {
        // No generation matches: the first look reads the CQ's.
        Self {
            gen: u64::MAX,
            vi: None,
        }
    }
}

impl HotCopy {
    /// The CQ's hot VI now (one load unless it changed).
    pub(crate) fn get(&mut self, cq: &CompletionQueue) -> Option<&Arc<Vi>> {
        let gen = cq.hot_gen.load(Ordering::Acquire);
        if gen != self.gen {
            let h = cq.hot.lock().unwrap_or_else(|e| e.into_inner());
            self.vi = h.vi.upgrade();
            // Read under the lock: changes bump it under the lock too.
            self.gen = cq.hot_gen.load(Ordering::Acquire);
        }
        self.vi.as_ref()
    }
}

/// A one-shot handler run with the CQ's next entry.
pub type CqNotify = Box<dyn FnOnce(CqEntry) + Send>;

pub struct CompletionQueue {
    pub(crate) id: u64,
    entries: Mutex<VecDeque<CqEntry>>,
    /// Cheap emptiness check for pollers (avoids the lock when empty).
    count: AtomicUsize,
    capacity: AtomicUsize,
    vis: Mutex<Vec<Weak<Vi>>>,
    notify: Mutex<Option<CqNotify>>,
    /// A notify handler is installed (spares pollers the lock).
    notify_set: AtomicBool,
    /// The VI the last notice named: a poll looks at it before the
    /// notices (a ping-pong's next message comes on the same VI).
    hot: Mutex<Hot>,
    /// Bumped whenever the hot VI changes (pollers keep a copy).
    hot_gen: AtomicU64,
    /// The hot VI's peer sends no notices (read without the lock).
    hot_watched: AtomicBool,
    /// The hot VI was named more than once in a row (read without the
    /// lock): only then is it worth a look before the notices.
    hot_settled: AtomicBool,
    /// Opaque value for the C shell (its handle).
    pub token: AtomicU64,
}

impl CompletionQueue {
    pub(crate) fn new(id: u64, capacity: usize) -> Result<Self> {
        if capacity == 0 || capacity > MAX_CQ_ENTRIES {
            return Err(ViaError::InvalidParameter("CQ entries"));
        }
        Ok(Self {
            id,
            entries: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
            count: AtomicUsize::new(0),
            capacity: AtomicUsize::new(capacity),
            vis: Mutex::new(Vec::new()),
            notify: Mutex::new(None),
            notify_set: AtomicBool::new(false),
            hot: Mutex::new(Hot {
                vi: Weak::new(),
                streak: 0,
                watched: false,
            }),
            hot_gen: AtomicU64::new(0),
            hot_watched: AtomicBool::new(false),
            hot_settled: AtomicBool::new(false),
            token: AtomicU64::new(0),
        })
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Appends an entry (called with the producing VI's lock held).
    pub(crate) fn push(&self, vi_id: u64, vi_token: u64, recv: bool) {
        let mut q = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(CqEntry {
            vi_id,
            vi_token,
            recv,
        });
        self.count.store(q.len(), Ordering::Release);
    }

    /// Takes the oldest entry, if any.
    pub(crate) fn pop(&self) -> Option<CqEntry> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut q = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let e = q.pop_front();
        self.count.store(q.len(), Ordering::Release);
        e
    }

    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Changes the number of entries; fails if more are queued than fit.
    pub fn resize(&self, capacity: usize) -> Result<()> {
        if capacity == 0 || capacity > MAX_CQ_ENTRIES {
            return Err(ViaError::InvalidParameter("CQ entries"));
        }
        if self.len() > capacity {
            return Err(ViaError::Resource(
                "CQ holds more entries than the new size",
            ));
        }
        self.capacity.store(capacity, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn attach(&self, vi: &Arc<Vi>) {
        let mut v = self.vis.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(vi));
    }

    pub(crate) fn detach(&self, vi_id: u64) {
        let mut v = self.vis.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.upgrade().is_some_and(|vi| vi.id() != vi_id));
        let mut q = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        q.retain(|e| e.vi_id != vi_id);
        self.count.store(q.len(), Ordering::Release);
        drop(q);
        let mut h = self.hot.lock().unwrap_or_else(|e| e.into_inner());
        if h.vi.upgrade().is_none_or(|v| v.id() == vi_id) {
            h.vi = Weak::new();
            h.watched = false;
            self.hot_watched.store(false, Ordering::Relaxed);
            self.hot_settled.store(false, Ordering::Relaxed);
            self.hot_gen.fetch_add(1, Ordering::Release);
        }
    }

    /// Whether any VI still uses this CQ.
    pub fn in_use(&self) -> bool {
        let v = self.vis.lock().unwrap_or_else(|e| e.into_inner());
        v.iter().any(|w| w.strong_count() > 0)
    }

    /// The VIs feeding this CQ (for driving their progress).
    pub(crate) fn members(&self) -> Vec<Arc<Vi>> {
        let v = self.vis.lock().unwrap_or_else(|e| e.into_inner());
        v.iter().filter_map(|w| w.upgrade()).collect()
    }

    pub(crate) fn set_notify(&self, f: CqNotify) {
        *self.notify.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
        self.notify_set.store(true, Ordering::Release);
    }

    pub(crate) fn take_notify_if_ready(&self) -> Option<(CqNotify, CqEntry)> {
        if self.is_empty() || !self.has_notify() {
            return None;
        }
        let mut n = self.notify.lock().unwrap_or_else(|e| e.into_inner());
        n.as_ref()?;
        let e = self.pop()?;
        self.notify_set.store(false, Ordering::Release);
        n.take().map(|f| (f, e))
    }

    pub(crate) fn has_notify(&self) -> bool {
        self.notify_set.load(Ordering::Acquire)
    }

    /// Whether the hot VI is worth a look before the notices (it was
    /// named twice in a row: a ping-pong, a stream; not round-robin).
    pub(crate) fn hot_is_settled(&self) -> bool {
        self.hot_settled.load(Ordering::Relaxed)
    }

    /// Whether the hot VI's peer already sends no notices for it.
    pub(crate) fn hot_is_watched(&self) -> bool {
        self.hot_watched.load(Ordering::Relaxed)
    }

    /// A notice named `vi` (of this CQ) last (or a poll found it had work): it becomes the hot VI, or
    /// stays it one notice longer. A VI hot for [`WATCH_AFTER`] notices
    /// has its peer told to stop them (every poll looks at it first
    /// anyway). Returns the VI that stopped being hot while watched: its
    /// peer was told to resume, and the caller must fence and look at it
    /// (a notice may have been skipped just before).
    pub(crate) fn noticed(&self, vi: &Arc<Vi>) -> Option<Arc<Vi>> {
        // The watched flags change under this lock, so a VI is watched
        // only while it is the hot one.
        let mut h = self.hot.lock().unwrap_or_else(|e| e.into_inner());
        if std::ptr::eq(h.vi.as_ptr(), Arc::as_ptr(vi)) {
            h.streak = h.streak.saturating_add(1);
            if h.streak == 1 {
                self.hot_settled.store(true, Ordering::Relaxed);
            }
            if h.streak >= WATCH_AFTER && !h.watched {
                h.watched = true;
                vi.set_watched(true);
                self.hot_watched.store(true, Ordering::Relaxed);
            }
            return None;
        }
        let old = if h.watched { h.vi.upgrade() } else { None };
        if let Some(o) = &old {
            o.set_watched(false);
        }
        self.hot_watched.store(false, Ordering::Relaxed);
        self.hot_settled.store(false, Ordering::Relaxed);
        *h = Hot {
            vi: Arc::downgrade(vi),
            streak: 0,
            watched: false,
        };
        self.hot_gen.fetch_add(1, Ordering::Release);
        old
    }
}
