//! The XDP program that steers our frames to an AF_XDP socket, and the
//! bpf(2) calls that load and attach it.
//!
//! The program is a dozen eBPF instructions assembled here, so no clang or
//! libbpf is needed on the user's machine: it bounds-checks the Ethernet
//! header (and the destination id, when filtered) against `data_end` as
//! the verifier demands, and redirects frames of our EtherType through an
//! XSKMAP indexed by the receive queue; every other frame (ARP, IP, ...)
//! gets XDP_PASS and reaches the kernel's stack as before. The program is
//! attached with a BPF link, so closing the link's descriptor (the process
//! exiting included) detaches it: nothing is left on the interface.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::frames::{FrameError, FrameFilter, ETH_HEADER_LEN};

// bpf(2) commands, map and program types, attach type (linux/bpf.h).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const XDP_PASS: i32 = 2;

/// XDP attach modes (linux/if_link.h): generic runs after the kernel built
/// an skb (any driver); native runs in the driver's receive path.
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

// Offsets in `struct xdp_md`, the program's context.
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before any skb exists (XDP_FLAGS_DRV_MODE).
    Native,
    /// After the kernel built an skb (XDP_FLAGS_SKB_MODE): any driver.
    Generic,
}

/// One eBPF instruction, as the kernel reads it (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    /// dst register in the low nibble, src in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

// Opcode parts (linux/bpf_common.h, linux/bpf.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ALU64: u8 = 0x07;
const JMP: u8 = 0x05;
const W: u8 = 0x00;
const H: u8 = 0x08;
const DW: u8 = 0x18;
const MEM: u8 = 0x60;
const IMM: u8 = 0x00;
const K: u8 = 0x00;
const X: u8 = 0x08;
const ADD: u8 = 0x00;
const MOV: u8 = 0xb0;
const JGT: u8 = 0x20;
const JNE: u8 = 0x50;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0x0f),
        off,
        imm,
    }
}

/// The steering program for `filter`, redirecting into the XSKMAP `map_fd`.
///
/// ```text
///     r6 = r1                      ; ctx
///     r2 = ctx->data ; r3 = ctx->data_end
///     r4 = r2 + need               ; need = 14, or up to the id's end
///     if r4 > r3 goto pass         ; the verifier's bounds check
///     r5 = *(u16 *)(r2 + 12)       ; EtherType as stored (big-endian)
///     if r5 != ethertype goto pass
///     [r5 = *(u16 *)(r2 + 14 + off); if r5 != id goto pass]
///     return bpf_redirect_map(xskmap, ctx->rx_queue_index, XDP_PASS)
/// pass:
///     return XDP_PASS
/// ```
/// A queue with no socket in the map falls back to XDP_PASS (the flags
/// argument of bpf_redirect_map), so nothing is lost before the socket
/// registers.
pub fn steering_program(filter: &FrameFilter, map_fd: RawFd) -> Result<Vec<Insn>, FrameError> {
    // Loads read the frame's bytes in the machine's order; comparing with
    // the value the big-endian bytes make in that order needs no swap.
    let as_loaded = |v: u16| i32::from(u16::from_ne_bytes(v.to_be_bytes()));
    let need = match filter.dst_id {
        None => ETH_HEADER_LEN,
        Some((off, _)) => ETH_HEADER_LEN + off + 2,
    };
    // The verifier bounds packet offsets; frames are far smaller anyway.
    if need > 0x7fff {
        return Err(FrameError::Unsupported("filter offset past any frame"));
    }
    let mut tail: Vec<Insn> = Vec::new();
    if let Some((off, id)) = filter.dst_id {
        let at = (ETH_HEADER_LEN + off) as i16;
        tail.push(insn(LDX | MEM | H, 5, 2, at, 0));
        tail.push(insn(JMP | JNE | K, 5, 0, 0, as_loaded(id))); // off patched below
    }
    let mut prog = vec![
        insn(ALU64 | MOV | X, 6, 1, 0, 0),
        insn(LDX | MEM | W, 2, 1, XDP_MD_DATA, 0),
        insn(LDX | MEM | W, 3, 1, XDP_MD_DATA_END, 0),
        insn(ALU64 | MOV | X, 4, 2, 0, 0),
        insn(ALU64 | ADD | K, 4, 0, 0, need as i32),
        insn(JMP | JGT | X, 4, 3, 0, 0), // -> pass
        insn(LDX | MEM | H, 5, 2, 12, 0),
        insn(JMP | JNE | K, 5, 0, 0, as_loaded(filter.ethertype)), // -> pass
    ];
    prog.extend(tail);
    prog.extend([
        // ld_imm64 takes two slots; the kernel swaps the fd for the map.
        insn(LD | IMM | DW, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        insn(LDX | MEM | W, 2, 6, XDP_MD_RX_QUEUE_INDEX, 0),
        insn(ALU64 | MOV | K, 3, 0, 0, XDP_PASS),
        insn(JMP | CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        insn(JMP | EXIT, 0, 0, 0, 0),
    ]);
    let pass = prog.len();
    prog.extend([
        insn(ALU64 | MOV | K, 0, 0, 0, XDP_PASS),
        insn(JMP | EXIT, 0, 0, 0, 0),
    ]);
    // Every conditional jump goes to `pass`: offsets count from the next insn.
    for (i, ins) in prog.iter_mut().enumerate() {
        if ins.code == JMP | JGT | X || ins.code == JMP | JNE | K {
            ins.off = (pass - i - 1) as i16;
        }
    }
    Ok(prog)
}

/// `union bpf_attr` for BPF_MAP_CREATE (the leading fields; the rest zero).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    rest: [u32; 27],
}

#[repr(C)]
#[derive(Default)]
struct MapUpdateAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    rest: [u32; 24],
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    rest: [u32; 28],
}

