//! Every `OPENVIA_*` environment setting of the project, in one table:
//! its name, default, the part it governs and what it does. `viainfo`
//! prints it with the values in force; docs/settings.md and the
//! openvia-settings(7) man page are generated from it, and tests check
//! that they match it and that the source tree reads no `OPENVIA_*`
//! variable the table lacks (so code, tool and docs cannot drift).
//!
//! The readers stay where the setting is used ([`crate::config`],
//! `devices::udp`, the PVM crates, viabench); adding a setting means one
//! row here.

/// The part of the project a setting governs (a section of the docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Limits and diagnostics of every NIC, whatever its device.
    Nic,
    /// How Waits spin and sleep, and the progress thread.
    Wait,
    /// The shared-memory device `/dev/via_lo`.
    SharedMemory,
    /// The network device `/dev/via_<ifname>`, `/dev/via_udp`.
    Udp,
    /// The PVM daemon and task library.
    Pvm,
    /// viabench.
    Bench,
    /// The project's own tests.
    Tests,
}

impl Scope {
    pub const ALL: [Scope; 7] = [
        Scope::Nic,
        Scope::Wait,
        Scope::SharedMemory,
        Scope::Udp,
        Scope::Pvm,
        Scope::Bench,
        Scope::Tests,
    ];

    /// Short name, as in `viainfo --json`.
    pub fn key(self) -> &'static str {
        match self {
            Scope::Nic => "nic",
            Scope::Wait => "wait",
            Scope::SharedMemory => "shm",
            Scope::Udp => "udp",
            Scope::Pvm => "pvm",
            Scope::Bench => "bench",
            Scope::Tests => "tests",
        }
    }

    /// Heading of the scope's section in the docs.
    pub fn title(self) -> &'static str {
        match self {
            Scope::Nic => "Every NIC (both devices)",
            Scope::Wait => "Waiting and progress (both devices)",
            Scope::SharedMemory => "Shared-memory device (/dev/via_lo)",
            Scope::Udp => "Network devices (/dev/via_<ifname>, /dev/via_udp; the OPENVIA_UDP_* protocol settings also govern the Ethernet device)",
            Scope::Pvm => "PVM (pvmd, libpvm3)",
            Scope::Bench => "viabench",
            Scope::Tests => "The project's tests",
        }
    }
}

/// One environment setting.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    pub name: &'static str,
    /// The value in force when the variable is unset, as a user would
    /// write it (sizes take K and M suffixes where the reader accepts them).
    pub default: &'static str,
    pub scope: Scope,
    pub doc: &'static str,
}

const fn s(name: &'static str, default: &'static str, scope: Scope, doc: &'static str) -> Setting {
    Setting {
        name,
        default,
        scope,
        doc,
    }
}

