//! Threads of the library's own inside a program's process (progress,
//! agents, watchers) start with every signal blocked. A signal sent to
//! the process goes to any one thread that does not block it; a program
//! that blocks its signals and takes them in sigsuspend (nginx's master
//! does) would otherwise have its handler run on one of ours, and its
//! sigsuspend never return: nginx under viarun then ignored SIGTERM for
//! good, holding its listening socket.

use std::io;
use std::thread::JoinHandle;

/// `std::thread::Builder::spawn` with the thread's signals all blocked.
pub fn spawn_quiet<F, T>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    spawn_quiet_from(std::thread::Builder::new().name(name.into()), f)
}

/// `builder.spawn(f)` with the thread's signals all blocked.
pub fn spawn_quiet_from<F, T>(builder: std::thread::Builder, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: sigset_t is plain data, filled by sigfillset before use;
    // pthread_sigmask changes only the calling thread's mask, put back
    // below whatever the spawn did. The new thread inherits the full mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let spawned = builder.spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        spawned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The new thread blocks every signal; the spawning one is as before.
    #[test]
    fn a_quiet_thread_blocks_signals_and_the_spawner_does_not_change() {
        // SAFETY: reading the calling thread's mask into our own set.
        let blocked_term = || unsafe {
            let mut m: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut m);
            libc::sigismember(&m, libc::SIGTERM) == 1
        };
        let before = blocked_term();
        let inside = spawn_quiet("quiet-test", blocked_term)
            .expect("spawn")
            .join()
            .expect("join");
        assert!(inside, "SIGTERM blocked in the quiet thread");
        assert_eq!(blocked_term(), before, "the spawner's mask put back");
    }
}
