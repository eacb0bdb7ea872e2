//! The UDP device's own handshake parsers: a connect request's user data
//! (mode, tag, client time, discriminator) and the cluster-key check on a
//! whole handshake datagram. Never a panic; accepted user data re-emits to
//! the same bytes (when its discriminator fits what the wire carries); a
//! datagram signed with a key verifies with that key and no other.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openvia_core::devices::rum::packet_auth::{sign, verify};
use openvia_core::devices::rum::rendezvous::{RequestData, MAX_CARRIED_DISCRIMINATOR};

fuzz_target!(|data: &[u8]| {
    if let Some(r) = RequestData::parse(data) {
        if r.client_disc.len() <= MAX_CARRIED_DISCRIMINATOR {
            assert_eq!(r.emit(), data);
        }
    }
    let key: &[u8] = b"a cluster key of at least 16 bytes";
    let _ = verify(None, data);
    let _ = verify(Some(key), data);
    let mut signed = data.to_vec();
    sign(Some(key), &mut signed);
    if signed != data {
        // Signing changed something, so this is a handshake packet with an
        // authenticator: the key must verify it, a different key must not.
        assert!(verify(Some(key), &signed));
        assert!(!verify(Some(b"another cluster key, 16+ bytes"), &signed));
    }
});
