//! Connections handed to a new program by exec before their first use.
//!
//! A connection is settled (the acceptor's answer awaited, the VI made)
//! by whichever process uses it first. A server that accepts and then
//! execs a handler (inetd, tcpserver, sshd's re-exec), or a client that
//! connects and then execs a program on the socket (`nc -e`), gives the
//! socket to a new program whose library knows nothing of it, while the
//! peer waits for the VI. So while a connection is not yet used, a small
//! memfd holding a [`Record`] and a copy of the one descriptor its state
//! needs (the control page's memfd, the Unix socket the acceptor's answer
//! comes to, or the UDP socket of the offer between hosts) stay open
//! across exec. The library's constructor in the new program finds the
//! records among its descriptors and takes the connections up again,
//! under every descriptor that names the socket (found by inode, so
//! `dup2` onto stdin and stdout before the exec is followed).
//!
//! The record is shared memory: the first process to use the connection
//! marks it used, so a forked sibling that uses it or execs later does
//! not take it up a second time. Once used, a connection gets a
//! *switchable* record instead (the control page's memfd on one host, the
//! hand-over page's between hosts), held while it lives,
//! never claimed: a program exec'd on it hands the connection back to the
//! kernel on first use (`switched`, docs/sockets.md).
//!
//! A record found used by a program its holder runs later (the first
//! program that used the connection has exited with its VI) is taken up
//! the same way when the page can be reached: the record's own page, or
//! the copy that first program left queued on the record's answer socket
//! (`rendezvous::stash_page`); between hosts, the hand-over page the
//! first user made inside the record's memfd (`Inherit::net_page`), past
//! the record. Otherwise its calls fail (ECONNRESET).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use std::os::fd::FromRawFd;

use crate::conn::{self, Setup};
use crate::control::{Control, Side};
use crate::kernel::inode;
use crate::real::real;
use crate::remote;

const MAGIC: u64 = u64::from_le_bytes(*b"viarunI1");
const RECORD_NAME: &std::ffi::CStr = c"viarun-inherit";
const HOST_MAX: usize = 64;
/// Most records this process holds at once. Each costs two descriptors:
/// past this, or with the descriptor table half full, a new connection
/// is not carried (it stays on kernel TCP, which an exec cannot break:
/// `room_for_a_record`). 64 at first, of which connections in use could
/// take 32: a client using more ran past them, and a program it ran on a
/// later one got ECONNRESET.
pub const MAX_HELD: usize = 1024;

static HELD: AtomicUsize = AtomicUsize::new(0);

/// The descriptors the slots hold, one bit each (those below
/// `conn::MAX_FD`): the close hook asks on every close of the program's.
static HELD_FDS: [AtomicU64; conn::MAX_FD / 64] = [const { AtomicU64::new(0) }; conn::MAX_FD / 64];

/// Notes that a slot holds descriptor `fd` now (`on`) or no longer.
fn note_held(fd: RawFd, on: bool) {
    if fd < 0 || fd as usize >= conn::MAX_FD {
        return;
    }
    let (word, bit) = (fd as usize / 64, 1u64 << (fd as usize % 64));
    if on {
        HELD_FDS[word].fetch_or(bit, Ordering::AcqRel);
    } else {
        HELD_FDS[word].fetch_and(!bit, Ordering::AcqRel);
    }
}

/// The descriptors of each record this process holds, where the close
/// hooks can see them without a lock (a vfork child runs the hooks in
/// our memory, beside our other threads): `record_fd` -1 is a free slot.
struct Slot {
    record_fd: AtomicI32,
    aux_fd: AtomicI32,
    socket_inode: AtomicU64,
}

static SLOTS: [Slot; MAX_HELD] = [const {
    Slot {
        record_fd: AtomicI32::new(-1),
        aux_fd: AtomicI32::new(-1),
        socket_inode: AtomicU64::new(0),
    }
}; MAX_HELD];

/// A held record's descriptors, as the close hooks see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldRecord {
    pub record_fd: RawFd,
    /// -1 for none.
    pub aux_fd: RawFd,
    pub socket_inode: u64,
}

/// The first record this process holds for which `f` says true (each is
/// read as it is visited: nothing is copied, as the hooks that ask run on
/// the program's stack, perhaps in a vfork child).
pub fn find_held(mut f: impl FnMut(&HeldRecord) -> bool) -> Option<HeldRecord> {
    if HELD.load(Ordering::Acquire) == 0 {
        return None;
    }
    SLOTS.iter().find_map(|s| {
        let record_fd = s.record_fd.load(Ordering::Acquire);
        let r = HeldRecord {
            record_fd,
            aux_fd: s.aux_fd.load(Ordering::Acquire),
            socket_inode: s.socket_inode.load(Ordering::Acquire),
        };
        (record_fd >= 0 && f(&r)).then_some(r)
    })
}

/// Whether `fd` is one of this process's record descriptors (the memfd
/// or its copy of the state's descriptor). Cheap while none is held.
pub fn is_held(fd: RawFd) -> bool {
    if fd < 0 || HELD.load(Ordering::Acquire) == 0 {
        return false;
    }
    if (fd as usize) < conn::MAX_FD {
        let (word, bit) = (fd as usize / 64, 1u64 << (fd as usize % 64));
        return HELD_FDS[word].load(Ordering::Acquire) & bit != 0;
    }
    SLOTS.iter().any(|s| {
        s.record_fd.load(Ordering::Acquire) == fd || s.aux_fd.load(Ordering::Acquire) == fd
    })
}

