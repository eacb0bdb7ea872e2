//! Two NICs in one process, connected over the shared-memory device: the
//! quickest end-to-end check of posting, completion, RDMA and errors (the
//! scenarios are shared with the UDP device's tests).

mod scenarios;

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
fn recv_done_at_hand_takes_only_what_completed() {
    scenarios::recv_done_at_hand_takes_only_what_completed(SHM, "t-at-hand");
}
