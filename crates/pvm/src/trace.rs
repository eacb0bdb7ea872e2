//! Time marks along a message's path, for measuring where a round trip's
//! microseconds go (docs/pvm.md, "Where the time goes between hosts").
//!
//! Off unless `OPENVIA_PVM_TRACE=PREFIX` is set; then every mark appends
//! (CLOCK_MONOTONIC ns, point, bytes) to memory and [`flush`] writes them
//! to `PREFIX.<hostname>.<pid>` (a task at `pvm_exit`, a pvmd when it
//! halts). The clock is the kernel's, shared by every process of the
//! machine (network namespaces included), so marks of the four processes
//! of a round trip sort into one timeline (`python/pvm_trace.py`). Off, a
//! mark costs one load of a flag that never changes.

use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// At most this many marks are kept (about 48 MiB).
const MAX_MARKS: usize = 2 << 20;

struct Trace {
    prefix: String,
    marks: Mutex<Vec<(u64, &'static str, u32)>>,
}

fn trace() -> Option<&'static Trace> {
    static T: OnceLock<Option<Trace>> = OnceLock::new();
    T.get_or_init(|| {
        let prefix = std::env::var("OPENVIA_PVM_TRACE").ok()?;
        (!prefix.is_empty()).then(|| Trace {
            prefix,
            marks: Mutex::new(Vec::new()),
        })
    })
    .as_ref()
}

/// CLOCK_MONOTONIC in nanoseconds (the clock of the VIs' protocol timers).
pub use openvia_core::sys::now_ns;

/// Marks that the path reached `point` with a message of `bytes` bytes
/// (0 where the size is not known there).
#[inline]
pub fn mark(point: &'static str, bytes: usize) {
    if let Some(t) = trace() {
        let at = now_ns();
        let mut m = t.marks.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() < MAX_MARKS {
            m.push((at, point, bytes.min(u32::MAX as usize) as u32));
        }
    }
}

/// Writes the marks so far (and forgets them); a no-op when off.
pub fn flush() {
    let Some(t) = trace() else { return };
    let marks = std::mem::take(&mut *t.marks.lock().unwrap_or_else(|e| e.into_inner()));
    let mut host = [0u8; 256];
    // SAFETY: gethostname writes at most host.len() bytes into the array.
    unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) };
    let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
    let host = String::from_utf8_lossy(&host[..end]).into_owned();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let path = format!("{}.{host}.{pid}", t.prefix);
    let Ok(f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    else {
        return;
    };
    let mut w = std::io::BufWriter::new(f);
    for (at, point, bytes) in marks {
        let _ = writeln!(w, "{at} {host} {pid} {point} {bytes}");
    }
}
