//! Whether a program about to be exec'd will run without this library: a
//! *bare* program. The library reaches a program through LD_PRELOAD, so a
//! program does not get it when the environment it is given names no
//! libviarun, when it is linked statically (no ELF interpreter:
//! busybox, most Go programs), or when it is set-user-ID or
//! set-group-ID to someone else (the loader then ignores LD_PRELOAD
//! paths outside the system's). A Go program linked dynamically (for the
//! C library's resolver) loads the library but makes its system calls
//! itself, past it: it is known by its Go build-ID note. A script is
//! judged by its interpreter (`#!`, one level).
//!
//! A bare program reads and writes its inherited sockets through the
//! kernel only, so a connection both ends agreed to carry but did not yet
//! use must stay on kernel TCP for it (`conn::go_bare_before_exec`).
//!
//! These checks may run in a vfork child: they allocate nothing (fixed
//! buffers on the stack) and only open, read and close files. Whatever
//! cannot be read is judged not bare, as before this check.

use libc::{c_char, c_int};
use std::ffi::CStr;

use crate::real::real;

/// The program an exec names.
#[derive(Clone, Copy)]
pub enum Target {
    /// A path, as execve and posix_spawn take it.
    Path(*const c_char),
    /// A file name looked up in PATH unless it holds a slash, as execvp
    /// and posix_spawnp take it.
    Search(*const c_char),
    /// An open file, as fexecve takes it.
    Fd(c_int),
}

/// Most bytes of a path built here (PATH lookup, a script's interpreter).
const PATH_MAX: usize = 4096;

/// Whether the program `target` names, given environment `envp` (null:
/// this process's own), will run without the library.
pub fn will_be_bare(target: Target, envp: *const *const c_char) -> bool {
    if !preloads_us(envp) {
        return true;
    }
    let mut buf = [0u8; PATH_MAX];
    match target {
        Target::Fd(fd) => fd_is_bare(fd, 1),
        Target::Path(p) if !p.is_null() => path_is_bare(p, 1),
        Target::Search(f) if !f.is_null() => match search(f, &mut buf) {
            Some(p) => path_is_bare(p, 1),
            None => false,
        },
        _ => false,
    }
}

