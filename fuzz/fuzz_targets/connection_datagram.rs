//! `Connection::handle_datagram` on arbitrary datagrams, for a connected
//! server-side connection whose id an attacker may have guessed. The input
//! is split into datagrams at 0xFE bytes; the first byte of each is a
//! control byte (bit 0: patch our connection id in, so the state machine
//! past the id check is reached; bit 1: let timers fire). Nothing may
//! panic, whatever the sequence.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openvia_proto::{Config, Connection, MessageInfo, MessageSink, Piece, Placement, Time};
use openvia_wire::rum::{Body, Repr};

struct Discard;
impl MessageSink for Discard {
    fn place(&mut self, _: &MessageInfo, _: &[Piece<'_>]) -> Placement {
        Placement::Placed
    }
}

const SERVER_CID: u64 = 0x5E5E_5E5E_5E5E_5E5E;

fn server() -> Connection {
    let now = Time::ZERO;
    let mut client = Connection::connect(Config::default(), 0xC1, b"", now).unwrap();
    let mut buf = vec![0u8; client.max_datagram_len()];
    let n = client.poll_transmit(now, &mut buf).unwrap();
    let Ok(Repr { body: Body::ConnectRequest(req), .. }) = Repr::parse(&buf[..n]) else {
        unreachable!()
    };
    Connection::accept(Config::default(), SERVER_CID, &req, b"", now).unwrap()
}

fuzz_target!(|data: &[u8]| {
    let mut conn = server();
    let mut buf = vec![0u8; conn.max_datagram_len()];
    let mut now = 0u64;
    for chunk in data.split(|&b| b == 0xFE) {
        let Some((&control, rest)) = chunk.split_first() else { continue };
        let mut d = rest.to_vec();
        if d.len() >= 16 && control & 1 == 1 {
            d[8..16].copy_from_slice(&SERVER_CID.to_be_bytes());
        }
        now += 1_000_000;
        conn.handle_datagram(Time::from_nanos(now), &d);
        if control & 2 == 2 {
            now += 50_000_000;
            conn.handle_timeout(Time::from_nanos(now));
        }
        while conn.poll_transmit(Time::from_nanos(now), &mut buf).is_some() {}
        while conn.poll_event().is_some() {}
        while conn.poll_message(&mut Discard).is_some() {}
        let _ = conn.poll_timeout();
    }
});
