//! The daemon's request table: one handler per opcode, each answering
//! with a code and generic arguments (see frame.rs).

use std::os::fd::RawFd;

use super::mbox::{Entry, WAIT_FOR_INFO};
use super::spawn::SpawnRequest;
use super::{Daemon, InfoWaiter, Notify, TaskRec};
use crate::error::PvmError;
use crate::frame::{op, Args};
use crate::tid;

const TASK_EXIT: i32 = 1;
const HOST_DELETE: i32 = 2;
const HOST_ADD: i32 = 3;
const NOTIFY_CANCEL: i32 = 256;

fn int(a: &Args, i: usize) -> i32 {
    a.ints.get(i).copied().unwrap_or(0)
}

fn string(a: &Args, i: usize) -> String {
    a.strs.get(i).cloned().unwrap_or_default()
}

impl Daemon {
    pub(super) fn request(&mut self, fd: RawFd, seq: u32, opcode: u32, a: Args) {
        let me = self.conns.get(&fd).and_then(|c| c.tid);
        if opcode != op::HELLO && me.is_none() {
            self.reply(fd, seq, PvmError::SysErr.code(), Args::default());
            return;
        }
        let me = me.unwrap_or(0);
        let (code, out) = match opcode {
            op::HELLO => {
                self.hello(fd, seq, &a);
                return;
            }
            op::SPAWN => self.req_spawn(me, &a),
            op::CONFIG => self.config(),
            op::TASKS => self.list_tasks(int(&a, 0)),
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
                let ok = self.host_name_ok(&string(&a, 0));
                (
                    if ok { 0 } else { PvmError::NoHost.code() },
                    Args::default(),
                )
            }
            op::NOTIFY => self.notify(me, &a),
            op::EXIT => {
                self.reply(fd, seq, 0, Args::default());
                self.drop_conn(fd);
                return;
            }
            op::HALT => {
                self.reply(fd, seq, 0, Args::default());
                // Everyone else gets SIGTERM at shutdown; the caller just exits.
                self.tasks.remove(&me);
                self.halting = true;
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
                match self.mailbox.get(&name, index, flags) {
                    Ok(e) => (0, info_args(e)),
                    Err(_) if flags & WAIT_FOR_INFO != 0 => {
                        self.info_waiters.push(InfoWaiter {
                            fd,
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
            op::ADDHOSTS => {
                let codes = a.strs.iter().map(|h| {
                    if self.host_name_ok(h) {
                        PvmError::DupHost.code()
                    } else {
                        PvmError::CantStart.code()
                    }
                });
                (
                    0,
                    Args {
                        ints: codes.collect(),
                        ..Args::default()
                    },
                )
            }
            op::DELHOSTS => {
                let codes = a.strs.iter().map(|_| PvmError::NoHost.code()).collect();
                (
                    0,
                    Args {
                        ints: codes,
                        ..Args::default()
                    },
                )
            }
            _ => (PvmError::NotImpl.code(), Args::default()),
        };
        self.reply(fd, seq, code, out);
    }

    fn host_name_ok(&self, h: &str) -> bool {
        h == self.cfg.hostname || h == "localhost" || h == "."
    }

    /// Enrolls a connection: a spawned task claims its reserved tid, a task
    /// started by hand gets a new one.
    fn hello(&mut self, fd: RawFd, seq: u32, a: &Args) {
        let (hint, pid, name) = (int(a, 0), int(a, 1), string(a, 0));
        let t = match self.tasks.get(&hint) {
            Some(r) if hint != 0 && r.conn.is_none() => hint,
            _ => {
                let t = self.new_tid();
                let slot = self.claim_slot(t, pid);
                let rec = TaskRec {
                    ptid: 0,
                    pid,
                    name,
                    conn: None,
                    pending: Vec::new(),
                    siblings: vec![t],
                    slot,
                };
                self.tasks.insert(t, rec);
                t
            }
        };
        let rec = self.tasks.get_mut(&t).expect("just ensured");
        rec.conn = Some(fd);
        rec.pid = pid;
        let pending = std::mem::take(&mut rec.pending);
        let mut ints = vec![rec.ptid, rec.siblings.len() as i32];
        ints.extend(&rec.siblings);
        ints.push(rec.slot.map_or(-1, |s| s as i32));
        if let (Some(pool), Some(slot)) = (&self.pool, rec.slot) {
            pool.set_slot_pid(slot, pid);
        }
        if let Some(c) = self.conns.get_mut(&fd) {
            c.tid = Some(t);
        }
        // The reply must precede the held messages: the task reads it first.
        self.reply(
            fd,
            seq,
            t,
            Args {
                ints,
                strs: vec![self.cfg.hostname.clone()],
                bytes: Vec::new(),
            },
        );
        for f in pending {
            self.deliver(t, f);
        }
    }

    fn req_spawn(&mut self, me: i32, a: &Args) -> (i32, Args) {
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
        let req = SpawnRequest {
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
        let tids = self.spawn(req);
        let ok = tids.iter().filter(|&&t| t > 0).count() as i32;
        (
            ok,
            Args {
                ints: tids,
                ..Args::default()
            },
        )
    }

    fn config(&self) -> (i32, Args) {
        let ints = vec![tid::host_tid(super::HOST_NUM), 1000, 0x0040_8841];
        let strs = vec![self.cfg.hostname.clone(), self.cfg.arch.clone()];
        (
            1,
            Args {
                ints,
                strs,
                bytes: Vec::new(),
            },
        )
    }

    fn list_tasks(&self, which: i32) -> (i32, Args) {
        let host = tid::host_tid(super::HOST_NUM);
        let mut out = Args::default();
        for (t, r) in &self.tasks {
            if which != 0 && which != host && which != *t {
                continue;
            }
            let flag = if r.conn.is_some() { 4 } else { 0 };
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

    fn notify(&mut self, me: i32, a: &Args) -> (i32, Args) {
        let (what, tag, ctx) = (int(a, 0), int(a, 1), int(a, 2));
        let kind = what & !NOTIFY_CANCEL;
        if what & NOTIFY_CANCEL != 0 {
            let targets = &a.ints[3.min(a.ints.len())..];
            self.notifies.retain(|n| {
                !(n.watcher == me && n.what == kind && n.tag == tag && targets.contains(&n.target))
            });
            return (0, Args::default());
        }
        match kind {
            TASK_EXIT => {
                for &target in &a.ints[3.min(a.ints.len())..] {
                    let n = Notify {
                        what: kind,
                        watcher: me,
                        tag,
                        ctx,
                        target,
                    };
                    if self.tasks.contains_key(&target) {
                        self.notifies.push(n);
                    } else {
                        self.send_notify(&n);
                    }
                }
                (0, Args::default())
            }
            HOST_DELETE | HOST_ADD => {
                // One host: it is never deleted while we run, none is added.
                for &target in &a.ints[3.min(a.ints.len())..] {
                    self.notifies.push(Notify {
                        what: kind,
                        watcher: me,
                        tag,
                        ctx,
                        target,
                    });
                }
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
            match self.mailbox.get(&w.name, w.index, w.flags) {
                Ok(e) => self.reply(w.fd, w.seq, 0, info_args(e)),
                Err(_) => self.info_waiters.push(w),
            }
        }
    }
}

fn info_args(e: Entry) -> Args {
    Args {
        ints: vec![e.enc, e.owner],
        strs: Vec::new(),
        bytes: e.body,
    }
}
