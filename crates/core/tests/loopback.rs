//! Two NICs in one process, connected over the shared-memory device: the
//! quickest end-to-end check of posting, completion, RDMA and errors (the
//! scenarios are shared with the UDP device's tests).

mod scenarios;

use openvia_core::nic::Nic;
use openvia_core::vi::reliability;
use scenarios::SHM;

#[test]
fn send_receive_every_size_reliable_delivery() {
    scenarios::roundtrip_sizes(SHM, reliability::RELIABLE_DELIVERY, "t-rd");
}

#[test]
fn send_receive_every_size_reliable_reception() {
    scenarios::roundtrip_sizes(SHM, reliability::RELIABLE_RECEPTION, "t-rr");
}

#[test]
fn send_receive_every_size_unreliable() {
    scenarios::roundtrip_sizes(SHM, reliability::UNRELIABLE, "t-ur");
}

#[test]
fn rdma_write_with_immediate_and_read() {
    scenarios::rdma_write_with_immediate_and_read(SHM, "t-rdma");
}

#[test]
fn rdma_write_to_bad_handle_breaks_reliable_connection() {
    scenarios::rdma_write_to_bad_handle_breaks_reliable_connection(SHM, "t-prot");
}

#[test]
fn deregistering_a_posted_receive_is_refused() {
    scenarios::dereg::deregistering_a_posted_receive_is_refused(SHM, "t-dereg-recv");
}

/// Streamed through the ring (larger than it, below the CMA threshold).
#[test]
fn deregistering_a_pending_large_send_is_refused() {
    scenarios::dereg::deregistering_a_pending_large_send_is_refused(SHM, "t-dereg-send", 3 << 20);
}

/// Pulled by the peer with CMA (above the threshold).
#[test]
fn deregistering_a_pending_cma_send_is_refused() {
    scenarios::dereg::deregistering_a_pending_large_send_is_refused(SHM, "t-dereg-cma", 12 << 20);
}

#[test]
fn peer_to_peer_connect() {
    scenarios::peer_to_peer(SHM, "lo-peer");
}

#[test]
fn descriptor_checks() {
    scenarios::descriptor_checks(SHM, "t-desc");
}

#[test]
fn completes_without_the_program_calling_in() {
    scenarios::completes_without_the_program_calling_in(SHM, "t-progress");
}

#[test]
fn forked_child_cannot_use_parents_nic() {
    let nic = Nic::open(None).unwrap();
    let ptag = nic.create_ptag().unwrap();
    // SAFETY: the child only calls code that returns before taking any lock
    // (the fork check comes first) and then leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let refused = matches!(
            nic.create_ptag(),
            Err(openvia_core::ViaError::InvalidState(_))
        ) && matches!(
            nic.register_mem(4096, 1, ptag, false, false),
            Err(openvia_core::ViaError::InvalidState(_))
        );
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(if refused { 0 } else { 1 }) };
    }
    let mut st = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    assert!(
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
        "child was allowed in"
    );
    // The parent still can.
    nic.create_ptag().unwrap();
}
