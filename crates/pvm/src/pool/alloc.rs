//! Page runs and their holds, the pool lock, and the first-fit page
//! waiters: when a free leaves room, the earliest waiter whose demand fits
//! is handed its run directly (one wake-up, no thundering herd), then the
//! next, while anything fits.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::time::Duration;

use super::{Pool, MAX_SLOTS};
use openvia_core::sys::futex;

/// Index of the first waiter (in arrival order) whose demand fits in
/// `avail` pages: the paper's first-fit rule.
pub fn first_fit(avail: u32, demands: &[u32]) -> Option<usize> {
    demands.iter().position(|&d| d <= avail)
}

/// Held pool lock; released on drop.
pub(crate) struct Locked<'a> {
    pool: &'a Pool,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.pool.header().lock.store(0, Release);
    }
}

/// Our process id, as the lock word holds it. Cached: `getpid` is a
/// system call (glibc no longer caches it) and the lock is taken several
/// times per message; a forked child forgets the parent's value.
fn my_pid() -> u32 {
    static PID: AtomicU32 = AtomicU32::new(0);
    static FORGET_IN_CHILD: std::sync::Once = std::sync::Once::new();
    extern "C" fn forget() {
        PID.store(0, Relaxed);
    }
    let p = PID.load(Relaxed);
    if p != 0 {
        return p;
    }
    FORGET_IN_CHILD.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic,
        // which is async-signal-safe as a fork child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(forget)) };
    });
    // SAFETY: getpid has no preconditions.
    let p = unsafe { libc::getpid() as u32 };
    PID.store(p, Relaxed);
    p
}

/// Whether the lock's holder can still act: a holder that exited and is
/// not yet reaped (a zombie, which signal 0 still finds) is gone too.
fn pid_alive(pid: u32) -> bool {
    openvia_core::sys::process::alive(pid)
}

