//! Segment sizing, after M-VIA's policies (seed 000): a message is cut into
//! segments of one size per connection, chosen from the path MTU.
//!
//! - `Fixed`: fill the MTU: MTU − IP/UDP header − RUM data header
//!   (M-VIA's 1472-byte unit on a 1500-byte Ethernet frame).
//! - `PageAligned`: one segment per 4 KiB page, so a page-aligned buffer is
//!   never split across two datagrams; needs MTU ≥ 4096 + overhead
//!   ([`page_aligned_mtu`]). With a smaller MTU the largest power-of-two
//!   fraction of a page that fits is used, so segments still never straddle
//!   a page boundary.
//! - `LargestThatFits`: the largest UDP datagram, whatever the MTU; the
//!   kernel fragments it or UDP GSO cuts it, trading per-packet loss
//!   granularity for the fewest protocol operations.

use openvia_wire::rum::{DATA_OVERHEAD, MAX_DATAGRAM};

/// IPv4 header (20) plus UDP header (8).
pub const IPV4_UDP_OVERHEAD: usize = 28;
/// IPv6 header (40) plus UDP header (8).
pub const IPV6_UDP_OVERHEAD: usize = 48;
/// The page size the page-aligned policy cuts at.
pub const PAGE_SIZE: usize = 4096;

/// How the segment payload size follows from the MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentPolicy {
    Fixed,
    PageAligned,
    LargestThatFits,
}

/// Why no segment size could be derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    #[error("MTU {mtu} leaves no room for data after {overhead} bytes of headers")]
    MtuTooSmall { mtu: usize, overhead: usize },
}

/// Payload bytes per segment for `mtu`, with `ip_overhead` bytes of IP and
/// UDP headers ([`IPV4_UDP_OVERHEAD`] or [`IPV6_UDP_OVERHEAD`]).
pub fn segment_size(
    mtu: usize,
    ip_overhead: usize,
    policy: SegmentPolicy,
) -> Result<usize, SegmentError> {
    let overhead = ip_overhead + DATA_OVERHEAD;
    let max_udp_payload = MAX_DATAGRAM - DATA_OVERHEAD;
    let fill = mtu
        .checked_sub(overhead)
        .filter(|&n| n > 0)
        .ok_or(SegmentError::MtuTooSmall { mtu, overhead })?
        .min(max_udp_payload);
    Ok(match policy {
        SegmentPolicy::Fixed => fill,
        SegmentPolicy::PageAligned => {
            let mut size = PAGE_SIZE;
            while size > fill {
                size /= 2;
            }
            if size == 0 {
                return Err(SegmentError::MtuTooSmall { mtu, overhead });
            }
            size
        }
        SegmentPolicy::LargestThatFits => max_udp_payload,
    })
}

/// The MTU at which the page-aligned policy carries a whole page.
pub fn page_aligned_mtu(ip_overhead: usize) -> usize {
    PAGE_SIZE + ip_overhead + DATA_OVERHEAD
}

/// Segments a message of `len` bytes needs (an empty message takes one).
pub fn segments_for(len: usize, segment_size: usize) -> usize {
    len.div_ceil(segment_size.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies() {
        let v4 = IPV4_UDP_OVERHEAD;
        assert_eq!(
            segment_size(1500, v4, SegmentPolicy::Fixed),
            Ok(1500 - 28 - 64)
        );
        assert_eq!(segment_size(9000, v4, SegmentPolicy::Fixed), Ok(8908));
        assert_eq!(
            segment_size(page_aligned_mtu(v4), v4, SegmentPolicy::PageAligned),
            Ok(4096)
        );
        assert_eq!(segment_size(9000, v4, SegmentPolicy::PageAligned), Ok(4096));
        assert_eq!(segment_size(1500, v4, SegmentPolicy::PageAligned), Ok(1024));
        assert_eq!(
            segment_size(1500, v4, SegmentPolicy::LargestThatFits),
            Ok(65507 - 64)
        );
        assert!(segment_size(80, v4, SegmentPolicy::Fixed).is_err());
        assert!(segment_size(65535, IPV6_UDP_OVERHEAD, SegmentPolicy::Fixed).is_ok());
        assert_eq!(segments_for(0, 1408), 1);
        assert_eq!(segments_for(1408, 1408), 1);
        assert_eq!(segments_for(1409, 1408), 2);
    }
}
