//! The PVM parsers of bytes from another process or host: the task/pvmd
//! frame, the pvmd-to-pvmd envelope, and the hostfile. Never a panic; an
//! accepted frame re-encodes to the very same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openvia_pvm::frame::Frame;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Frame::decode(data) {
        let again = f.encode();
        assert_eq!(Frame::decode(&again[4..]).ok(), Some(f));
    }
    let _ = openvia_pvm::link::parse(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = openvia_pvm::hostfile::parse(text);
    }
});