/// The table. Values are read once per process.
#[rustfmt::skip]
pub const SETTINGS: &[Setting] = &[
    s("OPENVIA_MAX_VI", "4096", Scope::Nic,
      "Most VIs one NIC may have at once (1..1048576); VipQueryNic reports it and the next VipCreateVi fails with VIP_ERROR_RESOURCE."),
    s("OPENVIA_DEBUG", "0", Scope::Nic,
      "1: without an error callback, also print lost connections (a peer that exited) on stderr; by default only other asynchronous errors are printed."),
    s("OPENVIA_SPIN_NS", "50000", Scope::Wait,
      "How long a Wait spins (polling memory) before it blocks, in ns; 0 blocks at once."),
    s("OPENVIA_BLOCK_CAP_MS", "50", Scope::Wait,
      "Longest single sleep of a Wait, in ms: a safety net against a lost wake-up (the tests raise it so that one would show as a hang)."),
    s("OPENVIA_PROGRESS_US", "20000", Scope::Wait,
      "How often the progress thread looks in while the program is busy polling, in µs (a program blocking in a Wait wakes it at once)."),
    s("OPENVIA_NO_MEMBARRIER", "unset", Scope::Wait,
      "Set to anything: do not use membarrier(2) for the sleeper's fence (a full fence on every publish instead)."),
    s("OPENVIA_INLINE_MAX", "16K", Scope::SharedMemory,
      "Messages up to this size travel inside one ring record (two copies)."),
    s("OPENVIA_CHUNK_BYTES", "16K", Scope::SharedMemory,
      "Larger messages stream through the ring in chunks of this size (at least 4K, at most a quarter ring)..."),
    s("OPENVIA_CMA_MIN", "1M", Scope::SharedMemory,
      "...up to this size; from here on one copy with process_vm_readv/writev (CMA), both processes copying pieces of it at once."),
    s("OPENVIA_CMA_PIECE", "32K", Scope::SharedMemory,
      "A CMA message is copied by both processes at once in pieces of at least this size (at least 16K; at most eight pieces), the sender taking pieces while it runs; 0: the receiver copies alone."),
    s("OPENVIA_RING_SLOW_GBPS", "6", Scope::SharedMemory,
      "A message that streams through the ring slower than this (GB/s) counts as slow; after two in a row, messages above OPENVIA_INLINE_MAX go by CMA until the ring runs fast again (one in 16 still tries the ring). 0: never."),
    s("OPENVIA_RING_BYTES", "1M", Scope::SharedMemory,
      "Bytes of each ring direction (rounded up to a power of two, 64K..256M)."),
    s("OPENVIA_CMA", "1", Scope::SharedMemory,
      "0 turns CMA off: everything streams through the ring."),
    s("OPENVIA_NET_DEVICE", "udp", Scope::Udp,
      "Which device /dev/via_<ifname> opens: udp; ether (raw Ethernet frames, needs CAP_NET_RAW: without it VipOpenNic fails with VIP_ERROR_RESOURCE naming it); auto (ether when the process has CAP_NET_RAW and the interface is not loopback, else udp). /dev/via_udp is always UDP."),
    s("OPENVIA_ETHER_PATH", "packet", Scope::Udp,
      "How the Ethernet device's connections reach the wire: packet (AF_PACKET, CAP_NET_RAW), xdp (AF_XDP, also CAP_BPF and CAP_NET_ADMIN; one connection per interface on the host, MTU at most 3826), auto (AF_XDP while it can be had, else AF_PACKET)."),
    s("OPENVIA_AGENT_PORT", "7250", Scope::Udp,
      "UDP port of the per-host connection agent."),
    s("OPENVIA_UDP_BIND", "first non-loopback address", Scope::Udp,
      "Address the generic /dev/via_udp binds to."),
    s("OPENVIA_CLUSTER_KEY", "none", Scope::Udp,
      "File with a key (at least 16 bytes, the same on every host) that authenticates every datagram: HMAC-SHA256 on handshakes, a GMAC trailer on every later packet."),
    s("OPENVIA_UDP_MTU", "the interface's", Scope::Udp,
      "MTU to assume instead of the interface's."),
    s("OPENVIA_UDP_SEGMENT", "fixed", Scope::Udp,
      "Segment policy: fixed, page, largest, or a segment size in bytes (also the Ethernet device's, where largest = fixed: a frame holds at most the MTU)."),
    s("OPENVIA_UDP_FLOW", "hetero", Scope::Udp,
      "RUM flow-control mode: hetero or homo."),
    s("OPENVIA_UDP_LOSSLESS", "0", Scope::Udp,
      "1: flow-control-only mode (no retransmission; for a lossless network)."),
    s("OPENVIA_UDP_WINDOW", "8 MiB of segments, at least 1024", Scope::Udp,
      "Receive window in segments (raised to hold one largest message)."),
    s("OPENVIA_UDP_INFLIGHT", "2097152", Scope::Udp,
      "Bytes a sender keeps in flight at most for 100 ms after loss detection found a hole (0: the window alone)."),
    s("OPENVIA_UDP_GSO", "1", Scope::Udp,
      "0 turns UDP generic segmentation offload off."),
    s("OPENVIA_UDP_GRO", "1", Scope::Udp,
      "0 turns UDP generic receive offload off."),
    s("OPENVIA_UDP_COPY_SENDS", "0", Scope::Udp,
      "1: copy large sends at post instead of reading them in place until acknowledged."),
    s("OPENVIA_UDP_DIRECT", "1", Scope::Udp,
      "0: buffer received data in the protocol and copy it at delivery, instead of placing data that arrives in order straight into the posted receive."),
    s("OPENVIA_UDP_ACK_EVERY", "64", Scope::Udp,
      "In-order segments per acknowledgement (1..65536); a message's end, a hole or a duplicate is acknowledged at once, and held data within 50 µs."),
    s("OPENVIA_UDP_KEEPALIVE_MS", "50", Scope::Udp,
      "Keepalive interval of an idle connection, in ms (its ICMP answer tells a dead peer process); due on a grid of an eighth of it, so a process's idle connections share wake-ups. An owner may set its own per VI (viarun's links: 1 s)."),
    s("OPENVIA_UDP_DEAD_MS", "3000", Scope::Udp,
      "Silence after which the peer counts as dead, in ms (viarun's links: 10 s)."),
    s("OPENVIA_UDP_MIN_RTO_US", "10000", Scope::Udp,
      "Lower bound of the retransmission timeout, in µs (100..1000000)."),
    s("OPENVIA_UDP_FAULTS", "none", Scope::Udp,
      "Faults injected into every datagram a connection receives, for tests: e.g. drop=0.05,dup=0.01,reorder=0.01,corrupt=0.001,seed=7 (rates in 0..1)."),
    s("OPENVIA_UDP_STATS", "unset", Scope::Udp,
      "Set to anything: each connection prints its protocol counters when it closes."),
    s("OPENVIA_PVMD", "pvmd beside libpvm3.so or the program", Scope::Pvm,
      "The pvmd binary a task starts when no daemon runs."),
    s("OPENVIA_PVM_SOCK", "${PVM_TMP:-/tmp}/openvia-pvmd.<uid>", Scope::Pvm,
      "The pvmd's listening socket (its log is this path plus .log); pvmd also sets it for the tasks it spawns."),
    s("OPENVIA_PVM_TID", "unset", Scope::Pvm,
      "Set by pvmd for a task it spawns: the task's id (not for users)."),
    s("OPENVIA_PVM_POOL_MB", "64", Scope::Pvm,
      "Size of the per-host shared message pool in MiB; 0 disables the pool."),
    s("OPENVIA_PVM_DEVICE", "/dev/via_udp", Scope::Pvm,
      "Network device the pvmds talk to each other over."),
    s("OPENVIA_PVM_WINDOW", "16", Scope::Pvm,
      "Fragments in flight between two pvmds (at most 1024)."),
    s("OPENVIA_PVM_HOSTLINK", "1", Scope::Pvm,
      "0: a task's default-route messages to another host go through its own pvmd, as stock PVM routes them. Otherwise they go, once it is up, over a VI of the task's own to the pvmd of the receiver's host, which places them into the receiver's pool pages: one daemon on the way instead of two (docs/pvm.md, \"Host links\")."),
    s("OPENVIA_PVM_FRAG", "256K", Scope::Pvm,
      "Bytes per pvmd-to-pvmd fragment (1K..1M)."),
    s("OPENVIA_PVM_SPIN_NS", "50000", Scope::Pvm,
      "How long a task waiting for a message (on the pool doorbell or a direct VI) and a pvmd waiting for work poll before they sleep, in ns (at most 10000000; 0 sleeps at once); a task waiting for a message from a task of another host (on the pool doorbell or its direct VI) polls up to three times as long, and the network device's progress thread of a pvmd or task (which receives messages from other hosts) polls its sockets up to twice as long before it sleeps in epoll. Adaptive: the window halves when waits last longer or another process holds the CPU. pvmd refuses a bad value; a task warns and uses the default."),
    s("OPENVIA_PVM_TRACE", "unset", Scope::Pvm,
      "PREFIX: every task and pvmd records time marks along each message's path and writes them to PREFIX.<host>.<pid> (python/pvm_trace.py merges them)."),
    s("OPENVIA_PVM_DIRECT_BREAK_AFTER", "unset", Scope::Tests,
      "N: a task drops its direct VI to a peer abruptly after N messages came over it (fault injection for tests/pvm/multihost.c)."),
    s("OPENVIA_PVM_HOSTLINK_BREAK_AFTER", "unset", Scope::Tests,
      "N: a task drops its host link to another host's pvmd abruptly once N messages went over it, and connects the link before its first message goes, so the count is exact (fault injection for tests/pvm/multihost.c)."),
    s("OPENVIA_PVM_DIRECT_STATS", "unset", Scope::Pvm,
      "Set to anything: a task prints its direct-route and host-link figures at pvm_exit."),
    s("OPENVIA_BENCH_DEVICE", "/dev/via_udp", Scope::Bench,
      "Device of viabench's network transports, e.g. /dev/via_veth0 (udp: default /dev/via_udp; ether and ether-xdp: default /dev/via_<first interface with a non-loopback address>)."),
    s("OPENVIA_BENCH_RELIABILITY", "rd", Scope::Bench,
      "Reliability level of viabench's network transports (udp, ether, ether-xdp): ur, rd or rr."),
    s("OPENVIA_KILL_TRIALS", "3", Scope::Tests,
      "How many times the namespace test peer_killed_while_idle kills a peer (its figures print with --nocapture)."),
    s("OPENVIA_LIBVIPL", "libvipl.so of the build", Scope::Tests,
      "libvipl.so the namespace tests load for their C programs."),
];

