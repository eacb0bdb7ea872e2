//! Runs the built `viabench` binary end to end: it starts its own server,
//! measures, and prints JSON lines whose figures must be sane.

use std::process::Command;

fn run_json(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_viabench"))
        .args(args)
        .output()
        .expect("viabench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "viabench {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn positive(v: &serde_json::Value, key: &str) -> f64 {
    let x = v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"));
    assert!(x > 0.0 && x.is_finite(), "{key} = {x} in {v}");
    x
}

#[test]
fn tcp_latency_json_lines() {
    let lines = run_json(&[
        "latency",
        "--transport",
        "kernel-tcp",
        "--size",
        "8,4096",
        "--iters",
        "200",
        "--json",
    ]);
    assert_eq!(lines.len(), 2);
    for (line, size) in lines.iter().zip([8, 4096]) {
        assert_eq!(line["transport"], "kernel-tcp");
        assert_eq!(line["test"], "latency");
        assert_eq!(line["size"], size);
        assert_eq!(line["iters"], 200);
        assert_eq!(line["mode"], "block");
        // Default pinning: client 0, server 1 (or none on a one-CPU runner).
        let pin = line["pin"].as_str().unwrap();
        assert!(pin == "none" || pin.starts_with("client:"), "pin {pin}");
        let min = positive(line, "min_ns");
        let median = positive(line, "median_ns");
        let p99 = positive(line, "p99_ns");
        positive(line, "mean_ns");
        assert!(min <= median && median <= p99, "{line}");
    }
}

#[test]
fn udp_spin_bandwidth_verified_json_line() {
    let lines = run_json(&[
        "bandwidth",
        "--transport",
        "kernel-udp-spin",
        "--size",
        "65536",
        "--iters",
        "50",
        "--verify",
        "--json",
    ]);
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_eq!(line["test"], "bandwidth");
    assert_eq!(line["size"], 65536);
    assert_eq!(line["iters"], 50);
    assert_eq!(line["verify"], true);
    assert_eq!(line["mode"], "spin");
    positive(line, "gbytes_per_s");
    positive(line, "msgs_per_s");
    let delivered = line["delivered_msgs"].as_u64().unwrap();
    let lost = line["lost_msgs"].as_u64().unwrap();
    assert_eq!(delivered + lost, 50);
    assert!(delivered > 0);
}

#[test]
fn tcp_spin_bandwidth_verified_table() {
    let out = Command::new(env!("CARGO_BIN_EXE_viabench"))
        .args([
            "bandwidth",
            "-t",
            "kernel-tcp-spin",
            "-s",
            "4K,1M",
            "-n",
            "20",
            "--window",
            "4",
            "--verify",
        ])
        .args(["--cpu", "none"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("kernel-tcp-spin") && table.contains("1M"),
        "{table}"
    );
}

#[test]
fn bad_arguments_fail_cleanly() {
    for args in [
        &["latency", "--transport", "nope", "--size", "8"][..],
        &["latency", "--transport", "kernel-tcp", "--size", "4X"][..],
        &[
            "latency",
            "--transport",
            "kernel-tcp",
            "--size",
            "8",
            "--cpu",
            "0,4096",
        ][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_viabench"))
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!out.stderr.is_empty());
    }
}
