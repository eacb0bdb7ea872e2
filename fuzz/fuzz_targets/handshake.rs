//! The local connection handshake parser: never a panic, and an accepted
//! message re-emits to the very same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openvia_wire::handshake::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Message::parse(data) {
        assert_eq!(m.emit(), data);
    }
});
