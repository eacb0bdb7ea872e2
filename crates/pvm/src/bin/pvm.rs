//! The `pvm` console: `pvm [-n host] [-d mask] [hostfile]`. As stock's, it
//! starts a pvmd with those arguments if none runs (else says "pvmd
//! already running."), enrolls, runs `$HOME/.pvmrc`, then reads commands
//! (see openvia_pvm::console).

use std::os::unix::net::UnixStream;

use openvia_pvm::console::Console;
use openvia_pvm::task::{self, Task};

/// C notation: 0x hex, leading 0 octal, else decimal (stock's pvmstrtoi).
fn c_int(s: &str) -> i32 {
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        i64::from_str_radix(&s[1..], 8)
    } else {
        s.parse::<i64>()
    };
    v.unwrap_or(0) as i32
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Stock reads the debug mask from the first argument only.
    let debug = args.first().and_then(|a| a.strip_prefix("-d")).map(c_int);
    if UnixStream::connect(openvia_pvm::paths::daemon_socket()).is_ok() {
        println!("pvmd already running.");
    } else if task::start_daemon_with(&args).is_err() {
        eprintln!(
            "libpvm [pid{}]: Console: Can't start pvmd",
            std::process::id()
        );
        std::process::exit(1);
    }
    let t = match Task::enroll_as(String::new()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("libpvm [pid{}]: pvm_mytid(): {e}", std::process::id());
            std::process::exit(1);
        }
    };
    let mut c = Console::new(t);
    if let Some(mask) = debug {
        c.set_option(2, mask);
    }
    c.read_pvmrc();
    c.run();
}
