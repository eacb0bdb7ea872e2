//! Whether another process can still act: a lock's holder, a VI's maker.
//! Signal 0 finds a process until its parent has waited for it, so one
//! that exited but was not yet reaped (a zombie) would be taken for a
//! live holder and waited for as long as its parent lets it lie; its
//! state in /proc says it is gone.

/// Whether process `pid` exists and has not exited.
pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let found = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    found && !exited(pid)
}

/// Whether `pid` has exited and waits to be reaped (state Z or X in
/// /proc/PID/stat, the field after the command's closing parenthesis).
fn exited(pid: u32) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    matches!(stat.get(close + 2), Some(b'Z' | b'X'))
}

#[cfg(test)]
mod tests {
    use super::alive;

    /// A child that exited is not alive, reaped or not; a running process is.
    #[test]
    fn an_exited_child_is_not_alive_before_it_is_reaped() {
        assert!(alive(std::process::id()));
        // SAFETY: the child only calls _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: ends the child at once, async-signal-safe.
            unsafe { libc::_exit(0) };
        }
        // Until it has exited, leaving it unreaped (a zombie).
        // SAFETY: an out-parameter of ours.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child without reaping it.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(r, 0, "waitid");
        assert!(!alive(pid as u32), "a zombie taken for alive");
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        assert!(!alive(pid as u32));
    }
}
