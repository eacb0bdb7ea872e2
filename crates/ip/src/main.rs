//! `viaip up IFNAME ADDR/PREFIX [...]` and `viaip show [IFNAME]`.
//!
//! `up` prints one line, `viaip: IFNAME up ...`, once the interface is
//! configured and packets flow (with `-d`, the parent prints it and exits
//! when the background instance is ready: a readiness signal for scripts).
//! SIGINT, SIGTERM and SIGHUP end the process; the interface goes with its
//! TUN descriptor, as it does on kill -9.

use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use viaip::daemon::{self, UpConfig};
use viaip::link::Mode;

#[derive(Parser)]
#[command(
    name = "viaip",
    about = "IP over openvia: a TUN interface carried by VIA messages"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Connected,
    Datagram,
}

#[derive(Subcommand)]
enum Cmd {
    /// Creates IFNAME with ADDR/PREFIX and carries its packets until stopped.
    Up {
        ifname: String,
        /// The overlay address, e.g. 10.77.0.1/24.
        addr: String,
        /// The underlay interface: the device is /dev/via_<UNDERLAY_IF>.
        #[arg(long, conflicts_with = "device")]
        link: Option<String>,
        /// The openvia network device (default /dev/via_udp).
        #[arg(long)]
        device: Option<String>,
        #[arg(long, value_enum, default_value = "connected")]
        mode: ModeArg,
        /// Overlay MTU (default: 65520 connected, the device's datagram
        /// payload in datagram mode).
        #[arg(long)]
        mtu: Option<usize>,
        /// Lines `OVERLAY_IPV4 UNDERLAY_HOST`.
        #[arg(long)]
        peers: Option<String>,
        /// Runs in the background once the interface is up.
        #[arg(short = 'd')]
        background: bool,
        /// No TUN checksum and segmentation offloads (connected mode uses
        /// them by default; datagram mode never does).
        #[arg(long)]
        no_offload: bool,
        /// How long, in µs, the sending loop polls the TUN for the local
        /// program's answer after a packet was written to it (0: it
        /// sleeps at once).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=10_000))]
        answer_spin_us: u64,
        /// How long, in µs, a receiving thread polls its link for the
        /// next datagram before it sleeps (adaptive; 0: it sleeps at once).
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=10_000))]
        rx_spin_us: u64,
    },
    /// Lists the interfaces of this network namespace with their counters.
    Show { ifname: Option<String> },
}

fn parse_cidr(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected ADDR/PREFIX"))?;
    let addr = a
        .parse()
        .map_err(|_| format!("{a:?}: not an IPv4 address"))?;
    let prefix = p
        .parse::<u8>()
        .ok()
        .filter(|&p| p <= 32)
        .ok_or_else(|| format!("{p:?}: prefix 0..=32"))?;
    Ok((addr, prefix))
}

/// Blocks the stop signals in this thread (and every thread it starts);
/// a thread of their own waits for them and ends the process.
fn handle_stop_signals() {
    // SAFETY: sigset operations on a local set; pthread_sigmask with it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let set_copy = set;
        std::thread::spawn(move || {
            let mut sig = 0;
            // SAFETY: waiting on a valid set for a signal number.
            libc::sigwait(&set_copy, &mut sig);
            // The TUN closes with the process: the interface is removed.
            std::process::exit(0);
        });
    }
}

/// Forks; the parent waits for the child's first line and exits with it.
/// Returns the write end the child reports on.
fn background() -> Result<OwnedFd, String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    // SAFETY: fresh descriptors owned only here.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no threads exist yet (called first in main), so fork is safe.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error().to_string()),
        0 => {
            drop(r);
            // SAFETY: setsid has no arguments.
            unsafe { libc::setsid() };
            Ok(w)
        }
        _ => {
            drop(w);
            let mut msg = String::new();
            let _ = std::fs::File::from(r).read_to_string(&mut msg);
            if msg.starts_with("viaip: ") {
                print!("{msg}");
                std::process::exit(0);
            }
            eprint!("{msg}");
            std::process::exit(1);
        }
    }
}

/// Points stdin, stdout and stderr at /dev/null (a background instance).
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

fn up(cfg: UpConfig, bg: bool) -> Result<(), String> {
    let report = if bg { Some(background()?) } else { None };
    let fail = |e: String| -> String {
        if let Some(w) = &report {
            let _ = std::fs::File::from(w.try_clone().expect("dup"))
                .write_all(format!("viaip up: {e}\n").as_bytes());
        }
        e
    };
    let ifname = cfg.ifname.clone();
    handle_stop_signals();
    let control = viaip::control::bind(&ifname)
        .map_err(|e| fail(format!("{ifname}: an instance runs already ({e})")))?;
    let ifc = daemon::open(cfg).map_err(fail)?;
    let line = format!(
        "viaip: {ifname} up, {} mode, mtu {}, {} peer(s), pid {}\n",
        ifc.fabric.mode.name(),
        ifc.fabric.mtu,
        ifc.peers().len(),
        std::process::id()
    );
    match report {
        Some(w) => {
            let _ = std::fs::File::from(w).write_all(line.as_bytes());
            detach_stdio();
        }
        None => {
            print!("{line}");
            let _ = std::io::stdout().flush();
        }
    }
    Err(daemon::run(ifc, control))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Up {
            ifname,
            addr,
            link,
            device,
            mode,
            mtu,
            peers,
            background,
            no_offload,
            answer_spin_us,
            rx_spin_us,
        } => (|| {
            let (addr, prefix) = parse_cidr(&addr)?;
            let device = match (&link, device) {
                (Some(l), _) => format!("/dev/via_{l}"),
                (None, Some(d)) => d,
                (None, None) => "/dev/via_udp".to_string(),
            };
            // The underlay interface, for discovery: named, or the
            // interface a `/dev/via_<ifname>` device is opened on.
            let link = link.or_else(|| {
                device
                    .strip_prefix("/dev/via_")
                    .filter(|i| *i != "udp" && *i != "lo")
                    .map(str::to_string)
            });
            let peers = match peers {
                Some(path) => {
                    let text =
                        std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
                    viaip::peers::parse(&text).map_err(|e| format!("{path}: {e}"))?
                }
                None => Vec::new(),
            };
            let mode = match mode {
                ModeArg::Connected => Mode::Connected,
                ModeArg::Datagram => Mode::Datagram,
            };
            let cfg = UpConfig {
                ifname,
                addr,
                prefix,
                device,
                mode,
                mtu,
                peers,
                link,
                offload: !no_offload,
                answer_spin: std::time::Duration::from_micros(answer_spin_us),
                rx_spin: std::time::Duration::from_micros(rx_spin_us),
            };
            up(cfg, background)
        })(),
        Cmd::Show { ifname } => show(ifname),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("viaip: {e}");
            ExitCode::FAILURE
        }
    }
}

fn show(ifname: Option<String>) -> Result<(), String> {
    let names = match ifname {
        Some(n) => vec![n],
        None => viaip::control::instances().map_err(|e| e.to_string())?,
    };
    for n in names {
        let r = viaip::control::query(&n).map_err(|e| format!("{n}: no instance ({e})"))?;
        print!("{r}");
    }
    Ok(())
}
