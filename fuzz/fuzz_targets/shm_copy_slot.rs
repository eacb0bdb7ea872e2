//! The shared-copy slot as a sender finds it after the other process wrote
//! anything there: reading it, checking it against the message sent and
//! claiming pieces must never panic, overflow or reach past the message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openvia_core::devices::shm::shared_copy::fuzz_slot;

fuzz_target!(|data: &[u8]| {
    // The first 8 bytes choose the length of "our" message.
    let len = data
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()) % (1 << 31))
        .unwrap_or(0);
    fuzz_slot(data.get(8..).unwrap_or(&[]), len);
});
