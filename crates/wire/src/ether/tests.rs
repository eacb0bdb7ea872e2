//! Exactness of the translation (RUM → frame → RUM gives the same bytes
//! for random valid datagrams of every type, with and without trailer),
//! the compact header's size, the headroom bound, typed refusals, and a
//! mutation corpus: every mutated frame is refused with a typed error or
//! expands to a datagram that encodes back to the very same frame.

use super::*;
use crate::rum::{
    AckRepr, Body, DataRepr, FlowMode, HandshakeRepr, HeaderRepr, Repr, SackBlock, ViaOp,
    TRAILER_LEN,
};

/// splitmix64: deterministic test inputs.
struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// 0 half of the time (the fields' common value), else random.
    fn often_zero(&mut self) -> u32 {
        if self.below(2) == 0 {
            0
        } else {
            self.next() as u32
        }
    }
}

/// A random valid RUM datagram (its connection id within 16 bits),
/// followed by a trailer half of the time.
fn random_datagram(rng: &mut SplitMix) -> Vec<u8> {
    let header = HeaderRepr {
        conn_id: 1 + rng.below(0xFFFF),
        ack_request: rng.below(2) == 0,
        seq: rng.next() as u32,
        ack: rng.next() as u32,
        consumed: rng.next() as u32,
        window: rng.next() as u32,
    };
    let payload: Vec<u8> = (0..rng.below(1500)).map(|_| rng.next() as u8).collect();
    let n = payload.len() as u32;
    let (offset, total_len) = match rng.below(3) {
        0 => (0, n),
        1 => (0, n + rng.below(100_000) as u32),
        _ => (1 + rng.below(1 << 20) as u32, n + (1 << 21)),
    };
    let (offset, total_len) = if n == 0 { (0, 0) } else { (offset, total_len) };
    let mut ack = AckRepr::default();
    for _ in 0..rng.below(5) {
        let s = rng.next() as u32;
        ack.push(SackBlock {
            start: s,
            end: s.wrapping_add(1 + rng.below(1000) as u32),
        });
    }
    let user: Vec<u8> = (0..rng.below(40)).map(|_| rng.next() as u8).collect();
    let hs = HandshakeRepr {
        conn_id: rng.next(),
        reliability: 4,
        rdma_write: true,
        rdma_read: false,
        flow_mode: FlowMode::Hetero,
        flow_control_only: false,
        max_transfer_size: 1 << 20,
        segment_size: 1400,
        recv_window: 512,
        reject_reason: 0,
        user_data: &user,
        has_authenticator: rng.below(2) == 0,
    };
    let mut header = header;
    let body = match rng.below(8) {
        0..=2 => Body::Data(DataRepr {
            msg_id: rng.next() as u32,
            offset,
            total_len,
            op: ViaOp::from_u8(rng.below(4) as u8).unwrap(),
            immediate: (rng.below(3) == 0).then(|| rng.often_zero()),
            mem_handle: if rng.below(2) == 0 {
                0
            } else {
                rng.often_zero()
            },
            remote_addr: if rng.below(2) == 0 { 0 } else { rng.next() },
            payload: &payload,
        }),
        3 => Body::Ack(ack.as_body()),
        4 => {
            header.conn_id = 0;
            Body::ConnectRequest(hs)
        }
        5 => Body::ConnectAccept(hs),
        6 => Body::Keepalive,
        _ => Body::Disconnect {
            reason: rng.next() as u32,
        },
    };
    let r = Repr { header, body };
    let mut d = vec![0u8; r.buffer_len()];
    r.emit(&mut d).expect("valid by construction");
    if rng.below(2) == 0 {
        d.extend((0..TRAILER_LEN).map(|_| rng.next() as u8));
    }
    d
}

#[test]
fn random_datagrams_translate_exactly_both_ways() {
    let mut rng = SplitMix(42);
    let mut compact = 0;
    for _ in 0..20_000 {
        let d = random_datagram(&mut rng);
        let frame = frame_from_rum(&d).expect("every valid datagram with a small id");
        let (dst, kind) = peek(&frame).unwrap();
        assert_eq!(
            u64::from(dst),
            u64::from_be_bytes(d[8..16].try_into().unwrap())
        );
        if kind == KIND_DATA {
            compact += 1;
        } else {
            assert_eq!(kind, KIND_RUM);
        }
        assert_eq!(to_rum(&frame).unwrap(), d);
        // Ethernet padding after the frame changes nothing.
        let mut padded = frame.clone();
        padded.extend_from_slice(&[0xAB; 30]);
        assert_eq!(to_rum(&padded).unwrap(), d);
    }
    assert!(compact > 5_000, "only {compact} compact frames");
}

