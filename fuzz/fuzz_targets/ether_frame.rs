//! Ethernet-device frame payloads on arbitrary bytes: expansion into RUM
//! and the resolution parser must never panic, and every frame that
//! expands must encode back to the same bytes (padding excluded).
#![no_main]

use libfuzzer_sys::fuzz_target;
use openvia_wire::ether::{frame_from_rum, to_rum, ResolveRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = ResolveRepr::parse(data) {
        assert_eq!(&r.emit()[..], &data[..r.emit().len()]);
    }
    let Ok(datagram) = to_rum(data) else { return };
    let again = frame_from_rum(&datagram).expect("an expanded frame encodes");
    assert!(data.starts_with(&again));
});
