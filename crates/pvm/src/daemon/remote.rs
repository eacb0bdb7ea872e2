//! Requests that cross hosts. A task asks its own pvmd; when the answer
//! lives elsewhere (the task is on another host, the mailbox is the
//! master's, a spawn or a task list spans hosts) the pvmd forwards the
//! request over its link with the asking task's tid in front of the
//! integers, remembers whom to answer under a call number, and relays the
//! reply. Requests that span hosts are gathered: one part per host, merged
//! when the last comes in.

use std::os::fd::RawFd;

use super::Daemon;
use crate::error::PvmError;
use crate::frame::{op, Args, Frame};
use crate::link::LinkEvent;
use crate::tid;

/// Who gets the answer of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyTo {
    /// A task on this host, by its connection.
    Task(RawFd),
    /// Another pvmd, which forwarded the request.
    Host(u32),
}

/// A request out on another host.
pub enum Pending {
    /// Answer `to` under `seq` with the reply as it is.
    Single { to: ReplyTo, seq: u32, host: u32 },
    /// Part `index` of gather `gather`.
    Part {
        gather: u32,
        index: usize,
        host: u32,
    },
}

/// What to do with the parts once all are in.
pub enum GatherKind {
    /// pvm_tasks(0): concatenate the lists.
    Tasks,
    /// pvm_spawn across hosts: concatenate the tids, then tell every host
    /// involved the whole sibling list.
    Spawn { hosts: Vec<u32>, counts: Vec<usize> },
}

/// A request spread over several hosts.
pub struct Gather {
    pub to: ReplyTo,
    pub seq: u32,
    pub kind: GatherKind,
    pub parts: Vec<Option<(i32, Args)>>,
}

/// A request that needs no answer travels with call number 0.
pub const NO_REPLY: u32 = 0;

impl Daemon {
    /// Queues a frame for host `dst`, through the master if there is no
    /// direct link. False if there is no way there.
    pub(super) fn send_host(&mut self, dst: u32, f: Frame) -> bool {
        let me = self.host_num;
        if self.mesh_hold(dst, me, &f) {
            return true;
        }
        let link = self
            .links
            .get(&dst)
            .or_else(|| self.links.get(&self.master_num));
        match link {
            Some(l) => l.send(me, dst, &f),
            None => false,
        }
    }

    /// Answers a request, wherever it came from.
    pub(super) fn reply_to(&mut self, to: ReplyTo, seq: u32, code: i32, args: Args) {
        match to {
            ReplyTo::Task(fd) => self.reply(fd, seq, code, args),
            ReplyTo::Host(h) => {
                if seq != NO_REPLY {
                    self.send_host(h, Frame::Reply { seq, code, args });
                }
            }
        }
    }

    fn new_call(&mut self) -> u32 {
        let c = self.next_call;
        self.next_call = self.next_call.wrapping_add(1).max(1);
        c
    }

    /// Sends request `opcode` on behalf of task `me` to host `host`.
    /// With `pending` None no answer is awaited.
    fn send_request(
        &mut self,
        host: u32,
        me: i32,
        opcode: u32,
        a: &Args,
        pending: Option<Pending>,
    ) -> bool {
        let call = match pending {
            Some(p) => {
                let c = self.new_call();
                self.calls.insert(c, p);
                c
            }
            None => NO_REPLY,
        };
        let mut args = a.clone();
        args.ints.insert(0, me);
        let ok = self.send_host(
            host,
            Frame::Req {
                seq: call,
                op: opcode,
                args,
            },
        );
        if !ok && call != NO_REPLY {
            self.calls.remove(&call);
        }
        ok
    }

    /// Forwards a task's request to the host that can answer it.
    pub(super) fn forward(
        &mut self,
        to: ReplyTo,
        seq: u32,
        host: u32,
        me: i32,
        opcode: u32,
        a: Args,
    ) {
        let p = Pending::Single { to, seq, host };
        if !self.send_request(host, me, opcode, &a, Some(p)) {
            self.reply_to(to, seq, PvmError::HostFail.code(), Args::default());
        }
    }

    /// Fire-and-forget request (notify registrations, halts).
    pub(super) fn tell(&mut self, host: u32, me: i32, opcode: u32, a: Args) {
        self.send_request(host, me, opcode, &a, None);
    }

    /// Starts a gather: `local` are parts already known (by index), the
    /// others are (index, host, args) requests to send.
    pub(super) fn gather(
        &mut self,
        (to, seq): (ReplyTo, u32),
        me: i32,
        opcode: u32,
        kind: GatherKind,
        local: Vec<(usize, (i32, Args))>,
        remote: Vec<(usize, u32, Args)>,
    ) {
        let n = local.len() + remote.len();
        let id = self.new_call();
        let mut parts: Vec<Option<(i32, Args)>> = vec![None; n];
        for (i, part) in local {
            parts[i] = Some(part);
        }
        self.gathers.insert(
            id,
            Gather {
                to,
                seq,
                kind,
                parts,
            },
        );
        for (index, host, args) in remote {
            let p = Pending::Part {
                gather: id,
                index,
                host,
            };
            if !self.send_request(host, me, opcode, &args, Some(p)) {
                self.part_done(id, index, PvmError::HostFail.code(), Args::default());
            }
        }
        self.try_finish(id);
    }

