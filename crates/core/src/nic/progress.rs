//! The NIC's progress thread: what makes a posted descriptor complete
//! even if the program never calls in again.
//!
//! While the program polls, the thread stays off its VIs (taking a lock the
//! program wants would make it wait for a thread the scheduler may have
//! preempted) and serves only what the program may not be looking at:
//! notify handlers and due protocol timers. On the network device it also
//! takes the VIs' sockets out of its epoll set meanwhile (see
//! `NicShared::watch_sockets`). When the program goes quiet it
//! drives every VI, then arms the doorbell, polls the sockets a while if
//! the owner asked for it (`Nic::set_progress_spin`, off by default) and
//! sleeps in epoll until a peer writes, a connection socket hangs up, a
//! handler is installed, or the next protocol timer is due.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{NicShared, TOKEN_EVENT};

/// While the program polls, a protocol timer must be this overdue before
/// the progress thread takes the VI from it (a held acknowledgement asks
/// for "now" on every message; the program's own polling sends it).
const BUSY_TIMER_SLACK_NS: u64 = 1_000_000;
use crate::sys::poll::Epoll;

impl NicShared {
    /// The earliest protocol timer of any VI (CLOCK_MONOTONIC ns).
    fn next_timer_ns(&self) -> Option<u64> {
        if !self.drive.timers {
            return None;
        }
        self.live_vis()
            .iter()
            .filter_map(|vi| match vi.inner.try_lock() {
                Some(g) => g.channel.as_ref().and_then(|c| c.timer_deadline_ns()),
                // Busy: its owner drives it; look again soon.
                None => Some(crate::sys::now_ns() + 1_000_000),
            })
            .min()
    }

    /// One round over every VI; returns whether anything moved.
    fn progress_round(&self) -> bool {
        let mut did = false;
        let now = crate::sys::now_ns();
        for vi in self.live_vis() {
            did |= vi.poke_timers(true, now);
        }
        self.finish_round(did)
    }

    /// The end of either round: CQs with a notify handler are driven and
    /// their handlers fired, and local waiters are woken if anything moved.
    fn finish_round(&self, mut did: bool) -> bool {
        for cq in self.live_cqs() {
            if cq.has_notify() {
                for vi in cq.members() {
                    did |= vi.poke(true);
                }
                self.fire_cq_notify(&cq);
            }
        }
        if did {
            self.doorbell.ring_local();
        }
        did
    }

    /// The round while the program is busy polling: it drives its own VIs,
    /// so only what it may not be looking at is served — notify handlers,
    /// and protocol timers that are due. Taking a VI's lock the program
    /// wants would make it wait for this thread (a priority inversion when
    /// the CPU is shared).
    fn progress_round_busy(&self) -> bool {
        let now = crate::sys::now_ns();
        let mut did = false;
        for vi in self.live_vis() {
            let due = vi.has_notify()
                || (self.drive.timers
                    && matches!(vi.inner.try_lock(), Some(g) if g.channel.as_ref()
                        .and_then(|c| c.timer_deadline_ns())
                        .is_some_and(|t| t + BUSY_TIMER_SLACK_NS <= now)));
            if due {
                did |= vi.poke_timers(true, now);
            }
        }
        self.finish_round(did)
    }

    fn wants_attention(&self) -> bool {
        self.live_vis().iter().any(|v| v.has_notify())
            || self.live_cqs().iter().any(|c| c.has_notify())
    }
}

pub(super) fn progress_loop(weak: Weak<NicShared>, epoll: Arc<Epoll>, nap: Epoll) {
    crate::vi::held::this_thread_is_transport();
    let mut last_activity = u64::MAX;
    let mut tokens = Vec::new();
    let mut poll = PollBeforeSleep::default();
    loop {
        let mut busy = false;
        let timeout = {
            let Some(nic) = weak.upgrade() else { return };
            if nic.closed.load(Ordering::SeqCst) {
                return;
            }
            let act = nic.activity.load(Ordering::Relaxed);
            // A program blocked in a Wait is not polling, nor is one that
            // is event-driven: then the thread watches everything
            // (hang-ups too) at once.
            let active = act != last_activity && !nic.doorbell.has_waiters() && !nic.event_driven();
            last_activity = act;
            // Before the last look of a round that may end in sleep: a
            // socket added back with data queued reports it at once.
            nic.watch_sockets(!active);
            let did = if active {
                nic.progress_round_busy()
            } else {
                nic.progress_round()
            };
            if active {
                busy = true;
                Some(Duration::from_micros(nic.config.progress_interval_us))
            } else if did {
                continue;
            } else {
                // Going to sleep: ask peers to ring us, then look once more
                // so nothing published before the flag was seen is missed.
                nic.doorbell.arm();
                if nic.progress_round() {
                    nic.doorbell.disarm();
                    continue;
                }
                if nic.wants_attention() {
                    Some(Duration::from_micros(nic.config.progress_interval_us))
                } else {
                    Some(Duration::from_secs(1))
                }
            }
        };
        // Never sleep past a protocol timer (retransmission, keepalive,
        // dead peer): a posted descriptor must complete on its own.
        let timeout = match weak.upgrade().and_then(|n| n.next_timer_ns()) {
            // The polling program runs the timers of the VIs it polls
            // (a held acknowledgement asks for "soon" after every message):
            // waking for them would only preempt it, once a millisecond,
            // on the CPU it spins on. Due timers of VIs it leaves alone
            // are served at the busy round's cadence.
            Some(_) if busy => timeout,
            Some(t) => {
                let left = Duration::from_nanos(t.saturating_sub(crate::sys::now_ns()));
                Some(timeout.map_or(left, |d| d.min(left)))
            }
            None => timeout,
        };
        if busy {
            // The program polls its sockets itself: a wake-up per arriving
            // datagram would only steal its CPU. Nap on our own eventfd
            // alone (a thread about to block rings it), then collect what
            // happened meanwhile (hang-ups) without waiting.
            let Some(nic) = weak.upgrade() else { return };
            nic.doorbell.napping(true);
            // A thread that blocked just before the flag went up could not
            // see it: look once more (both sides use SeqCst).
            if !nic.doorbell.has_waiters() {
                drop(nic);
                nap.wait(timeout, &mut tokens);
            }
            if let Some(nic) = weak.upgrade() {
                nic.doorbell.napping(false);
            }
            epoll.wait(Some(Duration::ZERO), &mut tokens);
        } else {
            let Some(nic) = weak.upgrade() else { return };
            let setting = nic.progress_spin();
            drop(nic);
            poll.wait(setting, &epoll, timeout, &mut tokens);
        }
        let Some(nic) = weak.upgrade() else { return };
        nic.doorbell.disarm();
        for &t in &tokens {
            if t == TOKEN_EVENT {
                nic.doorbell.event().drain();
            } else if let Some(vi) = nic.vi(t) {
                vi.read_peer_event();
            }
        }
    }
}

