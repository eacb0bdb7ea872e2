//! The daemon's request table: one handler per opcode, each answering
//! with a code and generic arguments (see frame.rs).

use std::os::fd::RawFd;

use super::hosts::{HOST_ADD, HOST_DELETE, TASK_EXIT};
use super::mbox::{Entry, WAIT_FOR_INFO};
use super::remote::{GatherKind, ReplyTo};
use super::spawn::{SpawnRequest, SIBLINGS_LATER, TASK_ARCH, TASK_HOST};
use super::{Daemon, InfoWaiter, Notify, TaskRec};
use crate::error::PvmError;
use crate::frame::{op, Args};
use crate::tid;

const NOTIFY_CANCEL: i32 = 256;

fn int(a: &Args, i: usize) -> i32 {
    a.ints.get(i).copied().unwrap_or(0)
}

fn string(a: &Args, i: usize) -> String {
    a.strs.get(i).cloned().unwrap_or_default()
}

impl Daemon {
    /// A request from a task on this host.
    pub(super) fn request(&mut self, fd: RawFd, seq: u32, opcode: u32, a: Args) {
        let me = self.conns.get(&fd).and_then(|c| c.tid);
        if opcode != op::HELLO && me.is_none() {
            self.reply(fd, seq, PvmError::SysErr.code(), Args::default());
            return;
        }
        match opcode {
            op::HELLO => self.hello(fd, seq, &a),
            op::EXIT => {
                self.reply(fd, seq, 0, Args::default());
                self.drop_conn(fd);
            }
            _ => self.serve(ReplyTo::Task(fd), seq, me.unwrap_or(0), opcode, a),
        }
    }

