//! Test harness for viaip between network namespaces: two namespaces
//! joined by veth (names contain "viaip" and the test's pid), instances
//! started as children and waited for by their readiness line, and
//! traffic made from threads that joined a namespace (setns is per
//! thread): an ICMP echo of our own (no ping binary needed) and a TCP
//! transfer whose checksums are compared.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

pub const VIAIP: &str = env!("CARGO_BIN_EXE_viaip");

/// One test at a time: the machine is small, and timing-sensitive steps
/// (dead-peer detection) should not compete with each other.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why the namespace tests cannot run here, if they cannot.
pub fn skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let why = if unsafe { libc::geteuid() } != 0 {
        Some("not root")
    } else if !std::path::Path::new("/dev/net/tun").exists() {
        Some("no /dev/net/tun")
    } else if Command::new("ip").arg("-V").output().is_err() {
        Some("no `ip` command")
    } else {
        None
    };
    if let Some(w) = why {
        eprintln!("SKIPPED {test}: {w}");
        return true;
    }
    false
}

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Namespaces a and b, veth between them (underlay 10.76.n.1/.2), the
/// overlay 10.77.n.1/.2, and a peers file naming both.
pub struct Pair {
    pub ns: [String; 2],
    pub veth: [String; 2],
    pub under: [Ipv4Addr; 2],
    pub over: [Ipv4Addr; 2],
    pub peers_file: String,
}

impl Pair {
    pub fn new(mtu: u32) -> Pair {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("{}{}", pid % 1_000_000, k % 10);
        let n = ((pid.wrapping_mul(7).wrapping_add(k)) % 250 + 1) as u8;
        let pair = Pair {
            ns: [format!("viaipA{tag}"), format!("viaipB{tag}")],
            veth: [format!("viaip{tag}a"), format!("viaip{tag}b")],
            under: [Ipv4Addr::new(10, 76, n, 1), Ipv4Addr::new(10, 76, n, 2)],
            over: [Ipv4Addr::new(10, 77, n, 1), Ipv4Addr::new(10, 77, n, 2)],
            peers_file: std::env::temp_dir()
                .join(format!("viaip-peers-{tag}"))
                .display()
                .to_string(),
        };
        run(&["ip", "netns", "add", &pair.ns[0]]);
        run(&["ip", "netns", "add", &pair.ns[1]]);
        run(&[
            "ip",
            "link",
            "add",
            &pair.veth[0],
            "netns",
            &pair.ns[0],
            "type",
            "veth",
            "peer",
            "name",
            &pair.veth[1],
            "netns",
            &pair.ns[1],
        ]);
        let mtu = mtu.to_string();
        for i in 0..2 {
            let addr = format!("{}/24", pair.under[i]);
            run(&["ip", "-n", &pair.ns[i], "link", "set", "lo", "up"]);
            run(&[
                "ip",
                "-n",
                &pair.ns[i],
                "addr",
                "add",
                &addr,
                "dev",
                &pair.veth[i],
            ]);
            run(&[
                "ip",
                "-n",
                &pair.ns[i],
                "link",
                "set",
                &pair.veth[i],
                "mtu",
                &mtu,
                "up",
            ]);
        }
        let text = format!(
            "# overlay underlay\n{} {}\n{} {}\n",
            pair.over[0], pair.under[0], pair.over[1], pair.under[1]
        );
        std::fs::write(&pair.peers_file, text).expect("peers file");
        pair
    }

    /// Starts viaip in namespace i, interface `viaip0`; returns once it
    /// printed its readiness line.
    pub fn up(&self, i: usize, mode: &str) -> Instance {
        self.up_with(i, mode, &["--peers", &self.peers_file])
    }

    /// As `up`, with `extra` arguments instead of the peers file.
    pub fn up_with(&self, i: usize, mode: &str, extra: &[&str]) -> Instance {
        let addr = format!("{}/24", self.over[i]);
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns[i], VIAIP, "up", "viaip0", &addr])
            .args(["--link", &self.veth[i], "--mode", mode])
            .args(extra)
            .env("OPENVIA_UDP_KEEPALIVE_MS", "200")
            .env("OPENVIA_UDP_DEAD_MS", "1000")
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn viaip");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        BufReader::new(out).read_line(&mut line).expect("read");
        assert!(line.starts_with("viaip: viaip0 up"), "viaip said {line:?}");
        Instance {
            child,
            ns: self.ns[i].clone(),
        }
    }

    /// `viaip show` in namespace i.
    pub fn show(&self, i: usize) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns[i], VIAIP, "show"])
            .output()
            .expect("viaip show");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether namespace i has an interface called `name`.
    pub fn has_link(&self, i: usize, name: &str) -> bool {
        Command::new("ip")
            .args(["-n", &self.ns[i], "link", "show", name])
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("ip link")
            .success()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_file(&self.peers_file);
    }
}

/// A running viaip; stopped with SIGTERM when dropped.
pub struct Instance {
    pub child: Child,
    pub ns: String,
}