/// The progress thread's poll before it sleeps (`Nic::set_progress_spin`):
/// looks at the sockets without blocking, pausing between looks, until
/// something is there or the window is used up, then sleeps in epoll.
#[derive(Default)]
struct PollBeforeSleep {
    /// The setting the window was made for: (limit, contended) in ns.
    setting: (u64, u64),
    window: Option<crate::spin::Window>,
}

impl PollBeforeSleep {
    /// Returns whether the poll saw an event (no sleep was needed).
    fn wait(
        &mut self,
        setting: (u64, u64),
        epoll: &Epoll,
        timeout: Option<Duration>,
        tokens: &mut Vec<u64>,
    ) -> bool {
        if setting != self.setting || self.window.is_none() {
            self.setting = setting;
            self.window = (setting.0 > 0)
                .then(|| crate::spin::Window::new(Duration::from_nanos(setting.0), setting.1));
        }
        let Some(window) = self.window.as_mut() else {
            epoll.wait(timeout, tokens);
            return false;
        };
        let mut spin = window.start();
        tokens.clear();
        while spin.go_on() {
            epoll.wait(Some(Duration::ZERO), tokens);
            if !tokens.is_empty() {
                break;
            }
        }
        let caught = !tokens.is_empty();
        if !caught {
            epoll.wait(timeout, tokens);
        }
        // A wait that ended with nothing (the timeout: a timer, or the
        // idle second) counts as a long one: the window shrinks.
        window.settle_woken(&spin, !tokens.is_empty());
        caught
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::poll::EventFd;
    use std::os::fd::AsRawFd;

    /// No pause ends these polls: a loaded test machine must not decide.
    const NEVER_CONTENDED: u64 = u64::MAX;

    fn epoll_with_event() -> (Epoll, Arc<EventFd>) {
        let epoll = Epoll::new().unwrap();
        let ev = Arc::new(EventFd::new().unwrap());
        epoll.add(ev.fd().as_raw_fd(), 7).unwrap();
        (epoll, ev)
    }

    /// One poll with spin limit `limit_ns` while a thread signals the
    /// event 2 ms in: whether the poll caught it (no sleep).
    fn poll_once(epoll: &Epoll, ev: &Arc<EventFd>, limit_ns: u64) -> bool {
        let mut tokens = Vec::new();
        let mut poll = PollBeforeSleep::default();
        let ev2 = ev.clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2));
            ev2.signal();
        });
        let caught = poll.wait(
            (limit_ns, NEVER_CONTENDED),
            epoll,
            Some(Duration::from_secs(10)),
            &mut tokens,
        );
        writer.join().unwrap();
        assert_eq!(tokens, vec![7]);
        ev.drain();
        caught
    }

    /// The spin is capped at MAX_SPIN_NS (10 ms): on a loaded machine
    /// (tests in parallel on 2 CPUs) the writer may not run within it, or
    /// the spinner may be off its CPU past it, and the event then comes
    /// after the window; so a caught event is looked for over a few
    /// tries (a spin that never looked would catch none).
    #[test]
    fn an_event_within_the_window_is_caught_by_the_poll() {
        let (epoll, ev) = epoll_with_event();
        assert!(
            !poll_once(&epoll, &ev, 0),
            "no spin: the event is slept for"
        );
        let caught = (0..50).any(|_| poll_once(&epoll, &ev, 2_000_000_000));
        assert!(caught, "no event caught within the spin in 50 tries");
    }

    #[test]
    fn an_idle_poll_shrinks_to_nothing() {
        let (epoll, _ev) = epoll_with_event();
        let mut tokens = Vec::new();
        let mut poll = PollBeforeSleep::default();
        let setting = (1_000_000, NEVER_CONTENDED);
        for _ in 0..40 {
            let caught = poll.wait(setting, &epoll, Some(Duration::ZERO), &mut tokens);
            assert!(!caught && tokens.is_empty());
        }
        assert_eq!(poll.window.unwrap().get(), Duration::ZERO);
    }
}
