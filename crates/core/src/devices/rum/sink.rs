//! Where the protocol's delivered messages go: a [`Sink`] places each
//! one, for one progress call, into the VI's posted descriptors (sends and
//! RDMA writes) or answers it (RDMA read requests, and refusals as NACK
//! responses). Also the gathering of a post's local ranges into a payload.

use std::sync::atomic::Ordering;

use openvia_proto::{MessageInfo, MessageSink, OutgoingMessage, Piece, Placement as Offer, ViaOp};

use super::channel::NACK_HANDLE;
use super::direct::{DirectPlacement, Target};
use super::stats::STATS;
use crate::descriptor::status;
use crate::ranges::{self, Range};
use crate::vi::placement::{Fault, Placement};

pub(super) fn local_data(local: &[Range], len: u64) -> Vec<u8> {
    gather_into(Vec::new(), local, len)
}

/// Copies the posted ranges into `buf` (a reused buffer: a fresh one
/// per large message costs more in page faults than the copy), without
/// zeroing it first (that was a second pass over every byte: 2.5 % of
/// viaip's sending thread).
pub(super) fn gather_into(mut buf: Vec<u8>, local: &[Range], len: u64) -> Vec<u8> {
    let len = len as usize;
    buf.clear();
    buf.reserve(len);
    let out = buf.spare_capacity_mut().as_mut_ptr().cast::<u8>();
    // SAFETY: the ranges were validated against the registry at post (and
    // are the program's memory, not this fresh capacity); `out` has room
    // for `len` bytes. Whatever the ranges lack is zeroed, so all `len`
    // bytes are initialized before the length is set.
    unsafe {
        let got = ranges::gather_raw(local, 0, out, len);
        std::ptr::write_bytes(out.add(got), 0, len - got);
        buf.set_len(len);
    }
    buf
}

/// Places delivered messages for one progress call.
pub(super) struct Sink<'p, 'a> {
    pub(super) place: &'p mut Placement<'a>,
    /// Where bytes placed on arrival went.
    pub(super) direct: &'p mut DirectPlacement,
    pub(super) reliable: bool,
    pub(super) replies: &'p mut Vec<OutgoingMessage>,
    /// Set when a message is held for want of a receive descriptor.
    pub(super) held: bool,
}

pub(super) fn nack(seq: u64, bits: u32) -> OutgoingMessage {
    OutgoingMessage {
        op: ViaOp::RdmaReadResponse,
        immediate: Some(bits),
        mem_handle: NACK_HANDLE,
        remote_addr: seq,
        data: Vec::new().into(),
    }
}

