//! Unit tests of exec records: offer, take-up, claims, places.

use super::*;
use crate::control::Control;
use crate::kernel::descriptor_limit;

fn socket_pair() -> [RawFd; 2] {
    let mut sv = [0; 2];
    // SAFETY: socketpair fills two ints of ours.
    assert_eq!(
        unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) },
        0
    );
    sv
}

/// What a new program's constructor gets: its own copy of the record.
fn copy_of(rec: &Inherit) -> RawFd {
    // SAFETY: dup of the record's descriptor.
    unsafe { libc::dup(rec.record_fd()) }
}

#[test]
fn a_record_is_taken_up_under_every_descriptor_of_its_socket_and_refused_once_claimed() {
    let _pool = crate::inherit::POOL_TESTS
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let sv = socket_pair();
    // SAFETY: dup of our socket.
    let other = unsafe { libc::dup(sv[0]) };
    let ino = inode(sv[0]).unwrap();
    let host = b"\x0a\0\0\x02";
    let what = Offered::AgreedNet {
        side: Side::Acceptor,
        token: 42,
        host,
    };
    let rec = Inherit::offer(sv[0], what).unwrap();
    let sockets = [(sv[0], ino), (other, ino), (sv[1], inode(sv[1]).unwrap())];
    take_up_one(copy_of(&rec), &sockets);
    assert!(conn::lookup(sv[0]).is_some() && conn::lookup(other).is_some());
    assert!(
        conn::lookup(sv[1]).is_none(),
        "the pair's other end is another socket"
    );
    conn::forget(sv[0]);
    conn::forget(other);
    // Used by some process: a later program cannot follow its stream
    // (it travels in that process's VI) and gets a clear error.
    assert!(rec.claim());
    assert!(!rec.claim());
    take_up_one(copy_of(&rec), &sockets);
    assert!(matches!(
        conn::route(sv[0]),
        conn::Route::Fail(libc::ECONNRESET)
    ));
    assert!(matches!(
        conn::route(other),
        conn::Route::Fail(libc::ECONNRESET)
    ));
    conn::forget(sv[0]);
    conn::forget(other);
    drop(rec);
    for fd in [sv[0], sv[1], other] {
        // SAFETY: closing our sockets.
        unsafe { libc::close(fd) };
    }
}

/// A connection (a socket pair) and its connector's record, awaiting
/// the answer on the other pair's first socket.
fn awaiting_answer() -> ([RawFd; 2], [RawFd; 2], u64, Arc<Inherit>) {
    let sv = socket_pair();
    let answer = socket_pair();
    let ino = inode(sv[0]).unwrap();
    let what = Offered::AwaitAnswer {
        listener: answer[0],
        dst_port: 5,
    };
    (sv, answer, ino, Inherit::offer(sv[0], what).unwrap())
}

/// A sibling or a program exec'd on the socket waits for the
/// claimer's hello before its switch byte; nobody waits on a record
/// not claimed.
#[test]
fn a_switch_waits_for_the_claimers_hello() {
    let (sv, answer, _, rec) = awaiting_answer();
    let t = std::time::Instant::now();
    rec.wait_for_hello(std::time::Duration::from_secs(5));
    assert!(
        t.elapsed() < std::time::Duration::from_millis(500),
        "unclaimed: no wait"
    );
    assert!(rec.claim());
    assert!(!rec.hello_sent());
    let claimer = rec.clone();
    let hello = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        claimer.note_hello_sent();
    });
    let t = std::time::Instant::now();
    rec.wait_for_hello(std::time::Duration::from_secs(5));
    assert!(t.elapsed() >= std::time::Duration::from_millis(40));
    assert!(rec.hello_sent());
    hello.join().unwrap();
    rec.note_kernel();
    assert!(rec.went_kernel());
    drop(rec);
    for fd in [sv[0], sv[1], answer[0], answer[1]] {
        // SAFETY: closing our descriptors.
        unsafe { libc::close(fd) };
    }
}

/// A record's descriptors go to the library's floor or above (the upper
/// half of the table, or the program's original limit when raised),
/// leaving the program's numbers where kernel TCP would have them.
#[test]
fn a_records_descriptors_live_above_the_floor() {
    let (sv, answer, _, rec) = awaiting_answer();
    let half = crate::fdroom::floor(descriptor_limit().unwrap()) as RawFd;
    let slot = &SLOTS[rec.slot];
    assert!(slot.record_fd.load(Ordering::Acquire) >= half);
    assert!(slot.aux_fd.load(Ordering::Acquire) >= half);
    assert!(is_held(slot.record_fd.load(Ordering::Acquire)));
    // SAFETY: a new descriptor of ours, closed below.
    let next = unsafe { libc::dup(sv[0]) };
    assert!(next < half, "the program's next number stays low");
    drop(rec);
    for fd in [sv[0], sv[1], answer[0], answer[1], next] {
        // SAFETY: closing our descriptors.
        unsafe { libc::close(fd) };
    }
}

