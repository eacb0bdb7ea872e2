//! Running `via_peer` children from a test: spawn, wait for a line (the
//! readiness signal is the `READY` line, never a sleep), enforce a
//! deadline on everything, and never leave a process behind.
//!
//! Each child's stdout is read by a thread that forwards lines over a
//! channel, so waiting for a line or for the child's end is a blocking
//! receive with a timeout. A child that overruns its deadline is killed
//! and the test fails with everything the child printed. The child itself
//! asks for SIGKILL when the test thread that spawned it goes away
//! (`PR_SET_PDEATHSIG`, see the helper's `main`), and a `Peer` dropped
//! during a panic kills and reaps its child.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Environment variable through which a child learns its parent's pid, to
/// notice a parent that died before `PR_SET_PDEATHSIG` took effect.
pub const PARENT_ENV: &str = "VIA_PEER_PARENT";

/// The default deadline of one child.
pub const CHILD_TIMEOUT: Duration = Duration::from_secs(40);

/// A discriminator no other test (or concurrent test run) uses.
pub fn unique_disc(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Settings every child gets: bounded spinning (idle waits block on a
/// 2-CPU machine) and the large-message path under test.
/// `cma`: large messages take the one-copy CMA path (from 16 KiB up, so
/// the tests exercise it; the default threshold is 8 MiB); otherwise CMA is
/// off and everything streams through the ring.
pub fn base_env(cma: bool) -> Vec<(String, String)> {
    vec![
        ("OPENVIA_SPIN_NS".into(), "20000".into()),
        ("OPENVIA_CMA".into(), if cma { "1" } else { "0" }.into()),
        ("OPENVIA_CMA_MIN".into(), "16K".into()),
    ]
}

/// What a child left when it ended.
#[derive(Debug)]
pub struct Finished {
    pub name: String,
    pub status: ExitStatus,
    pub lines: Vec<String>,
    pub stderr: String,
    /// When the child's stdout closed (it exited).
    pub ended: Instant,
}

impl Finished {
    /// Fails the test unless the child exited with status 0.
    pub fn assert_ok(&self) -> &Self {
        assert!(self.status.success(), "{} failed: {self}", self.name);
        self
    }

    /// The value of `key` in the last `RESULT` line that has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.lines
            .iter()
            .rev()
            .filter_map(|l| l.strip_prefix("RESULT "))
            .flat_map(|l| l.split_whitespace())
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    }

    /// Like `get`, but the key must be there.
    pub fn expect(&self, key: &str) -> &str {
        self.get(key)
            .unwrap_or_else(|| panic!("{}: no RESULT {key}=...: {self}", self.name))
    }

    pub fn expect_u64(&self, key: &str) -> u64 {
        let v = self.expect(key);
        v.parse()
            .unwrap_or_else(|_| panic!("{}: {key}={v} is not a number", self.name))
    }
}

impl std::fmt::Display for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "status {}", self.status)?;
        writeln!(f, "--- stdout ---\n{}", self.lines.join("\n"))?;
        write!(f, "--- stderr ---\n{}", self.stderr)
    }
}

/// One running `via_peer` child.
pub struct Peer {
    name: String,
    child: Option<Child>,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: Option<JoinHandle<String>>,
    started: Instant,
    deadline: Instant,
}

impl Peer {
    /// Starts the helper in `role` with `key=value` arguments and extra
    /// environment. `exe` is `env!("CARGO_BIN_EXE_via_peer")` of the test.
    pub fn spawn(exe: &str, name: &str, args: &[String], env: &[(String, String)]) -> Peer {
        let mut cmd = Command::new(exe);
        cmd.args(args);
        Peer::start(name, cmd, env, CHILD_TIMEOUT)
    }

