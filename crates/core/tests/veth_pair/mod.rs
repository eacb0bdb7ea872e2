//! Two network namespaces joined by a veth pair, for the AF_XDP tests and
//! the xdp_pingpong example: names hold "xdp", the process id and a
//! counter, so runs never meet; `Drop` deletes both namespaces (and with
//! them the veth), also when a test panics.

use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces joined by a veth pair, deleted on drop.
pub struct Pair {
    pub ns: [String; 2],
    pub ifs: [String; 2],
    pub ips: [String; 2],
}

impl Pair {
    /// `queues` per direction (None: the kernel's default, one per CPU).
    pub fn with(mtu: u32, queues: Option<u32>) -> Pair {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "{}{}",
            std::process::id() % 1_000_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let subnet = std::process::id() % 200 + 20;
        let p = Pair {
            ns: [format!("xdpA{tag}"), format!("xdpB{tag}")],
            ifs: [format!("xdp{tag}a"), format!("xdp{tag}b")],
            ips: [format!("10.201.{subnet}.1"), format!("10.201.{subnet}.2")],
        };
        run(&["ip", "netns", "add", &p.ns[0]]);
        run(&["ip", "netns", "add", &p.ns[1]]);
        let q = queues.map(|q| q.to_string());
        let queue_args: Vec<&str> = match &q {
            Some(q) => vec!["numtxqueues", q, "numrxqueues", q],
            None => vec![],
        };
        let mut add = vec!["ip", "link", "add", &p.ifs[0], "netns", &p.ns[0]];
        add.extend(&queue_args);
        add.extend(["type", "veth", "peer", "name", &p.ifs[1], "netns", &p.ns[1]]);
        add.extend(&queue_args);
        run(&add);
        let mtu = mtu.to_string();
        for i in 0..2 {
            let addr = format!("{}/24", p.ips[i]);
            run(&["ip", "-n", &p.ns[i], "addr", "add", &addr, "dev", &p.ifs[i]]);
            run(&[
                "ip", "-n", &p.ns[i], "link", "set", &p.ifs[i], "mtu", &mtu, "up",
            ]);
        }
        p
    }

    /// Runs `f` on a thread inside namespace `i`.
    pub fn within<T: Send + 'static>(&self, i: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.ns[i]);
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).unwrap();
            // SAFETY: setns on this thread only, with a valid namespace fd.
            assert_eq!(
                unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
                0
            );
            f()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}
