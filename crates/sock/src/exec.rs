//! exec and spawn with a connection already carried over a VI.
//!
//! A connection is carried by the process that used it first: its bytes
//! are in that process's rings and VI, and its kernel socket holds only
//! doorbells. A new program that inherits the socket (bash's `exec
//! 3<>/dev/tcp/...`, then `cat <&3`; a server that reads a request and
//! execs a handler) would read those doorbells as data, or wait for bytes
//! that never come through the kernel. So right before exec (and around
//! posix_spawn) each such socket that survives exec gets a small record
//! (`inherit::mark_unusable`), and the new program's library makes its
//! calls on it fail at once (ECONNRESET) instead. A forked child gets
//! such records at once (its fork handler), since its exec may not pass
//! through these hooks (execl, system and popen call the kernel from
//! inside the C library). A connection with a switchable record (made at
//! its first use, on one host and between hosts) needs none: the new
//! program hands it back to the kernel (docs/sockets.md).
//!
//! These hooks may run in a vfork child: nothing here allocates, and the
//! connection table is only tried, never waited for.

use libc::{c_char, c_int, pid_t};
use std::os::fd::RawFd;
use std::sync::OnceLock;

use crate::bare::Target;
use crate::real::{real, sym};

type Argv = *const *const c_char;
type SpawnFn = unsafe extern "C" fn(
    *mut pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *mut c_char,
    *const *mut c_char,
) -> c_int;

struct Exec {
    execve: unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int,
    execv: unsafe extern "C" fn(*const c_char, Argv) -> c_int,
    execvp: unsafe extern "C" fn(*const c_char, Argv) -> c_int,
    execvpe: unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int,
    fexecve: unsafe extern "C" fn(c_int, Argv, Argv) -> c_int,
    posix_spawn: SpawnFn,
    posix_spawnp: SpawnFn,
}

static EXEC: OnceLock<Exec> = OnceLock::new();

/// Finds the C library's calls (from the library's constructor).
pub fn init() {
    exec_fns();
}

fn exec_fns() -> &'static Exec {
    EXEC.get_or_init(|| Exec {
        execve: sym(c"execve"),
        execv: sym(c"execv"),
        execvp: sym(c"execvp"),
        execvpe: sym(c"execvpe"),
        fexecve: sym(c"fexecve"),
        posix_spawn: sym(c"posix_spawn"),
        posix_spawnp: sym(c"posix_spawnp"),
    })
}

/// The records made for one exec, closed again if it returns.
struct Marks {
    fds: [RawFd; 64],
    n: usize,
}

impl Marks {
    /// A record for each carried socket open here without close-on-exec.
    fn make() -> Marks {
        let mut m = Marks {
            fds: [-1; 64],
            n: 0,
        };
        if !crate::conn::carries(0) {
            return m;
        }
        let mut marked = [0u64; 64];
        crate::closing::each_kept_socket(|fd, ino| {
            // Each kept socket asks the table itself: a list of the
            // carried ones, bounded as nothing here may allocate, left
            // some out past 64 connections, and a program exec'd on one
            // of those read its doorbells as data.
            if marked[..m.n].contains(&ino) || !crate::conn::carries(ino) {
                return true;
            }
            // Its record (every carried connection has one) goes across
            // exec by itself: the new program takes it up.
            let switchable = crate::inherit::find_held(|r| r.socket_inode == ino).is_some();
            if switchable {
                return true;
            }
            if m.n == m.fds.len() {
                return false;
            }
            if let Some(rec) = crate::inherit::mark_unusable(fd) {
                marked[m.n] = ino;
                m.fds[m.n] = rec;
                m.n += 1;
            }
            true
        });
        m
    }
}

impl Drop for Marks {
    fn drop(&mut self) {
        for &fd in &self.fds[..self.n] {
            // SAFETY: a record descriptor this exec attempt made.
            unsafe { (real().close)(fd) };
        }
    }
}

/// In a child just forked: records for the connections its parent
/// carries, left open for whatever program it may exec (the exec hooks
/// do not see execl, system or popen, which call the kernel from inside
/// the C library). A child that never execs keeps them unused.
pub fn mark_for_child() {
    std::mem::forget(Marks::make());
}

/// Runs `f` (an exec or a spawn) with the records in place; they are
/// closed when it returns (an exec that returns failed; a spawn's child
/// has its copies by then).
fn with_marks(target: Target, envp: Argv, f: impl FnOnce() -> c_int) -> c_int {
    crate::process::note_fork();
    if crate::guarded(false, || crate::bare::will_be_bare(target, envp)) {
        crate::guarded((), crate::conn::go_bare_before_exec);
    }
    if !crate::process::borrowing_parent_memory() {
        // A spawned program may ask for a connection carried between hosts.
        crate::guarded((), crate::netlink::start_watcher);
    }
    let marks = crate::guarded(
        Marks {
            fds: [-1; 64],
            n: 0,
        },
        Marks::make,
    );
    // The new program starts from the limit it would have had.
    let limit = crate::fdroom::original_for_exec();
    let r = f();
    drop(limit);
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    drop(marks);
    crate::set_errno(errno);
    r
}

/// An exec of this program: as `with_marks`, after this process's own
/// connections that the new program keeps are handed to the kernel (our
/// VI ends here). Not in a vfork child: its parent, whose memory it
/// borrows, goes on with them.
fn exec_with_marks(target: Target, envp: Argv, f: impl FnOnce() -> c_int) -> c_int {
    if !crate::process::borrowing_parent_memory() {
        crate::guarded((), crate::conn::hand_over_before_exec);
    }
    with_marks(target, envp, f)
}

/// # Safety
/// The C prototype of execve(2).
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    exec_with_marks(Target::Path(path), envp, || {
        (exec_fns().execve)(path, argv, envp)
    })
}

/// # Safety
/// The C prototype of execv(3).
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    exec_with_marks(Target::Path(path), std::ptr::null(), || {
        (exec_fns().execv)(path, argv)
    })
}

/// # Safety
/// The C prototype of execvp(3).
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    exec_with_marks(Target::Search(file), std::ptr::null(), || {
        (exec_fns().execvp)(file, argv)
    })
}

/// # Safety
/// The C prototype of execvpe(3).
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    exec_with_marks(Target::Search(file), envp, || {
        (exec_fns().execvpe)(file, argv, envp)
    })
}

/// # Safety
/// The C prototype of fexecve(3).
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    exec_with_marks(Target::Fd(fd), envp, || {
        (exec_fns().fexecve)(fd, argv, envp)
    })
}

/// # Safety
/// The C prototype of posix_spawn(3).
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    with_marks(Target::Path(path), envp.cast(), || {
        (exec_fns().posix_spawn)(pid, path, actions, attr, argv, envp)
    })
}

/// # Safety
/// The C prototype of posix_spawnp(3).
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    with_marks(Target::Search(file), envp.cast(), || {
        (exec_fns().posix_spawnp)(pid, file, actions, attr, argv, envp)
    })
}
