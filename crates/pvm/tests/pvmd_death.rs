//! A pvmd killed with SIGKILL under two tasks that exchange messages
//! through the pool (the scenario): each task, blocked in a receive
//! the pvmd will never answer (one with a TaskExit notify armed on the
//! other), gets PvmSysErr within 1 s, and every later call fails the same
//! way. The child task is this test binary run again with PVM_TEST_ROLE.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use openvia_pvm::codec::Elem;
use openvia_pvm::frame::op;
use openvia_pvm::task::{Task, Wait};
use openvia_pvm::PvmError;

const READY: i32 = 100;
const PING: i32 = 101;
const PONG: i32 = 102;
const EXITED: i32 = 103;
const RAW: i32 = 1;
/// The echo child's exit status when its receive failed with PvmSysErr.
const SAW_SYSERR: i32 = 42;

/// A pvmd of this test's own, in the foreground so the test knows its pid;
/// returns once it listens (it writes one byte to the ready pipe).
fn start_pvmd(name: &str) -> Child {
    let dir = std::env::temp_dir().join(format!("openvia-pvm-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("OPENVIA_PVM_SOCK", dir.join("pvmd.sock"));
    std::env::set_var("OPENVIA_PVMD", env!("CARGO_BIN_EXE_pvmd"));
    std::env::set_var("OPENVIA_PVM_POOL_MB", "4");
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the array with two fresh descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors, owned from here on.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wr_fd = wr.as_raw_fd();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pvmd"));
    cmd.args(["--foreground", "--ready-fd", "3"])
        .stdin(Stdio::null());
    // SAFETY: only async-signal-safe dup2 between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::dup2(wr_fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    drop(wr);
    let mut byte = [0u8; 1];
    assert_eq!(
        std::fs::File::from(rd).read(&mut byte).unwrap(),
        1,
        "pvmd did not start"
    );
    child
}

fn send_int(t: &mut Task, to: i32, tag: i32, v: i32) -> Result<(), PvmError> {
    t.initsend(RAW)?;
    t.send_buf()?.pack(Elem::Int, &v.to_ne_bytes(), 1, 1);
    t.send(to, tag)
}

/// The child: answers every PING with a PONG until a call fails, then
/// exits with SAW_SYSERR if that failure was PvmSysErr.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("PVM_TEST_ROLE") else {
        return;
    };
    assert_eq!(role, "echo");
    let parent: i32 = std::env::var("PVM_TEST_PARENT").unwrap().parse().unwrap();
    let mut t = Task::enroll().unwrap();
    send_int(&mut t, parent, READY, 0).unwrap();
    let err = loop {
        if let Err(e) = t
            .recv(parent, PING, Wait::Forever)
            .and_then(|_| send_int(&mut t, parent, PONG, 0))
        {
            break e;
        }
    };
    std::process::exit(if err == PvmError::SysErr {
        SAW_SYSERR
    } else {
        1
    });
}

/// Waits for a child's exit, at most `limit`.
fn exit_within(c: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let end = Instant::now() + limit;
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return Some(s);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The scheduler state letter of one of this process's threads.
fn thread_state(tid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name.
    stat.rsplit(')')
        .next()
        .and_then(|rest| rest.trim_start().chars().next())
        .unwrap_or('?')
}

#[test]
fn blocked_tasks_get_pvm_sys_err_within_1_s_of_a_pvmd_kill() {
    if std::env::var_os("PVM_TEST_ROLE").is_some() {
        return;
    }
    let mut pvmd = start_pvmd("death");
    let mut t = Task::enroll().unwrap();
    assert!(
        t.home.is_some(),
        "no pool: the scenario needs pool messages"
    );
    let mut kid = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env("PVM_TEST_ROLE", "echo")
        .env("PVM_TEST_PARENT", t.mytid.to_string())
        .spawn()
        .unwrap();
    let id = t
        .recv(-1, READY, Wait::For(Duration::from_secs(20)))
        .unwrap();
    assert!(id > 0, "the child did not enroll");
    let (_, _, peer) = t.bufinfo(id).unwrap();
    t.simple(op::NOTIFY, vec![1, EXITED, 0, peer], vec![])
        .unwrap();
    for k in 0..50 {
        send_int(&mut t, peer, PING, k).unwrap();
        let id = t
            .recv(peer, PONG, Wait::For(Duration::from_secs(20)))
            .unwrap();
        assert!(id > 0, "no PONG {k}");
        assert!(t.recv_buf().unwrap().data.in_pool(), "not a pool message");
    }

    // Block in a receive that only the (soon dead) pvmd could satisfy.
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        let r = t.recv(-1, EXITED, Wait::Forever);
        let _ = done_tx.send((r, Instant::now(), t));
    });
    let waiter = rx.recv().unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while thread_state(waiter) != 'S' {
        assert!(Instant::now() < end, "the receiver never went to sleep");
        std::thread::yield_now();
    }

    pvmd.kill().unwrap();
    let killed = Instant::now();
    pvmd.wait().unwrap();

    let got = done_rx.recv_timeout(Duration::from_secs(5));
    let kid_status = exit_within(&mut kid, Duration::from_secs(5));
    if kid_status.is_none() {
        let _ = kid.kill();
        let _ = kid.wait();
    }
    let (r, when, mut t) = got.expect("the blocked pvm_recv never returned");
    assert_eq!(r, Err(PvmError::SysErr));
    let late = when - killed;
    eprintln!("blocked receive failed {late:?} after the pvmd's SIGKILL");
    assert!(late < Duration::from_secs(1), "took {late:?}");
    assert_eq!(
        kid_status.and_then(|s| s.code()),
        Some(SAW_SYSERR),
        "the child's blocked receive did not fail with PvmSysErr"
    );

    // Every later call fails too, at once.
    let now = Instant::now();
    assert_eq!(send_int(&mut t, peer, PING, 0), Err(PvmError::SysErr));
    assert_eq!(t.recv(-1, -1, Wait::Never), Err(PvmError::SysErr));
    assert_eq!(t.recv(-1, -1, Wait::Forever), Err(PvmError::SysErr));
    assert_eq!(t.probe(-1, -1), Err(PvmError::SysErr));
    assert_eq!(t.simple(op::CONFIG, vec![], vec![]), Err(PvmError::SysErr));
    assert!(t.pvmd_gone());
    assert!(now.elapsed() < Duration::from_millis(500));
}
