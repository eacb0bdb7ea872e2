//! The PVM parsers of bytes from another process or host: the task/pvmd
//! frame, the pvmd-to-pvmd envelope, a link's hello (where a direct route
//! or a host link waits), and the hostfile. Never a panic; an accepted
//! frame or hello re-encodes to the very same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openvia_pvm::frame::Frame;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Frame::decode(data) {
        let again = f.encode();
        assert_eq!(Frame::decode(&again[4..]).ok(), Some(f));
    }
    let _ = openvia_pvm::link::parse(data);
    if let Some((disc, addr)) = openvia_pvm::link::decode_hello(data) {
        assert_eq!(openvia_pvm::link::encode_hello(&disc, &addr), data);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = openvia_pvm::hostfile::parse(text);
    }
});
