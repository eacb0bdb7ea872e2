//! Results as records, and their two renderings: JSON lines for programs
//! (one object per test and size, stable field names) and aligned tables
//! for people.

use serde::Serialize;
use std::fmt::Write as _;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TestKind {
    Latency,
    Bandwidth,
}

/// The measured figures of one test.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Figures {
    /// One-way latency, nanoseconds.
    Latency {
        min_ns: f64,
        median_ns: f64,
        p99_ns: f64,
        mean_ns: f64,
        /// Round trips repeated after a lost datagram (unreliable level);
        /// left out of the JSON when none were.
        #[serde(skip_serializing_if = "is_zero")]
        repeated: u64,
    },
    /// Delivered throughput over the measured stream.
    Bandwidth {
        gbytes_per_s: f64,
        msgs_per_s: f64,
        seconds: f64,
        window: u32,
        verify: bool,
        delivered_msgs: u64,
        lost_msgs: u64,
    },
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One line of `--json` output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    pub transport: String,
    pub test: TestKind,
    pub size: usize,
    pub iters: u64,
    pub warmup: u64,
    #[serde(flatten)]
    pub figures: Figures,
    pub mode: &'static str,
    pub pin: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The openvia device measured (None for kernel sockets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<crate::transports::DeviceNote>,
    /// compare only: >1 means better than kernel-tcp (lower latency or
    /// higher bandwidth), for the same test and size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup_vs_kernel_tcp: Option<f64>,
    /// compare only: the same against shm, when shm is registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup_vs_shm: Option<f64>,
}

impl Record {
    /// The figure ratios compare: median latency or GB/s.
    pub fn headline(&self) -> f64 {
        match self.figures {
            Figures::Latency { median_ns, .. } => median_ns,
            Figures::Bandwidth { gbytes_per_s, .. } => gbytes_per_s,
        }
    }

    /// How many times better `self` is than `base` (same test and size).
    pub fn speedup_over(&self, base: &Record) -> Option<f64> {
        let (mine, theirs) = (self.headline(), base.headline());
        let ratio = match self.test {
            TestKind::Latency => theirs / mine,
            TestKind::Bandwidth => mine / theirs,
        };
        ratio.is_finite().then_some(ratio)
    }

    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("records always serialise")
    }
}

/// `4096` → `4K`, `1048576` → `1M`, otherwise the number of bytes.
pub fn human_size(size: usize) -> String {
    if size >= 1 << 20 && size & ((1 << 20) - 1) == 0 {
        format!("{}M", size >> 20)
    } else if size >= 1 << 10 && size & ((1 << 10) - 1) == 0 {
        format!("{}K", size >> 10)
    } else {
        size.to_string()
    }
}

fn ns(x: f64) -> String {
    format!("{x:.1}")
}

/// GB/s with three significant decimals even for tiny messages.
pub fn gbs(x: f64) -> String {
    if x >= 0.1 {
        format!("{x:.3}")
    } else {
        format!("{x:.6}")
    }
}

/// Renders rows under headers, columns padded to their widest cell; the
/// first `left` columns are left-aligned (names), the rest right-aligned (numbers).
pub fn render_table(headers: &[&str], rows: &[Vec<String>], left: usize) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut parts = Vec::new();
        for (i, cell) in cells.enumerate() {
            let w = widths[i];
            parts.push(if i < left {
                format!("{cell:<w$}")
            } else {
                format!("{cell:>w$}")
            });
        }
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(&mut out, &mut headers.iter().copied());
    for row in rows {
        line(&mut out, &mut row.iter().map(String::as_str));
    }
    out
}

