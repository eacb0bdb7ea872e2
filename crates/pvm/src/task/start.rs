//! Starting a pvmd on demand, as the first PVM task on a host does: the
//! daemon binary is found beside this library (or in OPENVIA_PVMD), started
//! in its own session, and its readiness read from a pipe.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn own_location() -> Option<PathBuf> {
    // SAFETY: dladdr only reads the loader's tables; info is written by it.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let here = own_location as *const () as *const libc::c_void;
        if libc::dladdr(here, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .into_owned();
        Some(PathBuf::from(name))
    }
}

/// Where the pvmd binary is.
pub fn daemon_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OPENVIA_PVMD") {
        return Some(PathBuf::from(p));
    }
    let mut dirs = Vec::new();
    if let Some(lib) = own_location().and_then(|p| std::fs::canonicalize(p).ok()) {
        if let Some(d) = lib.parent() {
            dirs.push(d.to_path_buf());
            dirs.push(d.join("../bin"));
        }
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(d) = exe.parent() {
            dirs.push(d.to_path_buf());
        }
    }
    dirs.into_iter()
        .map(|d| d.join("pvmd"))
        .find(|p| p.is_file() && is_ours(p))
}

/// Stock PVM's pvmd may sit in the same directories: only ours knows
/// `--ready-fd`, and it says so in its help text.
fn is_ours(p: &PathBuf) -> bool {
    Command::new(p)
        .arg("--openvia-version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).starts_with("openvia"))
        .unwrap_or(false)
}

/// Starts a pvmd and waits until it listens.
pub fn start_daemon() -> io::Result<()> {
    start_daemon_with(&[])
}

/// Starts a pvmd with `args` (the console's `-n host`, `-d mask`,
/// hostfile) and waits until it listens.
pub fn start_daemon_with(args: &[String]) -> io::Result<()> {
    let bin = daemon_binary()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no openvia pvmd found"))?;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors owned here.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wr_fd = wr.as_raw_fd();
    let mut cmd = Command::new(bin);
    cmd.arg("--ready-fd")
        .arg("3")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: between fork and exec we only call async-signal-safe dup2.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::dup2(wr_fd, 3) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    drop(wr);
    let mut f = std::fs::File::from(rd);
    let mut byte = [0u8; 1];
    let n = f.read(&mut byte)?;
    // The daemon forks into the background; reap the parent half.
    let _ = child.wait();
    if n == 1 {
        Ok(())
    } else {
        Err(io::Error::other("pvmd failed to start"))
    }
}
