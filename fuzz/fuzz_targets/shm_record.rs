//! A shared-memory ring record header (and a CMA range list) from arbitrary
//! bytes: never a panic, and an accepted header re-emits to one that parses
//! the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openvia_wire::shm::{parse_iovs, RecordHeader, LINE};

fuzz_target!(|data: &[u8]| {
    let mut line = [0u8; LINE];
    let n = data.len().min(LINE);
    line[..n].copy_from_slice(&data[..n]);
    if let Ok(h) = RecordHeader::parse(&line, 1 << 20) {
        let mut again = [0u8; LINE];
        h.emit(&mut again);
        assert_eq!(RecordHeader::parse(&again, 1 << 20), Ok(h));
        assert!(h.record_len() >= LINE && h.record_len() % LINE == 0);
    }
    let _ = parse_iovs(&data[n..]);
});
