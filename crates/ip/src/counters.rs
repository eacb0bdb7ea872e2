//! Counters of an interface and of each peer, shared between the threads
//! that move packets and the control socket that reports them.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a packet was dropped; each reason has its own counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop {
    /// No peer holds the destination address.
    NoRoute,
    /// The peer's link is down (not connected yet, or gone).
    PeerDown,
    /// The peer's send queue stayed full.
    QueueFull,
    /// Larger than the link carries.
    TooBig,
    /// Not a consistent IPv4 packet (from the kernel or a peer).
    Malformed,
    /// Not IPv4.
    Unsupported,
    /// The kernel refused a received packet.
    TunWrite,
}

const DROPS: [(Drop, &str); 7] = [
    (Drop::NoRoute, "no_route"),
    (Drop::PeerDown, "peer_down"),
    (Drop::QueueFull, "queue_full"),
    (Drop::TooBig, "too_big"),
    (Drop::Malformed, "malformed"),
    (Drop::Unsupported, "unsupported"),
    (Drop::TunWrite, "tun_write"),
];

/// Packets and bytes each way, and drops by reason.
#[derive(Default, Debug)]
pub struct Counters {
    pub tx_packets: AtomicU64,
    pub tx_bytes: AtomicU64,
    /// TCP super-packets from the TUN's segmentation offload: sent as such
    /// (connected mode), or cut into the packets counted (datagram mode).
    pub tx_gso: AtomicU64,
    pub rx_packets: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub rx_gso: AtomicU64,
    drops: [AtomicU64; 7],
}

impl Counters {
    /// A packet of `bytes` sent (`gso`: a super-packet).
    pub fn sent(&self, bytes: usize, gso: bool) {
        self.tx_packets.fetch_add(1, Ordering::Relaxed);
        self.tx_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        if gso {
            self.tx_gso.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A super-packet cut into segments before sending (datagram mode),
    /// each counted as sent on its own.
    pub fn cut(&self) {
        self.tx_gso.fetch_add(1, Ordering::Relaxed);
    }

    pub fn received(&self, bytes: usize, gso: bool) {
        self.rx_packets.fetch_add(1, Ordering::Relaxed);
        self.rx_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        if gso {
            self.rx_gso.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn drop(&self, why: Drop) {
        let i = DROPS.iter().position(|(d, _)| *d == why).unwrap_or(0);
        self.drops[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn dropped(&self, why: Drop) -> u64 {
        let i = DROPS.iter().position(|(d, _)| *d == why).unwrap_or(0);
        self.drops[i].load(Ordering::Relaxed)
    }

    /// `rx packets N bytes N gso N  tx ...  drops reason=N ...` (only the
    /// reasons that happened).
    pub fn render(&self) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut s = format!(
            "rx packets {} bytes {} gso {}  tx packets {} bytes {} gso {}  drops",
            get(&self.rx_packets),
            get(&self.rx_bytes),
            get(&self.rx_gso),
            get(&self.tx_packets),
            get(&self.tx_bytes),
            get(&self.tx_gso)
        );
        let mut any = false;
        for (i, (_, name)) in DROPS.iter().enumerate() {
            let n = get(&self.drops[i]);
            if n > 0 {
                any = true;
                let _ = write!(s, " {name}={n}");
            }
        }
        if !any {
            s.push_str(" 0");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_reasons_that_happened() {
        let c = Counters::default();
        c.sent(100, false);
        c.sent(60000, true);
        c.drop(Drop::PeerDown);
        c.drop(Drop::PeerDown);
        c.drop(Drop::Malformed);
        let s = c.render();
        assert!(s.contains("tx packets 2 bytes 60100 gso 1"), "{s}");
        assert!(s.contains("peer_down=2"), "{s}");
        assert!(s.contains("malformed=1"), "{s}");
        assert!(!s.contains("no_route"), "{s}");
        assert_eq!(c.dropped(Drop::PeerDown), 2);
    }
}
