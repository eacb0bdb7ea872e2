//! Processes on one host sharing the EPVM pool through a real pvmd: many
//! senders against a pool too small for their data, a send to a task that
//! has exited, and a task killed while holding pages. Child tasks are this
//! test binary run again with PVM_TEST_ROLE set (see `child_role`).

use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openvia_pvm::codec::Elem;
use openvia_pvm::frame::op;
use openvia_pvm::task::{Task, Wait};
use openvia_pvm::PvmError;

static SERIAL: Mutex<()> = Mutex::new(());

const READY: i32 = 100;
const DATA: i32 = 101;
const EXITED: i32 = 102;
const PACKED: i32 = 103;
const RAW: i32 = 1;

/// A private pvmd (own socket, pool of `pool_mb`) for one test.
fn private_pvmd(name: &str, pool_mb: usize) {
    let dir = std::env::temp_dir().join(format!("openvia-pvm-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("OPENVIA_PVM_SOCK", dir.join("pvmd.sock"));
    std::env::set_var("OPENVIA_PVMD", env!("CARGO_BIN_EXE_pvmd"));
    std::env::set_var("OPENVIA_PVM_POOL_MB", pool_mb.to_string());
    std::env::remove_var("PVM_TEST_ROLE");
}

fn child(role: &str, parent: i32, arg: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env("PVM_TEST_ROLE", role)
        .env("PVM_TEST_PARENT", parent.to_string())
        .env("PVM_TEST_ARG", arg.to_string())
        .spawn()
        .unwrap()
}

/// Deterministic message contents: sender `who`, message `k`.
fn payload(who: usize, k: usize, len: usize) -> Vec<u8> {
    let mut x = (who as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (k as u64 + 7);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn send_ints(t: &mut Task, to: i32, tag: i32, v: &[i32]) {
    t.initsend(RAW).unwrap();
    for x in v {
        t.send_buf()
            .unwrap()
            .pack(Elem::Int, &x.to_ne_bytes(), 1, 1);
    }
    t.send(to, tag).unwrap();
}

fn upk_int(t: &mut Task) -> i32 {
    let mut b = [0u8; 4];
    t.recv_buf()
        .unwrap()
        .unpack(Elem::Int, &mut b, 1, 1)
        .unwrap();
    i32::from_ne_bytes(b)
}

fn recv_within(t: &mut Task, src: i32, tag: i32, secs: u64) -> i32 {
    let id = t
        .recv(src, tag, Wait::For(Duration::from_secs(secs)))
        .unwrap();
    assert!(
        id > 0,
        "nothing with tag {tag} from t{src:x} within {secs} s"
    );
    id
}

fn notify_exit(t: &mut Task, target: i32) {
    t.simple(op::NOTIFY, vec![1, EXITED, 0, target], vec![])
        .unwrap();
}

/// Waits (bounded) until the pvmd has returned every page to the pool.
fn assert_pool_full(t: &mut Task) {
    let _ = t.freebuf(t.sbuf);
    let _ = t.freebuf(t.rbuf);
    let pool = t.home.as_ref().expect("task has a pool").pool.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.free_pages() != pool.npages() && Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert_eq!(pool.free_pages(), pool.npages(), "pages not reclaimed");
}

/// The test's own task; halts its pvmd when the test ends, even by panic.
struct Session(Task);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.0.simple(op::HALT, vec![], vec![]);
    }
}

#[test]
fn child_role() {
    let Ok(role) = std::env::var("PVM_TEST_ROLE") else {
        return;
    };
    let parent: i32 = std::env::var("PVM_TEST_PARENT").unwrap().parse().unwrap();
    let arg: usize = std::env::var("PVM_TEST_ARG").unwrap().parse().unwrap();
    let mut t = Task::enroll().unwrap();
    send_ints(&mut t, parent, READY, &[arg as i32]);
    match role.as_str() {
        "sender" => {
            let (msgs, len) = (arg >> 24, arg & 0xff_ffff);
            let who = (std::process::id() % 1000) as usize;
            for k in 0..msgs {
                let data = payload(who, k, len);
                t.initsend(RAW).unwrap();
                let b = t.send_buf().unwrap();
                b.pack(Elem::Int, &(who as i32).to_ne_bytes(), 1, 1);
                b.pack(Elem::Int, &(k as i32).to_ne_bytes(), 1, 1);
                b.pack(Elem::Byte, &data, len, 1);
                t.send(parent, DATA).unwrap();
            }
            t.exit().unwrap();
        }
        "exiter" => t.exit().unwrap(),
        "holder" => {
            // Pack a big message and never send it, then wait to be killed.
            let data = payload(1, 1, arg);
            let id = t.mkbuf(RAW).unwrap();
            t.setsbuf(id).unwrap();
            t.send_buf().unwrap().pack(Elem::Byte, &data, arg, 1);
            let small = t.mkbuf(RAW).unwrap();
            t.setsbuf(small).unwrap();
            t.send(parent, PACKED).unwrap();
            let _ = t.recv(-1, 9999, Wait::Forever);
        }
        r => panic!("unknown role {r}"),
    }
}

#[test]
fn many_senders_beyond_the_pool_keep_data_intact() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    private_pvmd("contention", 4);
    let mut s = Session(Task::enroll().unwrap());
    let t = &mut s.0;
    assert!(t.home.is_some(), "pvmd gave no pool");
    let (senders, msgs, len) = (5, 6, 1536 * 1024);
    // 5 senders x 6 x 1.5 MB = 45 MB through a 4 MB pool.
    let mut kids: Vec<Child> = (0..senders)
        .map(|_| child("sender", t.mytid, (msgs << 24) | len))
        .collect();
    for _ in 0..senders {
        recv_within(t, -1, READY, 20);
    }
    let started = Instant::now();
    let mut next = std::collections::HashMap::new();
    for _ in 0..senders * msgs {
        let id = recv_within(t, -1, DATA, 60);
        assert!(
            t.recv_buf().unwrap().data.in_pool(),
            "not delivered through the pool"
        );
        let (bytes, _, src) = t.bufinfo(id).unwrap();
        assert_eq!(bytes as usize, 8 + len);
        let who = upk_int(t) as usize;
        let k = upk_int(t) as usize;
        assert_eq!(k, *next.entry(src).or_insert(0), "order from t{src:x}");
        next.insert(src, k + 1);
        let mut got = vec![0u8; len];
        t.recv_buf()
            .unwrap()
            .unpack(Elem::Byte, &mut got, len, 1)
            .unwrap();
        assert!(
            got == payload(who, k, len),
            "message {k} of t{src:x} corrupted"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    let pool = t.home.as_ref().unwrap().pool.clone();
    assert!(pool.waits() > 0, "no sender ever waited for pages");
    for k in &mut kids {
        assert!(k.wait().unwrap().success());
    }
    assert_pool_full(t);
}

#[test]
fn send_to_an_exited_task_is_pvm_no_task() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    private_pvmd("deadsend", 4);
    let mut s = Session(Task::enroll().unwrap());
    let t = &mut s.0;
    let mut kid = child("exiter", t.mytid, 0);
    let id = recv_within(t, -1, READY, 20);
    let (_, _, tid) = t.bufinfo(id).unwrap();
    notify_exit(t, tid);
    recv_within(t, -1, EXITED, 20);
    assert!(kid.wait().unwrap().success());
    t.initsend(RAW).unwrap();
    assert_eq!(t.send(tid, 5), Err(PvmError::NoTask));
    // A tid that never existed on this host, and a big body, too.
    t.initsend(RAW).unwrap();
    t.send_buf()
        .unwrap()
        .pack(Elem::Byte, &[7; 100_000], 100_000, 1);
    assert_eq!(t.send(tid + 77, 5), Err(PvmError::NoTask));
    assert_pool_full(t);
}

#[test]
fn a_killed_tasks_pages_return_and_nobody_hangs() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    private_pvmd("killed", 8);
    let mut s = Session(Task::enroll().unwrap());
    let t = &mut s.0;
    let held = 3 * 1024 * 1024;
    let mut kid = child("holder", t.mytid, held);
    let id = recv_within(t, -1, READY, 20);
    let (_, _, tid) = t.bufinfo(id).unwrap();
    recv_within(t, tid, PACKED, 20);
    // A 2 MB message queued to it that it will never read.
    t.initsend(RAW).unwrap();
    t.send_buf()
        .unwrap()
        .pack(Elem::Byte, &[1; 2 << 20], 2 << 20, 1);
    t.send(tid, DATA).unwrap();
    t.initsend(RAW).unwrap();
    let pool = t.home.as_ref().unwrap().pool.clone();
    let used = (pool.npages() - pool.free_pages()) * openvia_pvm::pool::PAGE;
    assert!(
        used >= held + (2 << 20),
        "only {used} bytes of the pool in use"
    );
    notify_exit(t, tid);
    kid.kill().unwrap();
    kid.wait().unwrap();
    // The receiver learns of the death instead of hanging.
    let id = recv_within(t, -1, EXITED, 20);
    assert_eq!(upk_int(t), tid);
    let _ = id;
    assert_pool_full(t);
}