    /// Serves a request of task `me`, from this host or forwarded by
    /// another pvmd; forwards it on if another host must answer.
    pub(super) fn serve(&mut self, to: ReplyTo, seq: u32, me: i32, opcode: u32, a: Args) {
        let forwarded = matches!(to, ReplyTo::Host(_));
        if !forwarded {
            if let Some(wait) = self.forward_to_rm(me, opcode, &a) {
                self.reply_to(to, seq, super::RM_FORWARDED, wait);
                return;
            }
            if let Some(h) = self.answering_host(opcode, &a) {
                self.forward(to, seq, h, me, opcode, a);
                return;
            }
        }
        let (code, out) = match opcode {
            op::SPAWN => {
                self.req_spawn(to, seq, me, &a);
                return;
            }
            op::CONFIG => self.config(),
            op::REG_RM => (self.reg_rm(me), Args::default()),
            op::LINK_OPEN => self.task_link_open(me, forwarded),
            // Our loop reached it: whatever the task routed here before
            // has been taken in (see task_links.rs).
            op::LINK_MARK if forwarded => (0, Args::default()),
            op::LINK_MARK => (PvmError::BadParam.code(), Args::default()),
            op::TASKS => {
                let which = int(&a, 0);
                if which == 0 && !forwarded && self.hosts.len() > 1 {
                    self.tasks_everywhere(to, seq, me);
                    return;
                }
                self.list_tasks(which)
            }
            op::KILL => self.kill(int(&a, 0), libc::SIGTERM),
            op::SENDSIG => self.kill(int(&a, 0), int(&a, 1)),
            op::PSTAT => {
                let t = int(&a, 0);
                let ok = self.tasks.contains_key(&t) || t == self.tid();
                (
                    if ok { 0 } else { PvmError::NoTask.code() },
                    Args::default(),
                )
            }
            op::MSTAT => {
                let ok = self.host_by_name(&string(&a, 0)).is_some();
                (
                    if ok { 0 } else { PvmError::NoHost.code() },
                    Args::default(),
                )
            }
            op::NOTIFY => self.notify(me, &a, forwarded),
            op::HALT => {
                self.reply_to(to, seq, 0, Args::default());
                if self.host_num != self.master_num {
                    // The master halts the whole machine, us included.
                    self.tell(self.master_num, me, op::HALT, Args::default());
                    return;
                }
                // Everyone else gets SIGTERM at shutdown; the caller just exits.
                self.tasks.remove(&me);
                self.halting = true;
                return;
            }
            op::D_HALT => {
                self.logln("halted by the master");
                self.halting = true;
                return;
            }
            op::D_HOSTS => {
                self.set_host_table(&a);
                return;
            }
            op::D_MESH_MARK | op::D_MESH_ACK => {
                if let ReplyTo::Host(h) = to {
                    match opcode {
                        op::D_MESH_MARK => self.mesh_mark(h),
                        _ => self.mesh_ack(h),
                    }
                }
                return;
            }
            op::D_SIBLINGS => {
                self.set_siblings(&a.ints);
                return;
            }
            op::PUTINFO => {
                let e = Entry {
                    owner: me,
                    flags: int(&a, 0),
                    enc: int(&a, 1),
                    body: a.bytes.clone(),
                };
                let name = string(&a, 0);
                let r = self.mailbox.put(&name, e);
                if r.is_ok() {
                    self.wake_info_waiters(&name);
                }
                (r.unwrap_or_else(|e| e.code()), Args::default())
            }
            op::RECVINFO => {
                let (name, index, flags) = (string(&a, 0), int(&a, 0), int(&a, 1));
                match self.mailbox.get(&name, index, flags, me) {
                    Ok(e) => (0, info_args(e)),
                    Err(_) if flags & WAIT_FOR_INFO != 0 => {
                        self.info_waiters.push(InfoWaiter {
                            to,
                            me,
                            seq,
                            name,
                            index,
                            flags,
                        });
                        return;
                    }
                    Err(e) => (e.code(), Args::default()),
                }
            }
            op::DELINFO => {
                let r = self.mailbox.delete(&string(&a, 0), int(&a, 0), me);
                (r.map(|_| 0).unwrap_or_else(|e| e.code()), Args::default())
            }
            op::MBOXINFO => {
                let mut out = Args::default();
                for (name, entries) in self.mailbox.list(&string(&a, 0)) {
                    out.strs.push(name);
                    out.ints.push(entries.len() as i32);
                    for e in entries {
                        out.ints.extend([e.index, e.owner, e.flags]);
                    }
                }
                (out.strs.len() as i32, out)
            }
            op::RESETINFO => {
                let class = string(&a, 0);
                let keep: Vec<i32> = a.ints.iter().skip(2).copied().collect();
                let all_owned = int(&a, 1) != 0;
                let n = self.mailbox.reset(
                    (!class.is_empty()).then_some(class.as_str()),
                    int(&a, 0),
                    |owner| !keep.contains(&owner) && (all_owned || owner == 0),
                );
                (n as i32, Args::default())
            }
            op::ADDHOSTS => {
                let ints = self.add_hosts(&a.strs);
                let n = ints.iter().filter(|&&c| c >= 0).count() as i32;
                (
                    n,
                    Args {
                        ints,
                        ..Args::default()
                    },
                )
            }
            op::DELHOSTS => {
                let ints = self.delete_hosts(&a.strs);
                (
                    0,
                    Args {
                        ints,
                        ..Args::default()
                    },
                )
            }
            _ => (PvmError::NotImpl.code(), Args::default()),
        };
        self.reply_to(to, seq, code, out);
    }

    /// pvm_tasks(0) on a machine of several hosts: ask each.
    fn tasks_everywhere(&mut self, to: ReplyTo, seq: u32, me: i32) {
        let hosts: Vec<u32> = self.hosts.keys().copied().collect();
        let mut local = Vec::new();
        let mut remote = Vec::new();
        for (i, h) in hosts.into_iter().enumerate() {
            if h == self.host_num {
                local.push((i, self.list_tasks(0)));
            } else {
                let a = Args {
                    ints: vec![0],
                    ..Args::default()
                };
                remote.push((i, h, a));
            }
        }
        self.gather((to, seq), me, op::TASKS, GatherKind::Tasks, local, remote);
    }