/// The program closed `fd`, one of our record descriptors, itself (a
/// loop closing every descriptor): forget the number, so that dropping
/// the record later does not close whatever the number names by then.
/// The record then no longer reaches a new program. Not for a vfork
/// child (the slots are its parent's).
pub fn closed_by_program(fd: RawFd) {
    for s in &SLOTS {
        let _ = s
            .aux_fd
            .compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Acquire);
        // The slot stays taken (its holder frees it) but names nothing.
        let _ = s
            .record_fd
            .compare_exchange(fd, CLOSED, Ordering::AcqRel, Ordering::Acquire);
    }
    note_held(fd, false);
}

/// A taken slot whose memfd the program closed.
const CLOSED: RawFd = -2;

/// The soft limit on descriptors (None if unknown).
fn descriptor_limit() -> Option<u64> {
    // SAFETY: getrlimit into our own struct.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some(r.rlim_cur)
}

/// Our new descriptor `fd` (a record's, not close-on-exec), moved into
/// the upper half of the descriptor table: the program takes the lowest
/// free numbers, and a record's two descriptors per connection would push
/// its sockets' numbers up (past FD_SETSIZE for a program using select
/// with a few hundred connections, where kernel TCP stays below). -1
/// stays -1; where it cannot move, it stays where it is.
fn upper_half(fd: RawFd) -> RawFd {
    let Some(limit) = descriptor_limit() else {
        return fd;
    };
    let base = (limit / 2).min(i32::MAX as u64) as RawFd;
    if fd < 0 || fd >= base {
        return fd;
    }
    // SAFETY: F_DUPFD of our own descriptor (not close-on-exec, as the
    // original); the original is ours to close once copied.
    let d = unsafe { (real().fcntl)(fd, libc::F_DUPFD, base as u64) };
    if d < 0 {
        return fd;
    }
    // SAFETY: as above.
    unsafe { (real().close)(fd) };
    d
}

/// Whether another record may be made for a connection on `socket`: a
/// connection is carried only then, so that every one carried has a
/// record a program exec'd on it finds (two threads setting connections
/// up at once at the very limit may still leave one without).
pub fn room_for_a_record(socket: RawFd) -> bool {
    let held = HELD.load(Ordering::Relaxed);
    if held >= MAX_HELD {
        return false;
    }
    // The program's sockets in the lower half, our records' two
    // descriptors each in the upper (`upper_half`).
    descriptor_limit().map_or(true, |limit| {
        (socket.max(0) as u64).saturating_mul(2) < limit && (held as u64 + 1) * 4 < limit
    })
}

/// What state a record takes a connection up in (`Record::kind`).
const AGREED: u32 = 1;
const AGREED_NET: u32 = 2;
const AWAIT_ANSWER: u32 = 3;
const AWAIT_NET: u32 = 4;
/// Carried over a VI of the process that execs: unusable in the new
/// program (see [`mark_unusable`]).
const UNUSABLE: u32 = 5;
/// Carried over a VI of a process that used it: the new program hands the
/// connection back to the kernel on first use (`switched`); `aux_fd` is
/// the control page's memfd. Held from the first use until closed, by
/// every process sharing the socket, and never claimed.
const SWITCHABLE: u32 = 6;
/// As SWITCHABLE, between hosts: `aux_fd` is the hand-over page's memfd
/// (`netlink::page`); the new program asks the VI's maker to hand the
/// connection to the kernel on first use.
const NET_SWITCHABLE: u32 = 7;

/// Where a connection's hand-over page lies in its record's memfd between
/// hosts (`Inherit::net_page`): after the record, page-aligned.
const PAGE_AT: usize = 4096;
const _: () = assert!(std::mem::size_of::<Record>() <= PAGE_AT);

/// `Record::used`: claimed by a process (which sets the connection up).
const USED: u32 = 1;
/// Claimed, and found to stay on kernel TCP.
const USED_KERNEL: u32 = 2;
/// Claimed, and the claimer's hello is in the kernel stream: a sibling
/// switching the connection may put its switch byte after it.
const USED_HELLO_SENT: u32 = 3;

/// What a new program needs to take an unused connection up.
#[repr(C)]
struct Record {
    magic: u64,
    /// Nonzero once a process used the connection.
    used: AtomicU32,
    kind: u32,
    /// 0: connector, 1: acceptor (agreed connections).
    side: u32,
    host_len: u32,
    token: u64,
    socket_inode: u64,
    /// The descriptor the state needs (see the module's text) and its
    /// inode; -1 and 0 for none.
    aux_fd: i32,
    /// The ports of an offer between hosts, or the destination's.
    ports: [u16; 2],
    aux_inode: u64,
    /// The peer's network address between hosts (the connector's only).
    host: [u8; HOST_MAX],
}

/// A connection's state as the record keeps it.
pub enum Offered<'a> {
    Agreed {
        side: Side,
        token: u64,
        control: RawFd,
    },
    AgreedNet {
        side: Side,
        token: u64,
        host: &'a [u8],
    },
    AwaitAnswer {
        listener: RawFd,
        dst_port: u16,
    },
    AwaitNet {
        udp: RawFd,
        lport: u16,
        cport: u16,
    },
    /// A connection in use (carried over this process's VI).
    Switchable {
        side: Side,
        control: RawFd,
    },
    /// A connection in use between hosts.
    NetSwitchable {
        page: RawFd,
    },
}

