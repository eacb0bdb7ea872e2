//! Helper processes in a namespace: spawned with `ip netns exec` (which
//! execs, so the child's pid is the helper's own and SIGKILL reaches it),
//! stdout forwarded line by line over a channel so that waiting for
//! `READY` or for the end is a receive with a deadline, and a dropped
//! `Child` (also on panic) killed and reaped.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The environment variable carrying the test's pid, so a helper whose
/// parent died before `PR_SET_PDEATHSIG` took effect exits.
pub const PARENT_ENV: &str = "OVNS_PARENT";

/// What a helper left when it ended.
#[derive(Debug)]
pub struct Finished {
    pub name: String,
    pub status: ExitStatus,
    pub lines: Vec<String>,
    pub stderr: String,
    pub ended: Instant,
}

impl Finished {
    pub fn assert_ok(&self) -> &Self {
        assert!(self.status.success(), "{} failed: {self}", self.name);
        self
    }

    /// The value of `key` in the last `RESULT key=value ...` line with it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.lines
            .iter()
            .rev()
            .filter_map(|l| l.strip_prefix("RESULT "))
            .flat_map(|l| l.split_whitespace())
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    }

    pub fn expect_u64(&self, key: &str) -> u64 {
        let v = self
            .get(key)
            .unwrap_or_else(|| panic!("{}: no RESULT {key}=: {self}", self.name));
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

/// A running helper.
pub struct Helper {
    name: String,
    child: Option<Child>,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: Option<JoinHandle<String>>,
    deadline: Instant,
}

impl Helper {
    /// Runs `exe args` inside namespace `ns`, killed if still running after
    /// `timeout`.
    pub fn spawn(
        ns: &str,
        name: &str,
        exe: &str,
        args: &[String],
        env: &[(String, String)],
        timeout: Duration,
    ) -> Helper {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, exe])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env(PARENT_ENV, std::process::id().to_string());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {exe} in {ns} for {name}: {e}"));
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
        Helper {
            name: name.to_string(),
            child: Some(child),
            lines: rx,
            seen: Vec::new(),
            stderr: Some(stderr),
            deadline: Instant::now() + timeout,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Waits for a line starting with `prefix`; fails the test with the
    /// helper's output if it ends or the deadline passes first.
    pub fn wait_line(&mut self, prefix: &str) -> String {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let f = self.kill_and_collect();
                    panic!("{}: no `{prefix}` line before the deadline: {f}", f.name);
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let f = self.finish();
                    panic!("{}: ended before a `{prefix}` line: {f}", f.name);
                }
            }
        }
    }

    /// SIGKILL now, as a crash would.
    pub fn kill_now(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
        }
    }

    /// Waits for the end (killing at the deadline) and collects the output.
    pub fn finish(&mut self) -> Finished {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    let f = self.kill_and_collect();
                    panic!("{}: still running at its deadline: {f}", f.name);
                }
            }
        }
        let ended = Instant::now();
        let status = self.child.take().expect("child").wait().expect("wait");
        Finished {
            name: self.name.clone(),
            status,
            lines: std::mem::take(&mut self.seen),
            stderr: self
                .stderr
                .take()
                .map(|h| h.join().unwrap_or_default())
                .unwrap_or_default(),
            ended,
        }
    }

    fn kill_and_collect(&mut self) -> Finished {
        self.kill_now();
        self.deadline = Instant::now() + Duration::from_secs(5);
        self.finish()
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