    /// Enrolls a connection: a spawned task claims its reserved tid, a task
    /// started by hand gets a new one.
    fn hello(&mut self, fd: RawFd, seq: u32, a: &Args) {
        let (hint, pid, name) = (int(a, 0), int(a, 1), string(a, 0));
        let t = match self.tasks.get(&hint) {
            Some(r) if hint != 0 && r.conn.is_none() && r.hello_wait.is_none() => hint,
            _ => {
                let t = self.new_tid();
                let slot = self.claim_slot(t, pid);
                let rec = TaskRec {
                    ptid: 0,
                    pid,
                    name,
                    spawned: false,
                    conn: None,
                    pending: Vec::new(),
                    siblings: vec![t],
                    slot,
                    siblings_pending: false,
                    hello_wait: None,
                };
                self.tasks.insert(t, rec);
                t
            }
        };
        if let Some(c) = self.conns.get_mut(&fd) {
            c.tid = Some(t);
        }
        let rec = self.tasks.get_mut(&t).expect("just ensured");
        rec.pid = pid;
        if rec.siblings_pending {
            // Spawned beside tasks on other hosts: answer once the whole
            // sibling list is known.
            rec.hello_wait = Some((fd, seq));
            return;
        }
        self.finish_hello(t, fd, seq);
    }

    fn finish_hello(&mut self, t: i32, fd: RawFd, seq: u32) {
        let Some(rec) = self.tasks.get_mut(&t) else {
            return;
        };
        rec.conn = Some(fd);
        rec.hello_wait = None;
        let pending = std::mem::take(&mut rec.pending);
        let mut ints = vec![rec.ptid, rec.siblings.len() as i32];
        ints.extend(&rec.siblings);
        ints.push(rec.slot.map_or(-1, |s| s as i32));
        if let (Some(pool), Some(slot)) = (&self.pool, rec.slot) {
            pool.set_slot_pid(slot, rec.pid);
        }
        let name = self
            .hosts
            .get(&self.host_num)
            .map_or(self.cfg.hostname.clone(), |h| h.name.clone());
        // The reply must precede the held messages: the task reads it first.
        self.reply(
            fd,
            seq,
            t,
            Args {
                ints,
                strs: vec![name],
                bytes: Vec::new(),
            },
        );
        for f in pending {
            self.deliver(t, f);
        }
    }

    /// The whole sibling list of a spawn that spanned hosts.
    pub(super) fn set_siblings(&mut self, tids: &[i32]) {
        let mine: Vec<i32> = tids
            .iter()
            .copied()
            .filter(|&t| tid::host_num(t) == self.host_num)
            .collect();
        for t in mine {
            let Some(rec) = self.tasks.get_mut(&t) else {
                continue;
            };
            rec.siblings = tids.to_vec();
            rec.siblings_pending = false;
            if let Some((fd, seq)) = rec.hello_wait {
                self.finish_hello(t, fd, seq);
            }
        }
    }

