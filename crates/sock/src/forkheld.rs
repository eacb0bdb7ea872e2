//! Locks held across fork by the forking thread (from the fork handlers,
//! `process`), so that a child never inherits one held by a thread it
//! does not have: it would wait on it for good. After the fork the parent
//! lets them go as they were; the child first makes what they guard its
//! own (what was the parent's is leaked, never used or dropped there).

use std::cell::RefCell;
use std::sync::Mutex;

type Release = Box<dyn FnOnce(bool)>;

std::thread_local! {
    static HELD: RefCell<Vec<Release>> = const { RefCell::new(Vec::new()) };
}

/// Before fork: takes `lock`; in the child, `in_child` then clears what
/// it guards before the lock goes.
pub(crate) fn hold<T: 'static>(lock: &'static Mutex<T>, in_child: fn(&mut T)) {
    hold_after(lock, |_| {}, in_child);
}

/// As [`hold`], with `before` run on what the lock guards once it is
/// taken, before the fork.
pub(crate) fn hold_after<T: 'static>(
    lock: &'static Mutex<T>,
    before: fn(&mut T),
    in_child: fn(&mut T),
) {
    let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
    before(&mut g);
    let _ = HELD.try_with(|h| {
        h.borrow_mut().push(Box::new(move |child| {
            if child {
                in_child(&mut g);
            }
        }))
    });
}

/// After fork, in the parent (`child` false) or the child: every lock
/// held goes, in the reverse order of taking.
pub(crate) fn release(child: bool) {
    let held = HELD
        .try_with(|h| std::mem::take(&mut *h.borrow_mut()))
        .unwrap_or_default();
    for r in held.into_iter().rev() {
        r(child);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    static GUARDED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

    /// Another thread holds the lock when this one wants to fork: the
    /// fork waits for it (`hold`), so the child finds the lock free and
    /// what it guards cleared, and the parent finds both as they were.
    /// (Forked without `hold`, the child's copy stays held for good.)
    #[test]
    fn a_child_never_inherits_a_lock_held_by_another_thread() {
        GUARDED.lock().unwrap().push(7);
        let (taken, wait_taken) = mpsc::channel();
        let holder = std::thread::spawn(move || {
            let _g = GUARDED.lock().unwrap();
            taken.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        });
        wait_taken.recv().unwrap();
        hold(&GUARDED, |v| v.clear());
        // SAFETY: the child only looks at the lock and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            release(true);
            let ok = GUARDED.try_lock().is_ok_and(|v| v.is_empty());
            // SAFETY: leaving the child at once, running nothing else.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        release(false);
        let mut status = 0;
        // SAFETY: waiting for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child found the lock held"
        );
        assert_eq!(*GUARDED.lock().unwrap(), vec![7]);
        holder.join().unwrap();
    }
}
