//! `viarun [--stats] PROG ARGS…`: runs PROG with libviarun.so preloaded,
//! so that its TCP connections to other programs under viarun go over
//! openvia. With `--stats`, prints on stderr when PROG exits how many
//! connections went over which device; it then stays PROG's parent and
//! passes SIGTERM and SIGHUP on to it, so that `kill` of a server started
//! this way ends the server and still gives the line. (SIGINT from a
//! terminal reaches PROG directly: it is in the same process group.)

use std::collections::BTreeMap;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

/// PROG's process id while viarun waits for it.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe; pid is our own child.
        unsafe { libc::kill(pid, sig) };
    }
}

fn library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("VIARUN_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("../lib/libviarun.so"), dir.join("libviarun.so")]
        .into_iter()
        .find(|p| p.exists())
}

fn usage() -> ! {
    eprintln!("usage: viarun [--stats] PROG [ARGS...]");
    std::process::exit(2);
}

/// Connections of one device, from the lines its ends wrote: per key,
/// the lines of each end (connector, acceptor).
#[derive(Default)]
struct Ends(BTreeMap<String, [usize; 2]>);

impl Ends {
    fn note(&mut self, key: &str, side: &str) {
        let e = self.0.entry(key.to_string()).or_default();
        e[usize::from(side == "a")] += 1;
    }

    /// A connection is one key seen from one or both ends; the same key
    /// twice from one end is two (its port used again).
    fn count(&self) -> usize {
        self.0.values().map(|[c, a]| (*c).max(*a)).sum()
    }
}

/// "viarun: 3 connections over shm, 0 over kernel TCP". A `back` line is
/// an end of a connection agreed on a device that stayed on the kernel
/// after all (its peer exec'd a program without the library before
/// using it): it moves that key's connection to the kernel's count. A
/// `kept` line is an end of a connection that took up a VI kept from an
/// earlier one (`link::reuse`): counted on a line of its own.
fn summary(lines: &str) -> String {
    let mut devices: Vec<(String, Ends)> = Vec::new();
    let mut kernel = Ends::default();
    let mut back = Ends::default();
    let mut kept = Ends::default();
    for line in lines.lines() {
        let mut f = line.split(' ');
        let (Some(device), Some(key), Some(side)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if device == "tcp" {
            kernel.note(key, side);
            continue;
        }
        if device == "back" {
            back.note(key, side);
            continue;
        }
        if device == "kept" {
            kept.note(key, side);
            continue;
        }
        match devices.iter_mut().find(|(d, _)| d == device) {
            Some((_, ends)) => ends.note(key, side),
            None => {
                let mut ends = Ends::default();
                ends.note(key, side);
                devices.push((device.to_string(), ends));
            }
        }
    }
    for (key, ends) in &back.0 {
        let n = ends[0].max(ends[1]);
        for (_, dev) in devices.iter_mut() {
            if let Some(e) = dev.0.get_mut(key) {
                e[0] = e[0].saturating_sub(n);
                e[1] = e[1].saturating_sub(n);
            }
        }
        kernel.0.entry(key.clone()).or_default()[0] += n;
    }
    if devices.is_empty() {
        devices.push(("shm".to_string(), Ends::default()));
    }
    let mut out = String::from("viarun: ");
    for (i, (device, ends)) in devices.iter().enumerate() {
        if i == 0 {
            out += &format!("{} connections over {device}, ", ends.count());
        } else {
            out += &format!("{} over {device}, ", ends.count());
        }
    }
    out += &format!("{} over kernel TCP", kernel.count());
    if kept.count() > 0 {
        out += &format!(
            "\nviarun: {} on a VI kept from an earlier connection",
            kept.count()
        );
    }
    out
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let stats = args.first().is_some_and(|a| a == "--stats");
    if stats {
        args.remove(0);
    }
    if args.is_empty() || args[0] == "-h" || args[0] == "--help" {
        usage();
    }
    let Some(lib) = library() else {
        eprintln!("viarun: libviarun.so not found (set VIARUN_LIB)");
        std::process::exit(127);
    };
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{} {p}", lib.display()),
        _ => lib.display().to_string(),
    };
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..]).env("LD_PRELOAD", preload);
    if !stats {
        let e = cmd.exec();
        eprintln!("viarun: {}: {e}", args[0]);
        std::process::exit(127);
    }
    let file = std::env::temp_dir().join(format!(
        "viarun-stats-{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    if let Err(e) = std::fs::File::create(&file) {
        eprintln!("viarun: {}: {e}", file.display());
        std::process::exit(127);
    }
    cmd.env("VIARUN_STATS_FILE", &file);
    let status = match cmd.spawn().and_then(|mut child| {
        CHILD.store(child.id() as i32, Ordering::Relaxed);
        for sig in [libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: installing a handler that only calls kill(2).
            unsafe { libc::signal(sig, forward as *const () as libc::sighandler_t) };
        }
        child.wait()
    }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("viarun: {}: {e}", args[0]);
            let _ = std::fs::remove_file(&file);
            std::process::exit(127);
        }
    };
    let lines = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    eprintln!("{}", summary(&lines));
    std::process::exit(
        status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
    );
}

#[cfg(test)]
mod tests {
    use super::summary;

    #[test]
    fn counts_each_connection_once() {
        // Both ends of a-b; one end of c-d; e-f on the kernel.
        let lines = "shm a-b c\nshm a-b a\nshm c-d a\ntcp e-f c\n";
        assert_eq!(
            summary(lines),
            "viarun: 2 connections over shm, 1 over kernel TCP"
        );
        // A port used again: a-b twice from each end is two connections.
        let again = "shm a-b c\nshm a-b a\nshm a-b c\nshm a-b a\ntcp a-b c\n";
        assert_eq!(
            summary(again),
            "viarun: 2 connections over shm, 1 over kernel TCP"
        );
        // a-b agreed on shm, then stayed on the kernel (its acceptor
        // exec'd a program without the library): one end says so.
        let back = "shm a-b c\nshm a-b a\nshm c-d c\nback a-b c\n";
        assert_eq!(
            summary(back),
            "viarun: 1 connections over shm, 1 over kernel TCP"
        );
        assert_eq!(
            summary(""),
            "viarun: 0 connections over shm, 0 over kernel TCP"
        );
        // c-d went on a VI kept from a-b: a line of its own.
        let kept = "shm a-b c\nshm a-b a\nshm c-d c\nshm c-d a\nkept c-d c\nkept c-d a\n";
        assert_eq!(
            summary(kept),
            "viarun: 2 connections over shm, 0 over kernel TCP\n\
             viarun: 1 on a VI kept from an earlier connection"
        );
    }
}
