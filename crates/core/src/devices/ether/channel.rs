//! The Ethernet device's channel: the RUM channel ([`RumChannel`]) over a
//! [`FrameLink`], one per connected VI.
//!
//! A `FrameLink` turns the RUM datagrams the channel sends into frames of
//! our EtherType (`openvia_wire::ether`: a compact header for DATA, a
//! 4-byte prefix before any other packet), each gathered from the frame
//! header, the datagram's headers and its payload where it lies, and
//! sends a flush's frames in one call of its [`FrameIo`] (AF_PACKET or
//! AF_XDP). It receives only frames for its own connection id (the
//! kernel filter of its `FrameIo`) and keeps only those from its peer's
//! MAC; each is copied once into a receive buffer, placed so that the
//! compact header expands into the RUM headers in front of the payload
//! without moving it. Frames from another MAC, for another id, or that do
//! not parse are dropped and counted (`rum::stats`).
//!
//! No error of the medium means the peer is gone (there is no ICMP here):
//! a dead peer is found by the protocol's keepalive and dead-peer timeout.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use openvia_wire::ether;

use super::ids::IdClaim;
use crate::devices::rum::channel::RumChannel;
use crate::devices::rum::link::DatagramLink;
use crate::devices::rum::rx::RxBatch;
use crate::devices::rum::stats::STATS;
use crate::devices::rum::tx::TxBatch;
use crate::sys::frames::{FrameIo, Mac};

/// A connected VI on the Ethernet device.
pub type EtherChannel = RumChannel<FrameLink>;

/// Bytes of RUM and DATA header: what `ether::encode` reads of a datagram.
const RUM_DATA_HEAD: usize = openvia_wire::rum::HEADER_LEN + openvia_wire::rum::DATA_HEADER_LEN;

/// One connection's frames: its id's receive path and its peer's MAC.
pub struct FrameLink {
    io: Box<dyn FrameIo>,
    peer: Mac,
    /// The connection id this link receives (held until the link drops).
    claim: IdClaim,
}

impl FrameLink {
    /// A link receiving frames for `claim`'s id through `io` and sending
    /// to `peer`. `io` should already filter on the id (the kernel does
    /// it cheaper); the link checks again.
    pub fn new(io: Box<dyn FrameIo>, peer: Mac, claim: IdClaim) -> Self {
        Self { io, peer, claim }
    }

    pub fn local_id(&self) -> u16 {
        self.claim.id()
    }

    pub fn peer_mac(&self) -> Mac {
        self.peer
    }

    /// The medium's MTU: the largest frame payload.
    pub fn mtu(&self) -> usize {
        self.io.mtu()
    }
}

/// Counts a datagram the frame header could not be written for (the
/// protocol wrote it, so this is a bug, never the peer's doing); it is
/// dropped as if lost on the wire.
fn unsendable(e: ether::EtherError) {
    STATS.malformed.fetch_add(1, Ordering::Relaxed);
    if std::env::var_os("OPENVIA_DEBUG").is_some() {
        eprintln!("openvia ether: datagram not sent: {e}");
    }
}

impl DatagramLink for FrameLink {
    fn send(&mut self, datagram: &[u8]) -> io::Result<usize> {
        let head = match ether::encode(
            &datagram[..datagram.len().min(RUM_DATA_HEAD)],
            datagram.len(),
        ) {
            Ok(h) => h,
            Err(e) => {
                unsendable(e);
                return Ok(1);
            }
        };
        let parts: [&[u8]; 2] = [head.bytes(), &datagram[head.rum_skip()..]];
        self.io.send(self.peer, &[&parts])
    }

