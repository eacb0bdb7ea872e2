//! Task links: a task on another host sends its default-route messages
//! for this host over a VI of its own to this pvmd, instead of through
//! its own pvmd. The message then crosses one daemon, not two: the task
//! posts it, this pvmd's receive handler writes the body into the
//! receiver's pool pages and rings its doorbell (two wake-ups a message
//! where the relayed way takes three; `docs/pvm.md`).
//!
//! Setup, asked by the task through its own pvmd (requests that pvmd
//! forwards here, `frame::op`):
//! 1. LINK_OPEN: we make a VI, post its receives, wait for the task's
//!    connect on a thread of our own, and answer at once with our
//!    discriminator and address; the task connects.
//! 2. LINK_MARK, once the task's VI is up: our loop answers it after
//!    every frame the task routed to us before it (the task's socket and
//!    the link between the pvmds keep their order), so what comes over
//!    the task's VI afterwards never overtakes what came the other way.
//!
//! Such a link carries only messages for this host's tasks; anything else
//! on it is dropped. It goes away when the task leaves (its VI closes),
//! or when its connect does not come within the limit.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use openvia_core::ViaError;

use super::Daemon;
use crate::error::PvmError;
use crate::frame::{Args, Frame};
use crate::link::{encode_hello, Link, PreparedLink, WakeUp, Waker};

/// A task link's wake-up: frames and failures wake the loop; a message
/// placed into the pool does not make it spin (`WakeUp::delivered`),
/// since the receiver's answer will not come through this pvmd: it goes
/// over the receiver's own link to the other host.
struct NoKick(Arc<Waker>);

impl WakeUp for NoKick {
    fn wake(&self) {
        self.0.wake();
    }
}

/// `via` numbers of task links: above every host number (hosts fit in
/// the 12 bits of a tid's host field), so `LinkEvent`s tell them apart.
const TASK_LINK_VIA: u32 = 0x8000_0000;

/// How long the task's connect may take.
const CONNECT_LIMIT: Duration = Duration::from_secs(10);

/// Task links one pvmd keeps at most; a task asking for more stays on
/// the relayed way.
const MAX_TASK_LINKS: usize = 256;

type Outcome = (u32, i32, Result<PreparedLink, ViaError>);

/// The daemon's task links.
pub struct TaskLinks {
    /// Links waiting for their task's connect: via → task.
    pending: HashMap<u32, i32>,
    /// Finished accepts, from their threads.
    done: (Sender<Outcome>, Receiver<Outcome>),
    /// Links that are up: via → (task, link).
    up: HashMap<u32, (i32, Link)>,
    next: u32,
}

impl Default for TaskLinks {
    fn default() -> TaskLinks {
        TaskLinks {
            pending: HashMap::new(),
            done: mpsc::channel(),
            up: HashMap::new(),
            next: 0,
        }
    }
}

/// Whether a link event's `via` is a task link's.
pub(super) fn is_task_link(via: u32) -> bool {
    via & TASK_LINK_VIA != 0
}

impl Daemon {
    /// LINK_OPEN from task `me` of another host (forwarded by its pvmd).
    pub(super) fn task_link_open(&mut self, me: i32, forwarded: bool) -> (i32, Args) {
        let refuse = |e: PvmError| (e.code(), Args::default());
        if !forwarded || crate::tid::host_num(me) == self.host_num {
            // A task of this host has the pool.
            return refuse(PvmError::BadParam);
        }
        let Some(nic) = self.link_nic.clone() else {
            return refuse(PvmError::SysErr);
        };
        let tl = &mut self.task_links;
        if tl.pending.len() + tl.up.len() >= MAX_TASK_LINKS {
            return refuse(PvmError::OutOfRes);
        }
        tl.next = tl.next.wrapping_add(1) & !TASK_LINK_VIA;
        let via = TASK_LINK_VIA | tl.next;
        // SAFETY: getuid and getpid have no preconditions.
        let (uid, pid) = unsafe { (libc::getuid(), libc::getpid()) };
        let disc = format!("pvT.{uid}.{pid}.{via:x}.{me:x}").into_bytes();
        let prepared = match nic
            .new_vi()
            .and_then(|vi| nic.prepare_with(vi, 1, 2 * nic.window()))
        {
            Ok(p) => p,
            Err(e) => {
                self.logln(&format!("task link for t{me:x}: {e}"));
                return refuse(PvmError::OutOfRes);
            }
        };
        let address = nic.address();
        let (done, waker, d) = (
            self.task_links.done.0.clone(),
            self.waker.clone(),
            disc.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("pvm-task-link".into())
            .spawn(move || {
                let vi = prepared.vi().clone();
                let r = nic.accept_on(&vi, &d, CONNECT_LIMIT);
                let _ = done.send((via, me, r.map(|_| prepared)));
                waker.wake();
            });
        if spawned.is_err() {
            return refuse(PvmError::OutOfRes);
        }
        self.task_links.pending.insert(via, me);
        let args = Args {
            bytes: encode_hello(&disc, &address),
            ..Args::default()
        };
        (0, args)
    }

    /// Accepts that finished: their links run.
    pub(super) fn task_links_progress(&mut self) {
        while let Ok((via, task, r)) = self.task_links.done.1.try_recv() {
            self.task_links.pending.remove(&via);
            let link = r.and_then(|p| {
                // Nothing is ever answered on this VI (the task's replies
                // come over its peer's own link): acknowledge each message
                // as soon as it is placed, in the same wake-up, instead
                // of holding the acknowledgement for a reply and waking
                // again for its timer.
                p.vi().set_no_replies(true)?;
                let waker: Arc<dyn WakeUp> = Arc::new(NoKick(self.waker.clone()));
                p.run(
                    (via, self.host_num),
                    self.link_events.0.clone(),
                    waker,
                    self.inbound.clone(),
                )
            });
            match link {
                Ok(l) => {
                    self.task_links.up.insert(via, (task, l));
                }
                Err(e) => self.logln(&format!("task link for t{task:x} not made: {e}")),
            }
        }
    }

    /// A frame that came over a task link: only messages for this host.
    pub(super) fn task_link_frame(&mut self, via: u32, dst: u32, frame: Frame) {
        let task = self.task_links.up.get(&via).map(|(t, _)| *t);
        match (task, frame) {
            (Some(t), Frame::Msg(m)) if dst == self.host_num && m.src == t => self.route(m),
            _ => self.logln(&format!("task link {via:x}: stray frame dropped")),
        }
    }

    /// A task link is gone (its task left, or its VI failed).
    pub(super) fn task_link_down(&mut self, via: u32) {
        self.task_links.up.remove(&via);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_link_vias_never_name_a_host() {
        assert!(is_task_link(TASK_LINK_VIA | 1));
        assert!(!is_task_link(crate::tid::host_num(i32::MAX)));
    }
}