impl Pool {
    /// Takes the pool lock. A holder that died (exited, reaped or not) is
    /// detected and its lock taken over; the page map is then rebuilt.
    pub(crate) fn lock(&self) -> Locked<'_> {
        let me = my_pid();
        let word = &self.header().lock;
        let mut tries = 0u32;
        loop {
            let cur = word.load(Relaxed);
            if cur == 0 && word.compare_exchange(0, me, Acquire, Relaxed).is_ok() {
                return Locked { pool: self };
            }
            tries += 1;
            if tries.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            if tries.is_multiple_of(4096)
                && cur != 0
                && !pid_alive(cur)
                && word.compare_exchange(cur, me, Acquire, Relaxed).is_ok()
            {
                let g = Locked { pool: self };
                self.repair(&g);
                return g;
            }
        }
    }

    /// Rebuilds used[] and the free count from run_len[] and the holds,
    /// undoing whatever a dead lock holder left half done.
    fn repair(&self, _g: &Locked) {
        for p in 0..self.npages {
            self.used(p).store(0, Relaxed);
        }
        let mut used = 0;
        for p in 0..self.npages {
            let n = self.run_len(p).load(Relaxed) as usize;
            if n == 0 {
                continue;
            }
            if (0..MAX_SLOTS).any(|s| self.holds(p, s).load(Relaxed) > 0) && p + n <= self.npages {
                (p..p + n).for_each(|q| self.used(q).store(1, Relaxed));
                used += n;
            } else {
                self.run_len(p).store(0, Relaxed);
            }
        }
        self.header().rover.store(0, Relaxed);
        let free = self.npages.saturating_sub(used) as u32;
        self.header().free_pages.store(free, Release);
    }

    fn run_free(&self, start: usize, n: usize) -> bool {
        start + n <= self.npages && (start..start + n).all(|p| self.used(p).load(Relaxed) == 0)
    }

    /// Address-ordered first fit for `n` free contiguous pages. The rover
    /// is a lower bound of the free pages: keeping messages at the low end
    /// keeps the touched part of the pool small and its pages warm.
    fn find_run(&self, _g: &Locked, n: usize) -> Option<usize> {
        if n == 0 || n > self.header().free_pages.load(Relaxed) as usize {
            return None;
        }
        let mut p = (self.header().rover.load(Relaxed) as usize).min(self.npages);
        let mut first_free = None;
        let (mut start, mut count) = (p, 0);
        while p < self.npages {
            if self.used(p).load(Relaxed) == 0 {
                first_free.get_or_insert(p);
                if count == 0 {
                    start = p;
                }
                count += 1;
                if count == n {
                    break;
                }
            } else {
                count = 0;
            }
            p += 1;
        }
        if let Some(f) = first_free {
            self.header().rover.store(f as u32, Relaxed);
        }
        (count == n).then_some(start)
    }

    fn largest_free_run(&self, _g: &Locked) -> usize {
        let (mut best, mut cur) = (0, 0);
        for p in 0..self.npages {
            if self.used(p).load(Relaxed) == 0 {
                cur += 1;
                best = best.max(cur);
            } else {
                cur = 0;
            }
        }
        best
    }

    fn take_run(&self, _g: &Locked, start: usize, n: usize, slot: usize) {
        (start..start + n).for_each(|p| self.used(p).store(1, Relaxed));
        self.run_len(start).store(n as u32, Relaxed);
        self.holds(start, slot).store(1, Relaxed);
        self.header().free_pages.fetch_sub(n as u32, Relaxed);
        let h = &self.header().rover;
        if h.load(Relaxed) as usize == start {
            h.store((start + n) as u32, Relaxed);
        }
    }

    /// Allocates `n` pages for `slot` if a run is free now.
    pub fn try_alloc(&self, slot: usize, n: usize) -> Option<u32> {
        let g = self.lock();
        let start = self.find_run(&g, n)?;
        self.take_run(&g, start, n, slot);
        Some(start as u32)
    }

    /// Grows a run held only by `slot` in place, if the pages after it are free.
    pub fn try_extend(&self, slot: usize, start: u32, old: usize, new: usize) -> bool {
        let g = self.lock();
        let s = start as usize;
        let sole = (0..MAX_SLOTS).all(|o| o == slot || self.holds(s, o).load(Relaxed) == 0);
        if !sole || !self.run_free(s + old, new - old) {
            return false;
        }
        (s + old..s + new).for_each(|p| self.used(p).store(1, Relaxed));
        self.run_len(s).store(new as u32, Relaxed);
        self.header()
            .free_pages
            .fetch_sub((new - old) as u32, Relaxed);
        drop(g);
        true
    }

    /// Allocates `n` pages, queueing as a waiter until a free hands them
    /// over; None if `n` can never fit.
    pub fn alloc_blocking(&self, slot: usize, n: usize) -> Option<u32> {
        loop {
            match self.request(slot, n) {
                Request::Granted(s) => return Some(s),
                Request::Never => return None,
                Request::Queued => {}
            }
            loop {
                let w = &self.slot(slot).wake;
                let seen = w.load(SeqCst);
                if let Some(s) = self.take_grant(slot) {
                    return Some(s);
                }
                // The timeout re-checks on our own in case a freer died
                // between freeing and waking.
                futex::wait(w, seen, Some(Duration::from_millis(50)));
                if let Some(s) = self.take_grant(slot) {
                    return Some(s);
                }
                if self.retry_waiter(slot, n) {
                    break;
                }
            }
        }
    }

    /// Takes a run if one fits, or else queues `slot` as a waiter.
    pub fn request(&self, slot: usize, n: usize) -> Request {
        if n == 0 || n > self.npages {
            return Request::Never;
        }
        let g = self.lock();
        if let Some(start) = self.find_run(&g, n) {
            self.take_run(&g, start, n, slot);
            return Request::Granted(start as u32);
        }
        let h = self.header();
        let s = self.slot(slot);
        if s.wait_pages.load(Relaxed) == 0 {
            s.wait_ticket
                .store(h.next_ticket.fetch_add(1, Relaxed), Relaxed);
            s.wait_pages.store(n as u32, Relaxed);
            h.waiters.fetch_add(1, Relaxed);
            h.waits.fetch_add(1, Relaxed);
        }
        Request::Queued
    }

    /// Start of the run a free handed to `slot`, if any.
    pub fn take_grant(&self, slot: usize) -> Option<u32> {
        let g = self.slot(slot).grant.swap(0, AcqRel);
        (g != 0).then(|| g - 1)
    }

    /// Periodic re-check of a waiter: true if it should request again
    /// (it left the queue because its run is free now).
    fn retry_waiter(&self, slot: usize, n: usize) -> bool {
        let g = self.lock();
        let s = self.slot(slot);
        if s.wait_pages.load(Relaxed) == 0 {
            // Granted meanwhile: the grant is picked up by the caller.
            return s.grant.load(Relaxed) == 0;
        }
        if self.find_run(&g, n).is_some() {
            s.wait_pages.store(0, Relaxed);
            self.header().waiters.fetch_sub(1, Relaxed);
            return true;
        }
        false
    }

    /// Adds a hold of `slot` on a run (the run is being queued to it).
    pub(crate) fn add_hold(&self, _g: &Locked, start: u32, slot: usize) -> bool {
        let h = self.holds(start as usize, slot);
        let v = h.load(Relaxed);
        if v == u8::MAX {
            return false;
        }
        h.store(v + 1, Relaxed);
        true
    }

    /// Drops one hold of `slot` on a run; frees the run when none is left.
    pub fn release(&self, start: u32, slot: usize) {
        let g = self.lock();
        self.release_locked(&g, start as usize, slot);
    }

    fn release_locked(&self, g: &Locked, start: usize, slot: usize) {
        let h = self.holds(start, slot);
        let v = h.load(Relaxed);
        if v > 0 {
            h.store(v - 1, Relaxed);
        }
        if v <= 1 && (0..MAX_SLOTS).all(|s| self.holds(start, s).load(Relaxed) == 0) {
            self.free_run(g, start);
        }
    }

    fn free_run(&self, g: &Locked, start: usize) {
        let n = self.run_len(start).swap(0, Relaxed) as usize;
        (start..(start + n).min(self.npages)).for_each(|p| self.used(p).store(0, Relaxed));
        self.header().rover.fetch_min(start as u32, Relaxed);
        self.header().free_pages.fetch_add(n as u32, Relaxed);
        if self.header().waiters.load(Relaxed) > 0 {
            self.grant_waiters(g);
        }
    }

    /// First-fit over the waiters in arrival order; each one served gets
    /// its run and exactly one wake-up.
    fn grant_waiters(&self, g: &Locked) {
        loop {
            let mut waiting: Vec<(u64, usize, u32)> = (0..MAX_SLOTS)
                .filter_map(|i| {
                    let s = self.slot(i);
                    let n = s.wait_pages.load(Relaxed);
                    (n > 0).then(|| (s.wait_ticket.load(Relaxed), i, n))
                })
                .collect();
            if waiting.is_empty() {
                return;
            }
            waiting.sort_unstable();
            let demands: Vec<u32> = waiting.iter().map(|w| w.2).collect();
            let avail = self.largest_free_run(g) as u32;
            let Some(k) = first_fit(avail, &demands) else {
                return;
            };
            let (_, slot, n) = waiting[k];
            let start = self.find_run(g, n as usize).expect("largest run fits");
            self.take_run(g, start, n as usize, slot);
            let s = self.slot(slot);
            s.wait_pages.store(0, Relaxed);
            self.header().waiters.fetch_sub(1, Relaxed);
            s.grant.store(start as u32 + 1, Release);
            s.wake.fetch_add(1, SeqCst);
            futex::wake_one(&s.wake);
        }
    }

    /// The pvmd gives `slot` to a new task.
    pub fn claim_slot(&self, slot: usize, tid: i32, pid: i32) {
        let _g = self.lock();
        let s = self.slot(slot);
        s.head.store(0, Relaxed);
        s.tail.store(0, Relaxed);
        s.wait_pages.store(0, Relaxed);
        s.grant.store(0, Relaxed);
        s.watchers.store(0, Relaxed);
        s.pid.store(pid, Relaxed);
        s.tid.store(tid, Release);
    }

    pub fn set_slot_pid(&self, slot: usize, pid: i32) {
        self.slot(slot).pid.store(pid, Relaxed);
    }

    /// The pvmd retires a dead task's slot: senders now get PvmNoTask, and
    /// every run it held (its buffers, its unread messages, a grant it did
    /// not pick up) loses that hold. Returns the pages freed.
    pub fn reclaim_slot(&self, slot: usize) -> usize {
        let g = self.lock();
        let before = self.header().free_pages.load(Relaxed);
        let s = self.slot(slot);
        s.tid.store(0, Release);
        if s.wait_pages.swap(0, Relaxed) > 0 {
            self.header().waiters.fetch_sub(1, Relaxed);
        }
        s.grant.store(0, Relaxed);
        s.head.store(s.tail.load(Relaxed), Relaxed);
        for p in 0..self.npages {
            if self.holds(p, slot).load(Relaxed) > 0 {
                self.holds(p, slot).store(0, Relaxed);
                if (0..MAX_SLOTS).all(|o| self.holds(p, o).load(Relaxed) == 0) {
                    self.free_run(&g, p);
                }
            }
        }
        // Wake a receiver sleeping in that slot (a thread of a dying task),
        // and its pvm_getfds watcher if it has one.
        s.bell.fetch_add(1, SeqCst);
        futex::wake_all(&s.bell);
        (self.header().free_pages.load(Relaxed) - before) as usize
    }
}

