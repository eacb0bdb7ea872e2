//! The task side of PVM: enrollment with the local pvmd (started on demand,
//! as PVM does), buffers, send and receive. Everything libpvm3 exports is a
//! thin shell over [`Task`]; the `pvm` console uses it directly.

pub mod buffers;
mod direct;
mod host_link;
mod pvmd_link;
mod recv;
mod rm;
mod select_fd;
mod start;

pub use start::{start_daemon, start_daemon_with};

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, BufWriter, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::codec;
use crate::error::{PvmError, PvmResult};
use crate::frame::{self, op, Args, Frame, Msg};
use crate::pool::{Body, Desc, Pool, PoolHandle, PostError};
use buffers::{BufTable, MsgBuf};
use pvmd_link::{Lifeline, NoSigPipe};
use select_fd::SelectFd;

/// A message waiting in the task to be received.
pub struct Queued {
    pub src: i32,
    pub tag: i32,
    pub ctx: i32,
    pub enc: i32,
    pub body: Body,
}

/// Options pvm_setopt can change.
#[derive(Debug, Clone)]
pub struct Options {
    pub route: i32,
    pub auto_err: i32,
    pub out_tid: i32,
    pub out_code: i32,
    pub out_ctx: i32,
    pub frag_size: i32,
    pub show_tids: i32,
    pub no_reset: i32,
    /// PvmResvTids: may send to pvmds and use the system's (negative)
    /// tags, as a resource manager does.
    pub resv_tids: i32,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            // PvmAllowDirect, PVM's default: grant a peer's direct route.
            route: direct::ROUTE_ALLOW,
            auto_err: 1,
            out_tid: 0,
            out_code: 0,
            out_ctx: 0,
            frag_size: 4096,
            show_tids: 1,
            no_reset: 0,
            resv_tids: 0,
        }
    }
}

/// How long a receive may wait.
#[derive(Debug, Clone, Copy)]
pub enum Wait {
    Forever,
    Never,
    For(Duration),
}

/// An enrolled PVM task.
pub struct Task {
    rd: BufReader<UnixStream>,
    wr: BufWriter<NoSigPipe>,
    pub mytid: i32,
    pub ptid: i32,
    pub siblings: Vec<i32>,
    pub hostname: String,
    seq: u32,
    queue: VecDeque<Queued>,
    /// This task's pool mapping and slot (None: everything via the pvmd).
    pub home: Option<PoolHandle>,
    /// Slots of peers already looked up.
    peer_slots: HashMap<i32, usize>,
    seen_sock_bell: u32,
    pub bufs: BufTable,
    pub sbuf: i32,
    pub rbuf: i32,
    pub ctx: i32,
    next_ctx: i32,
    pub opts: Options,
    /// PvmRouteDirect between hosts.
    direct: direct::Direct,
    /// Default-route links to other hosts' pvmds.
    host_links: host_link::HostLinks,
    /// pvm_getfds's descriptor, once asked for.
    select: Option<SelectFd>,
    /// Whether the pvmd is still there (see pvmd_link); dropped last, so
    /// its watcher is stopped after the direct links.
    pvmd: Lifeline,
}

fn sys(_: io::Error) -> PvmError {
    PvmError::SysErr
}

impl Task {
    /// Enrolls this process, starting a pvmd if none answers.
    pub fn enroll() -> PvmResult<Task> {
        let name = std::env::args().next().unwrap_or_default();
        let name = name.rsplit('/').next().unwrap_or_default().to_string();
        Task::enroll_as(name)
    }

