//! TUN offloads across viaip (connected mode): with an overlay MTU of
//! 1500 the kernel hands viaip TCP super-packets of up to 64 KiB with
//! their checksums owed; each must cross as one message, and the peer's
//! kernel must take it with its offload header — a header lost or wrong
//! on the way makes the receiving kernel check a checksum that was never
//! finished and drop the segment, and the transfer fails. A peer without
//! offloads finishes the checksums itself. In datagram mode viaip cuts the
//! super-packets itself into segments that each fit a datagram. Needs root
//! (CI is root).

mod common;

use common::*;

const MTU: &str = "1500";

/// A checksummed transfer from namespace `from` to `to`; the sender's and
/// the receiver's counters after it.
fn transfer(pair: &Pair, from: usize, len: usize) -> (Traffic, Traffic) {
    let to = 1 - from;
    let (sent, got, n) = tcp_transfer(&pair.ns[from], &pair.ns[to], pair.over[to], len);
    assert_eq!(n, len, "bytes received");
    assert_eq!(sent, got, "checksum across viaip");
    (traffic(&pair.show(from)), traffic(&pair.show(to)))
}

/// Super-packets crossed: more bytes a packet than the MTU on average,
/// and packets marked as super-packets on both sides.
fn assert_super_packets(tx: Traffic, rx: Traffic, report: &str) {
    assert!(tx.tx_gso > 0, "no super-packets sent: {report}");
    assert!(rx.rx_gso > 0, "no super-packets received: {report}");
    assert!(
        tx.tx_bytes / tx.tx_packets.max(1) > 1500,
        "packets no larger than the MTU: {report}"
    );
}

#[test]
fn super_packets_cross_with_their_checksums_owed() {
    let _g = serial();
    if skip("super_packets_cross_with_their_checksums_owed") {
        return;
    }
    let pair = Pair::new(1500);
    let extra = ["--peers", &pair.peers_file, "--mtu", MTU];
    let _a = pair.up_with(0, "connected", &extra);
    let _b = pair.up_with(1, "connected", &extra);
    assert!((0..10).any(|_| ping(&pair.ns[0], pair.over[1])));
    assert!(pair.show(0).contains("offloads on"), "{}", pair.show(0));
    let (tx, rx) = transfer(&pair, 0, 16 << 20);
    assert_super_packets(tx, rx, &pair.show(0));
    // And back the other way.
    let (tx, rx) = transfer(&pair, 1, 4 << 20);
    assert_super_packets(tx, rx, &pair.show(1));
}

#[test]
fn a_peer_without_offloads_finishes_the_checksums() {
    let _g = serial();
    if skip("a_peer_without_offloads_finishes_the_checksums") {
        return;
    }
    let pair = Pair::new(1500);
    let _a = pair.up_with(0, "connected", &["--peers", &pair.peers_file, "--mtu", MTU]);
    let _b = pair.up_with(
        1,
        "connected",
        &["--peers", &pair.peers_file, "--mtu", MTU, "--no-offload"],
    );
    assert!((0..10).any(|_| ping(&pair.ns[0], pair.over[1])));
    assert!(pair.show(1).contains("offloads off"), "{}", pair.show(1));
    let (tx, rx) = transfer(&pair, 0, 8 << 20);
    assert_super_packets(tx, rx, &pair.show(1));
    // Bare packets the other way, written behind a plain header.
    let (tx, rx) = transfer(&pair, 1, 4 << 20);
    assert_eq!(tx.tx_gso, 0, "{}", pair.show(1));
    assert!(rx.rx_packets > 0);
}

#[test]
fn datagram_mode_cuts_super_packets_into_datagrams() {
    let _g = serial();
    if skip("datagram_mode_cuts_super_packets_into_datagrams") {
        return;
    }
    let pair = Pair::new(1500);
    let _a = pair.up(0, "datagram");
    let _b = pair.up(1, "datagram");
    assert!((0..10).any(|_| ping(&pair.ns[0], pair.over[1])));
    assert!(pair.show(0).contains("offloads on"), "{}", pair.show(0));
    let (tx, rx) = transfer(&pair, 0, 8 << 20);
    let report = pair.show(0);
    assert!(tx.tx_gso > 0, "no super-packets from the TUN: {report}");
    assert!(
        tx.tx_packets > 2 * tx.tx_gso,
        "super-packets not cut: {report}"
    );
    assert!(
        tx.tx_bytes / tx.tx_packets.max(1) <= 1500,
        "packets larger than a datagram: {report}"
    );
    assert_eq!(rx.rx_gso, 0, "{}", pair.show(1));
}