impl Instance {
    /// User and system CPU time of the instance so far, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("viaip's /proc stat");
        // Fields after the command name (which may hold spaces): state is
        // the first, utime the 12th, stime the 13th.
        let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }

    pub fn signal(&mut self, sig: i32) -> std::process::ExitStatus {
        // SAFETY: signalling our own child (`ip netns exec` execs viaip, so
        // the pid is viaip's).
        unsafe { libc::kill(self.child.id() as i32, sig) };
        self.child.wait().expect("wait")
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(libc::SIGTERM);
        }
    }
}

/// Runs `f` on a thread that joined namespace `ns`.
pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("netns file");
        // SAFETY: a valid namespace descriptor; only this thread moves.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}");
        f()
    })
    .join()
    .expect("namespace thread")
}

fn icmp_checksum(b: &[u8]) -> u16 {
    !viaip::vnet::ones_sum(b)
}

/// One ICMP echo from namespace `ns` to `dst`: true if the reply came
/// within a second.
pub fn ping(ns: &str, dst: Ipv4Addr) -> bool {
    in_ns(ns, move || {
        // SAFETY: plain socket call; checked below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
        assert!(fd >= 0, "raw socket");
        let id = (std::process::id() & 0xffff) as u16;
        let mut req = vec![8u8, 0, 0, 0];
        req.extend_from_slice(&id.to_be_bytes());
        req.extend_from_slice(&1u16.to_be_bytes());
        req.extend_from_slice(&[0xa5; 56]);
        let c = icmp_checksum(&req);
        req[2..4].copy_from_slice(&c.to_be_bytes());
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(dst.octets()),
            },
            sin_zero: [0; 8],
        };
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        // SAFETY: live buffers and lengths; fd is ours and closed below.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
            libc::sendto(
                fd,
                req.as_ptr().cast(),
                req.len(),
                0,
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            );
            let mut got = false;
            let mut buf = [0u8; 1500];
            while std::time::Instant::now() < deadline {
                let n = libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0);
                if n <= 0 {
                    break;
                }
                let p = &buf[..n as usize];
                let hl = usize::from(p[0] & 0x0f) * 4;
                if p.len() >= hl + 8
                    && p[12..16] == dst.octets()
                    && p[hl] == 0
                    && p[hl + 4..hl + 6] == id.to_be_bytes()
                {
                    got = true;
                    break;
                }
            }
            libc::close(fd);
            got
        }
    })
}

fn fnv1a(h: &mut u64, b: &[u8]) {
    for &x in b {
        *h ^= u64::from(x);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

/// Sends `len` pseudo-random bytes by TCP from namespace `from` to a
/// server in namespace `to` on `addr`; returns (sent, received) checksums
/// and the bytes the server counted.
pub fn tcp_transfer(from: &str, to: &str, addr: Ipv4Addr, len: usize) -> (u64, u64, usize) {
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    let to = to.to_string();
    let server = std::thread::spawn(move || {
        in_ns(&to, move || {
            let l = TcpListener::bind((addr, 0)).expect("bind");
            tx.send(l.local_addr().expect("addr")).expect("send addr");
            let (mut s, _) = l.accept().expect("accept");
            s.set_read_timeout(Some(Duration::from_secs(30))).ok();
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            let mut n = 0;
            let mut buf = vec![0u8; 65536];
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => {
                        fnv1a(&mut h, &buf[..k]);
                        n += k;
                    }
                    Err(e) => panic!("server read: {e}"),
                }
            }
            (h, n)
        })
    });
    let at = rx.recv().expect("server address");
    let sent = in_ns(from, move || {
        let mut s = TcpStream::connect_timeout(&at, Duration::from_secs(10)).expect("connect");
        s.set_write_timeout(Some(Duration::from_secs(30))).ok();
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut left = len;
        let mut buf = vec![0u8; 65536];
        while left > 0 {
            let k = left.min(buf.len());
            for b in &mut buf[..k] {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            s.write_all(&buf[..k]).expect("client write");
            fnv1a(&mut h, &buf[..k]);
            left -= k;
        }
        h
    });
    let (got, n) = server.join().expect("server");
    (sent, got, n)
}

/// The number after `name=` in a `viaip show` report (0 if absent).
pub fn counter(report: &str, name: &str) -> u64 {
    report
        .split_whitespace()
        .filter_map(|w| w.strip_prefix(&format!("{name}=")))
        .filter_map(|v| v.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// An interface's packet counters, from the second line of a `viaip
/// show` report (`rx packets N bytes N gso N  tx packets N bytes N gso N`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Traffic {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_gso: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_gso: u64,
}

pub fn traffic(report: &str) -> Traffic {
    let line = report.lines().nth(1).unwrap_or("");
    let after = |key: &str, nth: usize| -> u64 {
        line.split(key)
            .nth(1)
            .and_then(|l| l.split_whitespace().nth(nth))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Traffic {
        rx_packets: after("rx packets", 0),
        rx_bytes: after("rx packets", 2),
        rx_gso: after("rx packets", 4),
        tx_packets: after("tx packets", 0),
        tx_bytes: after("tx packets", 2),
        tx_gso: after("tx packets", 4),
    }
}
