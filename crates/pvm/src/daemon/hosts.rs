//! The hosts of the virtual machine. The master pvmd (host 1) reads the
//! hostfile and starts a slave pvmd on each host through the remote shell
//! in `PVM_RSH` (ssh by default), exactly as PVM does; the slave opens
//! openvia's network device, prints its address on the remote shell's
//! stdout, and waits for the master to connect a VI to it. The master keeps
//! the host table and sends it to every slave when it changes; slaves reach
//! each other through the master (a star: it relays). A slave whose master
//! is gone halts, as in PVM.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Daemon, Notify};
use crate::codec;
use crate::error::PvmError;
use crate::frame::{op, Args, Msg};
use crate::hostfile::{self, HostEntry};
use crate::link::LinkNic;
use crate::tid;

/// How a master started this slave (`pvmd --slave ...`).
#[derive(Debug, Clone, Default)]
pub struct SlaveArgs {
    pub host_num: u32,
    pub master_num: u32,
    /// The name the master knows this host by.
    pub name: String,
    /// Where the master will connect (our address, this discriminator).
    pub disc: String,
    pub exec_path: Option<Vec<PathBuf>>,
    pub workdir: Option<PathBuf>,
}

/// One host of the virtual machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRec {
    pub num: u32,
    pub name: String,
    pub arch: String,
    pub speed: i32,
    /// Its pvmd's network address (slaves link to each other with it);
    /// empty where not known.
    pub addr: Vec<u8>,
}

/// What a slave prints when its device is open: tag, address (hex), arch.
const READY_TAG: &str = "openvia-pvmd-slave";
/// How long a slave may take to start, and to be connected.
const START_LIMIT: Duration = Duration::from_secs(30);

pub const TASK_EXIT: i32 = 1;
pub const HOST_DELETE: i32 = 2;
pub const HOST_ADD: i32 = 3;

