//! The client's view of the other end: a server viabench starts on this host
//! (the default), or one already running elsewhere (`--peer`).
//!
//! A local server is this same binary re-executed as `viabench serve --once
//! --ready-fd N`: it listens on a free port and writes `READY <address>` to
//! the inherited pipe, so the client connects the moment the server can
//! accept, with no sleeping and no port guessing. If the server dies before
//! that, the pipe reaches EOF and the client reports it. The server cannot
//! outlive the client: PR_SET_PDEATHSIG kills it when the client goes, and
//! on the normal path the client says `Bye` and waits for it to exit
//! (bounded, through a pidfd).

use crate::error::{BenchError, Result};
use crate::pinning::{pin_current_thread, PinPlan};
use crate::session::{send_control, Request};
use crate::transports::{Endpoint, EndpointOptions, Transport};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a spawned server may take to start listening.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a server may take to exit after `Bye`.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// A server process this client started.
pub struct LocalServer {
    child: Option<Child>,
}

impl LocalServer {
    /// Starts `viabench serve` for `transport` and waits for its READY line;
    /// returns the server and the address it listens on.
    pub fn spawn(
        transport: &str,
        opts: &EndpointOptions,
        cpu: Option<usize>,
    ) -> Result<(LocalServer, String)> {
        let exe = std::env::current_exe()
            .map_err(|e| BenchError::io("locating the viabench binary", e))?;
        let (ready_read, ready_write) = pipe()?;
        let mut cmd = Command::new(exe);
        cmd.args([
            "serve",
            "--transport",
            transport,
            "--port",
            "0",
            "--local",
            "--once",
        ])
        .args(["--mode", opts.mode.as_str()])
        .args(["--max-size", &opts.max_message.to_string()])
        .args(["--max-window", &opts.max_window.to_string()])
        .args(["--ready-fd", &ready_write.as_raw_fd().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
        if let Some(cpu) = cpu {
            cmd.args(["--cpu", &cpu.to_string()]);
        }
        let parent = std::process::id() as libc::pid_t;
        let write_fd = ready_write.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and calls
        // only async-signal-safe functions (prctl, getppid, fcntl, _exit).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before the line above took effect.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                // The pipe is close-on-exec; only the server's copy must survive exec.
                if libc::fcntl(write_fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let child = cmd
            .spawn()
            .map_err(|e| BenchError::io("starting viabench serve", e))?;
        // Our copy must go, or EOF would never tell us the server died.
        drop(ready_write);
        let mut server = LocalServer { child: Some(child) };
        let line = read_ready_line(ready_read.as_raw_fd(), READY_TIMEOUT).map_err(|e| {
            let status = server.kill_and_reap();
            BenchError::Server(format!(
                "{transport} server did not become ready ({e}); {status}"
            ))
        })?;
        let address = line
            .strip_prefix("READY ")
            .ok_or_else(|| BenchError::Server(format!("unexpected readiness line `{line}`")))?
            .to_string();
        Ok((server, address))
    }

    /// Waits (bounded) for the server to exit on its own; kills it if it does not.
    pub fn finish(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if !wait_exit(child.id(), EXIT_TIMEOUT) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BenchError::Server(format!(
                "did not exit within {EXIT_TIMEOUT:?}; killed"
            )));
        }
        let status = child
            .wait()
            .map_err(|e| BenchError::io("waiting for the server", e))?;
        if !status.success() {
            return Err(BenchError::Server(format!("exited with {status}")));
        }
        Ok(())
    }

    fn kill_and_reap(&mut self) -> String {
        match self.child.take() {
            Some(mut child) => {
                let _ = child.kill();
                match child.wait() {
                    Ok(status) => format!("server {status}"),
                    Err(e) => format!("server not reaped: {e}"),
                }
            }
            None => String::new(),
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(BenchError::last_os("pipe2"));
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Polls `fd` for reading until `deadline`; false on timeout.
fn poll_readable(fd: RawFd, deadline: Instant) -> Result<bool> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(BenchError::io("poll", err));
        }
        return Ok(rc > 0);
    }
}

/// Reads one line from the readiness pipe.
fn read_ready_line(fd: RawFd, timeout: Duration) -> Result<String> {
    let deadline = Instant::now() + timeout;
    let mut line = Vec::new();
    loop {
        if !poll_readable(fd, deadline)? {
            return Err(BenchError::Timeout(format!(
                "no READY line within {timeout:?}"
            )));
        }
        let mut chunk = [0u8; 256];
        // SAFETY: reads at most chunk.len() bytes into a live buffer.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(BenchError::io("reading the readiness pipe", err));
        }
        if n == 0 {
            return Err(BenchError::Server("exited before it was ready".into()));
        }
        line.extend_from_slice(&chunk[..n as usize]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            return Ok(String::from_utf8_lossy(&line[..end]).into_owned());
        }
    }
}

/// Waits up to `timeout` for process `pid` (our child) to exit, without
/// reaping it. Uses a pidfd, so nothing sleeps on a guess.
fn wait_exit(pid: u32, timeout: Duration) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if raw < 0 {
        return false; // cannot watch it: let the caller kill it
    }
    // SAFETY: the descriptor was just returned by pidfd_open and is ours.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
    poll_readable(pidfd.as_raw_fd(), Instant::now() + timeout).unwrap_or(false)
}

/// A client's connection to a server, and the server itself if we started it.
pub struct Connection {
    pub endpoint: Box<dyn Endpoint>,
    server: Option<LocalServer>,
}

impl Connection {
    /// Connects to `peer`, or starts a local server and connects to it; then
    /// pins this (client) process as planned. The spawned server pins itself.
    pub fn open(
        transport: &dyn Transport,
        opts: &EndpointOptions,
        peer: Option<&str>,
        pin: &PinPlan,
    ) -> Result<Connection> {
        transport.available().map_err(BenchError::Unavailable)?;
        let (server, address) = match peer {
            Some(peer) => (None, peer.to_string()),
            None => {
                let (server, address) = LocalServer::spawn(transport.name(), opts, pin.server)?;
                (Some(server), address)
            }
        };
        // Pinned after the spawn so the server does not inherit our mask.
        if let Some(cpu) = pin.client {
            pin_current_thread(cpu)?;
        }
        let endpoint = transport.connect(&address, opts)?;
        Ok(Connection { endpoint, server })
    }

    /// Ends the session cleanly and waits for a local server to exit.
    pub fn close(mut self) -> Result<()> {
        send_control(self.endpoint.as_mut(), &Request::Bye.encode())?;
        // Dropping the endpoint closes it: stream servers also see EOF.
        let Connection { endpoint, server } = self;
        drop(endpoint);
        match server {
            Some(server) => server.finish(),
            None => Ok(()),
        }
    }
}