/// This process's hold on a record: the memfd, its mapping, and the
/// control page's memfd (one host). Dropped when the connection settles
/// or its last descriptor closes: the descriptors are closed then.
pub struct Inherit {
    /// Our place in [`SLOTS`], which holds the descriptors.
    slot: usize,
    record: *mut Record,
    /// Taken up from an exec record (this process did not make it).
    taken_up: bool,
    /// This process's forks when it made the record (`may_be_shared`).
    forks_at: u32,
}

// SAFETY: the record is reached only through its atomic `used` word after
// it is written, and the descriptors are plain integers.
unsafe impl Send for Inherit {}
// SAFETY: as above.
unsafe impl Sync for Inherit {}

impl Inherit {
    /// A record for the unused connection on `socket` in state `what`
    /// (its descriptor is copied; the caller keeps its own). `None` if a
    /// memfd cannot be made (the connection then works, but not across
    /// exec).
    pub fn offer(socket: RawFd, what: Offered<'_>) -> Option<Arc<Inherit>> {
        if !room_for_a_record(socket) {
            return None;
        }
        let socket_inode = inode(socket)?;
        let (kind, side, token, aux, ports, host) = match what {
            Offered::Agreed {
                side,
                token,
                control,
            } => (AGREED, side, token, Some(control), [0, 0], &[][..]),
            Offered::AgreedNet { side, token, host } => {
                (AGREED_NET, side, token, None, [0, 0], host)
            }
            Offered::AwaitAnswer { listener, dst_port } => (
                AWAIT_ANSWER,
                Side::Connector,
                0,
                Some(listener),
                [dst_port, 0],
                &[][..],
            ),
            Offered::AwaitNet { udp, lport, cport } => (
                AWAIT_NET,
                Side::Connector,
                0,
                Some(udp),
                [lport, cport],
                &[][..],
            ),
            Offered::Switchable { side, control } => {
                (SWITCHABLE, side, 0, Some(control), [0, 0], &[][..])
            }
            Offered::NetSwitchable { page } => (
                NET_SWITCHABLE,
                Side::Connector,
                0,
                Some(page),
                [0, 0],
                &[][..],
            ),
        };
        if host.len() > HOST_MAX {
            return None;
        }
        // SAFETY: a NUL-terminated name; no CLOEXEC: it must outlive exec.
        let record_fd = upper_half(unsafe { libc::memfd_create(RECORD_NAME.as_ptr(), 0) });
        if record_fd < 0 {
            return None;
        }
        let mut held = Inherit::holding(record_fd, std::ptr::null_mut(), socket_inode)?;
        let len = std::mem::size_of::<Record>();
        // SAFETY: sizing the memfd just made.
        if unsafe { libc::ftruncate(record_fd, len as libc::off_t) } != 0 {
            return None;
        }
        held.record = map(record_fd)?;
        let (aux_fd, aux_inode) = match aux {
            Some(a) => {
                // SAFETY: dup of a descriptor the caller holds; the copy is
                // not close-on-exec, as the record's.
                let d = upper_half(unsafe { (real().dup)(a) });
                if d < 0 {
                    return None;
                }
                held.set_aux(d);
                (d, inode(d)?)
            }
            None => (-1, 0),
        };
        let mut h = [0u8; HOST_MAX];
        h[..host.len()].copy_from_slice(host);
        // SAFETY: the mapping is ours, as large as a Record, not yet seen
        // by any other process.
        unsafe {
            held.record.write(Record {
                magic: MAGIC,
                used: AtomicU32::new(0),
                kind,
                side: matches!(side, Side::Acceptor) as u32,
                host_len: host.len() as u32,
                token,
                socket_inode,
                aux_fd,
                ports,
                aux_inode,
                host: h,
            })
        };
        Some(Arc::new(held))
    }

