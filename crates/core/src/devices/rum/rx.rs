//! Receive buffers a link fills in one call: up to [`RX_BATCH`] buffers,
//! each holding one datagram or, where the link glues a burst together
//! (UDP's GRO), several of one segment size.

/// Most buffers one receive fills.
pub const RX_BATCH: usize = 16;

/// Buffers for a link's
/// [`recv_batch`](super::link::DatagramLink::recv_batch).
pub struct RxBatch {
    pub bufs: Vec<Vec<u8>>,
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
            bufs: (0..RX_BATCH).map(|_| vec![0u8; buf_len]).collect(),
            lens: vec![(0, 0); RX_BATCH],
            truncated: vec![false; RX_BATCH],
            control: Vec::new(),
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
