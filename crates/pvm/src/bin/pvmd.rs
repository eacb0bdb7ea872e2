//! openvia's pvmd: `pvmd [--ready-fd N] [--foreground] [hostfile]`.
//! Without --foreground it detaches (fork + setsid) once it listens, and
//! writes one byte to the ready fd so the starter knows it may connect.
//! A master starts slaves as `pvmd --slave N --master M --name HOST --disc D
//! [--ep PATH] [--wd DIR] [--env K=V]...` through `PVM_RSH`.

use std::io::Write;
use std::os::fd::FromRawFd;

fn main() {
    let mut ready_fd: Option<i32> = None;
    let mut foreground = false;
    let mut hostfile = None;
    let mut host_name: Option<String> = None;
    let mut slave: Option<openvia_pvm::daemon::SlaveArgs> = None;
    let mut args = std::env::args().skip(1);
    let num = |v: Option<String>| v.and_then(|s| s.parse::<u32>().ok()).unwrap_or(0);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--openvia-version" => {
                println!("openvia pvmd {}", env!("CARGO_PKG_VERSION"));
                return;
            }
            "--ready-fd" => ready_fd = args.next().and_then(|s| s.parse().ok()),
            "--foreground" => foreground = true,
            "--slave" => slave.get_or_insert_with(Default::default).host_num = num(args.next()),
            "--master" => slave.get_or_insert_with(Default::default).master_num = num(args.next()),
            "--name" => {
                slave.get_or_insert_with(Default::default).name = args.next().unwrap_or_default()
            }
            "--disc" => {
                slave.get_or_insert_with(Default::default).disc = args.next().unwrap_or_default()
            }
            "--ep" => {
                slave.get_or_insert_with(Default::default).exec_path = args
                    .next()
                    .map(|p| p.split(':').map(std::path::PathBuf::from).collect())
            }
            "--wd" => {
                slave.get_or_insert_with(Default::default).workdir = args.next().map(Into::into)
            }
            "--env" => {
                // Before any thread exists: set_var is sound here.
                if let Some((k, v)) = args.next().as_deref().and_then(|kv| kv.split_once('=')) {
                    std::env::set_var(k, v);
                }
            }
            // Stock's `-nNAME` (this host's name) and `-dMASK` (debug
            // mask, accepted; this pvmd has no debug classes).
            "-n" => host_name = args.next(),
            s if s.starts_with("-n") => host_name = Some(s[2..].to_string()),
            "-d" => {
                args.next();
            }
            s if s.starts_with("-d") => {}
            s if !s.starts_with('-') => hostfile = Some(std::path::PathBuf::from(s)),
            other => {
                eprintln!("pvmd: unknown option {other}");
                std::process::exit(2);
            }
        }
    }
    if let Err(e) = openvia_pvm::spin::from_env() {
        eprintln!("pvmd: {e}");
        std::process::exit(2);
    }
    let mut cfg = openvia_pvm::daemon::Config::from_env();
    cfg.hostfile = hostfile;
    if let Some(n) = host_name {
        cfg.hostname = n;
    }
    if let Some(s) = &slave {
        if s.host_num < 2 || s.master_num == 0 || s.name.is_empty() || s.disc.is_empty() {
            eprintln!("pvmd: --slave needs --master, --name and --disc");
            std::process::exit(2);
        }
        cfg.hostname = s.name.clone();
        if let Some(ep) = &s.exec_path {
            cfg.exec_path = ep.clone();
        }
        if let Some(wd) = &s.workdir {
            let _ = std::env::set_current_dir(wd);
        }
    }
    cfg.slave = slave;
    let mut d = match openvia_pvm::daemon::Daemon::bind(cfg) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("pvmd: {e}");
            std::process::exit(1);
        }
    };
    if !foreground {
        // SAFETY: single-threaded here; the child continues with our state.
        match unsafe { libc::fork() } {
            -1 => std::process::exit(1),
            0 => {
                // SAFETY: detaching from the starter's session.
                unsafe { libc::setsid() };
            }
            _ => std::process::exit(0),
        }
    }
    if let Some(fd) = ready_fd {
        // SAFETY: the starter handed us this descriptor for this one byte.
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        let _ = f.write_all(b"R");
    }
    if let Err(e) = d.run() {
        eprintln!("pvmd: {e}");
        std::process::exit(1);
    }
}
