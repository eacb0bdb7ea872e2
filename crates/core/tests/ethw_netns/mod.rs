//! Two network namespaces joined by a veth pair for the raw-frame tests
//! and the frame ping-pong measurement: names contain "ethw", the pid and
//! a counter (parallel runs never meet), deleted by `Drop` — also when a
//! test panics. Work inside a namespace runs on a thread that joined it
//! (setns is per thread; sockets stay in the namespace they were made in).

#![allow(dead_code)]

use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Why the namespace tests cannot run here, if they cannot.
pub fn unavailable() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root");
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("no `ip` command"),
    }
}

/// True (after saying why) when namespace tests cannot run here.
pub fn skip(test: &str) -> bool {
    let why = unavailable();
    if let Some(why) = why {
        eprintln!("SKIPPED {test}: {why}");
    }
    why.is_some()
}

fn run(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Namespace `a` holds interface `if_a` (`ip_a`), `b` holds `if_b`.
pub struct EthwPair {
    pub a: String,
    pub b: String,
    pub if_a: String,
    pub if_b: String,
    pub ip_a: std::net::Ipv4Addr,
    pub ip_b: std::net::Ipv4Addr,
    pub ip6_a: std::net::Ipv6Addr,
    pub ip6_b: std::net::Ipv6Addr,
}

impl EthwPair {
    pub fn new() -> EthwPair {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed) % 100;
        let pid = std::process::id() % 10_000_000;
        let subnet = ((pid * 7 + n) % 250 + 1) as u8;
        let pair = EthwPair {
            a: format!("ethwA{pid}x{n}"),
            b: format!("ethwB{pid}x{n}"),
            if_a: format!("ethw{pid}x{n}a"),
            if_b: format!("ethw{pid}x{n}b"),
            ip_a: std::net::Ipv4Addr::new(10, 198, subnet, 1),
            ip_b: std::net::Ipv4Addr::new(10, 198, subnet, 2),
            ip6_a: std::net::Ipv6Addr::new(0xfd00, 0x198, subnet.into(), 0, 0, 0, 0, 1),
            ip6_b: std::net::Ipv6Addr::new(0xfd00, 0x198, subnet.into(), 0, 0, 0, 0, 2),
        };
        // `pair` owns the names from here: a failing step still cleans up.
        run(&["netns", "add", &pair.a]);
        run(&["netns", "add", &pair.b]);
        run(&[
            "link", "add", &pair.if_a, "netns", &pair.a, "type", "veth", "peer", "name",
            &pair.if_b, "netns", &pair.b,
        ]);
        for (ns, ifname, ip, ip6) in [
            (&pair.a, &pair.if_a, pair.ip_a, pair.ip6_a),
            (&pair.b, &pair.if_b, pair.ip_b, pair.ip6_b),
        ] {
            run(&["-n", ns, "link", "set", "lo", "up"]);
            run(&["-n", ns, "addr", "add", &format!("{ip}/24"), "dev", ifname]);
            let ip6 = format!("{ip6}/64");
            run(&["-n", ns, "addr", "add", &ip6, "dev", ifname, "nodad"]);
            run(&["-n", ns, "link", "set", ifname, "up"]);
        }
        pair
    }
}

impl Drop for EthwPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth end, and with it the other.
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Joins namespace `ns` on the calling thread.
pub fn enter(ns: &str) {
    let path = format!("/var/run/netns/{ns}");
    let file = std::fs::File::open(&path).expect("netns file");
    // SAFETY: a valid namespace descriptor; only this thread moves.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {path}");
}

/// Runs `f` on a thread that joined namespace `ns`.
pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns);
        f()
    })
    .join()
    .expect("namespace thread")
}