/// A record no other process holds becomes the connection's switchable
/// one at its first use, in place: a program exec'd on the socket
/// then carries the connection on through the control page.
#[test]
fn an_unshared_record_becomes_switchable_in_place() {
    let (sv, answer, ino, rec) = awaiting_answer();
    let record_fd = rec.record_fd();
    assert!(rec.claim());
    let (_control, page) = Control::create().expect("control page");
    assert!(rec.become_switchable(Side::Connector, page));
    assert_eq!(rec.record_fd(), record_fd, "the same memfd");
    assert_eq!(record_kind(record_fd), Some(SWITCHABLE));
    let aux = SLOTS[rec.slot].aux_fd.load(Ordering::Acquire);
    assert_eq!(inode(aux), inode(page), "its copy names the control page");
    take_up_one(copy_of(&rec), &[(sv[0], ino)]);
    assert!(matches!(conn::route(sv[0]), conn::Route::Via(_)));
    conn::forget(sv[0]);
    drop(rec);
    for fd in [sv[0], sv[1], answer[0], answer[1], page] {
        // SAFETY: closing our descriptors.
        unsafe { libc::close(fd) };
    }
}

/// A connector's record (awaiting the acceptor's answer on a Unix
/// socket) is taken up with its own copy of that socket.
#[test]
fn an_awaited_answer_is_taken_up_with_the_socket_it_comes_to() {
    let (sv, answer, ino, rec) = awaiting_answer();
    take_up_one(copy_of(&rec), &[(sv[0], ino)]);
    assert!(conn::lookup(sv[0]).is_some());
    conn::forget(sv[0]);
    drop(rec);
    for fd in sv.into_iter().chain(answer) {
        // SAFETY: closing our sockets.
        unsafe { libc::close(fd) };
    }
}

/// A socket carried by the process that execs: the new program's
/// calls on it fail at once.
#[test]
fn an_unusable_mark_makes_the_socket_fail_in_the_new_program() {
    let sv = socket_pair();
    let ino = inode(sv[0]).unwrap();
    let mark = mark_unusable(sv[0]).unwrap();
    take_up_one(mark, &[(sv[0], ino), (sv[1], inode(sv[1]).unwrap())]);
    assert!(matches!(
        conn::route(sv[0]),
        conn::Route::Fail(libc::ECONNRESET)
    ));
    assert!(conn::lookup(sv[1]).is_none());
    conn::forget(sv[0]);
    for fd in sv {
        // SAFETY: closing our sockets.
        unsafe { libc::close(fd) };
    }
}

#[test]
fn a_descriptor_that_is_not_a_record_is_left_alone() {
    let sv = socket_pair();
    // A memfd of the right size but without the magic.
    // SAFETY: memfd_create with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"viarun-inherit".as_ptr(), 0) };
    // SAFETY: sizing our memfd.
    assert_eq!(
        unsafe { libc::ftruncate(fd, std::mem::size_of::<Record>() as libc::off_t) },
        0
    );
    take_up_one(fd, &[(sv[0], inode(sv[0]).unwrap())]);
    assert!(conn::lookup(sv[0]).is_none());
    for fd in sv {
        // SAFETY: closing our sockets.
        unsafe { libc::close(fd) };
    }
}

/// A record's memfd, once its connection is gone, serves the next record
/// of the process (no memfd made, sized, mapped and faulted in), and
/// reads as that record. Other tests make records meanwhile and may take
/// the memfd first: a few tries, each of which finds it unless one did.
#[test]
fn a_gone_records_memfd_serves_the_next_record() {
    let sv = socket_pair();
    let what = || Offered::AwaitAnswer {
        listener: sv[1],
        dst_port: 7,
    };
    let reused = (0..5).any(|_| {
        let first = Inherit::offer(sv[0], what()).expect("a record");
        let ino = inode(first.record_fd());
        drop(first);
        let second = Inherit::offer(sv[0], what()).expect("another");
        let copy = copy_of(&second);
        assert_eq!(record_kind(copy), Some(AWAIT_ANSWER), "a whole record");
        // SAFETY: our copy.
        unsafe { libc::close(copy) };
        inode(second.record_fd()) == ino
    });
    assert!(reused, "the first record's memfd came back");
    // SAFETY: the pair made above.
    unsafe {
        libc::close(sv[0]);
        libc::close(sv[1]);
    }
}