/// bpf(2) with an attribute structure; returns the new descriptor or 0.
fn sys_bpf<A>(cmd: libc::c_long, attr: &mut A) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, fully initialised `bpf_attr` prefix of
    // size_of::<A>() bytes whose unused tail is zero, as the kernel checks;
    // pointers inside it (instructions, log, key, value) outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut A as *mut libc::c_void,
            std::mem::size_of::<A>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: bpf(2) just returned this descriptor and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// Effective capabilities of the calling thread (capget v3), if readable.
fn effective_caps() -> Option<u64> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut hdr = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: v3 capget writes two `Data` words into `data`.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) };
    (r == 0).then(|| u64::from(data[0].effective) | (u64::from(data[1].effective) << 32))
}

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// Which capability a bpf(2) EPERM means: XSKMAP creation and XDP program
/// loading need both CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_ADMIN; the
/// one missing is named.
fn bpf_permission() -> FrameError {
    let caps = effective_caps().unwrap_or(0);
    let has = |c: u32| caps & (1u64 << c) != 0;
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        FrameError::Permission("CAP_BPF")
    } else if !has(CAP_NET_ADMIN) {
        FrameError::Permission("CAP_NET_ADMIN")
    } else {
        FrameError::Permission("CAP_BPF and CAP_NET_ADMIN")
    }
}

fn bpf_error(e: io::Error) -> FrameError {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => bpf_permission(),
        Some(libc::ENOSYS) => FrameError::Unsupported("no bpf(2) in this kernel"),
        _ => FrameError::Io(e),
    }
}

/// An XSKMAP of `entries` queues.
fn create_xskmap(entries: u32) -> Result<OwnedFd, FrameError> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        ..Default::default()
    };
    sys_bpf(BPF_MAP_CREATE, &mut attr)
        .map(owned)
        .map_err(bpf_error)
}

/// Loads `prog` as an XDP program; a verifier rejection carries its log.
fn load_program(prog: &[Insn]) -> Result<OwnedFd, FrameError> {
    let license = c"GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut name = [0u8; 16];
    name[..9].copy_from_slice(b"ovia_xsk\0");
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: prog.len() as u32,
        insns: prog.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_XDP,
        ..Default::default()
    };
    match sys_bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(owned(fd)),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Err(bpf_permission()),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            Err(FrameError::Io(io::Error::new(
                e.kind(),
                format!("XDP program rejected ({e}); verifier log:\n{text}"),
            )))
        }
    }
}

/// Attaches `prog` to `ifindex` with a BPF link in `mode`.
fn attach(prog: &OwnedFd, ifindex: u32, mode: XdpMode) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: match mode {
            XdpMode::Native => XDP_FLAGS_DRV_MODE,
            XdpMode::Generic => XDP_FLAGS_SKB_MODE,
        },
        ..Default::default()
    };
    sys_bpf(BPF_LINK_CREATE, &mut attr).map(owned)
}