    /// Enrolls under the command name `name` (what `ps` shows; the console
    /// has none, as in stock PVM).
    pub fn enroll_as(name: String) -> PvmResult<Task> {
        let path = crate::paths::daemon_socket();
        let stream = match UnixStream::connect(&path) {
            Ok(s) => s,
            Err(_) => {
                start::start_daemon().map_err(|_| PvmError::SysErr)?;
                UnixStream::connect(&path).map_err(sys)?
            }
        };
        let pool = crate::fdpass::recv_greeting(stream.as_raw_fd())
            .map_err(sys)?
            .and_then(|fd| Pool::attach(fd).ok())
            .map(Arc::new);
        let hint = std::env::var(crate::daemon::ENV_TID)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut t = Task {
            rd: BufReader::with_capacity(256 * 1024, stream.try_clone().map_err(sys)?),
            wr: BufWriter::with_capacity(64 * 1024, NoSigPipe(stream)),
            mytid: 0,
            ptid: 0,
            siblings: Vec::new(),
            hostname: String::new(),
            seq: 0,
            queue: VecDeque::new(),
            home: None,
            peer_slots: HashMap::new(),
            seen_sock_bell: 0,
            bufs: BufTable::default(),
            sbuf: 0,
            rbuf: 0,
            ctx: 0,
            next_ctx: 1,
            opts: Options::default(),
            direct: direct::Direct::default(),
            host_links: host_link::HostLinks::default(),
            select: None,
            pvmd: Lifeline::unwatched(),
        };
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let (code, args) = t.call(
            op::HELLO,
            Args {
                ints: vec![hint, pid],
                strs: vec![name],
                bytes: vec![],
            },
        )?;
        if code <= 0 {
            return Err(PvmError::from_code(code).unwrap_or(PvmError::SysErr));
        }
        t.mytid = code;
        t.ptid = args.ints.first().copied().unwrap_or(0);
        let n = args.ints.get(1).copied().unwrap_or(0).max(0) as usize;
        t.siblings = args.ints.iter().skip(2).take(n).copied().collect();
        t.hostname = args.strs.first().cloned().unwrap_or_default();
        let slot = args.ints.get(2 + n).copied().unwrap_or(-1);
        if let (Some(pool), Ok(slot)) = (pool, usize::try_from(slot)) {
            t.seen_sock_bell = pool.sock_bell(slot);
            t.home = Some(PoolHandle { pool, slot });
        }
        t.pvmd = Lifeline::watch(t.rd.get_ref(), t.home.clone());
        // Our tid is a fresh one: drop the hint so our children do not reuse it.
        std::env::remove_var(crate::daemon::ENV_TID);
        Ok(t)
    }

    fn write(&mut self, f: &Frame) -> PvmResult<()> {
        let r = frame::write_frame(&mut self.wr, f).and_then(|_| self.wr.flush());
        self.socket_io(r)
    }

    /// The result of I/O on the pvmd's socket: a failure means the pvmd
    /// is gone, and the task stays marked so.
    fn socket_io<T>(&mut self, r: io::Result<T>) -> PvmResult<T> {
        r.map_err(|_| {
            self.pvmd.cut();
            PvmError::SysErr
        })
    }

    /// Err(PvmSysErr) once the pvmd is gone, which the watcher (or a
    /// failed socket call) marks, so calls that never touch the socket
    /// (pool sends and receives) still learn of the death.
    pub fn check_pvmd(&mut self) -> PvmResult<()> {
        if self.pvmd.gone() {
            Err(PvmError::SysErr)
        } else {
            Ok(())
        }
    }

    /// True once the pvmd is known to be gone; every call then fails.
    pub fn pvmd_gone(&self) -> bool {
        self.pvmd.gone()
    }

    /// Reads one frame from the pvmd, waiting at most until `deadline`.
    /// Messages go to the queue; a reply is returned.
    fn pump(&mut self, deadline: Option<Instant>) -> PvmResult<Option<(u32, i32, Args)>> {
        if self.rd.buffer().is_empty() {
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                let mut p = libc::pollfd {
                    fd: self.rd.get_ref().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = left.as_millis().min(i32::MAX as u128) as i32;
                // SAFETY: one valid pollfd.
                let n = unsafe { libc::poll(&mut p, 1, ms) };
                if n == 0 {
                    return Ok(None);
                }
            }
        }
        let r = frame::read_frame(&mut self.rd);
        match self.socket_io(r)? {
            None => {
                self.pvmd.cut();
                Err(PvmError::SysErr)
            }
            Some(Frame::Msg(m)) => {
                let q = Queued {
                    src: m.src,
                    tag: m.tag,
                    ctx: m.ctx,
                    enc: m.enc,
                    body: Body::from_vec(m.body, self.home.clone()),
                };
                self.arrive(q);
                Ok(None)
            }
            Some(Frame::Reply { seq, code, args }) => Ok(Some((seq, code, args))),
            Some(Frame::Req { .. }) => Ok(None),
        }
    }

