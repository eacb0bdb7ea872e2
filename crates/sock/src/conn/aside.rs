//! Threads that settle connections aside (`settle::settle_aside`), kept
//! from one connection to the next. A nonblocking first use must not
//! wait for the peer, so its setting up goes to another thread; that was
//! a new thread each time, and with a connection per request (nginx and
//! ab, both nonblocking) making and ending a thread per connection — its
//! stack mapped and unmapped, the unmapping sending every other CPU of a
//! threaded process a TLB flush — was much of the fifth of all CPU time
//! the settling threads took (`perf`, 2-vCPU box). Now a thread that is
//! done waits up to `IDLE_FOR` for the next job, at most `IDLE_MAX` of
//! them; a job that finds none idle gets a new thread, so no job ever
//! waits behind another (a settle may wait long for its peer).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// Threads that run jobs; `SETTLERS` is the library's.
pub(super) struct Threads {
    pool: Mutex<Option<Pool>>,
    wake: Condvar,
    /// Threads made so far.
    made: AtomicUsize,
}

struct Pool {
    /// The process whose threads these are (a forked child has none).
    pid: u32,
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    /// Threads asked for and not yet waiting or working.
    starting: usize,
}

pub(super) static SETTLERS: Threads = Threads::new();

/// Idle threads kept at most, and how long each waits for a job.
const IDLE_MAX: usize = 4;
const IDLE_FOR: Duration = Duration::from_secs(2);

/// This process's pool (a forked child starts an empty one: its parent's
/// threads are not in it, and its parent's jobs are not its to run).
fn pool_of(g: &mut Option<Pool>) -> &mut Pool {
    let me = crate::process::id();
    if g.as_ref().is_some_and(|p| p.pid != me) {
        std::mem::forget(g.take());
    }
    g.get_or_insert_with(|| Pool {
        pid: me,
        jobs: VecDeque::new(),
        idle: 0,
        starting: 0,
    })
}

impl Threads {
    const fn new() -> Threads {
        Threads {
            pool: Mutex::new(None),
            wake: Condvar::new(),
            made: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Pool>> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `job` on a pool thread: an idle one, else a new one. Where no
    /// thread can be made, a job is run here, now.
    pub(super) fn run(&'static self, job: Job) {
        let need_thread = {
            let mut g = self.lock();
            let pool = pool_of(&mut g);
            pool.jobs.push_back(job);
            let need = pool.jobs.len() > pool.idle + pool.starting;
            if need {
                pool.starting += 1;
            } else {
                self.wake.notify_one();
            }
            need
        };
        if !need_thread {
            return;
        }
        let spawned = openvia_core::sys::thread::spawn_quiet("viarun-settle", || self.work());
        if spawned.is_ok() {
            self.made.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let job = {
            let mut g = self.lock();
            let pool = pool_of(&mut g);
            pool.starting -= 1;
            if pool.jobs.len() > pool.idle + pool.starting {
                pool.jobs.pop_back()
            } else {
                None
            }
        };
        if let Some(job) = job {
            job();
        }
    }

    /// A new pool thread: takes jobs while there are, then waits for more.
    fn work(&self) {
        let mut g = self.lock();
        pool_of(&mut g).starting -= 1;
        loop {
            let pool = pool_of(&mut g);
            if let Some(job) = pool.jobs.pop_front() {
                drop(g);
                job();
                g = self.lock();
                continue;
            }
            if pool.idle >= IDLE_MAX {
                return;
            }
            pool.idle += 1;
            let (woken, waited) = self
                .wake
                .wait_timeout(g, IDLE_FOR)
                .unwrap_or_else(|e| e.into_inner());
            g = woken;
            let pool = pool_of(&mut g);
            pool.idle -= 1;
            if waited.timed_out() && pool.jobs.is_empty() {
                return;
            }
        }
    }
}

/// Before fork (`forkheld`): the child has none of the pool's threads,
/// and its jobs are the parent's.
pub(crate) fn hold_across_fork() {
    crate::forkheld::hold(&SETTLERS.pool, |pool| std::mem::forget(pool.take()));
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::Arc;

    use super::*;

    static TEST_THREADS: Threads = Threads::new();

    /// Every job runs at once, even while the others still run (each job
    /// here waits until all have started), and the threads are kept for
    /// the next round, which makes none.
    #[test]
    fn jobs_never_wait_behind_others_and_threads_are_kept() {
        let n = 3;
        for round in 0..2 {
            let started = Arc::new(AtomicUsize::new(0));
            let (tx, rx) = mpsc::channel();
            for _ in 0..n {
                let (started, tx) = (started.clone(), tx.clone());
                TEST_THREADS.run(Box::new(move || {
                    started.fetch_add(1, Ordering::SeqCst);
                    let t = std::time::Instant::now();
                    while started.load(Ordering::SeqCst) < n {
                        if t.elapsed() > Duration::from_secs(10) {
                            return; // never sends: the test fails below
                        }
                        std::thread::yield_now();
                    }
                    tx.send(()).unwrap();
                }));
            }
            for _ in 0..n {
                rx.recv_timeout(Duration::from_secs(20))
                    .expect("a job waited behind another");
            }
            // Wait until all are idle again (they go on after sending).
            let t = std::time::Instant::now();
            while TEST_THREADS.lock().as_ref().map_or(0, |p| p.idle) < n {
                assert!(t.elapsed() < Duration::from_secs(10), "threads not kept");
                std::thread::yield_now();
            }
            assert_eq!(
                TEST_THREADS.made.load(Ordering::Relaxed),
                n,
                "round {round}: threads made"
            );
        }
    }
}
