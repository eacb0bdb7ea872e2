//! pvmd: one per host. A single-threaded poll loop owns every task
//! connection, routes messages between tasks, spawns and reaps tasks,
//! forwards their output, and keeps the mailbox and notify lists. It never
//! blocks on a task: outgoing bytes queue per connection, so a slow or
//! stuck task cannot stall the others.

mod conn;
mod hosts;
mod mbox;
mod mesh;
mod remote;
mod requests;
mod rm;
mod spawn;
mod task_links;

pub use rm::{sm, FORWARDED as RM_FORWARDED};
pub use spawn::{ENV_SOCK, ENV_TID};

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;

use crate::codec;
use crate::frame::{Frame, Msg};
use crate::link::{Link, LinkEvent, LinkNic, Waker};
use crate::pool::{self, Pool};
use crate::tid;
use conn::Conn;
use hosts::HostRec;
pub use hosts::SlaveArgs;
use remote::{Gather, Pending, ReplyTo};

/// pvmd settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub socket: PathBuf,
    pub log: PathBuf,
    pub exec_path: Vec<PathBuf>,
    pub hostname: String,
    pub arch: String,
    /// Pages of the global pool (None: no pool, messages go through pvmd).
    pub pool_pages: Option<usize>,
    /// The hostfile to start the virtual machine from (master only).
    pub hostfile: Option<PathBuf>,
    /// Set when this pvmd is a slave started by a master.
    pub slave: Option<SlaveArgs>,
    /// How long the loop polls for work before it sleeps
    /// (`OPENVIA_PVM_SPIN_NS`; see `poll_once`).
    pub spin: std::time::Duration,
}

impl Config {
    /// Settings from the environment, as PVM reads them.
    pub fn from_env() -> Config {
        Config {
            socket: crate::paths::daemon_socket(),
            log: crate::paths::daemon_log(),
            exec_path: crate::paths::default_exec_path(),
            hostname: crate::paths::hostname(),
            arch: crate::paths::arch(),
            pool_pages: pool::pages_from_env(),
            hostfile: None,
            slave: None,
            spin: crate::spin::limit(),
        }
    }
}

/// What pvmd knows about one task.
struct TaskRec {
    ptid: i32,
    pid: i32,
    name: String,
    /// Started by this pvmd (its child), not enrolled by hand.
    spawned: bool,
    conn: Option<RawFd>,
    /// Frames for a spawned task that has not enrolled yet.
    pending: Vec<Frame>,
    siblings: Vec<i32>,
    /// Its slot in the pool (ring and holds), if one was free.
    slot: Option<usize>,
    /// Spawned with tasks on other hosts: its sibling list comes later,
    /// and its enrollment is answered only then.
    siblings_pending: bool,
    /// A HELLO waiting for the sibling list: (connection, request seq).
    hello_wait: Option<(RawFd, u32)>,
}

/// A pvm_notify request.
struct Notify {
    what: i32,
    watcher: i32,
    tag: i32,
    ctx: i32,
    target: i32,
}

/// A blocked pvm_recvinfo.
struct InfoWaiter {
    to: ReplyTo,
    me: i32,
    seq: u32,
    name: String,
    index: i32,
    flags: i32,
}

/// A child's stdout/stderr pipe.
/// Where its output goes is kept here, not in the task record: the pipe
/// may drain after the task has already left.
struct OutputPipe {
    tid: i32,
    file: File,
    out_tid: i32,
    out_code: i32,
    out_ctx: i32,
}