/// A DATA packet carrying a whole message in one frame, as the common case.
fn whole_message(payload: &[u8], immediate: Option<u32>) -> Vec<u8> {
    let r = Repr {
        header: HeaderRepr {
            conn_id: 7,
            ack_request: false,
            seq: 1,
            ack: 2,
            consumed: 3,
            window: 4,
        },
        body: Body::Data(DataRepr {
            msg_id: 5,
            offset: 0,
            total_len: payload.len() as u32,
            op: ViaOp::Send,
            immediate,
            mem_handle: 0,
            remote_addr: 0,
            payload,
        }),
    };
    let mut d = vec![0u8; r.buffer_len()];
    r.emit(&mut d).unwrap();
    d
}

#[test]
fn a_whole_message_costs_26_header_bytes_and_gathers_its_payload() {
    let payload = [0x5Au8; 8];
    let d = whole_message(&payload, None);
    let head = encode(&d[..64], d.len()).unwrap();
    assert_eq!(head.bytes().len(), COMPACT_BASE_LEN);
    // As small as M-VIA's header (42 bytes with Ethernet's).
    const { assert!(COMPACT_BASE_LEN + 14 <= 42) };
    assert_eq!(head.rum_skip(), 64);
    assert!(head.is_compact());
    // The payload follows the header untouched.
    let frame = frame_from_rum(&d).unwrap();
    assert_eq!(&frame[COMPACT_BASE_LEN..], &payload);
    // Immediate data: 4 more bytes.
    let d = whole_message(&payload, Some(9));
    assert_eq!(
        encode(&d[..64], d.len()).unwrap().bytes().len(),
        COMPACT_BASE_LEN + 4
    );
}

#[test]
fn expansion_needs_exactly_the_documented_headroom() {
    let d = whole_message(&[1, 2, 3], None);
    let frame = frame_from_rum(&d).unwrap();
    for room in 0..EXPAND_HEADROOM + 3 {
        let mut buf = vec![0u8; room];
        buf.extend_from_slice(&frame);
        let r = expand_in_place(&mut buf, room, frame.len());
        if room < EXPAND_HEADROOM {
            assert_eq!(
                r,
                Err(EtherError::Headroom {
                    have: room,
                    need: EXPAND_HEADROOM
                })
            );
        } else {
            let r = r.unwrap();
            assert_eq!(&buf[r.clone()], &d[..]);
            // The payload did not move.
            assert_eq!(r.end, room + frame.len());
        }
    }
}

#[test]
fn ids_past_16_bits_are_refused() {
    let mut d = whole_message(&[1], None);
    d[8..16].copy_from_slice(&0x1_0000u64.to_be_bytes());
    assert_eq!(encode(&d, d.len()), Err(EtherError::IdTooLarge(0x1_0000)));
}

#[test]
fn a_verbatim_frame_must_name_its_own_connection() {
    let r = Repr {
        header: HeaderRepr {
            conn_id: 300,
            ..HeaderRepr::default()
        },
        body: Body::Keepalive,
    };
    let mut d = vec![0u8; r.buffer_len()];
    r.emit(&mut d).unwrap();
    let mut frame = frame_from_rum(&d).unwrap();
    assert_eq!(frame.len(), RUM_PREFIX_LEN + d.len());
    frame[0..2].copy_from_slice(&301u16.to_be_bytes());
    assert_eq!(
        to_rum(&frame),
        Err(EtherError::IdMismatch {
            frame: 301,
            rum: 300
        })
    );
}

#[test]
fn tails_other_than_one_trailer_are_refused() {
    let d = whole_message(&[1, 2], None);
    for extra in [1, 23, 25, 48] {
        let mut long = d.clone();
        long.resize(d.len() + extra, 0);
        assert_eq!(frame_from_rum(&long), Err(EtherError::BadTail(extra)));
    }
}

#[test]
fn every_truncation_is_refused() {
    let mut rng = SplitMix(7);
    for _ in 0..200 {
        let d = random_datagram(&mut rng);
        let frame = frame_from_rum(&d).unwrap();
        for cut in 0..frame.len() {
            assert!(to_rum(&frame[..cut]).is_err(), "cut at {cut} accepted");
        }
    }
}

