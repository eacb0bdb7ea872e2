//! openvia's pvmd: `pvmd [--ready-fd N] [--foreground] [hostfile]`.
//! Without --foreground it detaches (fork + setsid) once it listens, and
//! writes one byte to the ready fd so the starter knows it may connect.

use std::io::Write;
use std::os::fd::FromRawFd;

fn main() {
    let mut ready_fd: Option<i32> = None;
    let mut foreground = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--openvia-version" => {
                println!("openvia pvmd {}", env!("CARGO_PKG_VERSION"));
                return;
            }
            "--ready-fd" => ready_fd = args.next().and_then(|s| s.parse().ok()),
            "--foreground" => foreground = true,
            _ => {}
        }
    }
    let cfg = openvia_pvm::daemon::Config::from_env();
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
