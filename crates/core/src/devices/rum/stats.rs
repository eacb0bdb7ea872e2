//! Process-wide counters of the network devices (UDP, Ethernet): what was dropped and why, so
//! that garbage, truncated, replayed or spoofed datagrams are never silent.
//! Connections add their protocol counters when they close; read them with
//! [`stats`], or set `OPENVIA_UDP_STATS=1` to have each connection print
//! its counters to stderr when it closes.

use std::sync::atomic::{AtomicU64, Ordering};

use openvia_proto::Counters;

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// Live counters (atomics).
        pub struct Stats { $(pub $name: AtomicU64,)* }
        /// A snapshot of [`Stats`].
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct StatsSnapshot { $(pub $name: u64,)* }
        impl Stats {
            const fn new() -> Self { Self { $($name: AtomicU64::new(0),)* } }
            pub fn snapshot(&self) -> StatsSnapshot {
                StatsSnapshot { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }
    };
}

counters!(
    // Protocol (summed over closed connections).
    datagrams_received,
    parse_errors,
    wrong_conn_id,
    unexpected_packets,
    duplicate_segments,
    out_of_window,
    bogus_acks,
    protocol_violations,
    retransmissions,
    fast_retransmits,
    messages_dropped,
    // Data segments placed on arrival (direct placement).
    segments_placed,
    // Device.
    truncated,
    malformed,
    no_descriptor_drops,
    // Bytes placed on arrival that delivery found in another receive than
    // the message's (never expected; the VI fails rather than deliver).
    misplaced,
    auth_failures,
    // ICMP port unreachable reported on a VI's socket (the peer's process
    // gone, or a forgery a keyed connection survives).
    port_unreachable,
    replayed_requests,
    agent_garbage,
    agent_no_listener,
    agent_forwarded,
    // Ethernet device: frames of our EtherType from a MAC that is not the
    // connection's peer (a stray or forged sender), and resolution
    // requests answered.
    unknown_peer_frames,
    resolve_answered,
    // Ethernet device: connection links opened on each path.
    ether_packet_links,
    ether_xdp_links,
);

pub static STATS: Stats = Stats::new();

impl Stats {
    pub(crate) fn add_connection(&self, c: &Counters) {
        let add = |a: &AtomicU64, v: u64| {
            a.fetch_add(v, Ordering::Relaxed);
        };
        add(&self.datagrams_received, c.datagrams_received);
        add(&self.parse_errors, c.parse_errors);
        add(&self.wrong_conn_id, c.wrong_conn_id);
        add(&self.unexpected_packets, c.unexpected_packets);
        add(&self.duplicate_segments, c.duplicate_segments);
        add(&self.out_of_window, c.out_of_window);
        add(&self.bogus_acks, c.bogus_acks);
        add(&self.protocol_violations, c.protocol_violations);
        add(&self.retransmissions, c.retransmissions);
        add(&self.fast_retransmits, c.fast_retransmits);
        add(&self.messages_dropped, c.messages_dropped);
        add(&self.segments_placed, c.segments_placed);
    }
}

/// The device's counters so far in this process.
pub fn stats() -> StatsSnapshot {
    STATS.snapshot()
}
