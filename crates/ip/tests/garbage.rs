//! Garbage from the underlay: VIA messages that are not IP packets (sent
//! by a client of our own on viaip's discriminator), bare or behind an
//! offload header that does not fit them, are dropped and counted as
//! malformed, and random UDP datagrams thrown at every UDP port
//! viaip holds change nothing: the interface carries traffic afterwards.
//! A process of its own (the core's agent belongs to one namespace).

mod common;

use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

use common::*;
use viaip::link::{Fabric, Form, Mode};
use viaip::peers::host_addr;

/// The UDP ports bound in the calling thread's namespace.
fn udp_ports() -> Vec<u16> {
    let mut text = String::new();
    for t in ["udp", "udp6"] {
        text += &std::fs::read_to_string(format!("/proc/thread-self/net/{t}")).unwrap_or_default();
    }
    text.lines()
        .filter(|l| !l.trim_start().starts_with("sl"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|a| u16::from_str_radix(a.split(':').nth(1)?, 16).ok())
        .collect()
}

#[test]
fn garbage_is_dropped_and_counted() {
    let _g = serial();
    if skip("garbage_is_dropped_and_counted") {
        return;
    }
    let pair = Pair::new(1500);
    let _a = pair.up(0, "connected");
    let ports = in_ns(&pair.ns[0], udp_ports);
    assert!(!ports.is_empty());
    let dev = format!("/dev/via_{}", pair.veth[1]);
    let (target, over) = (pair.under[0], pair.over[0]);
    in_ns(&pair.ns[1], move || {
        let sock = UdpSocket::bind("0.0.0.0:0").expect("udp");
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for &port in &ports {
            for len in [1usize, 7, 40, 200, 1400] {
                let junk: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                let _ = sock.send_to(&junk, (target, port));
            }
        }
        let fabric = Fabric::open(&dev, Mode::Connected, None, true).expect("open device");
        let mut link = fabric
            .connect(&host_addr(target.into()), Duration::from_secs(5))
            .expect("connect to viaip");
        // An IPv4 header whose length disagrees, a truncated header, text.
        let mut bad_len = [0u8; 100];
        bad_len[0] = 0x45;
        bad_len[2..4].copy_from_slice(&300u16.to_be_bytes());
        bad_len[16..20].copy_from_slice(&over.octets());
        for m in [
            &bad_len[..],
            &[0x45u8, 0, 0][..],
            &b"\x15 garbage, not IP"[..],
        ] {
            link.send(m, Form::Bare, Duration::from_secs(1))
                .expect("send garbage");
        }
        // Offload headers: one too short to be a header, and one asking
        // for a checksum past the end of a consistent packet.
        let mut owed_outside = vec![1u8, 0, 0, 0, 0, 0, 20, 0, 200, 0];
        let mut pkt = [0u8; 60];
        pkt[0] = 0x45;
        pkt[2..4].copy_from_slice(&60u16.to_be_bytes());
        pkt[9] = 6;
        pkt[16..20].copy_from_slice(&over.octets());
        owed_outside.extend_from_slice(&pkt);
        for m in [&[1u8, 0, 0][..], &owed_outside[..]] {
            link.send(m, Form::Vnet, Duration::from_secs(1))
                .expect("send garbage");
        }
        // Dropping the link lingers until the peer acknowledged all five.
        drop(link);
    });
    let mut malformed = 0;
    for _ in 0..200 {
        let report = pair.show(0);
        malformed = counter(report.lines().nth(1).unwrap_or(""), "malformed");
        if malformed >= 5 {
            break;
        }
    }
    assert_eq!(malformed, 5, "{}", pair.show(0));
    // Five junk datagrams reached the discovery port too.
    assert!(
        pair.show(0).contains("discovery: malformed=5"),
        "{}",
        pair.show(0)
    );
    let _b = pair.up(1, "connected");
    assert!(
        (0..10).any(|_| ping(&pair.ns[1], Ipv4Addr::from(over.octets()))),
        "no traffic after garbage: {}",
        pair.show(0)
    );
}