/// The table for `viabench latency` / `bandwidth`.
pub fn render_records(records: &[Record]) -> String {
    let Some(first) = records.first() else {
        return String::new();
    };
    let mut out = String::new();
    match first.test {
        TestKind::Latency => {
            let _ = writeln!(
                out,
                "# latency: one-way = round trip / 2, nanoseconds; pin={}",
                first.pin
            );
            let rows: Vec<Vec<String>> = records
                .iter()
                .filter_map(|r| match r.figures {
                    Figures::Latency {
                        min_ns,
                        median_ns,
                        p99_ns,
                        mean_ns,
                        ..
                    } => Some(vec![
                        r.transport.clone(),
                        r.mode.to_string(),
                        human_size(r.size),
                        r.iters.to_string(),
                        ns(min_ns),
                        ns(median_ns),
                        ns(p99_ns),
                        ns(mean_ns),
                        r.note.clone().unwrap_or_default(),
                    ]),
                    _ => None,
                })
                .collect();
            let headers = [
                "transport",
                "mode",
                "size",
                "iters",
                "min_ns",
                "median_ns",
                "p99_ns",
                "mean_ns",
                "note",
            ];
            out.push_str(&render_table(&headers, &rows, 2));
        }
        TestKind::Bandwidth => {
            let _ = writeln!(
                out,
                "# bandwidth: delivered bytes / sender time, GB/s = 1e9 B/s; pin={}",
                first.pin
            );
            let rows: Vec<Vec<String>> = records
                .iter()
                .filter_map(|r| match r.figures {
                    Figures::Bandwidth {
                        gbytes_per_s,
                        msgs_per_s,
                        window,
                        verify,
                        lost_msgs,
                        ..
                    } => Some(vec![
                        r.transport.clone(),
                        r.mode.to_string(),
                        human_size(r.size),
                        r.iters.to_string(),
                        window.to_string(),
                        gbs(gbytes_per_s),
                        format!("{msgs_per_s:.0}"),
                        lost_msgs.to_string(),
                        if verify { "yes" } else { "no" }.to_string(),
                        r.note.clone().unwrap_or_default(),
                    ]),
                    _ => None,
                })
                .collect();
            let headers = [
                "transport",
                "mode",
                "size",
                "msgs",
                "window",
                "GB/s",
                "msgs/s",
                "lost",
                "verified",
                "note",
            ];
            out.push_str(&render_table(&headers, &rows, 2));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latency(transport: &str, median: f64) -> Record {
        Record {
            transport: transport.into(),
            test: TestKind::Latency,
            size: 8,
            iters: 100,
            warmup: 10,
            figures: Figures::Latency {
                min_ns: 1.0,
                median_ns: median,
                p99_ns: 3.0,
                mean_ns: 2.0,
                repeated: 0,
            },
            mode: "spin",
            pin: "client:0,server:1".into(),
            note: None,
            device: None,
            speedup_vs_kernel_tcp: None,
            speedup_vs_shm: None,
        }
    }

    #[test]
    fn json_has_the_contract_fields() {
        let v: serde_json::Value =
            serde_json::from_str(&latency("kernel-tcp", 2.5).to_json_line()).unwrap();
        for key in [
            "transport",
            "test",
            "size",
            "iters",
            "median_ns",
            "p99_ns",
            "min_ns",
            "mean_ns",
            "mode",
            "pin",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["test"], "latency");
        assert!(v.get("note").is_none());
    }

    #[test]
    fn speedup_direction() {
        let slow = latency("kernel-tcp", 10.0);
        let fast = latency("shm", 2.0);
        assert_eq!(fast.speedup_over(&slow), Some(5.0));
        let mut bw = fast.clone();
        bw.test = TestKind::Bandwidth;
        bw.figures = Figures::Bandwidth {
            gbytes_per_s: 4.0,
            msgs_per_s: 1.0,
            seconds: 1.0,
            window: 64,
            verify: false,
            delivered_msgs: 1,
            lost_msgs: 0,
        };
        let mut base = bw.clone();
        if let Figures::Bandwidth { gbytes_per_s, .. } = &mut base.figures {
            *gbytes_per_s = 2.0;
        }
        assert_eq!(bw.speedup_over(&base), Some(2.0));
    }

    #[test]
    fn table_is_aligned() {
        let t = render_table(
            &["a", "num"],
            &[
                vec!["long-name".into(), "1".into()],
                vec!["x".into(), "12345".into()],
            ],
            1,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "a            num");
        assert_eq!(lines[1], "long-name      1");
        assert_eq!(lines[2], "x          12345");
        assert_eq!(human_size(4096), "4K");
        assert_eq!(human_size(1 << 20), "1M");
        assert_eq!(human_size(65537), "65537");
    }
}