    /// A synchronous request to the pvmd.
    pub fn call(&mut self, opcode: u32, args: Args) -> PvmResult<(i32, Args)> {
        self.check_pvmd()?;
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        self.write(&Frame::Req {
            seq,
            op: opcode,
            args,
        })?;
        loop {
            if let Some((s, code, args)) = self.pump(None)? {
                if s == seq {
                    return Ok((code, args));
                }
            }
        }
    }

    /// The socket to the pvmd.
    pub fn socket_fd(&self) -> i32 {
        self.rd.get_ref().as_raw_fd()
    }

    // ---- buffers ----

    pub fn mkbuf(&mut self, enc: i32) -> PvmResult<i32> {
        if !(0..=2).contains(&enc) && enc != 4 {
            return Err(PvmError::BadParam);
        }
        Ok(self.bufs.insert(MsgBuf::with_home(enc, self.home.clone())))
    }

    pub fn freebuf(&mut self, id: i32) -> PvmResult<()> {
        // Freeing "no buffer" (what pvm_setrbuf(0) hands back) is a no-op.
        if id == 0 {
            return Ok(());
        }
        self.bufs.remove(id)?;
        if self.sbuf == id {
            self.sbuf = 0;
        }
        if self.rbuf == id {
            self.rbuf = 0;
        }
        Ok(())
    }

    pub fn initsend(&mut self, enc: i32) -> PvmResult<i32> {
        let id = self.mkbuf(enc)?;
        if self.sbuf > 0 {
            let _ = self.bufs.remove(self.sbuf);
        }
        self.sbuf = id;
        Ok(id)
    }

    pub fn setsbuf(&mut self, id: i32) -> PvmResult<i32> {
        if id != 0 {
            self.bufs.get(id)?;
        }
        Ok(std::mem::replace(&mut self.sbuf, id))
    }

    pub fn setrbuf(&mut self, id: i32) -> PvmResult<i32> {
        if id != 0 {
            self.bufs.get(id)?;
        }
        Ok(std::mem::replace(&mut self.rbuf, id))
    }

    /// The send buffer, for packing.
    pub fn send_buf(&mut self) -> PvmResult<&mut MsgBuf> {
        let id = self.sbuf;
        self.bufs.get(id)
    }

    /// The receive buffer, for unpacking.
    pub fn recv_buf(&mut self) -> PvmResult<&mut MsgBuf> {
        let id = self.rbuf;
        self.bufs.get(id)
    }

    // ---- sending ----