    fn req_spawn(&mut self, to: ReplyTo, seq: u32, me: i32, a: &Args) {
        let forwarded = matches!(to, ReplyTo::Host(_));
        let (flags, count, nargs) = (
            int(a, 0),
            int(a, 1).max(0) as usize,
            int(a, 2).max(0) as usize,
        );
        let argv: Vec<String> = a.strs.iter().skip(2).take(nargs).cloned().collect();
        let env = a.strs.iter().skip(2 + nargs).filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        });
        let mut req = SpawnRequest {
            parent: me,
            file: string(a, 0),
            argv,
            flags,
            where_: string(a, 1),
            count,
            env: env.collect(),
            out_tid: int(a, 3),
            out_code: int(a, 4),
            out_ctx: int(a, 5),
        };
        if forwarded {
            // The asking pvmd chose this host; the flag says whether more
            // tasks of the same spawn run elsewhere.
            let later = flags & SIBLINGS_LATER != 0;
            req.flags &= !SIBLINGS_LATER;
            let (ok, out) = spawn_result(self.spawn(req, later));
            self.reply_to(to, seq, ok, out);
            return;
        }
        let placement = match self.place(&req) {
            Ok(p) => p,
            Err(e) => {
                let out = Args {
                    ints: vec![e.code(); count],
                    ..Args::default()
                };
                self.reply_to(to, seq, e.code(), out);
                return;
            }
        };
        if placement.len() == 1 && placement[0].0 == self.host_num {
            let (ok, out) = spawn_result(self.spawn(req, false));
            self.reply_to(to, seq, ok, out);
            return;
        }
        let spread = placement.len() > 1;
        let hosts: Vec<u32> = placement.iter().map(|p| p.0).collect();
        let counts: Vec<usize> = placement.iter().map(|p| p.1).collect();
        let mut local = Vec::new();
        let mut remote = Vec::new();
        for (i, &(h, n)) in placement.iter().enumerate() {
            if h == self.host_num {
                let part = SpawnRequest {
                    count: n,
                    argv: req.argv.clone(),
                    env: req.env.clone(),
                    file: req.file.clone(),
                    where_: String::new(),
                    ..req
                };
                local.push((i, spawn_result(self.spawn(part, spread))));
            } else {
                let mut fa = a.clone();
                if let Some(f) = fa.ints.get_mut(0) {
                    *f = (flags & !(TASK_HOST | TASK_ARCH))
                        | if spread { SIBLINGS_LATER } else { 0 };
                }
                if let Some(c) = fa.ints.get_mut(1) {
                    *c = n as i32;
                }
                remote.push((i, h, fa));
            }
        }
        let kind = GatherKind::Spawn {
            hosts: if spread { hosts } else { Vec::new() },
            counts,
        };
        self.gather((to, seq), me, op::SPAWN, kind, local, remote);
    }

    /// Where the tasks of a spawn go: (host, count) in host order. A named
    /// host or architecture narrows the choice; otherwise tasks go round
    /// the hosts in turn, as PVM places them.
    fn place(&mut self, req: &SpawnRequest) -> Result<Vec<(u32, usize)>, PvmError> {
        let candidates: Vec<u32> = if req.flags & TASK_HOST != 0 && !req.where_.is_empty() {
            vec![self.host_by_name(&req.where_).ok_or(PvmError::NoHost)?]
        } else if req.flags & TASK_ARCH != 0 {
            let v: Vec<u32> = self
                .hosts
                .values()
                .filter(|h| h.arch == req.where_)
                .map(|h| h.num)
                .collect();
            if v.is_empty() {
                return Err(PvmError::NoHost);
            }
            v
        } else {
            self.hosts.keys().copied().collect()
        };
        let mut counts = vec![0usize; candidates.len()];
        for _ in 0..req.count {
            let k = self.spawn_rr % candidates.len();
            counts[k] += 1;
            self.spawn_rr = self.spawn_rr.wrapping_add(1);
        }
        Ok(candidates
            .into_iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .collect())
    }

    fn list_tasks(&self, which: i32) -> (i32, Args) {
        let host = tid::host_tid(self.host_num);
        let mut out = Args::default();
        for (t, r) in &self.tasks {
            if which != 0 && which != host && which != *t {
                continue;
            }
            // PVM's task flags: 2 child of pvmd, 4 connected.
            let flag = if r.conn.is_some() { 4 } else { 0 } | if r.spawned { 2 } else { 0 };
            out.ints.extend([*t, r.ptid, host, flag, r.pid]);
            out.strs.push(r.name.clone());
        }
        if which != 0 && which != host && out.strs.is_empty() {
            return (PvmError::NoTask.code(), Args::default());
        }
        (out.strs.len() as i32, out)
    }

    fn kill(&mut self, t: i32, sig: i32) -> (i32, Args) {
        match self.tasks.get(&t) {
            Some(r) if r.pid > 0 => {
                // SAFETY: signalling a task process pvmd knows by pid.
                unsafe { libc::kill(r.pid, sig) };
                (0, Args::default())
            }
            _ => (PvmError::NoTask.code(), Args::default()),
        }
    }

    /// pvm_notify. Task-exit watches on tasks of other hosts are registered
    /// with those hosts' pvmds (their notify messages come back routed);
    /// host watches stay here, fired when the host table changes.
    fn notify(&mut self, me: i32, a: &Args, forwarded: bool) -> (i32, Args) {
        let (what, tag, ctx) = (int(a, 0), int(a, 1), int(a, 2));
        let kind = what & !NOTIFY_CANCEL;
        let targets: Vec<i32> = a.ints[3.min(a.ints.len())..].to_vec();
        let (mine, elsewhere): (Vec<i32>, Vec<i32>) = targets.iter().partition(|&&t| {
            kind != TASK_EXIT || forwarded || {
                let h = tid::host_num(t);
                h == self.host_num || h == 0
            }
        });
        let note = |target| Notify {
            what: kind,
            watcher: me,
            tag,
            ctx,
            target,
        };
        let mut by_host: std::collections::BTreeMap<u32, Vec<i32>> = Default::default();
        for t in elsewhere {
            by_host.entry(tid::host_num(t)).or_default().push(t);
        }
        for (h, ts) in by_host {
            let mut ints = vec![what, tag, ctx];
            ints.extend(&ts);
            let known = self.hosts.contains_key(&h);
            if known {
                self.tell(
                    h,
                    me,
                    op::NOTIFY,
                    Args {
                        ints,
                        ..Args::default()
                    },
                );
                if what & NOTIFY_CANCEL != 0 {
                    self.remote_watches
                        .retain(|n| !(n.watcher == me && n.tag == tag && ts.contains(&n.target)));
                } else {
                    self.remote_watches.extend(ts.iter().map(|&t| note(t)));
                }
            } else if what & NOTIFY_CANCEL == 0 {
                // No such host: its tasks are as good as gone.
                for target in ts {
                    self.send_notify(&note(target));
                }
            }
        }
        if what & NOTIFY_CANCEL != 0 {
            self.notifies.retain(|n| {
                !(n.watcher == me
                    && n.what == kind
                    && n.tag == tag
                    && (kind == HOST_ADD || mine.contains(&n.target)))
            });
            return (0, Args::default());
        }
        match kind {
            TASK_EXIT => {
                for target in mine {
                    if self.tasks.contains_key(&target) {
                        self.notifies.push(note(target));
                    } else {
                        self.send_notify(&note(target));
                    }
                }
                (0, Args::default())
            }
            HOST_DELETE => {
                for target in mine {
                    if self.hosts.contains_key(&tid::host_num(target)) {
                        self.notifies.push(note(target));
                    } else {
                        self.send_notify(&note(target));
                    }
                }
                (0, Args::default())
            }
            HOST_ADD => {
                self.notifies.push(note(0));
                (0, Args::default())
            }
            _ => (PvmError::BadParam.code(), Args::default()),
        }
    }

    fn wake_info_waiters(&mut self, name: &str) {
        let waiting: Vec<InfoWaiter> = {
            let (w, keep) = std::mem::take(&mut self.info_waiters)
                .into_iter()
                .partition(|w| w.name == name);
            self.info_waiters = keep;
            w
        };
        for w in waiting {
            match self.mailbox.get(&w.name, w.index, w.flags, w.me) {
                Ok(e) => self.reply_to(w.to, w.seq, 0, info_args(e)),
                Err(_) => self.info_waiters.push(w),
            }
        }
    }
}

/// A spawn's answer: how many started, and a tid or error code for each.
fn spawn_result(tids: Vec<i32>) -> (i32, Args) {
    let ok = tids.iter().filter(|&&t| t > 0).count() as i32;
    (
        ok,
        Args {
            ints: tids,
            ..Args::default()
        },
    )
}

fn info_args(e: Entry) -> Args {
    Args {
        ints: vec![e.enc, e.owner],
        strs: Vec::new(),
        bytes: e.body,
    }
}
