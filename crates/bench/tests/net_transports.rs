//! The network transports on the command line: `udp`, `ether` and
//! `ether-xdp` are listed with their availability, the Ethernet ones
//! refuse clearly where they cannot run (no interface, no CAP_NET_RAW),
//! and results name the device they measured (`device` in the JSON).

use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

fn viabench(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_viabench"));
    cmd.args(args).env_remove("OPENVIA_BENCH_DEVICE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn transports_lists_udp_and_ether_with_availability() {
    let out = viabench(&["transports", "--json"], &[]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for name in ["udp", "ether", "ether-xdp"] {
        let t = lines
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {lines:?}"));
        assert_eq!(t["remote"], true, "{t}");
        // A frame does not come back to its host: ether needs --peer.
        assert_eq!(t["local"], name == "udp", "{t}");
        let available = t["available"].as_bool().unwrap();
        // Unavailable says why; available has nothing to say.
        assert_eq!(t["reason"].is_string(), !available, "{t}");
    }
}

#[test]
fn ether_refuses_a_device_without_an_interface() {
    for transport in ["ether", "ether-xdp"] {
        let out = viabench(
            &[
                "latency",
                "-t",
                transport,
                "-s",
                "8",
                "-n",
                "10",
                "--peer",
                "192.0.2.9",
            ],
            &[("OPENVIA_BENCH_DEVICE", "/dev/via_lo")],
        )
        .output()
        .unwrap();
        assert!(!out.status.success(), "{transport} ran on /dev/via_lo");
        let err = stderr(&out);
        assert!(
            err.contains("needs an interface") && err.contains("/dev/via_lo"),
            "{transport}: {err}"
        );
    }
}

#[test]
fn ether_without_a_peer_asks_for_one() {
    for transport in ["ether", "ether-xdp"] {
        let out = viabench(&["latency", "-t", transport, "-s", "8", "-n", "10"], &[])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{transport} ran without --peer");
        let err = stderr(&out);
        assert!(
            err.contains("other hosts only") && err.contains("--peer"),
            "{transport}: {err}"
        );
    }
}

/// Drops CAP_NET_RAW from this (forked, not yet exec'd) process's
/// bounding set (else exec gives it back to root) and its effective,
/// permitted and inheritable sets, so the exec'd program runs without it
/// even as root.
fn drop_net_raw() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_NET_RAW: u32 = 13;
    // SAFETY: prctl with integer arguments; fails harmlessly (EPERM)
    // without CAP_SETPCAP, when the capability is not ours anyway.
    unsafe { libc::prctl(libc::PR_CAPBSET_DROP, CAP_NET_RAW as libc::c_ulong, 0, 0, 0) };
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget fills the two data words of a version 3 header.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let bit = !(1u32 << CAP_NET_RAW);
    data[0].effective &= bit;
    data[0].permitted &= bit;
    data[0].inheritable &= bit;
    // SAFETY: capset reads the header and the two data words we pass.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[test]
fn ether_without_cap_net_raw_says_so() {
    let mut cmd = viabench(
        &["transports"],
        &[("OPENVIA_BENCH_DEVICE", "/dev/via_ovtestnoif0")],
    );
    // SAFETY: the closure runs in the forked child before exec and makes
    // only system calls (prctl, capget, capset).
    unsafe { cmd.pre_exec(drop_net_raw) };
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    for transport in ["ether", "ether-xdp"] {
        let row = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(transport))
            .unwrap_or_else(|| panic!("{transport} not listed:\n{table}"));
        assert!(row.contains("no: ") && row.contains("CAP_NET_RAW"), "{row}");
    }
}

/// One 8-byte latency run of `transport` on this host: its JSON line.
fn latency_line(transport: &str) -> serde_json::Value {
    let out = viabench(
        &["latency", "-t", transport, "-s", "8", "-n", "200", "--json"],
        &[],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{transport}: {}", stderr(&out));
    serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap()
}

#[test]
fn results_name_the_device_they_measured() {
    for (transport, kind) in [("shm", "shm"), ("udp", "udp")] {
        let line = latency_line(transport);
        let device = &line["device"];
        assert_eq!(device["kind"], kind, "{line}");
        assert_eq!(device["reliability"], "rd", "{line}");
        if kind == "udp" {
            assert!(device["mtu"].as_u64().unwrap() >= 1280, "{line}");
            assert!(device["segment_bytes"].as_u64().unwrap() > 0, "{line}");
            assert!(device["segment_policy"].is_string(), "{line}");
        }
    }
    // Kernel sockets are no openvia device.
    let line = latency_line("kernel-udp-spin");
    assert!(line.get("device").is_none(), "{line}");
}

/// Two namespaces joined by veth (scripts/netns.sh under names of this
/// test process), deleted on drop, also when the test panics.
struct Namespaces {
    env: Vec<(&'static str, String)>,
}

const NETNS_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/netns.sh");

impl Namespaces {
    /// None (and why, on stderr) where namespaces cannot be made.
    fn up(mtu: u32) -> Option<Namespaces> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: not root (network namespaces need CAP_NET_ADMIN)");
            return None;
        }
        let tag = std::process::id() % 10_000_000;
        let ns = Namespaces {
            env: vec![
                ("OV_NS_A", format!("vbA{tag}")),
                ("OV_NS_B", format!("vbB{tag}")),
                ("OV_VETH", format!("vb{tag}v")),
            ],
        };
        let out = ns.script(&["up", &mtu.to_string()]);
        assert!(out.status.success(), "netns.sh up: {}", stderr(&out));
        Some(ns)
    }

    fn script(&self, args: &[&str]) -> Output {
        Command::new("sh")
            .arg(NETNS_SH)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("sh scripts/netns.sh")
    }

    /// viabench in namespace A (`a`) or B, on its veth.
    fn viabench(&self, a: bool, args: &[&str]) -> Command {
        let (ns, dev) = if a {
            (&self.env[0].1, "/dev/via_veth0")
        } else {
            (&self.env[1].1, "/dev/via_veth1")
        };
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_viabench")])
            .args(args)
            .env("OPENVIA_BENCH_DEVICE", dev);
        cmd
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        let _ = self.script(&["down"]);
    }
}

/// `serve` in namespace B, the client's run in A with `--peer`, as
/// scripts/net_compare.sh does it; returns the client's JSON lines.
fn across(ns: &Namespaces, transport: &str, client: &[&str]) -> Vec<serde_json::Value> {
    use std::io::{BufRead, BufReader};
    let mut server = ns
        .viabench(false, &["serve", "-t", transport, "--once", "--port", "7"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("viabench serve");
    // Readiness: the server's READY line.
    let mut ready = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert!(ready.starts_with("READY "), "server said {ready:?}");
    let peer = ready["READY ".len()..].trim().to_string();
    let out = ns
        .viabench(true, client)
        .args(["-t", transport, "--peer", &peer, "--cpu", "none", "--json"])
        .output()
        .unwrap();
    if !out.status.success() {
        // A server whose client failed may wait for it: end it first.
        let _ = server.kill();
        let _ = server.wait();
        panic!("{transport}: {}", stderr(&out));
    }
    let served = server.wait().unwrap();
    assert!(served.success(), "{transport} server: {served}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn ether_runs_across_namespaces_and_says_how() {
    let Some(ns) = Namespaces::up(1500) else {
        return;
    };
    for (transport, path) in [("ether", "packet"), ("ether-xdp", "xdp")] {
        let lat = across(&ns, transport, &["latency", "-s", "8,4096", "-n", "200"]);
        let bw = across(
            &ns,
            transport,
            &["bandwidth", "-s", "64K", "-n", "64", "-w", "8", "--verify"],
        );
        assert_eq!(lat.len() + bw.len(), 3, "{lat:?} {bw:?}");
        for line in lat.iter().chain(&bw) {
            assert_eq!(line["transport"], transport, "{line}");
            let device = &line["device"];
            assert_eq!(device["kind"], "ether", "{line}");
            assert_eq!(device["path"], path, "{line}");
            assert_eq!(device["interface"], "veth0", "{line}");
            assert_eq!(device["mtu"], 1500, "{line}");
            assert_eq!(device["segment_policy"], "fixed", "{line}");
        }
        assert_eq!(bw[0]["delivered_msgs"], 64, "{}", bw[0]);
    }
}