/// Outcome of [`Pool::request`].
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    Granted(u32),
    Queued,
    Never,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_picks_the_papers_task() {
        assert_eq!(first_fit(5, &[7, 9, 3, 10, 5, 15, 6]), Some(2));
        assert_eq!(first_fit(2, &[7, 9, 3]), None);
    }

    #[test]
    fn a_free_wakes_the_first_waiter_that_fits() {
        let pool = Pool::create(16).unwrap();
        let big = pool.try_alloc(0, 11).unwrap();
        let small = pool.try_alloc(0, 5).unwrap();
        assert_eq!(pool.free_pages(), 0);
        let demands = [7, 9, 3, 10, 5, 15, 6];
        for (i, &d) in demands.iter().enumerate() {
            assert_eq!(pool.request(i + 1, d), Request::Queued);
        }
        pool.release(small, 0); // 5 free pages
        let granted: Vec<usize> = (1..=7)
            .filter(|&s| pool.slot(s).grant.load(Relaxed) != 0)
            .collect();
        assert_eq!(granted, vec![3], "only the task wanting 3 is woken");
        assert_eq!(pool.slot(3).wake.load(Relaxed), 1, "one wake-up");
        assert_eq!(pool.free_pages(), 2);
        pool.release(big, 0); // 13 free, runs of 11 and 2
        assert!(pool.take_grant(1).is_some(), "then the task wanting 7");
        assert!(pool.take_grant(2).is_none());
        let r = pool.take_grant(3).unwrap();
        pool.release(r, 3);
    }

    #[test]
    fn reclaim_frees_a_dead_slots_runs() {
        let pool = Pool::create(8).unwrap();
        pool.claim_slot(4, 0x40004, 1);
        let a = pool.try_alloc(4, 3).unwrap();
        let b = pool.try_alloc(5, 2).unwrap();
        {
            let g = pool.lock();
            assert!(pool.add_hold(&g, b, 4));
        }
        assert_eq!(pool.reclaim_slot(4), 3, "b is still held by slot 5");
        pool.release(b, 5);
        assert_eq!(pool.free_pages(), 8);
        assert!(pool.try_alloc(0, 8).is_some());
        let _ = a;
    }

    #[test]
    fn lock_of_a_dead_holder_is_taken_over() {
        let pool = Pool::create(4).unwrap();
        let _ = pool.try_alloc(0, 2).unwrap();
        // A pid that cannot exist holds the lock, mid-way through a free.
        pool.header().lock.store(0x7fff_fff0, Relaxed);
        pool.used(3).store(1, Relaxed);
        drop(pool.lock());
        assert_eq!(pool.free_pages(), 2);
        assert!(pool.try_alloc(1, 2).is_some());
    }
}
