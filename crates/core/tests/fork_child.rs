//! A fork() child must get a clean refusal from its parent's NIC, never a
//! crash. Registration marks whole pages MADV_DONTFORK, so a heap object
//! that shares a page with a registered buffer is missing in the child; the
//! NIC's state therefore lives on pages of its own. This file is its own
//! test binary so no other test registers memory beside it (in one binary,
//! a parallel test's buffer could share a page with this test's state).

use std::sync::Arc;

use openvia_core::mem::PtagId;
use openvia_core::nic::{Nic, NicShared};
use openvia_core::vi::{reliability, Vi, ViAttributes};
use openvia_core::ViaError;

/// Forks; the child runs `check` and leaves with 0 when it returns true.
/// Says how the child ended when it did not leave with 0.
fn in_child(check: impl FnOnce() -> bool) -> Result<(), String> {
    // SAFETY: the child only calls code that returns before taking any lock
    // (the fork check comes first) and then leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = check();
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut st = 0;
    // SAFETY: waiting for our own child.
    let rc = unsafe { libc::waitpid(pid, &mut st, 0) };
    assert_eq!(rc, pid, "waitpid");
    if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 {
        Ok(())
    } else if libc::WIFSIGNALED(st) {
        Err(format!("child died of signal {}", libc::WTERMSIG(st)))
    } else {
        Err(format!("child was allowed in (status {st:#x})"))
    }
}

fn refused<T>(r: openvia_core::Result<T>) -> bool {
    matches!(r, Err(ViaError::InvalidState(_)))
}

fn child_is_refused(nic: &Nic, ptag: PtagId, vi: &Vi) -> Result<(), String> {
    in_child(|| {
        refused(nic.create_ptag())
            && refused(nic.register_mem(4096, 1, ptag, false, false))
            && refused(vi.send_done())
    })
}

fn open_with_vi() -> (Nic, PtagId, Arc<Vi>) {
    let nic = Nic::open(None).unwrap();
    let ptag = nic.create_ptag().unwrap();
    let vi = nic
        .create_vi(
            ViAttributes {
                reliability: reliability::RELIABLE_DELIVERY,
                max_transfer: 1 << 16,
                ptag,
                rdma_write: false,
                rdma_read: false,
            },
            None,
            None,
        )
        .unwrap();
    (nic, ptag, vi)
}

#[test]
fn forked_child_cannot_use_parents_nic() {
    let (nic, ptag, vi) = open_with_vi();
    child_is_refused(&nic, ptag, &vi).unwrap();
    // The parent still can.
    nic.create_ptag().unwrap();
}

#[test]
fn forked_child_is_refused_beside_registered_memory() {
    let (nic, ptag, vi) = open_with_vi();
    // Another NIC registers the bytes just before and just after the first
    // NIC's state and its VI's: those pages go missing in the child, as they would when
    // the program's own small buffers sat next to the state on the heap.
    let other = Nic::open(None).unwrap();
    let optag = other.create_ptag().unwrap();
    let nic_state = nic.state_address() as u64;
    let nic_size = std::mem::size_of::<NicShared>() as u64;
    let vi_state = Arc::as_ptr(&vi) as u64;
    let vi_size = std::mem::size_of::<Vi>() as u64;
    let mut handles = Vec::new();
    for addr in [
        nic_state - 1,
        nic_state + nic_size,
        vi_state - 1,
        vi_state + vi_size,
    ] {
        handles.push((
            addr,
            other.register_mem(addr, 1, optag, false, false).unwrap(),
        ));
    }
    child_is_refused(&nic, ptag, &vi).unwrap();
    nic.create_ptag().unwrap();
    for (addr, h) in handles {
        other.deregister_mem(addr, h).unwrap();
    }
}