/// The steering program with its XSKMAP, attached to one interface once
/// [`XdpSteering::attach`] succeeded. Dropping it closes the link, which
/// detaches the program.
pub struct XdpSteering {
    map: OwnedFd,
    prog: OwnedFd,
    link: Option<(OwnedFd, XdpMode)>,
}

impl XdpSteering {
    /// Creates the XSKMAP (`queues` entries: the queues a socket may be
    /// registered for) and loads the program for `filter`. This is where
    /// a process without CAP_BPF or CAP_NET_ADMIN is stopped.
    pub fn load(queues: u32, filter: &FrameFilter) -> Result<Self, FrameError> {
        let map = create_xskmap(queues.max(1))?;
        let prog = load_program(&steering_program(filter, map.as_raw_fd())?)?;
        Ok(XdpSteering {
            map,
            prog,
            link: None,
        })
    }

    /// Attaches the program to `ifindex` in `only` that mode, or (None)
    /// native mode first and generic where the driver has none.
    pub fn attach(&mut self, ifindex: u32, only: Option<XdpMode>) -> Result<XdpMode, FrameError> {
        let modes: &[XdpMode] = match only {
            Some(XdpMode::Native) => &[XdpMode::Native],
            Some(XdpMode::Generic) => &[XdpMode::Generic],
            None => &[XdpMode::Native, XdpMode::Generic],
        };
        let mut failures = Vec::new();
        for &mode in modes {
            match attach(&self.prog, ifindex, mode) {
                Ok(link) => {
                    self.link = Some((link, mode));
                    return Ok(mode);
                }
                Err(e) => failures.push((mode, e)),
            }
        }
        // The last refusal says most (generic mode refuses only for
        // reasons every mode shares).
        let (_, e) = failures.last().expect("at least one mode tried");
        Err(match e.raw_os_error() {
            Some(libc::EPERM) => FrameError::Permission("CAP_NET_ADMIN"),
            Some(libc::EBUSY) | Some(libc::EEXIST) => {
                FrameError::Unsupported("another XDP program is attached")
            }
            _ => {
                let text: Vec<String> = failures
                    .iter()
                    .map(|(m, e)| format!("{m:?}: {e}"))
                    .collect();
                FrameError::Io(io::Error::new(
                    e.kind(),
                    format!("XDP attach failed ({})", text.join(", ")),
                ))
            }
        })
    }

    /// Steers `queue`'s frames to the AF_XDP socket `xsk`.
    pub fn register(&self, queue: u32, xsk: RawFd) -> Result<(), FrameError> {
        let key = queue;
        let value = xsk as u32;
        let mut attr = MapUpdateAttr {
            map_fd: self.map.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            ..Default::default()
        };
        sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr)
            .map(drop)
            .map_err(bpf_error)
    }

    /// Where the program runs, once attached.
    pub fn mode(&self) -> Option<XdpMode> {
        self.link.as_ref().map(|(_, m)| *m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_branch_lands_on_the_pass_exit() {
        let f = FrameFilter {
            ethertype: 0x88b5,
            dst_id: Some((2, 0x1234)),
        };
        let prog = steering_program(&f, 7).unwrap();
        let pass = prog.len() - 2;
        assert_eq!(prog[pass].code, ALU64 | MOV | K);
        assert_eq!(prog[pass].imm, XDP_PASS);
        let branches: Vec<usize> = (0..prog.len())
            .filter(|&i| prog[i].code == JMP | JGT | X || prog[i].code == JMP | JNE | K)
            .collect();
        assert_eq!(branches.len(), 3);
        for i in branches {
            assert_eq!(i + 1 + prog[i].off as usize, pass);
        }
        // The bounds check covers the id's two bytes.
        assert_eq!(prog[4].imm, 14 + 2 + 2);
    }

    /// A program that reads the frame without the bounds check is refused,
    /// and the refusal carries the verifier's reason.
    #[test]
    fn a_rejected_program_carries_the_verifier_log() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: loading XDP programs needs root");
            return;
        }
        let unchecked = [
            insn(LDX | MEM | W, 2, 1, XDP_MD_DATA, 0),
            insn(LDX | MEM | H, 0, 2, 12, 0),
            insn(JMP | EXIT, 0, 0, 0, 0),
        ];
        match load_program(&unchecked) {
            Err(FrameError::Io(e)) => {
                let text = e.to_string();
                assert!(text.contains("verifier log"), "{text}");
                assert!(text.contains("invalid access to packet"), "{text}");
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("the verifier accepted an unchecked packet read"),
        }
    }
}
