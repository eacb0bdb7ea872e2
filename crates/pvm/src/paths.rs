//! Where the pieces of one virtual machine meet: the pvmd's socket and log,
//! per user (as PVM keys its files by uid), overridable for tests so that
//! several machines, or ours next to stock PVM, can run side by side.

use std::path::PathBuf;

fn tmp_dir() -> PathBuf {
    std::env::var_os("PVM_TMP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// The pvmd's listening socket (`OPENVIA_PVM_SOCK` overrides).
pub fn daemon_socket() -> PathBuf {
    match std::env::var_os("OPENVIA_PVM_SOCK") {
        Some(p) => PathBuf::from(p),
        None => tmp_dir().join(format!("openvia-pvmd.{}", uid())),
    }
}

/// The pvmd's log, which also collects unclaimed task output.
pub fn daemon_log() -> PathBuf {
    match std::env::var_os("OPENVIA_PVM_SOCK") {
        Some(p) => PathBuf::from(format!("{}.log", p.to_string_lossy())),
        None => tmp_dir().join(format!("openvia-pvml.{}", uid())),
    }
}

/// PVM_ARCH, LINUX64 unless set.
pub fn arch() -> String {
    std::env::var("PVM_ARCH").unwrap_or_else(|_| "LINUX64".to_string())
}

/// PVM_ROOT, Debian's default unless set.
pub fn pvm_root() -> PathBuf {
    std::env::var_os("PVM_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/pvm3"))
}

/// The executable search path: `$HOME/pvm3/bin/$PVM_ARCH`, then
/// `$PVM_ROOT/bin/$PVM_ARCH`, as PVM's default `ep=`.
pub fn default_exec_path() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(home) = std::env::var_os("HOME") {
        v.push(PathBuf::from(home).join("pvm3/bin").join(arch()));
    }
    v.push(pvm_root().join("bin").join(arch()));
    v
}

/// This host's name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