    fn part_done(&mut self, gather: u32, index: usize, code: i32, args: Args) {
        if let Some(g) = self.gathers.get_mut(&gather) {
            if let Some(slot) = g.parts.get_mut(index) {
                *slot = Some((code, args));
            }
        }
        self.try_finish(gather);
    }

    fn try_finish(&mut self, id: u32) {
        let done = self
            .gathers
            .get(&id)
            .is_some_and(|g| g.parts.iter().all(Option::is_some));
        if !done {
            return;
        }
        let g = self.gathers.remove(&id).expect("checked");
        let parts: Vec<(i32, Args)> = g.parts.into_iter().flatten().collect();
        match g.kind {
            GatherKind::Tasks => {
                let mut out = Args::default();
                for (code, a) in &parts {
                    if *code > 0 {
                        out.ints.extend(&a.ints);
                        out.strs.extend(a.strs.iter().cloned());
                    }
                }
                let n = out.strs.len() as i32;
                self.reply_to(g.to, g.seq, n, out);
            }
            GatherKind::Spawn { hosts, counts } => {
                let mut tids = Vec::new();
                for ((code, a), &count) in parts.iter().zip(&counts) {
                    // A host that failed as a whole answers its error once.
                    let fill = if *code < 0 {
                        *code
                    } else {
                        PvmError::HostFail.code()
                    };
                    let mut got = a.ints.clone();
                    got.resize(count, fill);
                    tids.extend(got);
                }
                let ok = tids.iter().filter(|&&t| t > 0).count() as i32;
                let live: Vec<i32> = tids.iter().copied().filter(|&t| t > 0).collect();
                for h in hosts {
                    let a = Args {
                        ints: live.clone(),
                        ..Args::default()
                    };
                    if h == self.host_num {
                        self.set_siblings(&live);
                    } else {
                        self.tell(h, 0, op::D_SIBLINGS, a);
                    }
                }
                self.reply_to(
                    g.to,
                    g.seq,
                    ok,
                    Args {
                        ints: tids,
                        ..Args::default()
                    },
                );
            }
        }
    }

    /// Everything the links brought since the last look.
    pub(super) fn link_events(&mut self) {
        while let Ok(ev) = self.link_events.1.try_recv() {
            match ev {
                LinkEvent::Frame {
                    via, dst, frame, ..
                } if super::task_links::is_task_link(via) => self.task_link_frame(via, dst, frame),
                LinkEvent::Down { via, .. } if super::task_links::is_task_link(via) => {
                    self.task_link_down(via)
                }
                LinkEvent::Frame {
                    via: _,
                    src,
                    dst,
                    frame,
                } => {
                    if dst != self.host_num {
                        // Relay (we are the hub): the envelope keeps its source.
                        self.mesh.relayed += 1;
                        let link = self.links.get(&dst);
                        if !link.is_some_and(|l| l.send(src, dst, &frame)) {
                            self.logln(&format!("no link to host {dst}: frame from {src} dropped"));
                        }
                        continue;
                    }
                    self.host_frame(src, frame);
                }
                LinkEvent::Down { via, why } => self.link_down(via, &why),
            }
        }
        self.mesh_progress();
        self.task_links_progress();
    }

    fn host_frame(&mut self, src: u32, frame: Frame) {
        match frame {
            Frame::Msg(m) => self.route(m),
            Frame::Req { seq, op, mut args } => {
                let me = if args.ints.is_empty() {
                    0
                } else {
                    args.ints.remove(0)
                };
                self.serve(ReplyTo::Host(src), seq, me, op, args);
            }
            Frame::Reply { seq, code, args } => match self.calls.remove(&seq) {
                Some(Pending::Single { to, seq, .. }) => self.reply_to(to, seq, code, args),
                Some(Pending::Part { gather, index, .. }) => {
                    self.part_done(gather, index, code, args)
                }
                None => {}
            },
        }
    }

    /// Answers every request still out on host `h` with PvmHostFail.
    pub(super) fn fail_calls_to(&mut self, h: u32) {
        let dead: Vec<u32> = self
            .calls
            .iter()
            .filter(|(_, p)| match p {
                Pending::Single { host, .. } | Pending::Part { host, .. } => *host == h,
            })
            .map(|(c, _)| *c)
            .collect();
        for c in dead {
            let code = PvmError::HostFail.code();
            match self.calls.remove(&c) {
                Some(Pending::Single { to, seq, .. }) => {
                    self.reply_to(to, seq, code, Args::default())
                }
                Some(Pending::Part { gather, index, .. }) => {
                    self.part_done(gather, index, code, Args::default())
                }
                None => {}
            }
        }
    }

    /// The host that answers `opcode` with these arguments, if not this one.
    pub(super) fn answering_host(&self, opcode: u32, a: &Args) -> Option<u32> {
        let first = a.ints.first().copied().unwrap_or(0);
        let h = match opcode {
            op::KILL | op::SENDSIG | op::PSTAT => tid::host_num(first),
            op::TASKS if first != 0 => tid::host_num(first),
            op::LINK_OPEN | op::LINK_MARK => first as u32,
            op::PUTINFO
            | op::RECVINFO
            | op::DELINFO
            | op::MBOXINFO
            | op::RESETINFO
            | op::ADDHOSTS
            | op::DELHOSTS => self.master_num,
            _ => self.host_num,
        };
        (h != self.host_num && h != 0).then_some(h)
    }
}
