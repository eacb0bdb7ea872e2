//! What the process owes its peers when it exits with VIs still open.
//!
//! A VI closes its connection when its last handle is dropped. At exit
//! that may never happen: the program may not drop it (a C program that
//! just returns), or the last handle may be held for a moment by another
//! thread (the progress thread looks at every VI, a peer rendezvous
//! thread keeps one until it ends), which the exit stops. Whatever that
//! connection still owed then stays unsent — above all an acknowledgement
//! held for a reply (`rum::channel`'s `ACK_DELAY_NS`): the peer's reliable
//! send of a message this process placed and checked then ends flushed
//! instead of done. So at exit (an `atexit` handler, registered when the
//! first NIC opens) every VI still open sends what it owes, and its
//! connection is left as the exit leaves it.

use std::sync::{Arc, Mutex, Once, Weak};
use std::time::{Duration, Instant};

use super::NicShared;
use crate::vi::Vi;

/// The NICs opened by this process (dead ones are pruned on each open).
static OPEN_NICS: Mutex<Vec<Weak<NicShared>>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();
/// How long the exit handler waits for a VI another thread is using.
const LOCK_PATIENCE: Duration = Duration::from_millis(20);

/// Remembers `nic` for the exit handler (installed on the first call).
pub(super) fn track(nic: &Arc<NicShared>) {
    HOOK.call_once(|| {
        // SAFETY: registering a plain extern "C" function with no captured
        // state; it catches every panic (see `flush_at_exit`).
        unsafe { libc::atexit(flush_at_exit) };
    });
    let mut nics = OPEN_NICS.lock().unwrap_or_else(|e| e.into_inner());
    nics.retain(|w| w.strong_count() > 0);
    nics.push(Arc::downgrade(nic));
}

extern "C" fn flush_at_exit() {
    // Unwinding out of an atexit handler would abort the exit.
    let _ = std::panic::catch_unwind(flush_open_vis);
}

/// Every VI of this process's open NICs sends what it owes now.
fn flush_open_vis() {
    // The exit may come from a thread holding the list (it is held only
    // to copy or prune it): then there is nothing safe to do.
    let Ok(nics) = OPEN_NICS.try_lock() else {
        return;
    };
    let nics: Vec<Arc<NicShared>> = nics.iter().filter_map(Weak::upgrade).collect();
    for nic in nics {
        // A forked child's exit must not speak on its parent's connections.
        if nic.check_owner().is_err() {
            continue;
        }
        for vi in nic.live_vis() {
            flush_vi(&vi);
        }
    }
}

/// Waits a little for a VI another thread is driving; never for one the
/// exiting thread itself holds (that would hang the exit).
fn flush_vi(vi: &Vi) {
    let until = Instant::now() + LOCK_PATIENCE;
    loop {
        match vi.inner.try_lock() {
            Some(mut g) => {
                if let Some(ch) = g.channel.as_mut() {
                    ch.flush_at_exit();
                }
                return;
            }
            None if Instant::now() < until => std::thread::yield_now(),
            None => return,
        }
    }
}
