//! The command line: subcommands, their options, and the parsers for size
//! lists (`8,4K,1M`) and CPU pinning (`0,1` / `none`).

use crate::transports::WaitMode;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "viabench",
    version,
    about = "Latency and bandwidth of openvia transports and of kernel TCP/UDP, measured the same way"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Ping-pong latency (one-way = round trip / 2).
    Latency(LatencyArgs),
    /// Windowed streaming bandwidth (OSU osu_bw style).
    Bandwidth(BandwidthArgs),
    /// The other end of a run; with --peer on the client for runs across hosts.
    Serve(ServeArgs),
    /// Latency and bandwidth of every transport available here, in one table.
    Compare(CompareArgs),
    /// List the transports and whether they can run here.
    Transports(TransportsArgs),
    /// Cost of VipPostSend + VipSendDone per descriptor (shared-memory device).
    Overhead(OverheadArgs),
    /// Many connections: round-robin ping-pong over N VIs, waiting per VI
    /// or on one CQ; connect times and memory (shared-memory device).
    Scale(ScaleArgs),
    /// Round trip of one cache line between two CPUs (the floor under any
    /// shared-memory ping-pong between them; on a VM it moves between runs).
    Line(LineArgs),
}

#[derive(Args, Debug, Clone)]
pub struct LineArgs {
    /// The two CPUs, as `A,B`.
    #[arg(long, default_value = "0,1", value_parser = parse_cpu_pair)]
    pub cpus: (usize, usize),
    /// Timed batches (the median is printed).
    #[arg(long, default_value_t = 21)]
    pub batches: usize,
    /// Round trips per batch.
    #[arg(long, default_value_t = 100_000)]
    pub per_batch: u64,
    #[arg(long)]
    pub json: bool,
}

/// `A,B`: two CPU numbers.
fn parse_cpu_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("expected two CPUs as A,B, got {s:?}"))?;
    let cpu = |x: &str| {
        x.trim()
            .parse::<usize>()
            .map_err(|_| format!("not a CPU number: {x:?}"))
    };
    Ok((cpu(a)?, cpu(b)?))
}

/// How `scale` waits for each receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScaleWait {
    /// VipRecvWait on the VI.
    Vi,
    /// VipCQWait on one CQ fed by every receive queue.
    Cq,
    /// VipCQDone polled in a loop.
    CqDone,
}

impl ScaleWait {
    pub fn as_str(self) -> &'static str {
        match self {
            ScaleWait::Vi => "vi",
            ScaleWait::Cq => "cq",
            ScaleWait::CqDone => "cq-done",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScaleRole {
    Client,
    Server,
}

#[derive(Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Connected VI pairs.
    #[arg(long, default_value_t = 1)]
    pub vis: usize,
    #[arg(long, value_enum, default_value_t = ScaleWait::Vi)]
    pub wait: ScaleWait,
    /// Measured round trips (over all VIs).
    #[arg(long, default_value_t = 200_000)]
    pub rounds: u64,
    #[arg(long, default_value_t = 20_000)]
    pub warmup: u64,
    /// Round trips per timed batch (the median is over batches).
    #[arg(long, default_value_t = 2048)]
    pub batch: u64,
    /// First make every ring wrap (16 KiB ping-pongs), as busy connections' have.
    #[arg(long)]
    pub wrap: bool,
    /// CPUs for client,server (`0,1` default, `none` to disable pinning).
    #[arg(long, value_parser = parse_pin)]
    pub cpu: Option<PinRequest>,
    #[arg(long)]
    pub json: bool,
    #[arg(long, value_enum, default_value_t = ScaleRole::Client, hide = true)]
    pub role: ScaleRole,
    #[arg(long, hide = true)]
    pub disc: Option<String>,
    #[arg(long, hide = true)]
    pub server_cpu: Option<usize>,
}

#[derive(Args, Debug, Clone)]
pub struct OverheadArgs {
    /// Measured batches of 64 descriptors.
    #[arg(long, default_value_t = 20000)]
    pub batches: u64,
    /// Batches before measuring.
    #[arg(long, default_value_t = 2000)]
    pub warmup: u64,
    /// CPU of the posting thread.
    #[arg(long, default_value = "0")]
    pub cpu_sender: Option<usize>,
    /// CPU of the draining thread.
    #[arg(long, default_value = "1")]
    pub cpu_receiver: Option<usize>,
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Options shared by `latency` and `bandwidth`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Transport name (see `viabench transports`).
    #[arg(long, short = 't')]
    pub transport: String,
    /// Message sizes: comma-separated, K = KiB, M = MiB (e.g. 8,4K,1M).
    #[arg(long, short = 's', value_parser = parse_size_list)]
    pub size: SizeList,
    /// Measured iterations (latency: round trips; bandwidth: messages).
    /// Default adapts to the size.
    #[arg(long, short = 'n')]
    pub iters: Option<u64>,
    /// Warm-up iterations, not measured (default: 10% of iters, at most 1000).
    #[arg(long)]
    pub warmup: Option<u64>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Wait mode (default: the transport's own, e.g. spin for kernel-tcp-spin).
    #[arg(long, value_enum)]
    pub mode: Option<WaitMode>,
    /// A `viabench serve` running elsewhere (HOST[:PORT]); default: start one here.
    #[arg(long)]
    pub peer: Option<String>,
    /// CPUs for client,server (`0,1` default, `none` to disable pinning).
    #[arg(long, value_parser = parse_pin)]
    pub cpu: Option<PinRequest>,
}

#[derive(Args, Debug, Clone)]
pub struct LatencyArgs {
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug, Clone)]
pub struct BandwidthArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Messages outstanding before the sender waits for an acknowledgement.
    #[arg(long, short = 'w', default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub window: u32,
    /// Fill every message with a per-(index, offset) pattern and check every byte.
    #[arg(long)]
    pub verify: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[arg(long, short = 't')]
    pub transport: String,
    /// Port to listen on (0 = any free port).
    #[arg(long, short = 'p', default_value_t = 18515)]
    pub port: u16,
    #[arg(long, value_enum)]
    pub mode: Option<WaitMode>,
    /// Pin the server to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Largest message clients may ask for.
    #[arg(long, value_parser = parse_size, default_value = "4M")]
    pub max_size: usize,
    /// Largest bandwidth window clients may ask for.
    #[arg(long, default_value_t = 64)]
    pub max_window: u32,
    /// Listen on loopback only.
    #[arg(long)]
    pub local: bool,
    /// Serve one client, then exit.
    #[arg(long)]
    pub once: bool,
    /// Write `READY <address>` to this file descriptor instead of stdout
    /// (used when viabench starts its own server).
    #[arg(long, hide = true)]
    pub ready_fd: Option<i32>,
}

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    #[arg(long)]
    pub json: bool,
    /// Fewer iterations (a smoke test, e.g. for CI).
    #[arg(long)]
    pub quick: bool,
    /// CPUs for client,server (`0,1` default, `none` to disable pinning).
    #[arg(long, value_parser = parse_pin)]
    pub cpu: Option<PinRequest>,
    /// Only these transports (comma-separated); default: all available.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct TransportsArgs {
    #[arg(long)]
    pub json: bool,
}

