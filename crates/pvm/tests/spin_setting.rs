//! OPENVIA_PVM_SPIN_NS: a pvmd given a value that is not a bounded number
//! of nanoseconds refuses to start, with an error naming the setting (and
//! leaves no socket behind); a good value starts it.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

/// Runs a pvmd with `OPENVIA_PVM_SPIN_NS=value`; it writes one byte to
/// its ready pipe once it listens. Returns the child and that pipe.
fn pvmd_with_spin(value: &str, sock: &std::path::Path) -> (std::process::Child, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the array with two fresh descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors, owned from here on.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wr_fd = wr.as_raw_fd();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pvmd"));
    cmd.args(["--foreground", "--ready-fd", "3"])
        .env("OPENVIA_PVM_SPIN_NS", value)
        .env("OPENVIA_PVM_SOCK", sock)
        .env("OPENVIA_PVM_POOL_MB", "2")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe dup2 between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::dup2(wr_fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("start pvmd");
    drop(wr);
    (child, std::fs::File::from(rd))
}

#[test]
fn pvmd_refuses_a_bad_spin_and_names_the_setting() {
    let dir = std::env::temp_dir().join(format!("openvia-pvm-spin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("pvmd.sock");
    for bad in ["fast", "-5", "20000000"] {
        let (mut child, mut ready) = pvmd_with_spin(bad, &sock);
        // The pipe ends (EOF) when the pvmd exits; a byte means it
        // started. Bounded, so a pvmd that wrongly runs fails the test
        // instead of hanging it.
        let mut p = libc::pollfd {
            fd: ready.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, 20_000) };
        let mut byte = [0u8; 1];
        let started = n == 1 && ready.read(&mut byte).unwrap_or(0) == 1;
        if n != 1 || started {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{bad}: pvmd started (or did not exit in 20 s)");
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.contains(&format!("OPENVIA_PVM_SPIN_NS={bad}")),
            "{bad}: the error names the setting: {err}"
        );
        assert!(!sock.exists(), "{bad}: no socket left behind");
    }
    // A good value: the pvmd starts and listens.
    let (mut ok, mut ready) = pvmd_with_spin("20000", &sock);
    let mut byte = [0u8; 1];
    assert_eq!(ready.read(&mut byte).unwrap(), 1, "pvmd did not start");
    assert!(sock.exists(), "pvmd with OPENVIA_PVM_SPIN_NS=20000 listens");
    ok.kill().unwrap();
    ok.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
