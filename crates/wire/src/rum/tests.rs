//! Round trips of every packet type, rejection of every truncation, and
//! random bytes through the parser (deterministic PRNG, no panics).

use super::*;

/// splitmix64: deterministic, tiny, good enough to scatter test inputs.
pub(super) struct SplitMix(pub u64);
impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn header() -> HeaderRepr {
    HeaderRepr {
        conn_id: 0xDEAD_BEEF_0123_4567,
        ack_request: true,
        seq: 0xFFFF_FFF0,
        ack: 17,
        consumed: 12,
        window: 1024,
    }
}

fn handshake(user: &[u8], auth: bool) -> HandshakeRepr<'_> {
    HandshakeRepr {
        conn_id: 0x1122_3344_5566_7788,
        reliability: 4,
        rdma_write: true,
        rdma_read: false,
        flow_mode: FlowMode::Homo,
        flow_control_only: true,
        max_transfer_size: 1 << 20,
        segment_size: 1408,
        recv_window: 2048,
        reject_reason: 0,
        user_data: user,
        has_authenticator: auth,
    }
}

/// One valid packet of every type (and variants), emitted to bytes.
pub(super) fn samples() -> Vec<Vec<u8>> {
    let payload: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    let mut ack = AckRepr::default();
    ack.push(SackBlock { start: 20, end: 25 });
    ack.push(SackBlock {
        start: 0xFFFF_FFFE,
        end: 3,
    });
    let mut reqhdr = header();
    reqhdr.conn_id = 0;
    let bodies = vec![
        (
            header(),
            Body::Data(DataRepr {
                msg_id: 9,
                offset: 100,
                total_len: 1000,
                op: ViaOp::RdmaWrite,
                immediate: Some(0xCAFE),
                mem_handle: 77,
                remote_addr: 0x7FFF_0000_1000,
                payload: &payload,
            }),
        ),
        (
            header(),
            Body::Data(DataRepr {
                msg_id: 1,
                offset: 0,
                total_len: 0,
                op: ViaOp::Send,
                immediate: None,
                mem_handle: 0,
                remote_addr: 0,
                payload: &[],
            }),
        ),
        (header(), Body::Ack(ack.as_body())),
        (header(), Body::Ack(SackBlocks::Built(&[]))),
        (reqhdr, Body::ConnectRequest(handshake(b"disc-42", true))),
        (header(), Body::ConnectAccept(handshake(b"", false))),
        (header(), Body::ConnectReject(handshake(b"x", true))),
        (header(), Body::Keepalive),
        (header(), Body::Disconnect { reason: 3 }),
    ];
    bodies
        .into_iter()
        .map(|(header, body)| {
            let r = Repr { header, body };
            let mut buf = vec![0u8; r.buffer_len()];
            let n = r.emit(&mut buf).expect("emit");
            assert_eq!(n, buf.len());
            buf
        })
        .collect()
}

#[test]
fn every_type_round_trips() {
    let payload = [5u8; 10];
    let samples = samples();
    assert_eq!(samples.len(), 9);
    for bytes in &samples {
        let r = Repr::parse(bytes).expect("parse");
        let mut again = vec![0u8; r.buffer_len()];
        r.emit(&mut again).unwrap();
        assert_eq!(&again, bytes);
    }
    // Field-level check on one data packet.
    let r = Repr {
        header: header(),
        body: Body::Data(DataRepr {
            msg_id: 3,
            offset: 4,
            total_len: 14,
            op: ViaOp::RdmaReadResponse,
            immediate: None,
            mem_handle: 5,
            remote_addr: 6,
            payload: &payload,
        }),
    };
    let mut buf = [0u8; 128];
    let n = r.emit(&mut buf).unwrap();
    let p = Packet::new_checked(&buf[..n]).unwrap();
    assert_eq!(p.packet_type(), PacketType::Data);
    assert_eq!((p.msg_id(), p.msg_offset(), p.msg_total_len()), (3, 4, 14));
    assert_eq!(p.payload(), &payload);
    assert_eq!(p.seq(), 0xFFFF_FFF0);
    assert!(p.ack_requested());
    assert_eq!(Repr::parse(&buf[..n]).unwrap(), r);
}