/// Message sizes in bytes, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeList(pub Vec<usize>);

/// What `--cpu` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinRequest {
    None,
    Cpus { client: usize, server: usize },
}

/// Largest message size accepted (bandwidth keeps a window of them in flight).
pub const MAX_SIZE: usize = 1 << 30;

/// Parses one size: a number with an optional K (KiB) or M (MiB) suffix.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let scale: usize = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        _ => return Err(format!("`{text}`: unknown unit (use K or M)")),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size"))?;
    let size = n
        .checked_mul(scale)
        .ok_or_else(|| format!("`{text}` is too large"))?;
    if size == 0 || size > MAX_SIZE {
        return Err(format!("`{text}`: size must be between 1 byte and 1024M"));
    }
    Ok(size)
}

/// Parses a comma-separated size list.
pub fn parse_size_list(text: &str) -> Result<SizeList, String> {
    let sizes = text
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(parse_size)
        .collect::<Result<Vec<_>, _>>()?;
    if sizes.is_empty() {
        return Err("empty size list".into());
    }
    Ok(SizeList(sizes))
}

/// Parses `--cpu`: `none`, or `A,B` (client A, server B).
pub fn parse_pin(text: &str) -> Result<PinRequest, String> {
    if text.eq_ignore_ascii_case("none") {
        return Ok(PinRequest::None);
    }
    let (a, b) = text
        .split_once(',')
        .ok_or("want `A,B` (client,server CPUs) or `none`")?;
    let cpu = |s: &str| {
        s.trim()
            .parse::<usize>()
            .map_err(|_| format!("`{s}` is not a CPU number"))
    };
    Ok(PinRequest::Cpus {
        client: cpu(a)?,
        server: cpu(b)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn a_cpu_pair_is_two_numbers() {
        assert_eq!(parse_cpu_pair("0,1"), Ok((0, 1)));
        assert_eq!(parse_cpu_pair(" 3, 12"), Ok((3, 12)));
        assert!(parse_cpu_pair("0").is_err());
        assert!(parse_cpu_pair("0,x").is_err());
    }

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(
            parse_size_list("8,4K,1M").unwrap(),
            SizeList(vec![8, 4096, 1 << 20])
        );
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size(" 65536 ").unwrap(), 65536);
        assert_eq!(parse_size_list("8,,64").unwrap(), SizeList(vec![8, 64]));
    }

    #[test]
    fn bad_sizes_rejected() {
        for bad in ["", "0", "K", "4G", "4X", "-1", "1.5K", "2048M"] {
            assert!(parse_size(bad).is_err(), "{bad} accepted");
        }
        assert!(parse_size_list(",").is_err());
    }

    #[test]
    fn pin_forms() {
        assert_eq!(parse_pin("none").unwrap(), PinRequest::None);
        assert_eq!(
            parse_pin("0,1").unwrap(),
            PinRequest::Cpus {
                client: 0,
                server: 1
            }
        );
        assert!(parse_pin("0").is_err());
        assert!(parse_pin("a,1").is_err());
    }

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "viabench",
            "bandwidth",
            "--transport",
            "kernel-udp",
            "--size",
            "64K",
            "--verify",
            "--window",
            "8",
        ])
        .unwrap();
        match cli.command {
            Command::Bandwidth(b) => {
                assert_eq!(b.run.size, SizeList(vec![65536]));
                assert!(b.verify);
                assert_eq!(b.window, 8);
            }
            other => panic!("parsed as {other:?}"),
        }
    }
}