#[test]
fn resolution_round_trips_and_is_not_rum() {
    let q = ResolveRepr {
        reply: false,
        target: [1; 16],
        sender: [2; 16],
        sender_mac: [2, 0, 0, 0, 0, 9],
    };
    let f = q.emit();
    assert_eq!(ResolveRepr::parse(&f), Ok(q));
    assert_eq!(peek(&f), Ok((AGENT_ID, KIND_RESOLVE_REQUEST)));
    assert_eq!(to_rum(&f), Err(EtherError::NotRum(KIND_RESOLVE_REQUEST)));
    let a = q.answer([2, 0, 0, 0, 0, 1]);
    assert_eq!((a.reply, a.target, a.sender), (true, [2; 16], [1; 16]));
    assert_eq!(ResolveRepr::parse(&a.emit()), Ok(a));
    for cut in 0..RESOLVE_LEN {
        assert!(ResolveRepr::parse(&f[..cut]).is_err());
    }
    let mut bad = f;
    bad[43] = 1;
    assert!(ResolveRepr::parse(&bad).is_err());
}

/// The fuzz target's invariant, on stable Rust with a fixed corpus.
pub(super) fn check_frame(f: &[u8]) -> bool {
    let _ = ResolveRepr::parse(f);
    match to_rum(f) {
        Ok(d) => {
            let again = frame_from_rum(&d).expect("an expanded frame encodes");
            assert!(f.starts_with(&again), "{f:02x?} became {again:02x?}");
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

#[test]
fn mutated_frames_are_refused_or_translate_back_to_themselves() {
    let mut rng = SplitMix(0xE7);
    let corpus: Vec<Vec<u8>> = (0..64)
        .map(|_| frame_from_rum(&random_datagram(&mut rng)).unwrap())
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..50_000 {
        let mut f = corpus[rng.below(corpus.len() as u64) as usize].clone();
        for _ in 0..1 + rng.below(3) {
            let pos = rng.below(f.len() as u64) as usize;
            match rng.below(4) {
                0 => f[pos] ^= 1 << rng.below(8),
                1 => f[pos] = [0u8, 1, 0x7F, 0x80, 0xFF][rng.below(5) as usize],
                2 => f.truncate(pos),
                _ => f.insert(pos, rng.next() as u8),
            }
            if f.is_empty() {
                f.push(0);
            }
        }
        if check_frame(&f) {
            ok += 1;
        } else {
            refused += 1;
        }
    }
    assert!(ok > 1_000 && refused > 1_000, "ok {ok}, refused {refused}");
}

#[test]
fn data_headers_the_emitter_would_not_write_are_refused() {
    let good = whole_message(&[1, 2, 3, 4], None);
    assert!(encode(&good, good.len()).is_ok());
    // (byte in the datagram, value): immediate bytes without the flag,
    // reserved data bytes, a segment past the message end.
    for (at, v) in [(32 + 19, 1u8), (32 + 14, 1), (32 + 15, 0x80), (32 + 11, 2)] {
        let mut bad = good.clone();
        bad[at] = v;
        assert!(encode(&bad, bad.len()).is_err(), "byte {at} = {v} accepted");
        assert!(frame_from_rum(&bad).is_err());
    }
}

#[test]
fn optional_fields_holding_their_implied_values_are_refused() {
    let d = whole_message(&[7; 5], None);
    let frame = frame_from_rum(&d).unwrap();
    assert_eq!(frame.len(), COMPACT_BASE_LEN + 5);
    let with_fields = |flag: u8, fields: &[u8]| {
        let mut f = frame[..COMPACT_BASE_LEN].to_vec();
        f[3] |= flag;
        f.extend_from_slice(fields);
        f.extend_from_slice(&[7; 5]);
        to_rum(&f)
    };
    // Segment fields saying "offset 0 of a 5-byte message": implied.
    let whole = [0, 0, 0, 0, 0, 0, 0, 5];
    assert!(matches!(
        with_fields(0x04, &whole),
        Err(EtherError::BadField(_))
    ));
    // RDMA fields all zero: implied.
    assert!(matches!(
        with_fields(0x10, &[0; 12]),
        Err(EtherError::BadField(_))
    ));
    // The same flags with real values are fine.
    assert!(with_fields(0x04, &[0, 0, 0, 0, 0, 0, 0, 9]).is_ok());
    assert!(with_fields(0x10, &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]).is_ok());
}

#[test]
fn a_frame_placed_at_its_headroom_expands_to_offset_zero() {
    let mut rng = SplitMix(11);
    for _ in 0..2000 {
        let dg = random_datagram(&mut rng);
        let frame = frame_from_rum(&dg).unwrap();
        let at = expand_headroom(&frame);
        let mut buf = vec![0u8; at + frame.len()];
        buf[at..].copy_from_slice(&frame);
        let r = expand_in_place(&mut buf, at, frame.len()).unwrap();
        if frame[KIND_OFFSET] == KIND_DATA {
            assert_eq!(r.start, 0, "compact frame placed at {at}");
        } else {
            assert_eq!((at, r.start), (0, RUM_PREFIX_LEN));
        }
        assert_eq!(&buf[r], &dg[..]);
    }
}