/// The row of `name`, if the table has one.
pub fn lookup(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// Where a setting's value in force came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Default,
    Env,
}

impl Source {
    pub fn key(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Env => "env",
        }
    }
}

/// A setting with the value this process sees.
#[derive(Clone, Debug)]
pub struct InForce {
    pub setting: &'static Setting,
    pub value: String,
    pub source: Source,
}

/// Every setting with its value in force, from `lookup_env` (the process
/// environment in [`in_force`]).
pub fn in_force_with(lookup_env: impl Fn(&str) -> Option<String>) -> Vec<InForce> {
    SETTINGS
        .iter()
        .map(|s| match lookup_env(s.name) {
            Some(v) => InForce {
                setting: s,
                value: v,
                source: Source::Env,
            },
            None => InForce {
                setting: s,
                value: s.default.to_string(),
                source: Source::Default,
            },
        })
        .collect()
}

/// Every setting with its value in this process's environment.
pub fn in_force() -> Vec<InForce> {
    in_force_with(|n| std::env::var(n).ok())
}

/// `OPENVIA_*` variables set in the environment that the table does not
/// know (most likely misspelt).
pub fn unknown_in_env() -> Vec<String> {
    let mut v: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("OPENVIA_") && lookup(k).is_none())
        .collect();
    v.sort();
    v
}