/// The daemon's whole state.
pub struct Daemon {
    cfg: Config,
    listener: UnixListener,
    conns: HashMap<RawFd, Conn>,
    tasks: BTreeMap<i32, TaskRec>,
    outputs: HashMap<RawFd, OutputPipe>,
    next_local: i32,
    notifies: Vec<Notify>,
    mailbox: mbox::Mailbox,
    info_waiters: Vec<InfoWaiter>,
    log: File,
    /// Task output not yet ended by a newline, per task.
    partial_lines: HashMap<i32, Vec<u8>>,
    halting: bool,
    pool: Option<Arc<Pool>>,
    free_slots: Vec<usize>,
    /// This host's number (the master is 1) and the master's.
    host_num: u32,
    master_num: u32,
    /// Every host of the virtual machine, this one included.
    hosts: BTreeMap<u32, HostRec>,
    /// Links to other pvmds: the master's to every slave, a slave's to the
    /// master and (`mesh.rs`) to every other slave.
    links: HashMap<u32, Link>,
    link_nic: Option<Arc<LinkNic>>,
    mesh: mesh::Mesh,
    /// Tasks of other hosts sending to ours over VIs of their own.
    task_links: task_links::TaskLinks,
    link_events: (
        std::sync::mpsc::Sender<LinkEvent>,
        std::sync::mpsc::Receiver<LinkEvent>,
    ),
    waker: Arc<Waker>,
    /// Requests sent to other pvmds, by call number.
    calls: HashMap<u32, Pending>,
    gathers: HashMap<u32, Gather>,
    next_call: u32,
    /// Hosts the hostfile described, for `add`.
    known_hosts: BTreeMap<String, crate::hostfile::HostEntry>,
    next_host: u32,
    spawn_rr: usize,
    /// Writes messages from other hosts straight into the pool.
    inbound: Option<Arc<crate::pool::inbound::Inbound>>,
    /// Task-exit watches our tasks placed on tasks of other hosts: fired
    /// here if that host goes away before its pvmd could fire them.
    remote_watches: Vec<Notify>,
    /// The registered resource manager (pvm_reg_rm), if any.
    rm: Option<i32>,
    /// The loop's spin window (`poll_once`).
    spin: crate::spin::Window,
    /// The loop is spinning for work (`wait_for_work`).
    spinning: bool,
}

