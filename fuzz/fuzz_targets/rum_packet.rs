//! The RUM parser on arbitrary bytes: it must never panic, and whatever it
//! accepts must re-emit to the same bytes (authenticator zeroed); the
//! authentication trailer's split must never panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openvia_wire::rum::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    // The trailer split never panics, and leaves a packet and 24 bytes.
    if let Ok(t) = openvia_wire::rum::split_trailer(data) {
        assert_eq!(t.packet.len() + openvia_wire::rum::TRAILER_LEN, data.len());
    }
    let Ok(repr) = Repr::parse(data) else { return };
    let packet = Packet::new_checked(data).expect("parse implies check");
    let _ = (packet.payload(), packet.sack_block(0), packet.authenticator());
    let mut out = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut out).expect("a parsed packet re-emits");
    let mut expect = data.to_vec();
    if let Some(r) = packet.authenticator_range() {
        expect[r].fill(0);
    }
    assert_eq!(&out[..n], &expect[..]);
});