#[test]
fn authenticator_is_placed_and_read_back() {
    let mut bytes = samples().remove(4);
    let mut p = Packet::new_checked(&mut bytes[..]).unwrap();
    assert_eq!(p.authenticator(), Some(&[0u8; AUTHENTICATOR_LEN][..]));
    assert!(p.set_authenticator(&[0xAB; AUTHENTICATOR_LEN]));
    let range = p.authenticator_range().unwrap();
    assert_eq!(range.end, bytes.len());
    let r = Repr::parse(&bytes).unwrap();
    match r.body {
        Body::ConnectRequest(h) => {
            assert_eq!(h.user_data, b"disc-42");
            assert!(h.has_authenticator);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(&bytes[range], &[0xAB; AUTHENTICATOR_LEN]);
}

#[test]
fn every_truncation_is_rejected() {
    for bytes in samples() {
        for cut in 0..bytes.len() {
            assert!(
                Packet::new_checked(&bytes[..cut]).is_err(),
                "prefix {cut} of {} accepted",
                bytes.len()
            );
        }
        // A trailing extra byte breaks the exact-length rule too.
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Packet::new_checked(&longer[..]).is_err());
    }
}

#[test]
fn typed_errors_for_bad_header() {
    let good = samples().remove(7);
    let mut b = good.clone();
    b[0] = 0;
    assert!(matches!(
        Packet::new_checked(&b[..]),
        Err(ParseError::BadMagic(_))
    ));
    let mut b = good.clone();
    b[2] = 9;
    assert_eq!(
        Packet::new_checked(&b[..]).unwrap_err(),
        ParseError::BadVersion(9)
    );
    let mut b = good.clone();
    b[3] = 200;
    assert_eq!(
        Packet::new_checked(&b[..]).unwrap_err(),
        ParseError::BadType(200)
    );
    let mut b = good.clone();
    b[4] = 0x80;
    assert_eq!(
        Packet::new_checked(&b[..]).unwrap_err(),
        ParseError::BadFlags(0x80)
    );
    assert!(matches!(
        Packet::new_checked(&good[..5]),
        Err(ParseError::Truncated { len: 5, need: 32 })
    ));
}

#[test]
fn emit_refuses_bad_fields() {
    let r = Repr {
        header: HeaderRepr::default(),
        body: Body::Keepalive,
    };
    assert!(r.emit(&mut [0u8; 64]).is_err(), "conn id 0 outside request");
    let mut r = Repr {
        header: header(),
        body: Body::Keepalive,
    };
    assert_eq!(
        r.emit(&mut [0u8; 8]),
        Err(EmitError::BufferTooSmall { need: 32, have: 8 })
    );
    r.body = Body::Data(DataRepr {
        msg_id: 0,
        offset: 10,
        total_len: 5,
        op: ViaOp::Send,
        immediate: None,
        mem_handle: 0,
        remote_addr: 0,
        payload: &[1],
    });
    assert!(r.emit(&mut [0u8; 128]).is_err());
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = SplitMix(0x5EED);
    let mut buf = [0u8; 256];
    let mut accepted = 0;
    for i in 0..100_000 {
        let len = rng.below(buf.len() as u64 + 1) as usize;
        for b in buf[..len].iter_mut() {
            *b = rng.next() as u8;
        }
        // Half the inputs get a valid magic/version/length so the body
        // checks are reached, not just the first comparison.
        if i % 2 == 0 && len >= HEADER_LEN {
            buf[0..2].copy_from_slice(&MAGIC.to_be_bytes());
            buf[2] = VERSION;
            buf[3] = 1 + (rng.below(7) as u8);
            buf[4] &= FLAG_ACK_REQUEST;
            buf[5] = 0;
            buf[6..8].copy_from_slice(&((len - HEADER_LEN) as u16).to_be_bytes());
        }
        if let Ok(r) = Repr::parse(&buf[..len]) {
            accepted += 1;
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut out).expect("a parsed packet re-emits");
            let mut expect = buf[..len].to_vec();
            if let Some(range) = Packet::new_checked(&buf[..len])
                .unwrap()
                .authenticator_range()
            {
                expect[range].fill(0);
            }
            assert_eq!(out, expect);
        }
    }
    // Keepalives and small ACKs do get through; the point is no panics.
    assert!(accepted < 100_000);
}

#[test]
fn data_header_then_payload_is_the_same_datagram() {
    let payload: Vec<u8> = (0..1400u32).map(|i| (i * 7) as u8).collect();
    let d = DataRepr {
        msg_id: 9,
        offset: 2800,
        total_len: 1 << 20,
        op: ViaOp::RdmaWrite,
        immediate: Some(5),
        mem_handle: 3,
        remote_addr: 0x1000,
        payload: &payload,
    };
    let mut whole = vec![0u8; 2048];
    let n = Repr {
        header: header(),
        body: Body::Data(d),
    }
    .emit(&mut whole)
    .unwrap();
    let mut split = vec![0u8; 2048];
    let h = Repr::emit_data_header(
        header(),
        DataRepr { payload: &[], ..d },
        payload.len(),
        &mut split,
    )
    .unwrap();
    assert_eq!(h, HEADER_LEN + DATA_HEADER_LEN);
    split.truncate(h);
    split.extend_from_slice(&payload);
    assert_eq!(&whole[..n], &split[..]);
    // The announced payload must still fit the message and the datagram.
    let past_end = DataRepr {
        payload: &[],
        offset: (1 << 20) - 10,
        ..d
    };
    assert!(Repr::emit_data_header(header(), past_end, 11, &mut split).is_err());
    assert!(Repr::emit_data_header(
        header(),
        DataRepr { payload: &[], ..d },
        MAX_DATAGRAM,
        &mut split
    )
    .is_err());
    assert!(Repr::emit_data_header(header(), d, 1, &mut split).is_err());
}