impl Daemon {
    /// Binds the socket; fails if another pvmd answers there.
    pub fn bind(cfg: Config) -> io::Result<Daemon> {
        if std::os::unix::net::UnixStream::connect(&cfg.socket).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "a pvmd is already running",
            ));
        }
        let _ = std::fs::remove_file(&cfg.socket);
        let listener = crate::private::listen(&cfg.socket)?;
        listener.set_nonblocking(true)?;
        let pool = match cfg.pool_pages {
            Some(n) => Some(Arc::new(Pool::create(n)?)),
            None => None,
        };
        let log = crate::private::open_append(&cfg.log)?;
        let cfg_spin = cfg.spin;
        let (host_num, master_num) = match &cfg.slave {
            Some(s) => (s.host_num, s.master_num),
            None => (1, 1),
        };
        let mut d = Daemon {
            cfg,
            listener,
            conns: HashMap::new(),
            tasks: BTreeMap::new(),
            outputs: HashMap::new(),
            next_local: 1,
            notifies: Vec::new(),
            mailbox: mbox::Mailbox::default(),
            info_waiters: Vec::new(),
            log,
            partial_lines: HashMap::new(),
            halting: false,
            pool,
            free_slots: (0..pool::MAX_SLOTS).rev().collect(),
            host_num,
            master_num,
            hosts: BTreeMap::new(),
            links: HashMap::new(),
            link_nic: None,
            mesh: mesh::Mesh::default(),
            task_links: task_links::TaskLinks::default(),
            link_events: std::sync::mpsc::channel(),
            waker: Waker::new()?,
            calls: HashMap::new(),
            gathers: HashMap::new(),
            next_call: 1,
            known_hosts: BTreeMap::new(),
            next_host: 2,
            spawn_rr: 0,
            inbound: None,
            remote_watches: Vec::new(),
            rm: None,
            spin: crate::spin::Window::new(cfg_spin, crate::spin::PVMD_CONTENDED_NS),
            spinning: false,
        };
        d.waker.set_kick(!d.cfg.spin.is_zero());
        // The pvmd's own slot holds runs its links are writing.
        let me_tid = d.tid();
        if let Some(slot) = d.claim_slot(me_tid, 0) {
            let pool = d.pool.clone().expect("a slot implies a pool");
            d.inbound = Some(Arc::new(crate::pool::inbound::Inbound::new(
                pool, slot, host_num,
            )));
        }
        let me = HostRec {
            num: host_num,
            name: d.cfg.hostname.clone(),
            arch: d.cfg.arch.clone(),
            speed: 1000,
            addr: Vec::new(),
        };
        d.hosts.insert(host_num, me);
        d.logln(&format!(
            "openvia pvmd ready on {} ({})",
            d.cfg.hostname, d.cfg.arch
        ));
        Ok(d)
    }

    /// This pvmd's tid.
    pub fn tid(&self) -> i32 {
        tid::daemon_tid(self.host_num)
    }

    fn logln(&mut self, line: &str) {
        let _ = writeln!(self.log, "[t{:x}] {}", self.tid() as u32, line);
    }

    /// A pool slot for a new task, if the pool has one left.
    fn claim_slot(&mut self, tid: i32, pid: i32) -> Option<usize> {
        let pool = self.pool.as_ref()?;
        let slot = self.free_slots.pop()?;
        pool.claim_slot(slot, tid, pid);
        Some(slot)
    }

    /// Tells a task's receive loop that its socket has data.
    fn ring_sock_bell(&self, fd: RawFd) {
        let Some(pool) = &self.pool else { return };
        let slot = self
            .conns
            .get(&fd)
            .and_then(|c| c.tid)
            .and_then(|t| self.tasks.get(&t))
            .and_then(|r| r.slot);
        if let Some(slot) = slot {
            pool.ring_sock_bell(slot);
        }
    }

    fn new_tid(&mut self) -> i32 {
        loop {
            let t = tid::task_tid(self.host_num, self.next_local);
            self.next_local = (self.next_local % tid::LOCAL_MASK) + 1;
            if !self.tasks.contains_key(&t) {
                return t;
            }
        }
    }

    /// Serves until halted.
    pub fn run(&mut self) -> io::Result<()> {
        self.start_virtual_machine();
        while !self.halting {
            self.poll_once(200)?;
            self.reap_children();
        }
        self.shutdown();
        Ok(())
    }

    fn poll_once(&mut self, timeout_ms: i32) -> io::Result<()> {
        let mut fds = vec![
            libc::pollfd {
                fd: self.listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.waker.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        for (fd, c) in &self.conns {
            let ev = libc::POLLIN | if c.wants_write() { libc::POLLOUT } else { 0 };
            fds.push(libc::pollfd {
                fd: *fd,
                events: ev,
                revents: 0,
            });
        }
        for fd in self.outputs.keys() {
            fds.push(libc::pollfd {
                fd: *fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let n = self.wait_for_work(&mut fds, timeout_ms);
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        for p in fds.iter().filter(|p| p.revents != 0) {
            if p.fd == self.listener.as_raw_fd() {
                self.accept_all();
            } else if p.fd == self.waker.fd() {
                self.waker.drain();
                self.link_events();
            } else if self.outputs.contains_key(&p.fd) {
                self.read_output(p.fd);
            } else if self.conns.contains_key(&p.fd) {
                if p.revents & libc::POLLOUT != 0 {
                    self.flush(p.fd);
                }
                if p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                    self.read_conn(p.fd);
                }
            }
        }
        Ok(())
    }

    /// Polls `fds` for work: first spinning (the spin window), then asleep
    /// in `poll`. While it spins the loop also drives the links itself, so
    /// a datagram from another host is mostly taken in here (written into
    /// the receiving task's pool pages, its doorbell rung) before the
    /// NIC's progress thread is scheduled, and a task's next message,
    /// which often follows within the window, is read without a wake-up
    /// of this loop. The progress thread keeps watching the links all the
    /// same: a spinning loop that loses its CPU to another process for a
    /// time slice must not leave a datagram lying there (measured: 2 ms
    /// stalls when it did). Returns what `poll` returns.
    fn wait_for_work(&mut self, fds: &mut [libc::pollfd], timeout_ms: i32) -> i32 {
        let poll = |fds: &mut [libc::pollfd], ms: i32| {
            // SAFETY: fds is a valid array of pollfd for its length.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) }
        };
        let mut spin = self.spin.start();
        let mut n = poll(fds, 0);
        // One host: tasks talk through the pool, the loop has nothing to
        // spin for.
        if n == 0 && !self.links.is_empty() && spin.go_on() {
            self.set_spinning(true);
            loop {
                for l in self.links.values() {
                    l.poll();
                }
                n = poll(fds, 0);
                if n != 0 || !spin.go_on() {
                    break;
                }
            }
        }
        if n == 0 {
            self.set_spinning(false);
            n = poll(fds, timeout_ms);
        }
        if n > 0 {
            self.spin.settle(&spin);
        }
        n
    }

    /// While the loop sleeps (and its spin is on), a message a link writes
    /// into the pool wakes it (`Waker::delivered`), so that it spins for
    /// the receiving task's answer beside the task's own wake-up.
    fn set_spinning(&mut self, on: bool) {
        if self.spinning != on {
            self.spinning = on;
            self.waker.set_kick(!on && !self.cfg.spin.is_zero());
        }
    }

    fn accept_all(&mut self) {
        while let Ok((s, _)) = self.listener.accept() {
            // The socket file is 0600; this also holds if someone widened
            // it: the pool (every local message) goes to our user only.
            if !crate::private::same_user(s.as_raw_fd()) {
                continue;
            }
            let pool_fd = self.pool.as_ref().map(|p| p.fd());
            // One byte into a fresh socket never blocks; a client that
            // only probed and left makes it fail, which is fine.
            let _ = crate::fdpass::send_greeting(s.as_raw_fd(), pool_fd);
            if let Ok(c) = Conn::new(s) {
                self.conns.insert(c.fd(), c);
            }
        }
    }

    fn flush(&mut self, fd: RawFd) {
        let dead = match self.conns.get_mut(&fd) {
            Some(c) => c.flush().is_err(),
            None => false,
        };
        self.ring_sock_bell(fd);
        if dead {
            self.drop_conn(fd);
        }
    }

    fn read_conn(&mut self, fd: RawFd) {
        let frames = match self.conns.get_mut(&fd).map(Conn::read_frames) {
            Some(Ok(f)) => f,
            Some(Err(_)) => {
                self.drop_conn(fd);
                return;
            }
            None => return,
        };
        let mut closed = false;
        for f in frames {
            match f {
                None => closed = true,
                Some(Frame::Msg(m)) => {
                    crate::trace::mark("pvmd.from_task", m.body.len());
                    if let Some(src) = self.conns.get(&fd).and_then(|c| c.tid) {
                        self.route(Msg { src, ..m });
                    }
                }
                Some(Frame::Req { seq, op, args }) => self.request(fd, seq, op, args),
                Some(Frame::Reply { .. }) => {}
            }
        }
        if closed {
            self.drop_conn(fd);
        }
    }

    /// Sends a frame to a task, holding it if the task has not enrolled.
    fn deliver(&mut self, to: i32, f: Frame) -> bool {
        let Some(rec) = self.tasks.get_mut(&to) else {
            return false;
        };
        match rec.conn {
            Some(fd) => {
                let broken = match self.conns.get_mut(&fd) {
                    Some(c) => c.queue(&f).is_err(),
                    None => true,
                };
                self.ring_sock_bell(fd);
                if broken {
                    self.drop_conn(fd);
                }
            }
            None => rec.pending.push(f),
        }
        true
    }

    fn route(&mut self, m: Msg) {
        self.note_remote_exit(&m);
        let dst = m.dst;
        if dst == self.tid() {
            self.daemon_message(m);
            return;
        }
        let host = tid::host_num(dst);
        if host != self.host_num && host != 0 {
            if !self.send_host(host, Frame::Msg(m)) {
                self.logln(&format!(
                    "message for t{dst:x}: no route to host {host}, dropped"
                ));
            }
            crate::trace::mark("pvmd.to_link", 0);
            return;
        }
        if !self.deliver(dst, Frame::Msg(m)) {
            self.logln(&format!("message for t{dst:x}: no such task, dropped"));
        }
    }

    fn reply(&mut self, fd: RawFd, seq: u32, code: i32, args: crate::frame::Args) {
        let broken = match self.conns.get_mut(&fd) {
            Some(c) => c.queue(&Frame::Reply { seq, code, args }).is_err(),
            None => false,
        };
        self.ring_sock_bell(fd);
        if broken {
            self.drop_conn(fd);
        }
    }

    fn drop_conn(&mut self, fd: RawFd) {
        let Some(c) = self.conns.remove(&fd) else {
            return;
        };
        self.info_waiters.retain(|w| w.to != ReplyTo::Task(fd));
        if let Some(t) = c.tid {
            self.task_gone(t);
        }
    }

    /// Forgets a task and tells whoever asked to know.
    fn task_gone(&mut self, t: i32) {
        let Some(rec) = self.tasks.remove(&t) else {
            return;
        };
        if let Some(fd) = rec.conn {
            self.conns.remove(&fd);
        }
        self.logln(&format!("task t{t:x} ({}) exited", rec.name));
        self.rm_task_gone(t);
        if let (Some(pool), Some(slot)) = (&self.pool, rec.slot) {
            let freed = pool.reclaim_slot(slot);
            self.free_slots.push(slot);
            if freed > 0 {
                self.logln(&format!("reclaimed {freed} pool pages of t{t:x}"));
            }
        }
        self.mailbox.owner_exited(t);
        let fired: Vec<Notify> = {
            let (f, keep) = std::mem::take(&mut self.notifies)
                .into_iter()
                .partition(|n| n.what == 1 && n.target == t);
            self.notifies = keep;
            f
        };
        self.notifies.retain(|n| n.watcher != t);
        self.remote_watches.retain(|n| n.watcher != t);
        for n in fired {
            self.send_notify(&n);
        }
    }

    fn send_notify(&mut self, n: &Notify) {
        let mut body = Vec::new();
        codec::pack_i32(codec::ENC_DEFAULT, n.target, &mut body);
        let m = Msg {
            src: self.tid(),
            dst: n.watcher,
            tag: n.tag,
            ctx: n.ctx,
            enc: codec::ENC_DEFAULT,
            body,
        };
        self.route(m);
    }

    fn reap_children(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid with WNOHANG only inspects our children.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            let gone: Vec<i32> = self
                .tasks
                .iter()
                .filter(|(_, r)| r.pid == pid && r.conn.is_none())
                .map(|(t, _)| *t)
                .collect();
            for t in gone {
                self.task_gone(t);
            }
        }
    }

    fn read_output(&mut self, fd: RawFd) {
        let mut buf = [0u8; 4096];
        let n = match self.outputs.get_mut(&fd) {
            Some(p) => io::Read::read(&mut p.file, &mut buf).unwrap_or(0),
            None => return,
        };
        let p = &self.outputs[&fd];
        let to = (p.tid, p.out_tid, p.out_code, p.out_ctx);
        if n == 0 {
            self.outputs.remove(&fd);
        }
        self.forward_output(to, &buf[..n]);
    }

    /// Task output goes to the task's output tid as (tid, len, bytes)
    /// messages (len 0 = end), or to the log when nobody asked for it.
    fn forward_output(&mut self, (tid, out_tid, code, ctx): (i32, i32, i32, i32), data: &[u8]) {
        if out_tid > 0 {
            let mut body = Vec::new();
            codec::pack_i32(codec::ENC_DEFAULT, tid, &mut body);
            codec::pack_i32(codec::ENC_DEFAULT, data.len() as i32, &mut body);
            codec::pack(
                codec::ENC_DEFAULT,
                codec::Elem::Byte,
                data,
                data.len(),
                1,
                &mut body,
            );
            let m = Msg {
                src: self.tid(),
                dst: out_tid,
                tag: code,
                ctx,
                enc: codec::ENC_DEFAULT,
                body,
            };
            self.route(m);
        } else {
            // Whole lines only: unbuffered stderr arrives in fragments.
            let pending = self.partial_lines.entry(tid).or_default();
            pending.extend_from_slice(data);
            let cut = if data.is_empty() {
                pending.len()
            } else {
                pending
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1)
            };
            let text: Vec<u8> = pending.drain(..cut).collect();
            if data.is_empty() {
                self.partial_lines.remove(&tid);
            }
            for line in String::from_utf8_lossy(&text).lines() {
                let _ = writeln!(self.log, "[t{tid:x}] {line}");
            }
        }
    }

    fn shutdown(&mut self) {
        self.halt_slaves();
        if let Some(inb) = &self.inbound {
            use std::sync::atomic::Ordering::Relaxed;
            let (p, s) = (inb.into_pool.load(Relaxed), inb.by_socket.load(Relaxed));
            if p + s > 0 {
                self.logln(&format!(
                    "messages from other hosts: {p} into the pool, {s} by socket"
                ));
            }
        }
        for r in self.tasks.values() {
            if r.pid > 0 {
                // SAFETY: signalling a process id we spawned or that enrolled.
                unsafe { libc::kill(r.pid, libc::SIGTERM) };
            }
        }
        let _ = std::fs::remove_file(&self.cfg.socket);
        crate::trace::flush();
        if self.mesh.relayed > 0 || self.host_num == self.master_num {
            self.logln(&format!(
                "frames relayed between other hosts: {}",
                self.mesh.relayed
            ));
        }
        self.logln("halted");
    }
}