    fn send_batch(&mut self, tx: &TxBatch) -> io::Result<usize> {
        // Frame headers first (the parts borrow them), then the parts.
        let mut heads = Vec::with_capacity(tx.len());
        for d in tx.datagrams() {
            heads.push(ether::encode(
                &d.head[..d.head.len().min(RUM_DATA_HEAD)],
                d.len(),
            ));
        }
        let mut parts: Vec<[&[u8]; 4]> = Vec::with_capacity(tx.len());
        // Leading datagrams that could not be framed count as sent; one
        // later in the batch ends it, to be skipped when it leads.
        let mut skipped_at_front = 0;
        for (d, head) in tx.datagrams().zip(&heads) {
            match head {
                Ok(h) => {
                    let skip = h.rum_skip();
                    // A compact header stands for the 64 header bytes; the
                    // payload follows them in `head` or lies outside.
                    let rest: &[u8] = d.head.get(skip..).unwrap_or(&[]);
                    parts.push([h.bytes(), rest, d.outside_bytes(), d.trailer]);
                }
                Err(e) if parts.is_empty() => {
                    unsendable(*e);
                    skipped_at_front += 1;
                }
                Err(_) => break,
            }
        }
        if parts.is_empty() {
            return Ok(skipped_at_front);
        }
        let frames: Vec<&[&[u8]]> = parts.iter().map(|p| &p[..]).collect();
        let sent = self.io.send(self.peer, &frames)?;
        Ok(skipped_at_front + sent)
    }