    /// Starts `cmd` (any program that prints `READY`/`RESULT` lines, for
    /// instance through `ip netns exec`), killed if still running after
    /// `timeout`. Its stdout is read line by line on a thread, so every
    /// wait is a receive with a deadline.
    pub fn start(
        name: &str,
        mut cmd: Command,
        env: &[(String, String)],
        timeout: Duration,
    ) -> Peer {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env(PARENT_ENV, std::process::id().to_string());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?} for {name}: {e}"));
        let out = child.stdout.take().expect("child stdout");
        let mut err = child.stderr.take().expect("child stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let started = Instant::now();
        Peer {
            name: name.to_string(),
            child: Some(child),
            lines: rx,
            seen: Vec::new(),
            stderr: Some(stderr),
            started,
            deadline: started + timeout,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits (at most `timeout`, and never past the child's deadline) for
    /// a stdout line starting with `prefix`; returns it.
    pub fn wait_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let until = (Instant::now() + timeout).min(self.deadline);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let f = self.kill_now();
                    panic!(
                        "{}: no line `{prefix}` within {timeout:?} (killed): {f}",
                        self.name
                    );
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let f = self.reap(Instant::now());
                    panic!("{}: exited before printing `{prefix}`: {f}", self.name);
                }
            }
        }
    }

    /// Waits for the `READY` line: the child listens for a connection.
    pub fn wait_ready(&mut self) {
        self.wait_line("READY", Duration::from_secs(20));
    }

    /// Waits for the child to end; kills it (and fails) past its deadline.
    pub fn finish(mut self) -> Finished {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    let f = self.kill_now();
                    panic!(
                        "{}: still running after {:?} (killed): {f}",
                        self.name,
                        self.started.elapsed()
                    );
                }
                Err(RecvTimeoutError::Disconnected) => return self.reap(Instant::now()),
            }
        }
    }

    /// SIGKILLs the child now and reaps it; returns the moment of the kill.
    pub fn kill(mut self) -> Instant {
        let at = Instant::now();
        self.kill_now();
        at
    }

    /// SIGKILLs the child and returns what it printed (for diagnostics).
    pub fn abort(mut self) -> Finished {
        self.kill_now()
    }

    fn kill_now(&mut self) -> Finished {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
        }
        self.reap(Instant::now())
    }

    fn reap(&mut self, ended: Instant) -> Finished {
        let status = self
            .child
            .take()
            .map(|mut c| c.wait().expect("wait for child"))
            .expect("child already reaped");
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        Finished {
            name: self.name.clone(),
            status,
            lines: std::mem::take(&mut self.seen),
            stderr,
            ended,
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Arguments for the helper: the role, then `key=value` pairs.
pub fn args(role: &str, kv: &[(&str, String)]) -> Vec<String> {
    std::iter::once(role.to_string())
        .chain(kv.iter().map(|(k, v)| format!("{k}={v}")))
        .collect()
}

/// Runs a server and a client to completion: the client starts once the
/// server printed READY. Both must exit with status 0.
pub fn run_pair(
    exe: &str,
    server_args: Vec<String>,
    client_args: Vec<String>,
    env: &[(String, String)],
) -> (Finished, Finished) {
    let mut server = Peer::spawn(exe, "server", &server_args, env);
    server.wait_ready();
    let client = Peer::spawn(exe, "client", &client_args, env).finish();
    if !client.status.success() {
        let server = server.abort();
        panic!("client failed: {client}\n=== server (killed) ===\n{server}");
    }
    let server = server.finish();
    server.assert_ok();
    (server, client)
}

/// Pids of this process's children that are still around (zombies
/// included): after a test, there must be none of ours.
pub fn child_pids() -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            let list = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Names in /dev/shm that look like ours.
pub fn shm_entries() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.to_ascii_lowercase().contains("openvia"))
                .collect()
        })
        .unwrap_or_default()
}

/// Unix socket names (abstract ones start with '@') bound by anyone that
/// contain `needle`.
pub fn unix_sockets_containing(needle: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter(|p| p.contains(needle))
        .map(str::to_string)
        .collect()
}

/// The discriminator as the connection manager spells it in socket names.
pub fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}
