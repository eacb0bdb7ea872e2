//! Opaque C handles that survive misuse.
//!
//! A VIPL handle is a pointer-sized value the program keeps and passes
//! back. We never dereference it: it encodes a kind tag, a slot index and a
//! generation, so a handle of the wrong kind, a destroyed one (stale
//! generation) or garbage is refused with `VIP_INVALID_PARAMETER` instead
//! of touching freed memory.
//!
//! Lookups take no lock: a reader announces itself in the slot's `users`
//! count and then checks the generation; destruction first moves the
//! generation on and then waits for `users` to drain before dropping the
//! object (both sides use sequentially consistent operations, so one of
//! them always sees the other).

use std::cell::UnsafeCell;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const INDEX_BITS: u32 = 16;
const GEN_BITS: u32 = 24;
const SLOTS: usize = 1 << 14;

/// The kinds of handle (the tag keeps one kind from passing for another).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Kind {
    Nic = 0x51,
    Vi = 0x52,
    Cq = 0x53,
    Ptag = 0x54,
    Conn = 0x55,
}

struct Slot<T> {
    /// generation << 1 | live
    state: AtomicU64,
    users: AtomicU32,
    obj: UnsafeCell<Option<Arc<T>>>,
}

/// A table of live objects of one kind.
pub struct HandleTable<T> {
    kind: Kind,
    slots: Box<[Slot<T>]>,
    free: Mutex<Vec<u32>>,
}

// SAFETY: `obj` is only written while the slot is not live and has no
// users (see `insert`/`remove`), and only read by users of a live slot.
unsafe impl<T: Send + Sync> Sync for HandleTable<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Send for HandleTable<T> {}

/// A borrowed object; keeps its slot from being torn down.
pub struct Guard<'a, T> {
    slot: &'a Slot<T>,
    obj: &'a Arc<T>,
}

impl<T> std::ops::Deref for Guard<'_, T> {
    type Target = Arc<T>;
    fn deref(&self) -> &Arc<T> {
        self.obj
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.slot.users.fetch_sub(1, Ordering::SeqCst);
    }
}

fn encode(kind: Kind, index: u32, generation: u64) -> *mut c_void {
    let v = ((kind as u64) << 48)
        | ((generation & ((1 << GEN_BITS) - 1)) << INDEX_BITS)
        | (index as u64 + 1);
    v as usize as *mut c_void
}

fn decode(h: *mut c_void) -> Option<(u8, u32, u64)> {
    let v = h as usize as u64;
    let low = v & ((1 << INDEX_BITS) - 1);
    if low == 0 {
        return None;
    }
    let kind = (v >> 48) as u8;
    let generation = (v >> INDEX_BITS) & ((1 << GEN_BITS) - 1);
    Some((kind, (low - 1) as u32, generation))
}

impl<T> HandleTable<T> {
    pub fn new(kind: Kind) -> Self {
        let slots: Vec<Slot<T>> = (0..SLOTS)
            .map(|_| Slot {
                state: AtomicU64::new(0),
                users: AtomicU32::new(0),
                obj: UnsafeCell::new(None),
            })
            .collect();
        Self {
            kind,
            slots: slots.into_boxed_slice(),
            free: Mutex::new((0..SLOTS as u32).rev().collect()),
        }
    }

    /// Stores `obj` and returns its new handle (None when the table is full).
    pub fn insert(&self, obj: Arc<T>) -> Option<*mut c_void> {
        let index = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
        let slot = &self.slots[index as usize];
        let generation = (slot.state.load(Ordering::SeqCst) >> 1) & ((1 << GEN_BITS) - 1);
        // SAFETY: the slot is free: not live, so no user holds a reference
        // to `obj` (users of stale handles never read it).
        unsafe { *slot.obj.get() = Some(obj) };
        slot.state.store((generation << 1) | 1, Ordering::SeqCst);
        Some(encode(self.kind, index, generation))
    }

    /// Looks a handle up; None for null, foreign, stale or garbage values.
    #[inline]
    pub fn get(&self, h: *mut c_void) -> Option<Guard<'_, T>> {
        let (kind, index, generation) = decode(h)?;
        if kind != self.kind as u8 {
            return None;
        }
        let slot = self.slots.get(index as usize)?;
        slot.users.fetch_add(1, Ordering::SeqCst);
        if slot.state.load(Ordering::SeqCst) != (generation << 1) | 1 {
            slot.users.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        // SAFETY: the slot is live with our generation and we are counted
        // in `users`, so `remove` cannot drop the object until we finish.
        let obj = unsafe { (*slot.obj.get()).as_ref() }?;
        Some(Guard { slot, obj })
    }

    /// Invalidates a handle and returns its object (None if not live).
    pub fn remove(&self, h: *mut c_void) -> Option<Arc<T>> {
        let (kind, index, generation) = decode(h)?;
        if kind != self.kind as u8 {
            return None;
        }
        let slot = self.slots.get(index as usize)?;
        let next = ((generation + 1) & ((1 << GEN_BITS) - 1)) << 1;
        slot.state
            .compare_exchange(
                (generation << 1) | 1,
                next,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .ok()?;
        while slot.users.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        // SAFETY: the slot is no longer live and has no users.
        let obj = unsafe { (*slot.obj.get()).take() };
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(index);
        obj
    }

    /// Every live object (for cleanup when a NIC closes).
    pub fn live(&self) -> Vec<(*mut c_void, Arc<T>)> {
        let mut out = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            let st = slot.state.load(Ordering::SeqCst);
            if st & 1 == 1 {
                let h = encode(self.kind, i as u32, st >> 1);
                if let Some(g) = self.get(h) {
                    out.push((h, (*g).clone()));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_foreign_and_garbage_handles_miss() {
        let t: HandleTable<u32> = HandleTable::new(Kind::Vi);
        let other: HandleTable<u32> = HandleTable::new(Kind::Cq);
        let h = t.insert(Arc::new(7)).unwrap();
        assert_eq!(**t.get(h).unwrap(), 7);
        assert!(other.get(h).is_none(), "wrong kind");
        assert!(t.get(std::ptr::null_mut()).is_none());
        assert!(t.get(0xdead_beef as *mut c_void).is_none());
        assert_eq!(*t.remove(h).unwrap(), 7);
        assert!(t.get(h).is_none(), "stale");
        assert!(t.remove(h).is_none(), "double destroy");
        let h2 = t.insert(Arc::new(8)).unwrap();
        assert_ne!(h, h2);
        assert!(t.get(h).is_none());
    }

    #[test]
    fn concurrent_lookup_and_remove() {
        let t: Arc<HandleTable<Vec<u8>>> = Arc::new(HandleTable::new(Kind::Nic));
        for _ in 0..200 {
            let h = t.insert(Arc::new(vec![1; 64])).unwrap() as usize;
            let t2 = t.clone();
            let reader = std::thread::spawn(move || {
                let mut seen = 0;
                for _ in 0..1000 {
                    if let Some(g) = t2.get(h as *mut c_void) {
                        assert_eq!(g.len(), 64);
                        seen += 1;
                    }
                }
                seen
            });
            t.remove(h as *mut c_void);
            reader.join().unwrap();
        }
    }
}
