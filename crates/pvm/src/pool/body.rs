//! A message body: packed straight into pool pages when the task has a
//! pool, on the heap otherwise (or when the pool is short at pack time;
//! pvm_send then waits for pages). A body that has been sent or received is
//! frozen: others may be reading its pages, so packing more copies it first.

use std::ops::Deref;
use std::sync::Arc;

use super::{Pool, PAGE};

/// Where a task allocates: its pool mapping and its slot.
#[derive(Clone)]
pub struct PoolHandle {
    pub pool: Arc<Pool>,
    pub slot: usize,
}

/// A run of pages held by this task's slot.
pub struct Run {
    home: PoolHandle,
    pub start: u32,
    pub pages: u32,
    pub len: usize,
    frozen: bool,
}

impl Drop for Run {
    fn drop(&mut self) {
        self.home.pool.release(self.start, self.home.slot);
    }
}

impl Run {
    fn bytes(&self) -> &[u8] {
        // SAFETY: the run is held by our slot, so its pages stay mapped and
        // unallocated to anyone else; len never exceeds pages * PAGE.
        unsafe { std::slice::from_raw_parts(self.home.pool.page_ptr(self.start), self.len) }
    }

    fn cap(&self) -> usize {
        self.pages as usize * PAGE
    }
}

enum Store {
    Heap(Vec<u8>),
    Pool(Run),
}

/// Packed bytes of one buffer.
pub struct Body {
    store: Store,
    home: Option<PoolHandle>,
}

impl Default for Body {
    fn default() -> Body {
        Body::new(None)
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.store {
            Store::Heap(_) => "heap",
            Store::Pool(_) => "pool",
        };
        write!(f, "Body({kind}, {} bytes)", self.len())
    }
}

impl Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.store {
            Store::Heap(v) => v,
            Store::Pool(r) => r.bytes(),
        }
    }
}

fn pages_for(n: usize) -> usize {
    n.div_ceil(PAGE).max(1)
}

impl Body {
    pub fn new(home: Option<PoolHandle>) -> Body {
        Body {
            store: Store::Heap(Vec::new()),
            home,
        }
    }

    pub fn from_vec(v: Vec<u8>, home: Option<PoolHandle>) -> Body {
        Body {
            store: Store::Heap(v),
            home,
        }
    }

    /// A received run: the hold taken over from the ring is ours now.
    pub fn received(home: PoolHandle, start: u32, pages: u32, len: usize) -> Body {
        let run = Run {
            home: home.clone(),
            start,
            pages,
            len,
            frozen: true,
        };
        Body {
            store: Store::Pool(run),
            home: Some(home),
        }
    }

    pub fn in_pool(&self) -> bool {
        matches!(self.store, Store::Pool(_))
    }

    /// Makes sure the bytes sit in pool pages, waiting for pages if the
    /// pool is short; (start, pages) of the run, None if it can never fit
    /// or there is no pool. Freezes the body: it is about to be shared.
    pub fn publish(&mut self) -> Option<(u32, u32)> {
        let home = self.home.clone()?;
        if let Store::Heap(v) = &self.store {
            let n = pages_for(v.len());
            let start = home.pool.alloc_blocking(home.slot, n)?;
            let mut run = Run {
                home,
                start,
                pages: n as u32,
                len: 0,
                frozen: false,
            };
            copy_into(&mut run, v);
            self.store = Store::Pool(run);
        }
        match &mut self.store {
            Store::Pool(r) => {
                r.frozen = true;
                Some((r.start, r.pages))
            }
            Store::Heap(_) => None,
        }
    }

    /// Another reference to the same bytes (sending to oneself, probing).
    pub fn share(&mut self) -> Body {
        match &mut self.store {
            Store::Heap(v) => Body::from_vec(v.clone(), self.home.clone()),
            Store::Pool(r) => {
                r.frozen = true;
                let pool = &r.home.pool;
                let g = pool.lock();
                if pool.add_hold(&g, r.start, r.home.slot) {
                    drop(g);
                    Body::received(r.home.clone(), r.start, r.pages, r.len)
                } else {
                    drop(g);
                    Body::from_vec(r.bytes().to_vec(), self.home.clone())
                }
            }
        }
    }

    /// Room for `extra` more bytes that may be written in place.
    fn make_room(&mut self, extra: usize) {
        let need = self.len() + extra;
        match &mut self.store {
            Store::Heap(v) => {
                if v.is_empty() {
                    if let Some(h) = &self.home {
                        if let Some(start) = h.pool.try_alloc(h.slot, pages_for(need)) {
                            self.store = Store::Pool(Run {
                                home: h.clone(),
                                start,
                                pages: pages_for(need) as u32,
                                len: 0,
                                frozen: false,
                            });
                            return;
                        }
                    }
                }
                v.reserve(extra);
            }
            Store::Pool(r) => {
                if !r.frozen && need <= r.cap() {
                    return;
                }
                let want = pages_for(need);
                if !r.frozen
                    && r.home
                        .pool
                        .try_extend(r.home.slot, r.start, r.pages as usize, want)
                {
                    r.pages = want as u32;
                    return;
                }
                // Move: to a bigger run if one is free, else to the heap.
                let bigger = pages_for(need.max(2 * r.len));
                let h = r.home.clone();
                let old = std::mem::replace(&mut self.store, Store::Heap(Vec::new()));
                let Store::Pool(old) = old else {
                    unreachable!()
                };
                if let Some(start) = h.pool.try_alloc(h.slot, bigger) {
                    let mut run = Run {
                        home: h,
                        start,
                        pages: bigger as u32,
                        len: 0,
                        frozen: false,
                    };
                    copy_into(&mut run, old.bytes());
                    self.store = Store::Pool(run);
                } else {
                    let mut v = Vec::with_capacity(need);
                    v.extend_from_slice(old.bytes());
                    self.store = Store::Heap(v);
                }
            }
        }
    }
}

fn copy_into(run: &mut Run, src: &[u8]) {
    debug_assert!(!run.frozen && run.len + src.len() <= run.cap());
    // SAFETY: the run is ours alone (not frozen) and has room (checked by
    // the callers), so the destination is valid and unshared.
    unsafe {
        std::ptr::copy_nonoverlapping(
            src.as_ptr(),
            run.home.pool.page_ptr(run.start).add(run.len),
            src.len(),
        )
    };
    run.len += src.len();
}

/// What the codec appends packed bytes to.
pub trait PackOut {
    fn out_len(&self) -> usize;
    fn reserve_out(&mut self, extra: usize);
    fn put(&mut self, b: &[u8]);
    /// Appends zero bytes up to a total length of `len`.
    fn zero_to(&mut self, len: usize) {
        let n = len.saturating_sub(self.out_len());
        const Z: [u8; 8] = [0; 8];
        let mut left = n;
        while left > 0 {
            let k = left.min(8);
            self.put(&Z[..k]);
            left -= k;
        }
    }
}

impl PackOut for Vec<u8> {
    fn out_len(&self) -> usize {
        self.len()
    }
    fn reserve_out(&mut self, extra: usize) {
        self.reserve(extra);
    }
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn zero_to(&mut self, len: usize) {
        if len > self.len() {
            self.resize(len, 0);
        }
    }
}

impl PackOut for Body {
    fn out_len(&self) -> usize {
        self.len()
    }
    fn reserve_out(&mut self, extra: usize) {
        self.make_room(extra);
    }
    fn put(&mut self, b: &[u8]) {
        self.make_room(b.len());
        match &mut self.store {
            Store::Heap(v) => v.extend_from_slice(b),
            Store::Pool(r) => copy_into(r, b),
        }
    }
}