/// Copies the pieces of a message the connection held into `target`.
pub(super) fn scatter_pieces(target: &[Range], pieces: &[Piece<'_>]) {
    for p in pieces {
        // SAFETY: callers pass ranges validated against the registry (a
        // posted receive, a checked RDMA target, a read's local buffers).
        unsafe { ranges::scatter(target, p.offset, p.data) };
    }
}

impl Sink<'_, '_> {
    /// Bytes of the message placed on arrival are not where it is being
    /// delivered: they are lost, so the VI fails (and a send's receive
    /// completes with a transport error) rather than deliver wrong bytes.
    fn misplaced(&mut self, info: &MessageInfo) -> Offer {
        STATS.misplaced.fetch_add(1, Ordering::Relaxed);
        let p = &mut *self.place;
        p.faults.push(Fault::Transport);
        if info.op == ViaOp::Send && p.recv_capacity().is_some() {
            p.recv_complete(0, info.immediate, false, status::TRANSPORT_ERROR);
        }
        Offer::Placed
    }

    /// No receive descriptor: hold the sender (reliable) or drop and count.
    pub(super) fn no_descriptor(&mut self) -> Offer {
        if self.reliable {
            self.held = true;
            Offer::NotNow
        } else {
            STATS.no_descriptor_drops.fetch_add(1, Ordering::Relaxed);
            Offer::Placed
        }
    }
}

impl MessageSink for Sink<'_, '_> {
    fn place(&mut self, info: &MessageInfo, pieces: &[Piece<'_>]) -> Offer {
        let offer = self.place_message(info, pieces);
        if offer == Offer::Placed {
            let head = self.place.recv_head_index();
            self.direct.delivered(info.msg_id, head);
        }
        offer
    }
}

impl Sink<'_, '_> {
    fn place_message(&mut self, info: &MessageInfo, pieces: &[Piece<'_>]) -> Offer {
        let len = info.len as u64;
        // Where the bytes the delivered message counts as placed went. A
        // plan's bytes that it does not count (`info.placed` 0) came with a
        // segment that was not part of it (a forged second start of its
        // id): its pieces then cover it all, over them.
        let placed = match (info.placed, self.direct.placed_target(info.msg_id)) {
            (0, _) => None,
            (n, Some((target, bytes))) if bytes == n as u64 => Some(target),
            // Cannot happen while each message is placed by one chain of
            // its own segments; if it did, some of its bytes are lost.
            _ => return self.misplaced(info),
        };
        let p = &mut *self.place;
        match info.op {
            ViaOp::Send => {
                let Some(cap) = p.recv_capacity() else {
                    return self.no_descriptor();
                };
                match placed {
                    None => {}
                    Some(Target::Recv(index)) if index == p.recv_head_index() => {}
                    // In another receive than the one delivery found:
                    // never while every message reaches one in order.
                    Some(_) => return self.misplaced(info),
                }
                if len > cap {
                    p.recv_complete(0, info.immediate, false, status::LENGTH_ERROR);
                    return Offer::Placed;
                }
                for piece in pieces {
                    p.recv_write(piece.offset, piece.data);
                }
                p.recv_complete(len, info.immediate, false, 0);
                Offer::Placed
            }
            ViaOp::RdmaWrite => {
                let planned = Target::Rdma {
                    handle: info.mem_handle,
                    addr: info.remote_addr,
                };
                if placed.is_some_and(|t| t != planned) {
                    return self.misplaced(info);
                }
                if let Err(bits) = p.check_rdma(true, info.remote_addr, info.mem_handle, len) {
                    p.faults.push(Fault::RdmaWriteProtection);
                    self.replies.push(nack(info.msg_id + 1, bits));
                    return Offer::Placed;
                }
                if info.immediate.is_some() && p.recv_capacity().is_none() {
                    return self.no_descriptor();
                }
                let target = [Range {
                    addr: info.remote_addr,
                    len,
                }];
                scatter_pieces(&target, pieces);
                if info.immediate.is_some() {
                    let p = &mut *self.place;
                    p.recv_complete(len, info.immediate, true, 0);
                }
                Offer::Placed
            }
            ViaOp::RdmaReadRequest => {
                let mut req = [0u8; 16];
                let mut got = 0;
                for piece in pieces {
                    let s = piece.data;
                    let n = s.len().min(16 - got);
                    req[got..got + n].copy_from_slice(&s[..n]);
                    got += n;
                }
                if len != 16 {
                    STATS.malformed.fetch_add(1, Ordering::Relaxed);
                    return Offer::Placed;
                }
                let want = u64::from_be_bytes(req[..8].try_into().unwrap_or_default());
                let tag = u64::from_be_bytes(req[8..].try_into().unwrap_or_default());
                if let Err(bits) = p.check_rdma(false, info.remote_addr, info.mem_handle, want) {
                    p.faults.push(Fault::RdmaReadProtection);
                    self.replies.push(nack(tag, bits));
                    return Offer::Placed;
                }
                let data = local_data(
                    &[Range {
                        addr: info.remote_addr,
                        len: want,
                    }],
                    want,
                );
                self.replies.push(OutgoingMessage {
                    op: ViaOp::RdmaReadResponse,
                    immediate: None,
                    mem_handle: 0,
                    remote_addr: tag,
                    data: data.into(),
                });
                Offer::Placed
            }
            ViaOp::RdmaReadResponse => {
                let tag = info.remote_addr;
                if info.mem_handle == NACK_HANDLE {
                    p.remote_refused(tag, info.immediate.unwrap_or(status::TRANSPORT_ERROR));
                    return Offer::Placed;
                }
                match p.read_ranges(tag) {
                    Some(local) if ranges::total(local) >= len => {
                        let local = local.to_vec();
                        scatter_pieces(&local, pieces);
                        p.read_done(tag, 0);
                    }
                    Some(_) => p.read_done(tag, status::TRANSPORT_ERROR),
                    None => {
                        STATS.malformed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Offer::Placed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reused buffer is filled from the ranges alone: its old bytes
    /// never show, and what the ranges lack reads as zeros.
    #[test]
    fn gathering_into_a_reused_buffer_leaves_nothing_of_it() {
        let a: Vec<u8> = (1..=5).collect();
        let b: Vec<u8> = (10..17).collect();
        let ranges = [
            Range {
                addr: a.as_ptr() as u64,
                len: 5,
            },
            Range {
                addr: b.as_ptr() as u64,
                len: 7,
            },
        ];
        let old = vec![0xEE; 64];
        let got = gather_into(old, &ranges, 12);
        assert_eq!(got, [1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15, 16]);
        let got = gather_into(got, &ranges, 16);
        assert_eq!(&got[..12], [1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15, 16]);
        assert_eq!(&got[12..], [0, 0, 0, 0], "past the ranges: zeros");
        assert_eq!(gather_into(got, &ranges, 3), [1, 2, 3]);
    }
}