    fn recv_batch(&mut self, rx: &mut RxBatch, max: usize) -> io::Result<usize> {
        let (peer, id) = (self.peer, self.claim.id());
        let mut k = 0;
        rx.ready(max);
        let max = max.min(rx.bufs.len());
        // Frames refused below are taken from the medium all the same, so
        // ask for as many as could fill the batch and stop when it is full.
        self.io.recv(max, &mut |src, frame| {
            if k >= max {
                return;
            }
            if src != peer {
                STATS.unknown_peer_frames.fetch_add(1, Ordering::Relaxed);
                return;
            }
            match ether::peek(frame) {
                Ok((dst, _)) if dst == id => {}
                Ok(_) => {
                    STATS.wrong_conn_id.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(_) => {
                    STATS.malformed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
            let at = ether::expand_headroom(frame);
            let buf = &mut rx.bufs[k];
            if at + frame.len() > buf.len() {
                rx.truncated[k] = true;
                rx.lens[k] = (0, 0);
                k += 1;
                return;
            }
            buf[at..at + frame.len()].copy_from_slice(frame);
            match ether::expand_in_place(buf, at, frame.len()) {
                Ok(r) => {
                    if r.start != 0 {
                        // A verbatim packet (not DATA): small, moved to 0.
                        buf.copy_within(r.clone(), 0);
                    }
                    rx.truncated[k] = false;
                    rx.lens[k] = (r.len(), 0);
                    k += 1;
                }
                Err(_) => {
                    STATS.malformed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })?;
        Ok(k)
    }

    fn wait_readable(&self, timeout: Duration) -> bool {
        self.io.wait_readable(timeout)
    }

    fn raw_fd(&self) -> RawFd {
        self.io.raw_fd()
    }

    /// A frame medium reports no peer's death: the keepalive and the
    /// dead-peer timeout find it.
    fn peer_gone(&self, _e: &io::Error) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::rum::tx::Outside;
    use openvia_wire::rum::{Body, DataRepr, HeaderRepr, Repr, ViaOp};

    /// Frames sent are kept; `recv` hands back those queued in `inbox`.
    struct Loop {
        sent: Vec<(Mac, Vec<u8>)>,
        inbox: Vec<(Mac, Vec<u8>)>,
    }

    impl FrameIo for Loop {
        fn local_mac(&self) -> Mac {
            [2, 0, 0, 0, 0, 1]
        }
        fn mtu(&self) -> usize {
            1500
        }
        fn send(&mut self, dst: Mac, frames: &[&[&[u8]]]) -> io::Result<usize> {
            for parts in frames {
                self.sent.push((dst, parts.concat()));
            }
            Ok(frames.len())
        }
        fn recv(&mut self, max: usize, each: &mut dyn FnMut(Mac, &[u8])) -> io::Result<usize> {
            let n = max.min(self.inbox.len());
            for (src, f) in self.inbox.drain(..n) {
                each(src, &f);
            }
            Ok(n)
        }
        fn raw_fd(&self) -> RawFd {
            -1
        }
        fn wait_readable(&self, _: Duration) -> bool {
            !self.inbox.is_empty()
        }
    }

    const PEER: Mac = [2, 0, 0, 0, 0, 2];

    fn data(conn_id: u64, payload: &[u8], offset: u32, total: u32) -> Vec<u8> {
        let header = HeaderRepr {
            conn_id,
            ack_request: false,
            seq: 7,
            ack: 3,
            consumed: 2,
            window: 100,
        };
        let d = DataRepr {
            msg_id: 5,
            offset,
            total_len: total,
            op: ViaOp::Send,
            immediate: None,
            mem_handle: 0,
            remote_addr: 0,
            payload,
        };
        let r = Repr {
            header,
            body: Body::Data(d),
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        buf
    }

    fn link(id: u16) -> (FrameLink, *mut Loop) {
        let mut io = Box::new(Loop {
            sent: Vec::new(),
            inbox: Vec::new(),
        });
        let raw: *mut Loop = &mut *io;
        let claim = loop {
            // A made-up interface index, away from real ones.
            if let Some(c) = super::super::ids::claim_exact(-11, id).unwrap() {
                break c;
            }
        };
        (FrameLink::new(io, PEER, claim), raw)
    }

    #[test]
    fn gathered_sends_arrive_as_the_same_datagrams_and_strangers_are_counted() {
        let (mut link, io) = link(40_001);
        let payload: Vec<u8> = (0..1200u32).map(|i| i as u8).collect();
        // A batch: one datagram whole in the arena, one with its payload
        // named outside (a segment of a longer message).
        let whole = data(40_001, &payload[..100], 0, 100);
        let seg = data(40_001, &payload, 2400, 9000);
        let mut tx = TxBatch::default();
        let t = tx.tail(whole.len());
        t.copy_from_slice(&whole);
        tx.commit(whole.len());
        let t = tx.tail(64);
        t.copy_from_slice(&seg[..64]);
        tx.commit_split(
            64,
            Some(Outside {
                addr: payload.as_ptr() as u64,
                len: payload.len(),
            }),
        );
        assert_eq!(link.send_batch(&tx).unwrap(), 2);
        // SAFETY: the box lives inside `link`, which is alive; no other
        // reference to it is in use.
        let io = unsafe { &mut *io };
        assert_eq!(io.sent.len(), 2);
        assert!(io.sent.iter().all(|(dst, _)| *dst == PEER));
        // Compact headers: 26 bytes for the whole message, 34 the segment.
        assert_eq!(io.sent[0].1.len(), 26 + 100);
        assert_eq!(io.sent[1].1.len(), 34 + 1200);
        // Back in: the two frames from the peer, one from a stranger, one
        // for another id, one that does not parse.
        let before = STATS.snapshot();
        let frames: Vec<_> = io.sent.drain(..).map(|(_, f)| f).collect();
        io.inbox.push((PEER, frames[0].clone()));
        io.inbox.push(([2, 0, 0, 0, 0, 9], frames[0].clone()));
        let mut other = frames[1].clone();
        other[1] ^= 1;
        io.inbox.push((PEER, other));
        io.inbox.push((PEER, vec![0x9c, 0x41, 1, 0]));
        io.inbox.push((PEER, frames[1].clone()));
        let mut rx = RxBatch::new(link.rx_buffer_len(2048));
        let n = link.recv_batch(&mut rx, 16).unwrap();
        assert_eq!(n, 2);
        assert_eq!(rx.datagrams(0).next().unwrap(), &whole[..]);
        assert_eq!(rx.datagrams(1).next().unwrap(), &seg[..]);
        let after = STATS.snapshot();
        assert!(after.unknown_peer_frames > before.unknown_peer_frames);
        assert!(after.wrong_conn_id > before.wrong_conn_id);
        assert!(after.malformed > before.malformed);
    }
}
