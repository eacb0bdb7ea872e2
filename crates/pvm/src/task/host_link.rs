//! The default route to a task on another host, one daemon shorter: the
//! task posts the message on a VI of its own to the pvmd of the
//! receiver's host (`daemon/task_links.rs`), whose receive handler writes
//! the body into the receiver's pool pages. The task's own pvmd is not
//! woken for it, so a message costs two wake-ups (the receiving pvmd's
//! progress thread, the receiver) where the relayed way costs three, and
//! its body is copied once, from the pool pages into the link's fragments.
//!
//! One link per remote host, made on the first message to that host:
//! LINK_OPEN (a request the task's pvmd forwards) gets the remote pvmd's
//! discriminator and address, a thread connects, and once the VI is up a
//! LINK_MARK answered by the remote pvmd says everything routed there
//! before has arrived; only then do messages take the link, so a pair's
//! messages keep their order. Until then, and for good if the link cannot
//! be made (no NIC, the remote pvmd refuses), they go the relayed way.
//! Direct-route setup messages to that host take the same way as the
//! messages, so they too stay in order.
//!
//! `OPENVIA_PVM_HOSTLINK=0` turns this off (every default-route message
//! through the task's own pvmd, as stock PVM routes them).

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openvia_core::ViaError;

use super::Task;
use crate::error::{PvmError, PvmResult};
use crate::frame::{op, Args};
use crate::link::{decode_hello, Link, LinkEvent, PreparedLink};
use crate::pool::Body;
use crate::tid;

/// How long the connect to a remote pvmd may take.
const CONNECT_LIMIT: Duration = Duration::from_secs(10);

/// Fault injection for the tests (`OPENVIA_PVM_HOSTLINK_BREAK_AFTER=N`):
/// a task drops its host link abruptly once N messages went over it, as a
/// failing network would (tests/pvm/multihost.c).
static BREAK_AFTER: std::sync::LazyLock<Option<u64>> = std::sync::LazyLock::new(|| {
    std::env::var("OPENVIA_PVM_HOSTLINK_BREAK_AFTER")
        .ok()
        .and_then(|v| v.parse().ok())
});

/// Where the connect thread leaves the VI, ready to run.
type Outcome = Arc<Mutex<Option<Result<PreparedLink, ViaError>>>>;

enum State {
    Connecting(Outcome),
    Up(Link),
    /// Not made, or failed: relayed for good.
    Off,
}

struct HostLink {
    state: State,
    /// Messages sent over the link, in all and since it last came up.
    sent: u64,
    sent_on_link: u64,
    /// The link failed after messages went over it: the next send says so.
    failed: bool,
}

/// A task's links to the pvmds of other hosts.
pub struct HostLinks {
    /// `OPENVIA_PVM_HOSTLINK` is not 0.
    enabled: bool,
    hosts: HashMap<u32, HostLink>,
    events: (Sender<LinkEvent>, Receiver<LinkEvent>),
    /// Links that went down, joined at exit.
    retired: Vec<Link>,
}

impl Default for HostLinks {
    fn default() -> HostLinks {
        HostLinks {
            enabled: std::env::var("OPENVIA_PVM_HOSTLINK").map_or(true, |v| v.trim() != "0"),
            hosts: HashMap::new(),
            events: mpsc::channel(),
            retired: Vec::new(),
        }
    }
}

impl Task {
    /// Sends buffer `id` to `dst` over our link to its host's pvmd;
    /// Ok(false) when the message goes the relayed way instead (a task
    /// of this host or a pvmd, no link yet; the first such message asks
    /// for one).
    pub(super) fn host_link_send(
        &mut self,
        id: i32,
        dst: i32,
        tag: i32,
        ctx: i32,
    ) -> PvmResult<bool> {
        if !self.host_links.enabled
            || self.home.is_none()
            || dst & tid::DAEMON_BIT as i32 != 0
            || tid::host_of(dst) == tid::host_of(self.mytid)
        {
            return Ok(false);
        }
        let host = tid::host_num(dst);
        self.host_link_progress(host)?;
        let failed = self.host_links.hosts.get(&host).is_some_and(|h| h.failed);
        if failed {
            return Err(self.host_link_failure(host, dst));
        }
        if !self.host_links.hosts.contains_key(&host) {
            self.host_link_open(host)?;
            return Ok(false);
        }
        let (ints, body) = self.link_message(id, dst, tag, ctx)?;
        Ok(self.host_link_post(host, ints, body))
    }

    /// A message of ours (`ints`: src, dst, tag, ctx, encoding) over the
    /// link to `host`, if it is up. False if the message must go the
    /// relayed way; a link that fails here is given up.
    pub(super) fn host_link_post(&mut self, host: u32, ints: [i32; 5], body: Body) -> bool {
        let Some(h) = self.host_links.hosts.get_mut(&host) else {
            return false;
        };
        let State::Up(link) = &h.state else {
            return false;
        };
        let me = tid::host_num(self.mytid);
        if link.send_msg((me, host), ints, body) {
            h.sent += 1;
            h.sent_on_link += 1;
            if Some(h.sent_on_link) == *BREAK_AFTER {
                link.abort();
            }
            return true;
        }
        self.host_link_down(host);
        false
    }

