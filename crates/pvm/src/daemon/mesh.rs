//! Slave to slave links: the pvmds of a virtual machine form a full mesh,
//! as stock PVM's do, so a frame from host B to host C does not wait for
//! the master to relay it.
//!
//! The master's host table carries every host's network address. When a
//! slave learns of another slave it has no link to, the two make one: the
//! lower host number waits for the connection, the higher one connects,
//! under a discriminator both derive from the pair and the virtual
//! machine; each on a thread of its own, so neither loop blocks. Until a
//! link is up, frames between the two go through the master as before.
//!
//! Switching must not reorder a pair's frames (messages of two tasks keep
//! their order): when its link is up, a slave sends MARK to the other
//! through the master and holds every frame for that host until the ACK
//! comes back. The other host answers MARK when it reaches it, that is
//! after every frame relayed before it was delivered; then the held
//! frames, and all later ones, go over the new link. A link that fails
//! sends the pair back through the master (and is made again on the next
//! host table).

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use openvia_core::ViaError;

use super::Daemon;
use crate::frame::op;
use crate::frame::{Args, Frame};
use crate::link::{Link, PreparedLink};

/// How long a mesh connect may take before the pair stays relayed.
const CONNECT_LIMIT: Duration = Duration::from_secs(20);

type Outcome = (u32, Result<PreparedLink, ViaError>);

/// The daemon's mesh state (slaves only; the master links to everyone).
pub struct Mesh {
    /// Hosts a connect thread is working on.
    pending: HashSet<u32>,
    /// Finished connects, from their threads.
    done: (Sender<Outcome>, Receiver<Outcome>),
    /// Links that are up while the relay path drains: the link, and the
    /// frames for that host held meanwhile (source host, frame), in order.
    switching: HashMap<u32, (Link, Vec<(u32, Frame)>)>,
    /// Frames this daemon relayed between two other hosts (the master's
    /// figure; logged at halt, tests check it).
    pub relayed: u64,
}

impl Default for Mesh {
    fn default() -> Mesh {
        Mesh {
            pending: HashSet::new(),
            done: mpsc::channel(),
            switching: HashMap::new(),
            relayed: 0,
        }
    }
}

/// The pair's discriminator: the virtual machine (`vm`, the master's
/// process id as the slaves' own discriminators carry it) and the hosts.
fn pair_disc(vm: &str, a: u32, b: u32) -> Vec<u8> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    format!("openvia-pvmd-mesh.{uid}.{vm}.{}.{}", a.min(b), a.max(b)).into_bytes()
}

impl Daemon {
    /// Slave, after a new host table: starts a link to every other slave
    /// it has none to.
    pub(super) fn mesh_connect(&mut self) {
        let Some(vm) = self
            .cfg
            .slave
            .as_ref()
            .map(|s| s.disc.rsplit('.').next().unwrap_or_default().to_string())
        else {
            return;
        };
        let Some(nic) = self.link_nic.clone() else {
            return;
        };
        let me = self.host_num;
        let wanted: Vec<(u32, Vec<u8>)> = self
            .hosts
            .values()
            .filter(|h| h.num != me && h.num != self.master_num && !h.addr.is_empty())
            .filter(|h| {
                !self.links.contains_key(&h.num)
                    && !self.mesh.pending.contains(&h.num)
                    && !self.mesh.switching.contains_key(&h.num)
            })
            .map(|h| (h.num, h.addr.clone()))
            .collect();
        for (h, addr) in wanted {
            let disc = pair_disc(&vm, me, h);
            let prepared = match nic.new_vi().and_then(|vi| nic.prepare(vi)) {
                Ok(p) => p,
                Err(e) => {
                    self.logln(&format!("mesh link to host {h}: {e}"));
                    continue;
                }
            };
            let (nic, done, waker) = (nic.clone(), self.mesh.done.0.clone(), self.waker.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("pvm-mesh-{h:x}"))
                .spawn(move || {
                    let vi = prepared.vi().clone();
                    let r = if me < h {
                        nic.accept_on(&vi, &disc, CONNECT_LIMIT)
                    } else {
                        nic.connect_on(&vi, &disc, (&addr, &disc), CONNECT_LIMIT)
                    };
                    let _ = done.send((h, r.map(|_| prepared)));
                    waker.wake();
                });
            if spawned.is_ok() {
                self.mesh.pending.insert(h);
            }
        }
    }

    /// Connects that finished: run the link and start the switch.
    pub(super) fn mesh_progress(&mut self) {
        while let Ok((h, r)) = self.mesh.done.1.try_recv() {
            self.mesh.pending.remove(&h);
            if !self.hosts.contains_key(&h) || self.links.contains_key(&h) {
                continue;
            }
            let link = r.and_then(|p| {
                p.run(
                    (h, self.host_num),
                    self.link_events.0.clone(),
                    self.waker.clone(),
                    self.inbound.clone(),
                )
            });
            match link {
                Ok(link) => {
                    self.mesh.switching.insert(h, (link, Vec::new()));
                    self.tell_via_master(h, op::D_MESH_MARK);
                }
                Err(e) => self.logln(&format!("mesh link to host {h} failed: {e}")),
            }
        }
    }

    /// A request straight to the master's link, past any held frames.
    fn tell_via_master(&mut self, h: u32, opcode: u32) {
        let frame = Frame::Req {
            seq: super::remote::NO_REPLY,
            op: opcode,
            args: Args {
                ints: vec![0],
                ..Args::default()
            },
        };
        if let Some(l) = self.links.get(&self.master_num) {
            l.send(self.host_num, h, &frame);
        }
    }

    /// Host `from` marked the end of what it relayed to us: answer.
    pub(super) fn mesh_mark(&mut self, from: u32) {
        self.tell_via_master(from, op::D_MESH_ACK);
    }

    /// Host `from` has everything we relayed before our mark: the link
    /// takes over, held frames first.
    pub(super) fn mesh_ack(&mut self, from: u32) {
        let Some((link, held)) = self.mesh.switching.remove(&from) else {
            return;
        };
        for (src, f) in held {
            link.send(src, from, &f);
        }
        self.links.insert(from, link);
        self.logln(&format!("mesh link to host {from} up"));
    }

    /// Holds a frame for a host whose link is switching; false if none is.
    pub(super) fn mesh_hold(&mut self, dst: u32, src: u32, f: &Frame) -> bool {
        match self.mesh.switching.get_mut(&dst) {
            Some((_, held)) => {
                held.push((src, f.clone()));
                true
            }
            None => false,
        }
    }

    /// A mesh link failed: its pair goes through the master from now on,
    /// frames held for a switch first.
    pub(super) fn mesh_down(&mut self, h: u32, why: &str) {
        let held = match self.mesh.switching.remove(&h) {
            Some((_, held)) => held,
            None if self.links.remove(&h).is_some() => Vec::new(),
            None => return,
        };
        self.logln(&format!("mesh link to host {h} down: {why}"));
        if let Some(l) = self.links.get(&self.master_num) {
            for (src, f) in held {
                l.send(src, h, &f);
            }
        }
    }

    /// Host `h` left the table: its link (and a switch) go.
    pub(super) fn mesh_forget(&mut self, h: u32) {
        if h == self.master_num {
            return;
        }
        if let Some(l) = self.links.remove(&h) {
            l.close_after_queue();
        }
        if let Some((l, _)) = self.mesh.switching.remove(&h) {
            l.close_after_queue();
        }
    }
}