    /// This process's hold on `record_fd` (mapped at `record`), for the
    /// connection on the socket `socket_inode`, in a slot of [`SLOTS`]
    /// until dropped. `None` (and `record_fd` closed) if every slot is
    /// taken.
    fn holding(record_fd: RawFd, record: *mut Record, socket_inode: u64) -> Option<Inherit> {
        let free = SLOTS.iter().position(|s| {
            s.record_fd
                .compare_exchange(-1, record_fd, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        let Some(slot) = free else {
            // SAFETY: the memfd is ours and not yet handed to anyone.
            unsafe { (real().close)(record_fd) };
            return None;
        };
        note_held(record_fd, true);
        SLOTS[slot].aux_fd.store(-1, Ordering::Release);
        SLOTS[slot]
            .socket_inode
            .store(socket_inode, Ordering::Release);
        HELD.fetch_add(1, Ordering::AcqRel);
        Some(Inherit {
            slot,
            record,
            taken_up: false,
            forks_at: crate::process::forks(),
        })
    }

    /// Where the hand-over page of this connection between hosts goes
    /// (memfd, offset): into the record itself, which the process that
    /// made it (a shell, a server handing connections to programs) holds
    /// on, so that a program it runs after the first user of the
    /// connection is gone still finds the page, and with it what that
    /// user's VI left unread. None for other records. The record is then
    /// held while the connection lives.
    pub fn net_page(&self) -> Option<(RawFd, usize)> {
        let fd = SLOTS[self.slot].record_fd.load(Ordering::Acquire);
        let net = matches!(self.record().kind, AGREED_NET | AWAIT_NET);
        (net && fd >= 0).then_some((fd, PAGE_AT))
    }

    /// A connector's record, once the answer came, closes its copy of the
    /// answer socket at once where no other process holds the record: the
    /// record waits, without it, to become the connection's switchable one
    /// (`become_switchable`). Where it may be shared the socket stays: the
    /// page is stashed on it for the record's other holders.
    pub fn let_go_of_answer_socket(&self) {
        if self.may_be_shared() || self.record().kind != AWAIT_ANSWER {
            return;
        }
        let old = SLOTS[self.slot].aux_fd.swap(-1, Ordering::AcqRel);
        note_held(old, false);
        if old >= 0 {
            // SAFETY: the record's copy of the answer socket.
            unsafe { (real().close)(old) };
        }
    }

    /// Turns this record, which no other process holds (`may_be_shared`),
    /// into the switchable record of the connection now in use, with a
    /// copy of its control page `control`: one memfd per connection
    /// instead of one before and another after the first use. False
    /// (nothing changed) where it may be shared, or the copy fails.
    pub fn become_switchable(&self, side: Side, control: RawFd) -> bool {
        if self.may_be_shared() || self.record.is_null() {
            return false;
        }
        let Some(aux_inode) = inode(control) else {
            return false;
        };
        // SAFETY: dup of the caller's descriptor; not close-on-exec, as the
        // record's.
        let d = upper_half(unsafe { (real().dup)(control) });
        if d < 0 {
            return false;
        }
        let old = SLOTS[self.slot].aux_fd.swap(d, Ordering::AcqRel);
        note_held(old, false);
        note_held(d, true);
        if old >= 0 {
            // SAFETY: the record's former copy of its state's descriptor.
            unsafe { (real().close)(old) };
        }
        // SAFETY: our mapping of the record, which no other process holds;
        // `kind` goes last, so a program exec'd meanwhile by another
        // thread (through a call no hook sees) finds no valid kind
        // rather than a mix.
        unsafe {
            let r = self.record;
            std::ptr::addr_of_mut!((*r).kind).write_volatile(0);
            (*r).used.store(0, Ordering::Release);
            std::ptr::addr_of_mut!((*r).side).write(matches!(side, Side::Acceptor) as u32);
            std::ptr::addr_of_mut!((*r).token).write(0);
            std::ptr::addr_of_mut!((*r).aux_fd).write(d);
            std::ptr::addr_of_mut!((*r).ports).write([0, 0]);
            std::ptr::addr_of_mut!((*r).aux_inode).write(aux_inode);
            std::ptr::addr_of_mut!((*r).host_len).write(0);
            std::sync::atomic::fence(Ordering::Release);
            std::ptr::addr_of_mut!((*r).kind).write_volatile(SWITCHABLE);
        }
        true
    }

    /// The hand-over page in this record, once the process that used the
    /// connection first made it there (`net_page`).
    pub fn used_net_page(&self) -> Option<crate::netlink::page::Page> {
        let (fd, _) = self.net_page()?;
        net_page_of_used(fd)
    }

    fn set_aux(&mut self, fd: RawFd) {
        SLOTS[self.slot].aux_fd.store(fd, Ordering::Release);
        note_held(fd, true);
    }

    #[cfg(test)]
    fn record_fd(&self) -> RawFd {
        SLOTS[self.slot].record_fd.load(Ordering::Acquire)
    }

    /// Claims the connection for this process (before its handshake);
    /// false if another process already did.
    pub fn claim(&self) -> bool {
        self.record()
            .used
            .compare_exchange(0, USED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The process that claimed the connection learnt that it stays on
    /// kernel TCP (the acceptor said no): the record's other holders, and
    /// programs they exec, use the kernel socket as it is.
    pub fn note_kernel(&self) {
        self.record().used.store(USED_KERNEL, Ordering::Release);
    }

    /// The claimer sent its hello (`USED_HELLO_SENT`).
    pub fn note_hello_sent(&self) {
        let _ = self.record().used.compare_exchange(
            USED,
            USED_HELLO_SENT,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Whether the claimer's hello is in the stream: only then may a
    /// sibling switch the connection (its switch byte must come after
    /// every byte of the handshake, which the switched reader drops).
    pub fn hello_sent(&self) -> bool {
        self.record().used.load(Ordering::Acquire) == USED_HELLO_SENT
    }

    /// Waits (at most `limit`) while the connection is claimed and the
    /// claimer's hello not yet sent; at once otherwise (not claimed, or
    /// a switchable record, which is never claimed).
    pub fn wait_for_hello(&self, limit: std::time::Duration) {
        let start = std::time::Instant::now();
        while self.record().used.load(Ordering::Acquire) == USED && start.elapsed() < limit {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Whether the process that claimed the connection found it stays on
    /// kernel TCP (`note_kernel`).
    pub fn went_kernel(&self) -> bool {
        self.record().used.load(Ordering::Acquire) == USED_KERNEL
    }

    /// Whether another process may hold the record too: it was taken up
    /// from an exec, or this process forked since it made it. The first
    /// user of the connection then leaves what a later user needs where
    /// the record's other holders reach it (`rendezvous::stash_page`).
    pub fn may_be_shared(&self) -> bool {
        self.taken_up || crate::process::forks() != self.forks_at
    }

    fn record(&self) -> &Record {
        // SAFETY: mapped for our lifetime; written before it was shared.
        unsafe { &*self.record }
    }
}

impl Drop for Inherit {
    fn drop(&mut self) {
        let slot = &SLOTS[self.slot];
        let aux = slot.aux_fd.swap(-1, Ordering::AcqRel);
        let record_fd = slot.record_fd.load(Ordering::Acquire);
        note_held(aux, false);
        note_held(record_fd, false);
        // SAFETY: our own mapping and descriptors (those the program has
        // not closed itself), used by nothing else in this process once
        // the last holder lets go.
        unsafe {
            if !self.record.is_null() {
                libc::munmap(self.record.cast(), std::mem::size_of::<Record>());
            }
            if record_fd >= 0 {
                (real().close)(record_fd);
            }
            if aux >= 0 {
                (real().close)(aux);
            }
        }
        HELD.fetch_sub(1, Ordering::AcqRel);
        slot.record_fd.store(-1, Ordering::Release);
    }
}

fn map(fd: RawFd) -> Option<*mut Record> {
    // SAFETY: a shared mapping of a memfd at least a Record long (checked
    // by the callers), owned by the Inherit that holds `fd`.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            std::mem::size_of::<Record>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

/// What `/proc/self/fd/N` links to.
fn link_of(fd: RawFd) -> Option<String> {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// Before an exec (or a spawn) that keeps `socket`, a connection carried
/// over this process's VI: a record telling the new program that the
/// socket's stream is not its own to read (its data is in our rings, its
/// kernel stream holds doorbells). The descriptor of the record, to close
/// if the exec fails; None if none could be made. No allocation: this may
/// run in a vfork child.
pub fn mark_unusable(socket: RawFd) -> Option<RawFd> {
    let socket_inode = inode(socket)?;
    // SAFETY: a NUL-terminated name; no CLOEXEC: it must outlive exec.
    let fd = unsafe { libc::memfd_create(RECORD_NAME.as_ptr(), 0) };
    if fd < 0 {
        return None;
    }
    let rec = Record {
        magic: MAGIC,
        used: AtomicU32::new(0),
        kind: UNUSABLE,
        side: 0,
        host_len: 0,
        token: 0,
        socket_inode,
        aux_fd: -1,
        ports: [0, 0],
        aux_inode: 0,
        host: [0; HOST_MAX],
    };
    let len = std::mem::size_of::<Record>();
    // SAFETY: the record's bytes (a repr(C) struct on our stack) written
    // whole into the memfd just made; through the C library's write, not
    // our hook (in a vfork child the number may name a connection of the
    // parent's tables).
    let wrote = unsafe { (real().write)(fd, (&rec as *const Record).cast(), len) };
    if wrote != len as isize {
        // SAFETY: the memfd we made.
        unsafe { (real().close)(fd) };
        return None;
    }
    Some(fd)
}

/// From the library's constructor: takes up every agreed, unused
/// connection a record among this process's descriptors names.
pub fn take_up() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<RawFd> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut sockets: Vec<(RawFd, u64)> = Vec::new();
    let mut records = Vec::new();
    for &fd in &fds {
        match link_of(fd) {
            Some(l) if l.starts_with("socket:[") => {
                let ino = l
                    .strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|n| n.parse().ok());
                if let Some(ino) = ino {
                    sockets.push((fd, ino));
                }
            }
            Some(l) if l.starts_with("/memfd:viarun-inherit") => records.push(fd),
            _ => {}
        }
    }
    // Switchable records first: a socket named by one of them is carried
    // on through it, whatever older record also names it.
    records.sort_by_key(|&fd| !matches!(record_kind(fd), Some(SWITCHABLE | NET_SWITCHABLE)));
    for record_fd in records {
        take_up_one(record_fd, &sockets);
    }
}

/// The control page of a connection a record names that another program
/// used (the record's own page when agreed on one host; when the answer
/// was still awaited, the page that program stashed on the answer socket,
/// `rendezvous::stash_page`). None where there is none.
fn page_of_used(r: &Record) -> Option<Control> {
    if r.aux_fd < 0 || inode(r.aux_fd) != Some(r.aux_inode) {
        return None;
    }
    let fd = match r.kind {
        AGREED if link_of(r.aux_fd).is_some_and(|l| l.starts_with("/memfd:viarun-control")) => {
            // SAFETY: F_DUPFD_CLOEXEC of the record's page, checked above.
            let d = unsafe { (real().fcntl)(r.aux_fd, libc::F_DUPFD_CLOEXEC, 0) };
            (d >= 0).then_some(d)?
        }
        AWAIT_ANSWER if link_of(r.aux_fd).is_some_and(|l| l.starts_with("socket:[")) => {
            crate::rendezvous::unstash_page(r.aux_fd)?
        }
        _ => return None,
    };
    let is_page = link_of(fd).is_some_and(|l| l.starts_with("/memfd:viarun-control"));
    let page = is_page.then(|| Control::map(fd)).flatten();
    // SAFETY: our copy (dup'd or received) of the page's memfd.
    unsafe { (real().close)(fd) };
    let page = page?;
    // The page keeps no copy of its own: the record holds the page (or
    // the socket it is stashed on) for a further exec.
    if let Some(copy) = page.take_fd() {
        // SAFETY: the page's copy Control::map just made.
        unsafe { (real().close)(copy) };
    }
    Some(page)
}

/// The hand-over page in the record memfd `record_fd` of a connection
/// between hosts that another program used (`Inherit::net_page`), once
/// that program made it. None where there is none.
fn net_page_of_used(record_fd: RawFd) -> Option<crate::netlink::page::Page> {
    let page = crate::netlink::page::Page::map_in(record_fd, PAGE_AT)?;
    (page.owner() != 0).then_some(page)
}

/// The kind of the record in memfd `fd`, read without mapping it.
fn record_kind(fd: RawFd) -> Option<u32> {
    let mut rec = std::mem::MaybeUninit::<Record>::uninit();
    let len = std::mem::size_of::<Record>();
    // SAFETY: reading at most a Record's bytes into our own buffer.
    let n = unsafe { libc::pread(fd, rec.as_mut_ptr().cast(), len, 0) };
    if n != len as isize {
        return None;
    }
    // SAFETY: fully written by the read above; every field is plain data.
    let rec = unsafe { rec.assume_init() };
    (rec.magic == MAGIC).then_some(rec.kind)
}

fn take_up_one(record_fd: RawFd, sockets: &[(RawFd, u64)]) {
    // SAFETY: fstat into our own zeroed struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(record_fd, &mut st) } != 0
        || (st.st_size != std::mem::size_of::<Record>() as libc::off_t
            && st.st_size != (PAGE_AT + crate::netlink::page::LEN) as libc::off_t)
    {
        return;
    }
    let Some(record) = map(record_fd) else { return };
    // SAFETY: mapped above, a whole Record long.
    let socket_inode = unsafe { (*record).socket_inode };
    let Some(mut held) = Inherit::holding(record_fd, record, socket_inode) else {
        // SAFETY: our mapping of a record no slot holds.
        unsafe { libc::munmap(record.cast(), std::mem::size_of::<Record>()) };
        return;
    };
    held.taken_up = true;
    // A copy of the record's fields: `held` moves into the state below.
    // SAFETY: mapped above, a whole Record long; `used` is read atomically.
    let r = unsafe { &*record };
    if r.magic != MAGIC {
        // Not for us: let it go with this process's copy of its descriptor.
        return;
    }
    let on: Vec<RawFd> = sockets
        .iter()
        .filter(|(fd, ino)| *ino == r.socket_inode && (*fd as usize) < conn::MAX_FD)
        .map(|(fd, _)| *fd)
        .collect();
    let Some(&first) = on.first() else { return };
    if conn::tracks(first) {
        return; // taken up through another record already
    }
    let switchable = matches!(r.kind, SWITCHABLE | NET_SWITCHABLE);
    let used = r.used.load(Ordering::Acquire);
    let used_elsewhere = !switchable && used != 0;
    if used_elsewhere && used == USED_KERNEL {
        // The program that used it first found it stays on the kernel:
        // the socket is the connection. Not tracked.
        return;
    }
    if used_elsewhere {
        if let Some(page) = page_of_used(r) {
            // Used by a program our parent ran before (a shell's first
            // command on a /dev/tcp descriptor), whose VI went with it:
            // through the page, the connection goes back to the kernel on
            // our first use, as for a switchable record.
            let side = if r.side == 1 {
                Side::Acceptor
            } else {
                Side::Connector
            };
            held.set_aux(r.aux_fd);
            let setup = Setup::Via(Arc::new(crate::switched::Switched::new(
                Arc::new(page),
                side,
                first,
                Some(Arc::new(held)),
            )));
            conn::insert(first, setup);
            for &fd in &on[1..] {
                conn::alias(first, fd);
            }
            return;
        }
    }
    if used_elsewhere && matches!(r.kind, AGREED_NET | AWAIT_NET) {
        if let Some(page) = net_page_of_used(record_fd) {
            // As above, between hosts: the page lies in the record.
            let (aux, aux_inode) = (r.aux_fd, r.aux_inode);
            if aux >= 0 && inode(aux) == Some(aux_inode) {
                held.set_aux(aux);
            }
            let setup = Setup::Via(Arc::new(crate::netlink::switched::NetSwitched::new(
                Arc::new(page),
                Some(Arc::new(held)),
            )));
            conn::insert(first, setup);
            for &fd in &on[1..] {
                conn::alias(first, fd);
            }
            return;
        }
    }
    if r.kind == UNUSABLE || used_elsewhere {
        // Its bytes travel in another process's VI and rings (or, used
        // elsewhere, in those of a program this one's parent ran before:
        // a shell running two programs on one /dev/tcp descriptor),
        // which nobody here can reach: a clear error on use, never the
        // doorbells read as data or a wait. The record stays held while
        // the socket is open here: a program this one execs on it (a
        // shell's next command) must get it too, or it would read the
        // kernel stream's doorbells and wait for good.
        let (aux, aux_inode) = (r.aux_fd, r.aux_inode);
        if aux >= 0 && inode(aux) == Some(aux_inode) {
            held.set_aux(aux);
        }
        conn::insert(
            first,
            Setup::Refused {
                _record: Arc::new(held),
            },
        );
        for &fd in &on[1..] {
            conn::alias(first, fd);
        }
        return;
    }
    let side = if r.side == 1 {
        Side::Acceptor
    } else {
        Side::Connector
    };
    let (kind, token, ports) = (r.kind, r.token, r.ports);
    let host = r.host[..(r.host_len as usize).min(HOST_MAX)].to_vec();
    let aux = (r.aux_fd >= 0).then_some((r.aux_fd, r.aux_inode));
    if let Some((fd, ino)) = aux {
        // Still the record's, not a number the program reused?
        let expected = match kind {
            AGREED | SWITCHABLE => {
                link_of(fd).is_some_and(|l| l.starts_with("/memfd:viarun-control"))
            }
            NET_SWITCHABLE => {
                link_of(fd).is_some_and(|l| l.starts_with(crate::netlink::page::LINK_PREFIX))
            }
            _ => link_of(fd).is_some_and(|l| l.starts_with("socket:[")),
        };
        if !expected || inode(fd) != Some(ino) {
            return; // the number is the program's now: left alone
        }
        held.set_aux(fd);
    }
    // The state's own copy of the descriptor (the record keeps its one
    // for a further exec), close-on-exec as the original was.
    let own_copy = || -> Option<RawFd> {
        let (fd, _) = aux?;
        // SAFETY: F_DUPFD_CLOEXEC of a descriptor checked above.
        let d = unsafe { (real().fcntl)(fd, libc::F_DUPFD_CLOEXEC, 0) };
        (d >= 0).then_some(d)
    };
    // The destination as the connect hook spelled it (`viarun --stats`
    // counts a connection once by its two addresses).
    let dst = || {
        crate::rendezvous::name_of(first, true)
            .map_or_else(String::new, |a| crate::rendezvous::text_of(&a))
    };
    let inherit = Some(Arc::new(held));
    let setup = match kind {
        NET_SWITCHABLE => {
            let Some((fd, _)) = aux else { return };
            let Some(page) = crate::netlink::page::Page::map(fd) else {
                return;
            };
            // The record keeps its own copy for a further exec.
            if let Some(copy) = page.take_fd() {
                // SAFETY: the page's copy Page::map just made.
                unsafe { (real().close)(copy) };
            }
            Setup::Via(Arc::new(crate::netlink::switched::NetSwitched::new(
                Arc::new(page),
                inherit,
            )))
        }
        SWITCHABLE => {
            let Some((fd, _)) = aux else { return };
            let Some(control) = Control::map(fd) else {
                return;
            };
            // The record keeps its own copy for a further exec.
            if let Some(copy) = control.take_fd() {
                // SAFETY: the page's copy Control::map just made.
                unsafe { (real().close)(copy) };
            }
            Setup::Via(Arc::new(crate::switched::Switched::new(
                Arc::new(control),
                side,
                first,
                inherit,
            )))
        }
        AGREED => {
            let Some((fd, _)) = aux else { return };
            let Some(control) = Control::map(fd) else {
                return;
            };
            Setup::Agreed {
                side,
                token,
                control: Arc::new(control),
                inherit,
                claimed: None,
            }
        }
        AGREED_NET => Setup::AgreedNet {
            side,
            token,
            peer_host: host,
            inherit,
            claimed: None,
        },
        AWAIT_ANSWER => {
            let Some(listener) = own_copy() else { return };
            Setup::AwaitAnswer {
                listener,
                dst_port: ports[0],
                dst: dst(),
                inherit,
            }
        }
        AWAIT_NET => {
            let Some(udp) = own_copy() else { return };
            // SAFETY: our own copy of the offer's UDP socket.
            let udp = unsafe { std::net::UdpSocket::from_raw_fd(udp) };
            Setup::AwaitNet {
                offer: remote::Offer::adopt(udp, ports[0], ports[1]),
                dst: dst(),
                inherit,
            }
        }
        _ => return,
    };
    conn::insert(first, setup);
    for &fd in &on[1..] {
        conn::alias(first, fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket_pair() -> [RawFd; 2] {
        let mut sv = [0; 2];
        // SAFETY: socketpair fills two ints of ours.
        assert_eq!(
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) },
            0
        );
        sv
    }

    /// What a new program's constructor gets: its own copy of the record.
    fn copy_of(rec: &Inherit) -> RawFd {
        // SAFETY: dup of the record's descriptor.
        unsafe { libc::dup(rec.record_fd()) }
    }

    #[test]
    fn a_record_is_taken_up_under_every_descriptor_of_its_socket_and_refused_once_claimed() {
        let sv = socket_pair();
        // SAFETY: dup of our socket.
        let other = unsafe { libc::dup(sv[0]) };
        let ino = inode(sv[0]).unwrap();
        let host = b"\x0a\0\0\x02";
        let what = Offered::AgreedNet {
            side: Side::Acceptor,
            token: 42,
            host,
        };
        let rec = Inherit::offer(sv[0], what).unwrap();
        let sockets = [(sv[0], ino), (other, ino), (sv[1], inode(sv[1]).unwrap())];
        take_up_one(copy_of(&rec), &sockets);
        assert!(conn::lookup(sv[0]).is_some() && conn::lookup(other).is_some());
        assert!(
            conn::lookup(sv[1]).is_none(),
            "the pair's other end is another socket"
        );
        conn::forget(sv[0]);
        conn::forget(other);
        // Used by some process: a later program cannot follow its stream
        // (it travels in that process's VI) and gets a clear error.
        assert!(rec.claim());
        assert!(!rec.claim());
        take_up_one(copy_of(&rec), &sockets);
        assert!(matches!(
            conn::route(sv[0]),
            conn::Route::Fail(libc::ECONNRESET)
        ));
        assert!(matches!(
            conn::route(other),
            conn::Route::Fail(libc::ECONNRESET)
        ));
        conn::forget(sv[0]);
        conn::forget(other);
        drop(rec);
        for fd in [sv[0], sv[1], other] {
            // SAFETY: closing our sockets.
            unsafe { libc::close(fd) };
        }
    }

    /// A connection (a socket pair) and its connector's record, awaiting
    /// the answer on the other pair's first socket.
    fn awaiting_answer() -> ([RawFd; 2], [RawFd; 2], u64, Arc<Inherit>) {
        let sv = socket_pair();
        let answer = socket_pair();
        let ino = inode(sv[0]).unwrap();
        let what = Offered::AwaitAnswer {
            listener: answer[0],
            dst_port: 5,
        };
        (sv, answer, ino, Inherit::offer(sv[0], what).unwrap())
    }

    /// A sibling or a program exec'd on the socket waits for the
    /// claimer's hello before its switch byte; nobody waits on a record
    /// not claimed.
    #[test]
    fn a_switch_waits_for_the_claimers_hello() {
        let (sv, answer, _, rec) = awaiting_answer();
        let t = std::time::Instant::now();
        rec.wait_for_hello(std::time::Duration::from_secs(5));
        assert!(
            t.elapsed() < std::time::Duration::from_millis(500),
            "unclaimed: no wait"
        );
        assert!(rec.claim());
        assert!(!rec.hello_sent());
        let claimer = rec.clone();
        let hello = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            claimer.note_hello_sent();
        });
        let t = std::time::Instant::now();
        rec.wait_for_hello(std::time::Duration::from_secs(5));
        assert!(t.elapsed() >= std::time::Duration::from_millis(40));
        assert!(rec.hello_sent());
        hello.join().unwrap();
        rec.note_kernel();
        assert!(rec.went_kernel());
        drop(rec);
        for fd in [sv[0], sv[1], answer[0], answer[1]] {
            // SAFETY: closing our descriptors.
            unsafe { libc::close(fd) };
        }
    }

    /// A record's descriptors go to the upper half of the table, leaving
    /// the program's numbers where kernel TCP would have them.
    #[test]
    fn a_records_descriptors_live_in_the_upper_half() {
        let (sv, answer, _, rec) = awaiting_answer();
        let half = (descriptor_limit().unwrap() / 2) as RawFd;
        let slot = &SLOTS[rec.slot];
        assert!(slot.record_fd.load(Ordering::Acquire) >= half);
        assert!(slot.aux_fd.load(Ordering::Acquire) >= half);
        assert!(is_held(slot.record_fd.load(Ordering::Acquire)));
        // SAFETY: a new descriptor of ours, closed below.
        let next = unsafe { libc::dup(sv[0]) };
        assert!(next < half, "the program's next number stays low");
        drop(rec);
        for fd in [sv[0], sv[1], answer[0], answer[1], next] {
            // SAFETY: closing our descriptors.
            unsafe { libc::close(fd) };
        }
    }

    /// A record no other process holds becomes the connection's switchable
    /// one at its first use, in place: a program exec'd on the socket
    /// then carries the connection on through the control page.
    #[test]
    fn an_unshared_record_becomes_switchable_in_place() {
        let (sv, answer, ino, rec) = awaiting_answer();
        let record_fd = rec.record_fd();
        assert!(rec.claim());
        let (_control, page) = Control::create().expect("control page");
        assert!(rec.become_switchable(Side::Connector, page));
        assert_eq!(rec.record_fd(), record_fd, "the same memfd");
        assert_eq!(record_kind(record_fd), Some(SWITCHABLE));
        let aux = SLOTS[rec.slot].aux_fd.load(Ordering::Acquire);
        assert_eq!(inode(aux), inode(page), "its copy names the control page");
        take_up_one(copy_of(&rec), &[(sv[0], ino)]);
        assert!(matches!(conn::route(sv[0]), conn::Route::Via(_)));
        conn::forget(sv[0]);
        drop(rec);
        for fd in [sv[0], sv[1], answer[0], answer[1], page] {
            // SAFETY: closing our descriptors.
            unsafe { libc::close(fd) };
        }
    }

    /// A connector's record (awaiting the acceptor's answer on a Unix
    /// socket) is taken up with its own copy of that socket.
    #[test]
    fn an_awaited_answer_is_taken_up_with_the_socket_it_comes_to() {
        let (sv, answer, ino, rec) = awaiting_answer();
        take_up_one(copy_of(&rec), &[(sv[0], ino)]);
        assert!(conn::lookup(sv[0]).is_some());
        conn::forget(sv[0]);
        drop(rec);
        for fd in sv.into_iter().chain(answer) {
            // SAFETY: closing our sockets.
            unsafe { libc::close(fd) };
        }
    }

    /// A socket carried by the process that execs: the new program's
    /// calls on it fail at once.
    #[test]
    fn an_unusable_mark_makes_the_socket_fail_in_the_new_program() {
        let sv = socket_pair();
        let ino = inode(sv[0]).unwrap();
        let mark = mark_unusable(sv[0]).unwrap();
        take_up_one(mark, &[(sv[0], ino), (sv[1], inode(sv[1]).unwrap())]);
        assert!(matches!(
            conn::route(sv[0]),
            conn::Route::Fail(libc::ECONNRESET)
        ));
        assert!(conn::lookup(sv[1]).is_none());
        conn::forget(sv[0]);
        for fd in sv {
            // SAFETY: closing our sockets.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn a_descriptor_that_is_not_a_record_is_left_alone() {
        let sv = socket_pair();
        // A memfd of the right size but without the magic.
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"viarun-inherit".as_ptr(), 0) };
        // SAFETY: sizing our memfd.
        assert_eq!(
            unsafe { libc::ftruncate(fd, std::mem::size_of::<Record>() as libc::off_t) },
            0
        );
        take_up_one(fd, &[(sv[0], inode(sv[0]).unwrap())]);
        assert!(conn::lookup(sv[0]).is_none());
        for fd in sv {
            // SAFETY: closing our sockets.
            unsafe { libc::close(fd) };
        }
    }
}
