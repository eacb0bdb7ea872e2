//! Two network NICs in one process, connected over UDP on the loopback
//! interface (no namespace needed): every VIPL operation through the
//! agent, the protocol and the UDP channel, at every reliability level.
//! The scenarios are the shared-memory device's own (crates/core/tests).

#[path = "../../../crates/core/tests/scenarios/mod.rs"]
mod scenarios;

use std::time::Duration;

use openvia_core::descriptor::status;
use openvia_core::nic::Nic;
use openvia_core::vi::reliability;
use scenarios::{pair, set_desc, UDP};

#[test]
fn send_receive_every_size_reliable_delivery() {
    scenarios::roundtrip_sizes(UDP, reliability::RELIABLE_DELIVERY, "t-rd");
}

#[test]
fn send_receive_every_size_reliable_reception() {
    scenarios::roundtrip_sizes(UDP, reliability::RELIABLE_RECEPTION, "t-rr");
}

#[test]
fn send_receive_every_size_unreliable() {
    scenarios::roundtrip_sizes(UDP, reliability::UNRELIABLE, "t-ur");
}

#[test]
fn rdma_write_with_immediate_and_read() {
    scenarios::rdma_write_with_immediate_and_read(UDP, "t-rdma");
}

#[test]
fn rdma_write_to_bad_handle_breaks_reliable_connection() {
    scenarios::rdma_write_to_bad_handle_breaks_reliable_connection(UDP, "t-prot");
}

#[test]
fn deregistering_a_posted_receive_is_refused() {
    scenarios::dereg::deregistering_a_posted_receive_is_refused(UDP, "t-dereg-recv");
}

#[test]
fn deregistering_a_pending_large_send_is_refused() {
    // Read in place for retransmission (above the in-place threshold).
    scenarios::dereg::deregistering_a_pending_large_send_is_refused(UDP, "t-dereg-send", 1 << 20);
}

#[test]
fn peer_to_peer_connect() {
    scenarios::peer_to_peer(UDP, "t-peer");
}

#[test]
fn descriptor_checks() {
    scenarios::descriptor_checks(UDP, "t-desc");
}

#[test]
fn completes_without_the_program_calling_in() {
    scenarios::completes_without_the_program_calling_in(UDP, "t-progress");
}

#[test]
fn nic_reports_network_attributes() {
    scenarios::udp_env();
    let nic = Nic::open(Some("/dev/via_udp")).unwrap();
    let q = nic.query();
    assert_eq!(q.name, "/dev/via_udp");
    assert_eq!(&q.address[10..], &[0xff, 0xff, 127, 0, 0, 1]);
    assert!(q.native_mtu >= 1280, "mtu {}", q.native_mtu);
    assert!(q.max_transfer_size >= 1 << 20);
    let lo = Nic::open(Some("/dev/via_lo")).unwrap();
    assert_eq!(lo.query().name, "/dev/via_lo");
    assert!(Nic::open(Some("/dev/via_nosuchif0")).is_err());
}

#[test]
fn peer_vanishing_breaks_the_connection() {
    let p = pair(UDP, reliability::RELIABLE_DELIVERY, "t-dead", 1 << 20);
    let errors = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let e2 = errors.clone();
    p._nics
        .0
        .set_error_handler(Some(std::sync::Arc::new(move |_e| {
            e2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })))
        .unwrap();
    let rd = p.ma.desc(3);
    set_desc(rd, 0, &[(p.ma.data(4096) as u64, p.ma.handle, 100)], 0);
    p.a.post_recv(rd, p.ma.handle).unwrap();
    // The peer's NIC goes away without a word: close it abruptly by
    // dropping its channel's socket through a NIC close.
    let start = std::time::Instant::now();
    p._nics.1.close().unwrap();
    // Orderly close sends a disconnect: the VI must leave Connected fast.
    let d = p.a.recv_wait(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(d.0, rd);
    assert_ne!(unsafe { (*rd).cs.status } & status::DESC_FLUSHED_ERROR, 0);
    assert_eq!(p.a.state(), openvia_core::vi::ViState::Error);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(errors.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}

#[test]
fn in_place_send_reused_at_completion_unreliable() {
    scenarios::in_place_send_reused_at_completion(UDP, reliability::UNRELIABLE, "t-ip-ur");
}

#[test]
fn in_place_send_reused_at_completion_reliable_delivery() {
    scenarios::in_place_send_reused_at_completion(UDP, reliability::RELIABLE_DELIVERY, "t-ip-rd");
}

#[test]
fn recv_done_at_hand_takes_only_what_completed() {
    scenarios::recv_done_at_hand_takes_only_what_completed(UDP, "t-at-hand");
}
