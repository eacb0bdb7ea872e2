//! Outgoing datagrams of one flush, as a link sends them.
//!
//! The protocol writes each datagram's headers (and a small payload) into
//! one arena; a large payload stays where it is — the protocol's
//! retransmission buffer, or the application's registered memory — and is
//! named by address. A link sends each datagram as its parts
//! ([`TxBatch::datagrams`]), gathered, so the kernel's copy is the only
//! one between the message and the wire (the UDP device: iovecs, runs of
//! equal-sized datagrams as one GSO send, `udp::gso`).
//!
//! Under a cluster key each datagram ends with an authentication trailer
//! (`packet_auth`), written into the arena right after the headers and
//! sent after the payload by a third iovec.
//!
//! A payload named by address is valid only until the protocol next takes
//! an acknowledgement. What a flush could not send (socket buffer full)
//! therefore gets its payload copied into the arena before the flush
//! returns.

/// A payload sent from outside the arena: (address, length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outside {
    pub addr: u64,
    pub len: usize,
}

/// One queued datagram: `head` bytes in the arena, then `outside`, then
/// the `trailer` bytes that follow `head` in the arena.
#[derive(Clone, Copy, Debug)]
struct Item {
    head: usize,
    outside: Option<Outside>,
    trailer: usize,
}

impl Item {
    fn len(&self) -> usize {
        self.head + self.outside.map_or(0, |o| o.len) + self.trailer
    }

    /// Bytes the item takes in the arena.
    fn in_arena(&self) -> usize {
        self.head + self.trailer
    }
}

/// Datagrams queued for one send of a link's
/// ([`DatagramLink::send_batch`](super::link::DatagramLink::send_batch)). The arena keeps its length so
/// its tail is never zeroed again; `used` says how much holds datagrams.
#[derive(Default)]
pub struct TxBatch {
    arena: Vec<u8>,
    items: Vec<Item>,
    used: usize,
}

/// One queued datagram as a link sends it: `head`, then the payload
/// named by `outside` (if any), then `trailer`.
#[derive(Clone, Copy, Debug)]
pub struct TxDatagram<'a> {
    pub head: &'a [u8],
    pub outside: Option<Outside>,
    pub trailer: &'a [u8],
    /// `head` and `trailer`, adjacent in the arena: the whole datagram
    /// when `outside` is None.
    pub in_arena: &'a [u8],
}

impl<'a> TxDatagram<'a> {
    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        self.in_arena.len() + self.outside.map_or(0, |o| o.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload named outside the arena (empty if none).
    /// Borrowed for as long as the batch is (a link may gather several
    /// datagrams' parts before one send).
    pub fn outside_bytes(&self) -> &'a [u8] {
        match self.outside {
            // SAFETY: the protocol names memory it keeps in place (its
            // retransmission buffer, or registered application memory
            // under a posted descriptor) and takes no acknowledgement
            // while the flush that sends this batch runs, so the bytes
            // are there for as long as the batch is borrowed.
            Some(o) if o.len > 0 => unsafe {
                std::slice::from_raw_parts(o.addr as *const u8, o.len)
            },
            _ => &[],
        }
    }
}

impl TxBatch {
    /// The queued datagrams, in order.
    pub fn datagrams(&self) -> impl Iterator<Item = TxDatagram<'_>> {
        let mut off = 0;
        self.items.iter().map(move |item| {
            let in_arena = &self.arena[off..off + item.in_arena()];
            off += item.in_arena();
            TxDatagram {
                head: &in_arena[..item.head],
                outside: item.outside,
                trailer: &in_arena[item.head..],
                in_arena,
            }
        })
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Room for one more datagram's arena part of up to `max` bytes.
    pub fn tail(&mut self, max: usize) -> &mut [u8] {
        if self.arena.len() < self.used + max {
            self.arena.resize(self.used + max, 0);
        }
        &mut self.arena[self.used..self.used + max]
    }

    /// The datagram written into `tail` is `n` bytes long.
    pub fn commit(&mut self, n: usize) {
        self.commit_split(n, None);
    }

    /// The datagram is the `n` bytes written into `tail`, then `outside`.
    pub fn commit_split(&mut self, n: usize, outside: Option<Outside>) {
        self.commit_trailed(n, outside, 0);
    }

    /// As [`Self::commit_split`], with `trailer` bytes written into `tail`
    /// after the `n` (they go out after `outside`).
    pub fn commit_trailed(&mut self, n: usize, outside: Option<Outside>, trailer: usize) {
        self.used += n + trailer;
        self.items.push(Item {
            head: n,
            outside,
            trailer,
        });
    }

    /// Drops the first `n` datagrams (sent). The rest, kept for a later
    /// flush, take their payloads into the arena: by then the memory named
    /// may have been freed or reused.
    pub fn consume(&mut self, n: usize) {
        let sent: usize = self.items[..n].iter().map(Item::in_arena).sum();
        self.items.drain(..n);
        if !self.items.iter().any(|i| i.outside.is_some()) {
            self.arena.copy_within(sent..self.used, 0);
            self.used -= sent;
            return;
        }
        let total: usize = self.items.iter().map(Item::len).sum();
        let mut arena = Vec::with_capacity(total.max(self.arena.len()));
        let mut off = sent;
        for item in &mut self.items {
            arena.extend_from_slice(&self.arena[off..off + item.head]);
            off += item.head;
            let trailer = &self.arena[off..off + item.trailer];
            off += item.trailer;
            if let Some(o) = item.outside.take() {
                let at = arena.len();
                arena.resize(at + o.len, 0);
                // SAFETY: `o` was named by the protocol during the flush
                // that is still running; it takes no acknowledgement before
                // the flush ends, so the bytes are still in place.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        o.addr as *const u8,
                        arena[at..].as_mut_ptr(),
                        o.len,
                    )
                };
                item.head += o.len;
            }
            arena.extend_from_slice(trailer);
            item.head += item.trailer;
            item.trailer = 0;
        }
        self.used = arena.len();
        let keep = self.arena.len().max(self.used);
        arena.resize(keep, 0);
        self.arena = arena;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_datagrams_take_their_payloads_in() {
        let payload: Vec<u8> = (0..100u8).collect();
        let mut tx = TxBatch::default();
        for k in 0..3u8 {
            let t = tx.tail(64);
            t[..4].fill(k);
            let outside = (k != 1).then(|| Outside {
                addr: payload[k as usize * 10..].as_ptr() as u64,
                len: 10,
            });
            tx.commit_split(4, outside);
        }
        tx.consume(1);
        assert_eq!(tx.len(), 2);
        // Datagram 1 (inline) then datagram 2 with its payload copied in.
        let mut want = vec![1u8; 4];
        want.extend_from_slice(&[2u8; 4]);
        want.extend_from_slice(&payload[20..30]);
        assert_eq!(&tx.arena[..tx.used], &want[..]);
        assert!(tx.items.iter().all(|i| i.outside.is_none()));
        assert_eq!(tx.items[1].len(), 14);
    }
}