/// Whether `envp` (null: `environ`) has an LD_PRELOAD that names us.
fn preloads_us(envp: *const *const c_char) -> bool {
    extern "C" {
        static environ: *const *const c_char;
    }
    // SAFETY: reading the C library's environment pointer.
    let mut e = if envp.is_null() {
        unsafe { environ }
    } else {
        envp
    };
    if e.is_null() {
        return false;
    }
    loop {
        // SAFETY: `e` walks a null-terminated array of C strings.
        let s = unsafe { *e };
        if s.is_null() {
            return false;
        }
        // SAFETY: each entry is a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(s) }.to_bytes();
        if let Some(v) = bytes.strip_prefix(b"LD_PRELOAD=") {
            return contains(v, b"libviarun");
        }
        // SAFETY: within the array, before its null end.
        e = unsafe { e.add(1) };
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// execvp's lookup: `file` itself if it holds a slash, else the first
/// executable `DIR/file` of PATH (the C library's default path without
/// one). The path is built in `buf`.
fn search(file: *const c_char, buf: &mut [u8; PATH_MAX]) -> Option<*const c_char> {
    // SAFETY: exec's file argument is a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(file) }.to_bytes();
    if name.is_empty() {
        return None;
    }
    if name.contains(&b'/') {
        return Some(file);
    }
    // SAFETY: getenv reads the environment; the result is used at once.
    let path = unsafe { libc::getenv(c"PATH".as_ptr()) };
    let dirs: &[u8] = if path.is_null() {
        b"/bin:/usr/bin"
    } else {
        // SAFETY: getenv's result is a NUL-terminated string.
        unsafe { CStr::from_ptr(path) }.to_bytes()
    };
    for dir in dirs.split(|&b| b == b':') {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let len = dir.len() + 1 + name.len();
        if len + 1 > buf.len() {
            continue;
        }
        buf[..dir.len()].copy_from_slice(dir);
        buf[dir.len()] = b'/';
        buf[dir.len() + 1..len].copy_from_slice(name);
        buf[len] = 0;
        let p = buf.as_ptr().cast::<c_char>();
        // SAFETY: `p` is the NUL-terminated path just built.
        if unsafe { libc::access(p, libc::X_OK) } == 0 {
            return Some(p);
        }
    }
    None
}

fn path_is_bare(path: *const c_char, depth: u32) -> bool {
    // SAFETY: opening a NUL-terminated path read-only.
    let fd = unsafe { libc::open(path, libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let bare = fd_is_bare(fd, depth);
    // SAFETY: closing the descriptor opened above.
    unsafe { (real().close)(fd) };
    bare
}

/// Reads exactly `buf.len()` bytes at `offset`, or says no.
fn read_at(fd: c_int, buf: &mut [u8], offset: u64) -> bool {
    // SAFETY: reading into our own buffer of its length.
    let n = unsafe {
        libc::pread(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            offset as libc::off_t,
        )
    };
    n == buf.len() as isize
}

fn fd_is_bare(fd: c_int, depth: u32) -> bool {
    // SAFETY: fstat into our own struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return false;
    }
    // SAFETY: geteuid and getegid have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if (st.st_mode & libc::S_ISUID != 0 && st.st_uid != euid)
        || (st.st_mode & libc::S_ISGID != 0 && st.st_gid != egid)
    {
        return true;
    }
    let mut head = [0u8; 256];
    // SAFETY: as read_at; a short file reads short.
    let n = unsafe { libc::pread(fd, head.as_mut_ptr().cast(), head.len(), 0) };
    if n < 4 {
        return false;
    }
    let head = &head[..n as usize];
    if head.starts_with(b"#!") {
        return depth > 0 && script_is_bare(head, depth);
    }
    if head.starts_with(b"\x7fELF") {
        return elf_passes_us_by(fd, head);
    }
    false
}

/// A script: its interpreter decides (the path after `#!`).
fn script_is_bare(head: &[u8], depth: u32) -> bool {
    let line = head[2..].split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = line.trim_ascii_start();
    let interp = line
        .split(|&b| b == b' ' || b == b'\t')
        .next()
        .unwrap_or(&[]);
    // A line cut by our read (no newline within it) is not judged.
    if interp.is_empty() || interp.len() >= PATH_MAX || !head.contains(&b'\n') {
        return false;
    }
    let mut buf = [0u8; PATH_MAX];
    buf[..interp.len()].copy_from_slice(interp);
    path_is_bare(buf.as_ptr().cast(), depth - 1)
}

/// A 64-bit little-endian ELF file without a PT_INTERP program header
/// (statically linked), or with a Go build-ID note (a Go program makes
/// its own system calls); other ELF files are not judged.
fn elf_passes_us_by(fd: c_int, head: &[u8]) -> bool {
    const ELFCLASS64: u8 = 2;
    const ELFDATA2LSB: u8 = 1;
    const PT_INTERP: u32 = 3;
    const PT_NOTE: u32 = 4;
    if head.len() < 64 || head[4] != ELFCLASS64 || head[5] != ELFDATA2LSB {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]);
    let phoff = u64::from_le_bytes(head[32..40].try_into().unwrap_or([0; 8]));
    let phentsize = u16_at(54) as usize;
    let phnum = u16_at(56) as usize;
    if phoff == 0 || phnum == 0 || !(8..=256).contains(&phentsize) || phnum > 128 {
        return false;
    }
    if phentsize < 56 {
        return false;
    }
    let mut ph = [0u8; 256];
    let mut dynamic = false;
    for i in 0..phnum {
        let entry = &mut ph[..phentsize];
        if !read_at(fd, entry, phoff + (i * phentsize) as u64) {
            return false;
        }
        let u64_at = |o: usize| u64::from_le_bytes(entry[o..o + 8].try_into().unwrap_or([0; 8]));
        match u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]) {
            PT_INTERP => dynamic = true,
            PT_NOTE if has_go_note(fd, u64_at(8), u64_at(32)) => return true,
            _ => {}
        }
    }
    !dynamic
}