/// docs/settings.md.
pub fn markdown() -> String {
    let mut out = String::from(
        "# openvia settings\n\n\
         Every `OPENVIA_*` environment variable, read once per process. \
         Generated from `crates/core/src/settings.rs` \
         (`viainfo --settings-doc markdown`); a test checks that this page, \
         the man page openvia-settings(7) and the code agree. \
         `viainfo` shows the values in force and where they came from.\n",
    );
    for scope in Scope::ALL {
        out.push_str(&format!(
            "\n## {}\n\n| variable | default | meaning |\n|---|---|---|\n",
            scope.title()
        ));
        for s in SETTINGS.iter().filter(|s| s.scope == scope) {
            out.push_str(&format!(
                "| `{}` | {} | {} |\n",
                s.name,
                s.default,
                s.doc.replace('|', "\\|")
            ));
        }
    }
    out
}

/// Escapes text for roff: backslashes, and a leading dot or quote.
fn roff_text(t: &str) -> String {
    let t = t.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// docs/man/openvia-settings.7.
pub fn man_page(version: &str) -> String {
    let mut out = format!(
        ".\\\" Generated from crates/core/src/settings.rs by viainfo --settings-doc man.\n\
         .TH OPENVIA-SETTINGS 7 \"\" \"openvia {version}\" \"openvia\"\n\
         .SH NAME\n\
         openvia-settings \\- environment settings of openvia\n\
         .SH DESCRIPTION\n\
         Every setting is an environment variable, read once per process.\n\
         .BR viainfo (1)\n\
         prints each with the value in force and where it came from\n\
         (default or environment).\n"
    );
    for scope in Scope::ALL {
        out.push_str(&format!(".SS {}\n", roff_text(scope.title())));
        for s in SETTINGS.iter().filter(|s| s.scope == scope) {
            out.push_str(&format!(
                ".TP\n.B {}\n(default: {})\n{}\n",
                s.name,
                roff_text(s.default),
                roff_text(s.doc)
            ));
        }
    }
    out.push_str(".SH SEE ALSO\n.BR viainfo (1),\n.BR viabench (1),\n.BR pvmd (1),\n.BR pvm (1)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn names_are_unique_and_prefixed() {
        for (i, a) in SETTINGS.iter().enumerate() {
            assert!(a.name.starts_with("OPENVIA_"), "{}", a.name);
            assert!(
                SETTINGS[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
        }
    }

    #[test]
    fn in_force_says_where_each_value_came_from() {
        let rows = in_force_with(|n| (n == "OPENVIA_SPIN_NS").then(|| "7".to_string()));
        let spin = rows
            .iter()
            .find(|r| r.setting.name == "OPENVIA_SPIN_NS")
            .unwrap();
        assert_eq!((spin.value.as_str(), spin.source), ("7", Source::Env));
        let ring = rows
            .iter()
            .find(|r| r.setting.name == "OPENVIA_RING_BYTES")
            .unwrap();
        assert_eq!((ring.value.as_str(), ring.source), ("1M", Source::Default));
    }

    /// The table's defaults of the shared-memory settings are the code's.
    #[test]
    fn shm_defaults_match_the_config() {
        let c = Config::default();
        let want: [(&str, u64); 10] = [
            ("OPENVIA_SPIN_NS", c.spin_ns),
            ("OPENVIA_BLOCK_CAP_MS", c.block_cap_ms),
            ("OPENVIA_PROGRESS_US", c.progress_interval_us),
            ("OPENVIA_INLINE_MAX", c.inline_max as u64),
            ("OPENVIA_CHUNK_BYTES", c.chunk_bytes as u64),
            ("OPENVIA_CMA_MIN", c.cma_min as u64),
            ("OPENVIA_CMA_PIECE", c.cma_piece as u64),
            ("OPENVIA_RING_SLOW_GBPS", c.ring_slow_gbps),
            ("OPENVIA_RING_BYTES", c.ring_bytes as u64),
            ("OPENVIA_CMA", c.cma as u64),
        ];
        for (name, value) in want {
            let text = lookup(name).unwrap().default;
            assert_eq!(
                crate::config::parse_size(text),
                Some(value),
                "{name}: table says {text}"
            );
        }
    }
}
