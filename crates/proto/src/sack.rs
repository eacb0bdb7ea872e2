//! Sequence numbers and selective acknowledgement. Internally every
//! sequence number is a u64 that never wraps; the wire carries its low 32
//! bits, and [`expand`] recovers the full value as the one nearest to a
//! reference the receiver already knows (windows are far below 2^31, so the
//! nearest is the only candidate). SACK blocks describe received segments
//! beyond the cumulative ack so the sender retransmits only the holes.

use openvia_wire::rum::{AckRepr, SackBlock};

/// The u64 sequence number whose low 32 bits are `wire`, nearest to `reference`.
pub fn expand(reference: u64, wire: u32) -> u64 {
    let candidate = (reference & !0xFFFF_FFFF) | wire as u64;
    let half = 1u64 << 31;
    if candidate + half < reference {
        candidate + (1 << 32)
    } else if candidate > reference + half && candidate >= 1 << 32 {
        candidate - (1 << 32)
    } else {
        candidate
    }
}

/// Builds an ACK body from runs of received sequence numbers.
#[derive(Debug)]
pub struct SackBuilder {
    ack: AckRepr,
    run: Option<(u64, u64)>,
    /// Blocks the datagram has room for.
    limit: usize,
}

impl Default for SackBuilder {
    fn default() -> Self {
        Self::with_limit(openvia_wire::rum::MAX_SACK_BLOCKS)
    }
}

impl SackBuilder {
    /// A builder of at most `limit` blocks (capped at the wire's maximum).
    pub fn with_limit(limit: usize) -> Self {
        Self {
            ack: AckRepr::default(),
            run: None,
            limit: limit.min(openvia_wire::rum::MAX_SACK_BLOCKS),
        }
    }

    /// Feed received sequence numbers in increasing order.
    pub fn add(&mut self, seq: u64) {
        match &mut self.run {
            Some((_, end)) if *end == seq => *end += 1,
            _ => {
                self.flush();
                self.run = Some((seq, seq + 1));
            }
        }
    }
    /// Feed the run `start..end` (after every sequence number fed so far).
    pub fn add_run(&mut self, start: u64, end: u64) {
        match &mut self.run {
            Some((_, e)) if *e == start => *e = end,
            _ => {
                self.flush();
                self.run = Some((start, end));
            }
        }
    }
    fn flush(&mut self) {
        if let Some((s, e)) = self.run.take() {
            self.ack.push(SackBlock {
                start: s as u32,
                end: e as u32,
            });
        }
    }
    /// Whether `seq` (the next in increasing order) still fits: it extends
    /// the open run, or a new block has room.
    pub fn accepts(&self, seq: u64) -> bool {
        match self.run {
            Some((_, end)) if end == seq => true,
            open => self.ack.blocks().len() + usize::from(open.is_some()) < self.limit,
        }
    }
    pub fn finish(mut self) -> AckRepr {
        self.flush();
        self.ack
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_near_reference() {
        assert_eq!(expand(0, 5), 5);
        assert_eq!(expand(10, 3), 3);
        assert_eq!(expand(0xFFFF_FFF0, 2), 0x1_0000_0002);
        assert_eq!(expand(0x1_0000_0002, 0xFFFF_FFF0), 0xFFFF_FFF0);
        assert_eq!(expand(5, 0xFFFF_FFFF), 0xFFFF_FFFF); // no negative values
    }

    #[test]
    fn builder_runs() {
        let mut b = SackBuilder::default();
        for s in [3, 4, 5, 9, 11, 12] {
            b.add(s);
        }
        let a = b.finish();
        let spans: Vec<_> = a.blocks().iter().map(|b| (b.start, b.end)).collect();
        assert_eq!(spans, vec![(3, 6), (9, 10), (11, 13)]);
    }

    #[test]
    fn builder_stops_at_its_limit() {
        let mut b = SackBuilder::with_limit(2);
        for s in [1, 2, 4, 5, 7, 9] {
            if !b.accepts(s) {
                break;
            }
            b.add(s);
        }
        let spans: Vec<_> = b
            .finish()
            .blocks()
            .iter()
            .map(|b| (b.start, b.end))
            .collect();
        assert_eq!(spans, vec![(1, 3), (4, 6)]);
    }
}