/// Whether the notes at `offset` (`size` bytes, the first 512 read) hold
/// one named "Go" (the Go linker's build ID).
fn has_go_note(fd: c_int, offset: u64, size: u64) -> bool {
    let mut buf = [0u8; 512];
    let len = (size as usize).min(buf.len());
    if len < 12 || !read_at(fd, &mut buf[..len], offset) {
        return false;
    }
    let notes = &buf[..len];
    let word = |o: usize| u32::from_le_bytes([notes[o], notes[o + 1], notes[o + 2], notes[o + 3]]);
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let namesz = word(at) as usize;
        let descsz = word(at + 4) as usize;
        let name = at + 12;
        if notes.get(name..name + namesz.min(3)) == Some(b"Go\0") && namesz == 4 {
            return true;
        }
        at = name + namesz.next_multiple_of(4) + descsz.next_multiple_of(4);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn env(entries: &[&str]) -> (Vec<CString>, Vec<*const c_char>) {
        let owned: Vec<CString> = entries.iter().map(|e| CString::new(*e).unwrap()).collect();
        let mut ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        (owned, ptrs)
    }

    const PRELOADED: &str = "LD_PRELOAD=/opt/openvia/lib/libviarun.so";

    #[test]
    fn a_program_without_our_preload_is_bare() {
        let sh = c"/bin/sh";
        let (_o, none) = env(&["PATH=/usr/bin:/bin"]);
        assert!(will_be_bare(Target::Path(sh.as_ptr()), none.as_ptr()));
        let (_o, other) = env(&["LD_PRELOAD=/usr/lib/libother.so"]);
        assert!(will_be_bare(Target::Path(sh.as_ptr()), other.as_ptr()));
        let (_o, ours) = env(&[PRELOADED]);
        assert!(!will_be_bare(Target::Path(sh.as_ptr()), ours.as_ptr()));
    }

    #[test]
    fn a_static_program_is_bare_and_a_dynamic_one_and_its_scripts_are_not() {
        let (_o, ours) = env(&[PRELOADED]);
        let dir = std::env::temp_dir().join(format!("viarun-bare-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A minimal static ELF header: 64-bit, little-endian, one
        // PT_LOAD program header and no PT_INTERP.
        let mut elf = vec![0u8; 64 + 56];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        elf[32..40].copy_from_slice(&64u64.to_le_bytes());
        elf[54..56].copy_from_slice(&56u16.to_le_bytes());
        elf[56..58].copy_from_slice(&1u16.to_le_bytes());
        elf[64..68].copy_from_slice(&1u32.to_le_bytes());
        let stat = dir.join("static");
        std::fs::write(&stat, &elf).unwrap();
        let mut dynamic = elf.clone();
        dynamic[64..68].copy_from_slice(&3u32.to_le_bytes());
        let dynp = dir.join("dynamic");
        std::fs::write(&dynp, &dynamic).unwrap();
        let c = |p: &std::path::Path| CString::new(p.to_str().unwrap()).unwrap();
        let (s, d) = (c(&stat), c(&dynp));
        assert!(will_be_bare(Target::Path(s.as_ptr()), ours.as_ptr()));
        assert!(!will_be_bare(Target::Path(d.as_ptr()), ours.as_ptr()));
        // Scripts take their interpreter's part.
        let on_static = dir.join("on-static");
        std::fs::write(&on_static, format!("#!{} -x\necho\n", stat.display())).unwrap();
        let on_dynamic = dir.join("on-dynamic");
        std::fs::write(&on_dynamic, format!("#! {}\n", dynp.display())).unwrap();
        let (a, b) = (c(&on_static), c(&on_dynamic));
        assert!(will_be_bare(Target::Path(a.as_ptr()), ours.as_ptr()));
        assert!(!will_be_bare(Target::Path(b.as_ptr()), ours.as_ptr()));
        // Dynamic, but a Go program (its build-ID note): it calls the
        // kernel itself.
        let mut go = dynamic.clone();
        go[56..58].copy_from_slice(&2u16.to_le_bytes());
        let mut note_ph = vec![0u8; 56];
        note_ph[..4].copy_from_slice(&4u32.to_le_bytes());
        let note_at = (64 + 2 * 56) as u64;
        note_ph[8..16].copy_from_slice(&note_at.to_le_bytes());
        let mut note = Vec::new();
        note.extend_from_slice(&4u32.to_le_bytes()); // namesz
        note.extend_from_slice(&8u32.to_le_bytes()); // descsz
        note.extend_from_slice(&4u32.to_le_bytes()); // type
        note.extend_from_slice(b"Go\0\0");
        note.extend_from_slice(b"buildid!");
        note_ph[32..40].copy_from_slice(&(note.len() as u64).to_le_bytes());
        go.extend_from_slice(&note_ph);
        go.extend_from_slice(&note);
        let gop = dir.join("go");
        std::fs::write(&gop, &go).unwrap();
        let g = c(&gop);
        assert!(will_be_bare(Target::Path(g.as_ptr()), ours.as_ptr()));
        // Another note (GNU's) does not count.
        let mut gnu = go.clone();
        let name_at = note_at as usize + 12;
        gnu[name_at..name_at + 4].copy_from_slice(b"GNU\0");
        let gnup = dir.join("gnu");
        std::fs::write(&gnup, &gnu).unwrap();
        let n = c(&gnup);
        assert!(!will_be_bare(Target::Path(n.as_ptr()), ours.as_ptr()));
        // By descriptor, as fexecve.
        let f = std::fs::File::open(&stat).unwrap();
        use std::os::fd::AsRawFd;
        assert!(will_be_bare(Target::Fd(f.as_raw_fd()), ours.as_ptr()));
        // What cannot be read is not judged.
        let missing = c(&dir.join("missing"));
        assert!(!will_be_bare(Target::Path(missing.as_ptr()), ours.as_ptr()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_name_is_looked_up_in_path() {
        let (_o, ours) = env(&[PRELOADED]);
        // `sh` is dynamic on every system this runs on.
        assert!(!will_be_bare(Target::Search(c"sh".as_ptr()), ours.as_ptr()));
        let mut buf = [0u8; PATH_MAX];
        let found = search(c"sh".as_ptr(), &mut buf).expect("sh in PATH");
        // SAFETY: `search` built a NUL-terminated path in `buf`.
        let found = unsafe { CStr::from_ptr(found) }.to_bytes();
        assert!(found.ends_with(b"/sh"));
        assert!(search(c"no-such-program-here".as_ptr(), &mut buf).is_none());
    }
}