    /// Sends the send buffer to every tid in `dsts`: through the pool
    /// (the receiver gets a hold on the same pages) when the receiver is a
    /// local task with a slot, else through the pvmd.
    pub fn send_buffer(&mut self, dsts: &[i32], tag: i32) -> PvmResult<()> {
        self.check_pvmd()?;
        let id = self.sbuf;
        crate::trace::mark("task.send", self.bufs.get(id)?.len());
        let ctx = self.ctx;
        let mut failed = None;
        if self.direct.active() {
            // Setup answers and finished connects first: a sender that
            // only sends must still come to use its direct route.
            self.gather()?;
        }
        for &dst in dsts {
            if dst <= 0 && dst & crate::tid::DAEMON_BIT as i32 == 0 {
                return Err(PvmError::BadParam);
            }
            if dst == self.mytid {
                let b = self.bufs.get(id)?;
                let body = if b.refs.is_empty() {
                    b.data.share()
                } else {
                    Body::from_vec(b.body(), self.home.clone())
                };
                let q = Queued {
                    src: self.mytid,
                    tag,
                    ctx,
                    enc: b.enc,
                    body,
                };
                self.queue.push_back(q);
                // No doorbell rings for it: readable for pvm_getfds now.
                if let Some(sel) = &self.select {
                    sel.raise();
                }
                continue;
            }
            match self.send_via_pool(id, dst, tag, ctx) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(PvmError::NoTask) => {
                    // The others of a multicast still get theirs.
                    failed.get_or_insert(PvmError::NoTask);
                    continue;
                }
                Err(e) => return Err(e),
            }
            if self.direct_send(id, dst, tag, ctx)? || self.host_link_send(id, dst, tag, ctx)? {
                continue;
            }
            // A local tid is checked (a dead one gives PvmNoTask, as the
            // issue asks); a remote one would cost a round trip between
            // hosts per send, so its pvmd drops it if the task is gone.
            let local = crate::tid::host_of(dst) == crate::tid::host_of(self.mytid);
            if dst & crate::tid::DAEMON_BIT as i32 == 0 && local && !self.task_exists(dst)? {
                failed.get_or_insert(PvmError::NoTask);
                continue;
            }
            let b = self.bufs.get(id)?;
            let m = Msg {
                src: self.mytid,
                dst,
                tag,
                ctx,
                enc: b.enc,
                body: b.body(),
            };
            let r = frame::write_frame(&mut self.wr, &Frame::Msg(m));
            self.socket_io(r)?;
        }
        let r = self.wr.flush();
        self.socket_io(r)?;
        crate::trace::mark("task.sent", 0);
        failed.map_or(Ok(()), Err)
    }

    fn task_exists(&mut self, t: i32) -> PvmResult<bool> {
        let (code, _) = self.call(
            op::PSTAT,
            Args {
                ints: vec![t],
                ..Args::default()
            },
        )?;
        Ok(code >= 0)
    }

    /// The pool path; Ok(false) when it does not apply (no pool, receiver
    /// without a slot, body larger than the pool).
    fn send_via_pool(&mut self, id: i32, dst: i32, tag: i32, ctx: i32) -> PvmResult<bool> {
        let Some(home) = self.home.clone() else {
            return Ok(false);
        };
        if dst as u32 & crate::tid::DAEMON_BIT != 0 {
            // A pvmd reads its socket, not a ring.
            return Ok(false);
        }
        let pool = &home.pool;
        let slot = match self.peer_slots.get(&dst) {
            Some(&s) if pool.slot_tid(s) == dst => s,
            _ => match pool.find_slot(dst) {
                Some(s) => {
                    self.peer_slots.insert(dst, s);
                    s
                }
                None => {
                    self.peer_slots.remove(&dst);
                    return Ok(false);
                }
            },
        };
        let b = self.bufs.get(id)?;
        let len = b.len();
        // In-place items are read now, into a run of their own.
        let mut temp = (!b.refs.is_empty()).then(|| Body::from_vec(b.body(), Some(home.clone())));
        let enc = b.enc;
        let run = if len == 0 {
            Some((u32::MAX, 0))
        } else {
            match temp.as_mut() {
                Some(t) => t.publish(),
                None => b.data.publish(),
            }
        };
        let Some((start, pages)) = run else {
            return Ok(false);
        };
        let d = Desc {
            src: self.mytid,
            tag,
            ctx,
            enc,
            start,
            pages,
            len: len as u64,
        };
        let mut spins = 0u32;
        loop {
            match pool.post(slot, dst, &d) {
                Ok(()) => return Ok(true),
                Err(PostError::NoTask) => {
                    self.peer_slots.remove(&dst);
                    return Err(PvmError::NoTask);
                }
                Err(PostError::Full) => {
                    // The receiver's ring is full: wait for it to read
                    // (with no pvmd, a dead receiver is never cleared).
                    self.check_pvmd()?;
                    spins += 1;
                    if spins < 100 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            }
        }
    }

    pub fn send(&mut self, dst: i32, tag: i32) -> PvmResult<()> {
        if tag < 0 && self.opts.resv_tids == 0 {
            return Err(PvmError::BadParam);
        }
        self.send_buffer(&[dst], tag)
    }

    pub fn mcast(&mut self, tids: &[i32], tag: i32) -> PvmResult<()> {
        if tag < 0 {
            return Err(PvmError::BadParam);
        }
        let others: Vec<i32> = tids.iter().copied().filter(|&t| t != self.mytid).collect();
        self.send_buffer(&others, tag)
    }
    /// (bytes, tag, source) of a buffer.
    pub fn bufinfo(&mut self, id: i32) -> PvmResult<(i32, i32, i32)> {
        let b = self.bufs.get(id)?;
        Ok((b.len() as i32, b.tag, b.src))
    }

    // ---- contexts ----

    pub fn newcontext(&mut self) -> i32 {
        let c = (self.mytid & crate::tid::HOST_MASK)
            | (self.mytid & 0xfff) << 6
            | (self.next_ctx & 0x3f);
        self.next_ctx += 1;
        c.max(1)
    }

    // ---- requests to the pvmd ----

    pub fn spawn(
        &mut self,
        file: &str,
        argv: &[String],
        flags: i32,
        where_: &str,
        count: i32,
    ) -> PvmResult<Vec<i32>> {
        if count < 1 {
            return Err(PvmError::BadParam);
        }
        let mut strs = vec![file.to_string(), where_.to_string()];
        strs.extend(argv.iter().cloned());
        strs.extend(exported_env());
        let ints = vec![
            flags,
            count,
            argv.len() as i32,
            self.opts.out_tid,
            self.opts.out_code,
            self.opts.out_ctx,
        ];
        let (_, args) = self.call_via_rm(
            op::SPAWN,
            Args {
                ints,
                strs,
                bytes: vec![],
            },
        )?;
        Ok(args.ints)
    }

    pub fn exit(&mut self) -> PvmResult<()> {
        // Pool holds go back before the pvmd retires our slot: afterwards
        // the slot may already belong to a new task. Direct links first:
        // their threads write into pages our slot holds; host links read
        // from them.
        self.host_links_close();
        self.direct_close();
        crate::trace::flush();
        // Our slot is about to go to another task: its bell is not ours
        // to ring any more.
        self.select = None;
        self.pvmd = Lifeline::unwatched();
        self.bufs = BufTable::default();
        self.queue.clear();
        self.sbuf = 0;
        self.rbuf = 0;
        self.home = None;
        self.call(op::EXIT, Args::default()).map(|_| ())
    }

    /// A request whose reply is just a code.
    pub fn simple(&mut self, opcode: u32, ints: Vec<i32>, strs: Vec<String>) -> PvmResult<i32> {
        let (code, _) = self.call(
            opcode,
            Args {
                ints,
                strs,
                bytes: vec![],
            },
        )?;
        if code < 0 {
            Err(PvmError::from_code(code).unwrap_or(PvmError::SysErr))
        } else {
            Ok(code)
        }
    }

    /// pvm_putinfo: stores buffer `id` under `name`.
    pub fn putinfo(&mut self, name: &str, id: i32, flags: i32) -> PvmResult<i32> {
        let b = self.bufs.get(id)?;
        let (enc, body) = (b.enc, b.body());
        let (code, _) = self.call(
            op::PUTINFO,
            Args {
                ints: vec![flags, enc],
                strs: vec![name.into()],
                bytes: body,
            },
        )?;
        if code < 0 {
            return Err(PvmError::from_code(code).unwrap_or(PvmError::SysErr));
        }
        Ok(code)
    }

    /// pvm_recvinfo: a new receive buffer holding the stored message.
    pub fn recvinfo(&mut self, name: &str, index: i32, flags: i32) -> PvmResult<i32> {
        let (code, a) = self.call(
            op::RECVINFO,
            Args {
                ints: vec![index, flags],
                strs: vec![name.into()],
                bytes: vec![],
            },
        )?;
        if code < 0 {
            return Err(PvmError::from_code(code).unwrap_or(PvmError::SysErr));
        }
        let enc = a.ints.first().copied().unwrap_or(0);
        let src = a.ints.get(1).copied().unwrap_or(0);
        // Like PVM, the stored message becomes the active receive buffer.
        let m = Queued {
            src,
            tag: 0,
            ctx: self.ctx,
            enc,
            body: Body::from_vec(a.bytes, self.home.clone()),
        };
        Ok(self.install_rbuf(m))
    }
}

/// Values of the variables named in PVM_EXPORT (colon separated), which
/// PVM passes on to spawned tasks.
fn exported_env() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(list) = std::env::var("PVM_EXPORT") {
        out.push(format!("PVM_EXPORT={list}"));
        for name in list.split(':').filter(|n| !n.is_empty()) {
            if let Ok(v) = std::env::var(name) {
                out.push(format!("{name}={v}"));
            }
        }
    }
    out
}

/// Unpacks one int from a message body in its encoding (used by callers
/// decoding pvmd-built messages such as notifications).
pub fn first_int(enc: i32, body: &[u8]) -> PvmResult<i32> {
    codec::unpack_i32(enc, body, &mut 0)
}
