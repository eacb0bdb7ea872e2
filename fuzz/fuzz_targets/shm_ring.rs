//! The ring consumer over memory a hostile peer filled: every line carries
//! a matching stamp, so any bytes can pose as a record. The consumer must
//! refuse or walk them without reading outside the ring.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openvia_core::devices::shm::ring::fuzz_consume;

fuzz_target!(|data: &[u8]| {
    fuzz_consume(data);
});