    /// LINK_OPEN through our pvmd, then a thread connects to the VI the
    /// remote pvmd waits on. Any failure leaves the host relayed.
    fn host_link_open(&mut self, host: u32) -> PvmResult<()> {
        let off = HostLink {
            state: State::Off,
            sent: 0,
            sent_on_link: 0,
            failed: false,
        };
        self.host_links.hosts.insert(host, off);
        let Some((nic, waker)) = self.link_endpoint() else {
            return Ok(());
        };
        let (code, args) = self.ask_host_pvmd(op::LINK_OPEN, host)?;
        let Some((their_disc, their_addr)) =
            (code >= 0).then(|| decode_hello(&args.bytes)).flatten()
        else {
            return Ok(());
        };
        let Ok(prepared) = nic
            .new_vi()
            .and_then(|vi| nic.prepare_with(vi, nic.window(), 1))
        else {
            return Ok(());
        };
        let disc = super::direct::make_disc(self.mytid, tid::daemon_tid(host));
        let outcome: Outcome = Arc::new(Mutex::new(None));
        let out = outcome.clone();
        let connect = move || {
            let vi = prepared.vi().clone();
            let r = nic.connect_on(&vi, &disc, (&their_addr, &their_disc), CONNECT_LIMIT);
            *out.lock().unwrap_or_else(|e| e.into_inner()) = Some(r.map(|_| prepared));
            waker.wake();
        };
        // Under the tests' fault injection the connect runs here, so the
        // link is up from the next message on and the count of messages
        // before the break does not depend on how long a connect takes.
        let spawned = match *BREAK_AFTER {
            Some(_) => {
                connect();
                Ok(())
            }
            None => openvia_core::sys::thread::spawn_quiet("pvm-host-link", connect).map(drop),
        };
        if spawned.is_ok() {
            if let Some(h) = self.host_links.hosts.get_mut(&host) {
                h.state = State::Connecting(outcome);
            }
        }
        Ok(())
    }

    /// Failures reported by the links; a finished connect starts its
    /// link, and LINK_MARK opens it to our messages.
    fn host_link_progress(&mut self, host: u32) -> PvmResult<()> {
        let down: Vec<u32> = self
            .host_links
            .events
            .1
            .try_iter()
            .filter_map(|ev| match ev {
                LinkEvent::Down { via, .. } => Some(via),
                LinkEvent::Frame { .. } => None,
            })
            .collect();
        for h in down {
            self.host_link_down(h);
        }
        let ready = match self.host_links.hosts.get(&host).map(|h| &h.state) {
            Some(State::Connecting(out)) => out.lock().unwrap_or_else(|e| e.into_inner()).take(),
            _ => None,
        };
        let Some(r) = ready else {
            return Ok(());
        };
        let h = self
            .host_links
            .hosts
            .get_mut(&host)
            .expect("looked up above");
        h.state = State::Off;
        let (Ok(prepared), Some(waker)) = (r, self.link_endpoint().map(|(_, w)| w)) else {
            return Ok(());
        };
        let me = tid::host_num(self.mytid);
        let Ok(link) = prepared.run((host, me), self.host_links.events.0.clone(), waker, None)
        else {
            return Ok(());
        };
        let (code, _) = self.ask_host_pvmd(op::LINK_MARK, host)?;
        let h = self
            .host_links
            .hosts
            .get_mut(&host)
            .expect("looked up above");
        if code == 0 {
            h.state = State::Up(link);
            h.sent_on_link = 0;
        } else {
            link.close_after_queue();
            self.host_links.retired.push(link);
        }
        Ok(())
    }

    /// LINK_OPEN or LINK_MARK for `host`'s pvmd, through ours.
    fn ask_host_pvmd(&mut self, opcode: u32, host: u32) -> PvmResult<(i32, Args)> {
        let args = Args {
            ints: vec![host as i32],
            ..Args::default()
        };
        self.call(opcode, args)
    }

    /// The link to `host` failed: relayed from now on.
    fn host_link_down(&mut self, host: u32) {
        let Some(h) = self.host_links.hosts.get_mut(&host) else {
            return;
        };
        if let State::Up(link) = std::mem::replace(&mut h.state, State::Off) {
            h.failed |= h.sent_on_link > 0;
            link.close_after_queue();
            self.host_links.retired.push(link);
        }
    }

    /// The first send after the link failed under messages we had sent
    /// over it: PvmNoTask if the receiver is gone, else PvmSysErr, since
    /// those messages may be lost (as a failed direct route reports).
    fn host_link_failure(&mut self, host: u32, dst: i32) -> PvmError {
        if let Some(h) = self.host_links.hosts.get_mut(&host) {
            h.failed = false;
        }
        self.lost_messages_error(dst)
    }

    /// Closes every host link once what is queued has gone out, and
    /// waits for their threads (they read pool pages our slot holds).
    pub(super) fn host_links_close(&mut self) {
        let links = std::mem::take(&mut self.host_links);
        if std::env::var_os(super::direct::ENV_STATS).is_some() {
            let mut hosts: Vec<_> = links.hosts.iter().collect();
            hosts.sort_by_key(|(h, _)| **h);
            for (host, h) in hosts {
                let state = match h.state {
                    State::Connecting(_) => "connecting",
                    State::Up(_) => "up",
                    State::Off => "off",
                };
                eprintln!(
                    "openvia-pvm host link t{:x} -> host {host}: {state}, {} messages sent over the VI",
                    self.mytid, h.sent
                );
            }
        }
        let up = links.hosts.into_values().filter_map(|h| match h.state {
            State::Up(link) => Some(link),
            _ => None,
        });
        up.chain(links.retired).for_each(Link::close_and_join);
    }
}

impl HostLinks {
    /// Whether our link to `host` is up (our messages to its tasks take
    /// it, so nothing else of ours for them may go the relayed way).
    pub(super) fn is_up(&self, host: u32) -> bool {
        matches!(
            self.hosts.get(&host),
            Some(HostLink {
                state: State::Up(_),
                ..
            })
        )
    }
}
