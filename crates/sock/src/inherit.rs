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
//! not take it up a second time. Once used, a connection's record becomes
//! *switchable* (rewritten in place where no other process holds it, or
//! a new one: the control page's memfd on one host; between hosts the
//! record keeps the hand-over page in its own memfd), held while it
//! lives, never claimed: a program exec'd on it hands the connection back
//! to the kernel on first use (`switched`, docs/sockets.md). A connection
//! with no room for a record is not carried at all
//! (`room_for_a_record`).
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

mod pool;
mod take_up;

#[cfg(test)]
pub(crate) use pool::POOL_TESTS;

use take_up::net_page_of_used;
pub use take_up::take_up;
#[cfg(test)]
use take_up::{record_kind, take_up_one};

use crate::conn;
use crate::control::Side;
use crate::kernel::{dup_high, inode};
use crate::netlink::spare::Spare;
use crate::real::real;

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

/// Our new record memfd `fd` (not close-on-exec), moved where the
/// library keeps its copies (`kernel::dup_high`); -1 stays -1, and where
/// it cannot move it stays.
fn moved_high(fd: RawFd) -> RawFd {
    if fd < 0 {
        return fd;
    }
    let d = dup_high(fd, false);
    if d < 0 {
        return fd;
    }
    // SAFETY: the original, ours, copied above.
    unsafe { (real().close)(fd) };
    d
}

/// Whether another record may be made for a connection on `socket`: a
/// connection is carried only then, so that every one carried has a
/// record a program exec'd on it finds (two threads setting connections
/// up at once at the very limit may still leave one without).
pub fn room_for_a_record(socket: RawFd) -> bool {
    let held = HELD.load(Ordering::Relaxed);
    // The program's sockets below the library's floor, our records' two
    // descriptors each (and the core's for the connection) above it
    // (`fdroom`, `kernel::dup_high`); a kept memfd (`pool`) counts as one.
    held < MAX_HELD && crate::fdroom::room_for_one_more(socket, held + pool::count())
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
        /// The offer's number for the agent (kept in the record's token).
        nonce: u64,
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
    /// Between hosts: the hand-over page and registered memory in the
    /// memfd, without a VI, for the next connection (`netlink::spare`).
    spare: std::sync::Mutex<Option<Spare>>,
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
            Offered::AwaitNet {
                udp,
                lport,
                cport,
                nonce,
            } => (
                AWAIT_NET,
                Side::Connector,
                nonce,
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
        let mut held = match pool::take(matches!(kind, AGREED_NET | AWAIT_NET)) {
            Some((record_fd, record, spare)) => {
                let Some(mut held) = Inherit::holding(record_fd, record, socket_inode) else {
                    // SAFETY: the kept record's mapping; its memfd was
                    // closed by `holding`, the spare goes with it.
                    unsafe { libc::munmap(record.cast(), std::mem::size_of::<Record>()) };
                    return None;
                };
                *held.spare.get_mut().unwrap_or_else(|e| e.into_inner()) = spare;
                held
            }
            None => {
                // SAFETY: a NUL-terminated name; no CLOEXEC: it must
                // outlive exec.
                let record_fd = moved_high(unsafe { libc::memfd_create(RECORD_NAME.as_ptr(), 0) });
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
                held
            }
        };
        let (aux_fd, aux_inode) = match aux {
            Some(a) => {
                // Not close-on-exec, as the record's.
                let d = dup_high(a, false);
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
            spare: std::sync::Mutex::new(None),
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

    /// Keeps `spare` (this connection's page and memory, its VI ended) in
    /// the record for the next connection (`netlink::spare`); given back
    /// at once where the record may be shared.
    pub fn keep_spare(&self, spare: Spare) {
        if !self.may_be_shared() && self.net_page().is_some() {
            *self.spare.lock().unwrap_or_else(|e| e.into_inner()) = Some(spare);
        }
    }

    /// The page and memory a kept memfd brought (`keep_spare`), if any.
    pub fn take_spare(&self) -> Option<Spare> {
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).take()
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
        // Not close-on-exec, as the record's.
        let d = dup_high(control, false);
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
        let claimed = || self.record().used.load(Ordering::Acquire) == USED;
        if !claimed() {
            return; // every write but in that moment
        }
        let start = std::time::Instant::now();
        while claimed() && start.elapsed() < limit {
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
        // The memfd goes to the pool, with its page and memory between
        // hosts, where no other process can hold it (and not from a vfork
        // child, whose descriptor table is not ours). A spare not kept is
        // given back here (`Spare`'s drop says by whom).
        let spare = self
            .spare
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let kept = record_fd >= 0
            && !self.record.is_null()
            && !self.may_be_shared()
            && !crate::process::borrowing_parent_memory()
            && pool::put(record_fd, self.record, spare).is_ok();
        // SAFETY: our own mapping and descriptors (those the program has
        // not closed itself), used by nothing else in this process once
        // the last holder lets go.
        unsafe {
            if !kept && !self.record.is_null() {
                libc::munmap(self.record.cast(), std::mem::size_of::<Record>());
            }
            if !kept && record_fd >= 0 {
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

#[cfg(test)]
mod tests;