/// Settings a slave inherits from its master's environment.
fn inherited_env() -> Vec<String> {
    std::env::vars()
        .filter(|(k, v)| {
            (k.starts_with("OPENVIA_") || k == "PVM_ARCH" || k == "PVM_ROOT")
                && k != "OPENVIA_PVM_SOCK"
                && !v.chars().any(char::is_whitespace)
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Reads one line from `r` within `limit`.
fn read_line_within(r: &mut std::process::ChildStdout, limit: Duration) -> Option<String> {
    let end = Instant::now() + limit;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut p = libc::pollfd {
            fd: r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) } <= 0 {
            continue;
        }
        match r.read(&mut byte) {
            Ok(1) => line.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&line).trim().to_string())
}

impl Daemon {
    fn ensure_link_nic(&mut self) -> Result<(), PvmError> {
        if self.link_nic.is_none() {
            match LinkNic::open() {
                Ok(n) => self.link_nic = Some(std::sync::Arc::new(n)),
                Err(e) => {
                    self.logln(&format!("cannot open the network device: {e}"));
                    return Err(PvmError::CantStart);
                }
            }
        }
        Ok(())
    }

    /// Master: starts the hosts of the hostfile. Slave: waits for the
    /// master's connection.
    pub(super) fn start_virtual_machine(&mut self) {
        if let Some(s) = self.cfg.slave.clone() {
            if let Err(why) = self.join_master(&s) {
                self.logln(&format!("cannot join the master: {why}"));
                self.halting = true;
            }
            return;
        }
        let Some(path) = self.cfg.hostfile.clone() else {
            return;
        };
        let entries = match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| hostfile::parse(&t).map_err(|e| e.to_string()))
        {
            Ok(e) => e,
            Err(why) => {
                self.logln(&format!("hostfile {}: {why}", path.display()));
                return;
            }
        };
        self.known_hosts = hostfile::by_name(&entries);
        let names: Vec<String> = entries
            .iter()
            .filter(|e| !e.delayed && !self.is_me(&e.name))
            .map(|e| e.name.clone())
            .collect();
        for (name, r) in names.iter().zip(self.add_hosts(&names)) {
            if r < 0 {
                self.logln(&format!("cannot add {name}: {}", crate::error::describe(r)));
            }
        }
    }

    fn join_master(&mut self, s: &crate::daemon::SlaveArgs) -> Result<(), String> {
        self.ensure_link_nic().map_err(|_| "network device")?;
        let nic = self.link_nic.as_ref().expect("just opened");
        let line = format!("{READY_TAG} {} {}\n", hex(&nic.address()), self.cfg.arch);
        let mut out = std::io::stdout();
        out.write_all(line.as_bytes())
            .and_then(|_| out.flush())
            .map_err(|e| e.to_string())?;
        let vi = nic
            .accept(s.disc.as_bytes(), START_LIMIT)
            .map_err(|e| e.to_string())?;
        // The remote shell ends once nobody holds its stdout.
        if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
            // SAFETY: replacing our stdout with /dev/null; both descriptors are valid.
            unsafe { libc::dup2(null.as_raw_fd(), 1) };
        }
        let link = nic
            .start(
                vi,
                (s.master_num, self.host_num),
                self.link_events.0.clone(),
                self.waker.clone(),
                self.inbound.clone(),
            )
            .map_err(|e| e.to_string())?;
        self.links.insert(s.master_num, link);
        self.logln(&format!("joined master (host {})", s.master_num));
        Ok(())
    }

    pub(super) fn is_me(&self, name: &str) -> bool {
        name.is_empty()
            || name == "."
            || name == "localhost"
            || self
                .hosts
                .get(&self.host_num)
                .is_some_and(|h| h.name == name)
            || name == self.cfg.hostname
    }

    /// The number of the host called `name`.
    pub(super) fn host_by_name(&self, name: &str) -> Option<u32> {
        if self.is_me(name) {
            return Some(self.host_num);
        }
        self.hosts.values().find(|h| h.name == name).map(|h| h.num)
    }

    /// Master: adds hosts; per host its pvmd tid or an error code.
    pub(super) fn add_hosts(&mut self, names: &[String]) -> Vec<i32> {
        let before = self.host_list();
        let out: Vec<i32> = names
            .iter()
            .map(|n| match self.add_host(n) {
                Ok(num) => tid::host_tid(num),
                Err(e) => e.code(),
            })
            .collect();
        let after = self.host_list();
        if after != before {
            self.broadcast_hosts();
            self.host_table_changed(&before);
        }
        out
    }

    fn add_host(&mut self, name: &str) -> Result<u32, PvmError> {
        if self.host_by_name(name).is_some() {
            return Err(PvmError::DupHost);
        }
        let entry = self.known_hosts.get(name).cloned().unwrap_or(HostEntry {
            name: name.to_string(),
            ..HostEntry::default()
        });
        self.ensure_link_nic()?;
        let num = self.next_host;
        self.next_host += 1;
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let disc = format!("openvia-pvmd.{uid}.{num}.{:x}", std::process::id());
        let daemon = entry
            .opts
            .daemon
            .clone()
            .map(PathBuf::from)
            .or_else(|| std::env::current_exe().ok());
        let Some(daemon) = daemon else {
            return Err(PvmError::CantStart);
        };
        let mut args: Vec<String> = vec![
            daemon.to_string_lossy().into_owned(),
            "--slave".into(),
            num.to_string(),
            "--master".into(),
            self.host_num.to_string(),
            "--name".into(),
            name.to_string(),
            "--disc".into(),
            disc.clone(),
        ];
        if let Some(ep) = &entry.opts.exec_path {
            args.extend(["--ep".into(), ep.join(":")]);
        }
        if let Some(wd) = &entry.opts.workdir {
            args.extend(["--wd".into(), wd.clone()]);
        }
        for kv in inherited_env() {
            args.extend(["--env".into(), kv]);
        }
        let rsh = std::env::var("PVM_RSH").unwrap_or_else(|_| "ssh".into());
        let mut cmd = Command::new(&rsh);
        cmd.arg(entry.opts.ip.as_deref().unwrap_or(name));
        if let Some(lo) = &entry.opts.login {
            cmd.args(["-l", lo]);
        }
        cmd.args(&args).stdin(Stdio::null()).stdout(Stdio::piped());
        match self.log.try_clone() {
            Ok(f) => cmd.stderr(Stdio::from(f)),
            Err(_) => cmd.stderr(Stdio::null()),
        };
        self.logln(&format!("starting host {name} (host {num}) with {rsh}"));
        let mut child = cmd.spawn().map_err(|e| {
            self.logln(&format!("{rsh}: {e}"));
            PvmError::CantStart
        })?;
        let line = child
            .stdout
            .as_mut()
            .and_then(|o| read_line_within(o, START_LIMIT));
        let parsed = line.as_deref().and_then(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == READY_TAG).then_some(())?;
            Some((unhex(w.next()?)?, w.next()?.to_string()))
        });
        let Some((addr, arch)) = parsed else {
            self.logln(&format!("host {name}: no pvmd answered ({line:?})"));
            let _ = child.kill();
            return Err(PvmError::CantStart);
        };
        let nic = self.link_nic.as_ref().expect("opened above");
        let link = nic
            .connect(&addr, disc.as_bytes(), START_LIMIT)
            .and_then(|vi| {
                nic.start(
                    vi,
                    (num, self.host_num),
                    self.link_events.0.clone(),
                    self.waker.clone(),
                    self.inbound.clone(),
                )
            });
        let link = match link {
            Ok(l) => l,
            Err(e) => {
                self.logln(&format!("host {name}: connect failed: {e}"));
                let _ = child.kill();
                return Err(PvmError::CantStart);
            }
        };
        self.links.insert(num, link);
        self.hosts.insert(
            num,
            HostRec {
                num,
                name: name.to_string(),
                arch,
                speed: entry.opts.speed.unwrap_or(1000),
                addr,
            },
        );
        self.logln(&format!("host {name} is host {num}"));
        Ok(num)
    }

    fn host_list(&self) -> Vec<HostRec> {
        self.hosts.values().cloned().collect()
    }

    /// Master: sends the host table to every slave.
    pub(super) fn broadcast_hosts(&mut self) {
        let mut a = Args::default();
        for h in self.hosts.values() {
            a.ints.extend([h.num as i32, h.speed]);
            a.strs
                .extend([h.name.clone(), h.arch.clone(), hex(&h.addr)]);
        }
        let slaves: Vec<u32> = self.links.keys().copied().collect();
        for s in slaves {
            self.tell(s, 0, op::D_HOSTS, a.clone());
        }
    }

    /// Slave: the master's new host table.
    pub(super) fn set_host_table(&mut self, a: &Args) {
        let before = self.host_list();
        self.hosts.clear();
        for (i, pair) in a.ints.chunks(2).enumerate() {
            let (Some(name), Some(arch)) = (a.strs.get(3 * i), a.strs.get(3 * i + 1)) else {
                break;
            };
            let addr = a
                .strs
                .get(3 * i + 2)
                .and_then(|s| unhex(s))
                .unwrap_or_default();
            let num = pair[0] as u32;
            self.hosts.insert(
                num,
                HostRec {
                    num,
                    name: name.clone(),
                    arch: arch.clone(),
                    speed: pair.get(1).copied().unwrap_or(1000),
                    addr,
                },
            );
        }
        self.host_table_changed(&before);
        self.mesh_connect();
    }

    /// Fires host notifies for the difference, fails calls to lost hosts.
    fn host_table_changed(&mut self, before: &[HostRec]) {
        let added: Vec<i32> = self
            .hosts
            .keys()
            .filter(|n| !before.iter().any(|h| h.num == **n))
            .map(|n| tid::host_tid(*n))
            .collect();
        let removed: Vec<u32> = before
            .iter()
            .map(|h| h.num)
            .filter(|n| !self.hosts.contains_key(n))
            .collect();
        for &h in &removed {
            self.mesh_forget(h);
            self.fail_calls_to(h);
            // Its tasks are gone with it: watchers of their exit hear now.
            let (gone, keep): (Vec<Notify>, Vec<Notify>) = std::mem::take(&mut self.remote_watches)
                .into_iter()
                .partition(|n| tid::host_num(n.target) == h);
            self.remote_watches = keep;
            for n in gone {
                self.send_notify(&n);
            }
            let target = tid::host_tid(h);
            let fired: Vec<Notify> = {
                let (f, keep) = std::mem::take(&mut self.notifies)
                    .into_iter()
                    .partition(|n| n.what == HOST_DELETE && n.target == target);
                self.notifies = keep;
                f
            };
            for n in fired {
                self.send_notify(&n);
            }
        }
        if !added.is_empty() {
            let watchers: Vec<(i32, i32, i32)> = self
                .notifies
                .iter()
                .filter(|n| n.what == HOST_ADD)
                .map(|n| (n.watcher, n.tag, n.ctx))
                .collect();
            for (watcher, tag, ctx) in watchers {
                let mut body = Vec::new();
                codec::pack_i32(codec::ENC_DEFAULT, added.len() as i32, &mut body);
                for &t in &added {
                    codec::pack_i32(codec::ENC_DEFAULT, t, &mut body);
                }
                let m = Msg {
                    src: self.tid(),
                    dst: watcher,
                    tag,
                    ctx,
                    enc: codec::ENC_DEFAULT,
                    body,
                };
                self.route(m);
            }
        }
    }

    /// A task-exit notify coming back from another host's pvmd settles the
    /// watch we kept for the case that host dies first.
    pub(super) fn note_remote_exit(&mut self, m: &Msg) {
        if self.remote_watches.is_empty() || m.src & tid::DAEMON_BIT as i32 == 0 {
            return;
        }
        let from = tid::host_num(m.src);
        if from == self.host_num {
            return;
        }
        let mut pos = 0;
        let Ok(target) = codec::unpack_i32(m.enc, &m.body, &mut pos) else {
            return;
        };
        self.remote_watches.retain(|n| {
            !(n.watcher == m.dst && n.tag == m.tag && n.ctx == m.ctx && n.target == target)
        });
    }

    /// Master: deletes hosts; per host 0 or an error code.
    pub(super) fn delete_hosts(&mut self, names: &[String]) -> Vec<i32> {
        let before = self.host_list();
        let out = names
            .iter()
            .map(|n| match self.host_by_name(n) {
                Some(h) if h == self.host_num => PvmError::BadParam.code(),
                Some(h) => {
                    self.tell(h, 0, op::D_HALT, Args::default());
                    self.hosts.remove(&h);
                    if let Some(l) = self.links.remove(&h) {
                        l.close_after_queue();
                    }
                    self.logln(&format!("host {n} deleted"));
                    0
                }
                None => PvmError::NoHost.code(),
            })
            .collect();
        if self.host_list() != before {
            self.broadcast_hosts();
            self.host_table_changed(&before);
        }
        out
    }

    /// A link failed: a slave lost its master (halt), the master lost a host.
    pub(super) fn link_down(&mut self, via: u32, why: &str) {
        if self.host_num != self.master_num && via != self.master_num {
            // A slave's mesh link: the pair goes through the master again
            // (held frames of a switch too), which keeps the host table.
            self.mesh_down(via, why);
            return;
        }
        if self.links.remove(&via).is_none() {
            return;
        }
        self.logln(&format!("link to host {via} down: {why}"));
        if via == self.master_num && self.host_num != self.master_num {
            self.logln("master gone: halting");
            self.halting = true;
            return;
        }
        let before = self.host_list();
        self.hosts.remove(&via);
        self.broadcast_hosts();
        self.host_table_changed(&before);
    }

    /// Master at halt: every slave halts too.
    pub(super) fn halt_slaves(&mut self) {
        if self.host_num != self.master_num {
            return;
        }
        let slaves: Vec<u32> = self.links.keys().copied().collect();
        for h in slaves {
            self.tell(h, 0, op::D_HALT, Args::default());
        }
        for (_, l) in self.links.drain() {
            l.close_after_queue();
        }
    }

    /// pvm_config: every host.
    pub(super) fn config(&self) -> (i32, Args) {
        let mut a = Args::default();
        for h in self.hosts.values() {
            // The data signature stock PVM 3.4.6 reports for LINUX64 on
            // x86-64 (the format our tasks pack in).
            a.ints.extend([tid::host_tid(h.num), h.speed, 0x0040_8c41]);
            a.strs.extend([h.name.clone(), h.arch.clone()]);
        }
        (self.hosts.len() as i32, a)
    }
}
