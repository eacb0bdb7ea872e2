//! Receive buffers a link fills in one call: up to [`RX_BATCH`] buffers,
//! each holding one datagram or, where the link glues a burst together
//! (UDP's GRO), several of one segment size.

/// Most buffers one receive fills.
pub const RX_BATCH: usize = 16;

/// Buffers for a link's
/// [`recv_batch`](super::link::DatagramLink::recv_batch). One buffer is
/// made at first and the rest when a receive first asks for more
/// ([`RxBatch::ready`]): a connection that never batches (request and
/// answer, a short connection) holds one buffer (64 KiB where the link
/// glues bursts), not sixteen.
pub struct RxBatch {
    pub bufs: Vec<Vec<u8>>,
    buf_len: usize,
    /// (bytes, segment size or 0) per filled buffer: a segment size says
    /// the buffer holds datagrams of that size one after the other (the
    /// last may be shorter).
    pub lens: Vec<(usize, usize)>,
    /// The datagram was longer than its buffer (it is dropped and counted).
    pub truncated: Vec<bool>,
    /// Room a link may use for what comes with the datagrams (UDP: the
    /// control messages that carry GRO's segment size).
    pub control: Vec<u64>,
}

impl RxBatch {
    pub fn new(buf_len: usize) -> Self {
        Self {
            bufs: vec![vec![0u8; buf_len]],
            buf_len,
            lens: vec![(0, 0); RX_BATCH],
            truncated: vec![false; RX_BATCH],
            control: Vec::new(),
        }
    }

    /// Makes sure there are at least `n` buffers (at most [`RX_BATCH`]).
    pub fn ready(&mut self, n: usize) {
        let n = n.min(RX_BATCH);
        while self.bufs.len() < n {
            self.bufs.push(vec![0u8; self.buf_len]);
        }
    }

    /// The datagrams in buffer `k` (a GRO buffer holds several).
    pub fn datagrams(&self, k: usize) -> impl Iterator<Item = &[u8]> {
        let (len, seg) = self.lens[k];
        let data = &self.bufs[k][..len];
        let step = if seg == 0 { len.max(1) } else { seg };
        data.chunks(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One buffer until a receive asks for a batch; never more than
    /// RX_BATCH, each of the length asked at the start.
    #[test]
    fn buffers_are_made_when_a_batch_is_first_asked_for() {
        let mut rx = RxBatch::new(65_536);
        assert_eq!(rx.bufs.len(), 1);
        rx.ready(1);
        assert_eq!(rx.bufs.len(), 1);
        rx.ready(4);
        assert_eq!(rx.bufs.len(), 4);
        rx.ready(100);
        assert_eq!(rx.bufs.len(), RX_BATCH);
        assert!(rx.bufs.iter().all(|b| b.len() == 65_536));
    }
}
