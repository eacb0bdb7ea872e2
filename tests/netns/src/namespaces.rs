//! Two network namespaces joined by a veth pair, named after the test
//! process (pid and a counter) so parallel runs never meet, and deleted by
//! `Drop` — also when the test panics. Deleting a namespace deletes its
//! end of the veth, and with it the other end.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Why namespace tests cannot run here, if they cannot (not root, no `ip`).
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: network namespaces need CAP_NET_ADMIN".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("the `ip` command (iproute2) is missing".into()),
    }
}

/// Why the nft drop tests cannot run here, if they cannot.
pub fn nft_unavailable() -> Option<String> {
    match Command::new("nft").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("the `nft` command (nftables) is missing".into()),
    }
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The pair: namespace `a` holds `if_a` (10.x.y.1), `b` holds `if_b`
/// (10.x.y.2).
pub struct NetnsPair {
    pub a: String,
    pub b: String,
    pub if_a: String,
    pub if_b: String,
    pub ip_a: String,
    pub ip_b: String,
}

impl NetnsPair {
    pub fn new(mtu: u32) -> NetnsPair {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // Interface names have at most 15 bytes: "ov" + pid (≤ 7) + n + a/b.
        let tag = format!("{}{}", pid % 10_000_000, n % 100);
        let subnet = (pid.wrapping_mul(31).wrapping_add(n)) % 250 + 1;
        let pair = NetnsPair {
            a: format!("ovnsA{tag}"),
            b: format!("ovnsB{tag}"),
            if_a: format!("ov{tag}a"),
            if_b: format!("ov{tag}b"),
            ip_a: format!("10.199.{subnet}.1"),
            ip_b: format!("10.199.{subnet}.2"),
        };
        // Built step by step; `pair` already owns the names, so a failing
        // step still deletes whatever was made.
        let mtu = mtu.to_string();
        let steps: Vec<Vec<&str>> = vec![
            vec!["ip", "netns", "add", &pair.a],
            vec!["ip", "netns", "add", &pair.b],
            vec![
                "ip", "link", "add", &pair.if_a, "netns", &pair.a, "type", "veth", "peer", "name",
                &pair.if_b, "netns", &pair.b,
            ],
        ];
        for s in &steps {
            run(s).unwrap_or_else(|e| panic!("{e}"));
        }
        let addr_a = format!("{}/24", pair.ip_a);
        let addr_b = format!("{}/24", pair.ip_b);
        for (ns, ifname, addr) in [
            (&pair.a, &pair.if_a, &addr_a),
            (&pair.b, &pair.if_b, &addr_b),
        ] {
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]).unwrap_or_else(|e| panic!("{e}"));
            run(&["ip", "-n", ns, "addr", "add", addr, "dev", ifname])
                .unwrap_or_else(|e| panic!("{e}"));
            run(&["ip", "-n", ns, "link", "set", ifname, "mtu", &mtu, "up"])
                .unwrap_or_else(|e| panic!("{e}"));
        }
        pair
    }

    /// Drops `percent` % of the UDP datagrams entering either namespace,
    /// at random (nft `numgen random`).
    pub fn drop_udp(&self, percent: u32) {
        let pct = percent.to_string();
        for ns in [&self.a, &self.b] {
            let nft = ["ip", "netns", "exec", ns, "nft"];
            let cmds: [&[&str]; 3] = [
                &["add", "table", "inet", "ovtest"],
                &[
                    "add", "chain", "inet", "ovtest", "in", "{", "type", "filter", "hook", "input",
                    "priority", "0", ";", "}",
                ],
                &[
                    "add", "rule", "inet", "ovtest", "in", "meta", "l4proto", "udp", "numgen",
                    "random", "mod", "100", "<", &pct, "counter", "drop",
                ],
            ];
            for c in cmds {
                let argv: Vec<&str> = nft.iter().chain(c.iter()).copied().collect();
                run(&argv).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }

    /// Drops `percent` % of the Ethernet device's frames (EtherType
    /// 0x88b5) entering either namespace, at random: an nft rule on each
    /// veth end's ingress hook (before any packet socket or XDP-less
    /// receive sees the frame).
    pub fn drop_ether(&self, percent: u32) {
        let pct = percent.to_string();
        for (ns, ifname) in [(&self.a, &self.if_a), (&self.b, &self.if_b)] {
            let nft = ["ip", "netns", "exec", ns, "nft"];
            let cmds: [&[&str]; 3] = [
                &["add", "table", "netdev", "ovtest"],
                &[
                    "add", "chain", "netdev", "ovtest", "in", "{", "type", "filter", "hook",
                    "ingress", "device", ifname, "priority", "0", ";", "}",
                ],
                &[
                    "add", "rule", "netdev", "ovtest", "in", "ether", "type", "0x88b5", "numgen",
                    "random", "mod", "100", "<", &pct, "counter", "drop",
                ],
            ];
            for c in cmds {
                let argv: Vec<&str> = nft.iter().chain(c.iter()).copied().collect();
                run(&argv).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }

    /// Packets the drop rule discarded so far, both namespaces together.
    pub fn dropped_packets(&self) -> u64 {
        self.counted("inet")
    }

    /// Frames the Ethernet drop rule (`drop_ether`) discarded so far.
    pub fn dropped_frames(&self) -> u64 {
        self.counted("netdev")
    }

    fn counted(&self, family: &str) -> u64 {
        let mut total = 0;
        for ns in [&self.a, &self.b] {
            let out = Command::new("ip")
                .args([
                    "netns", "exec", ns, "nft", "list", "table", family, "ovtest",
                ])
                .output()
                .expect("nft list");
            let text = String::from_utf8_lossy(&out.stdout);
            if let Some(rest) = text.split("counter packets ").nth(1) {
                total += rest
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        total
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.a]);
        let _ = run(&["ip", "netns", "del", &self.b]);
    }
}
