//! The connections this process knows, by file descriptor, and where each
//! stands: waiting for the acceptor's answer, agreed on openvia but not
//! yet handshaken (the VI is made by whichever process uses the socket
//! first, so accept-then-fork servers work), carried over a VI, or on the
//! kernel. Descriptors that are not ours cost one atomic load.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::carried::Carried;
use crate::control::{Control, Side};
use crate::inherit::Inherit;
use crate::real::real;
use crate::remote;

mod aside;
mod settle;

pub(crate) use aside::hold_across_fork;

use settle::settle;

/// Descriptors at or past this are never carried (they stay on the kernel).
pub const MAX_FD: usize = 65536;

static MARK: [AtomicBool; MAX_FD] = [const { AtomicBool::new(false) }; MAX_FD];
static TABLE: Mutex<Option<HashMap<RawFd, Arc<Conn>>>> = Mutex::new(None);
/// Bumped whenever a descriptor's entry is added, replaced or dropped: a
/// thread's remembered route (`LAST`) holds only while it is unchanged.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// A thread's remembered route: descriptor, epoch, link.
type Remembered = (RawFd, u64, Arc<dyn Carried>);

thread_local! {
    /// This thread's last carried descriptor, the epoch it was seen in, and
    /// its link: a program reading or writing one socket in a loop finds
    /// its link without the table's lock.
    static LAST: RefCell<Option<Remembered>> = const { RefCell::new(None) };
}
/// A listening TCP socket's registrations: its Unix socket for
/// connectors on this host, its UDP agent for those on others.
#[derive(Clone)]
pub struct Listener {
    pub local: Option<RawFd>,
    pub remote: Option<Arc<remote::Registry>>,
}

/// Listening TCP sockets under viarun → their registrations.
static LISTENERS: Mutex<Option<HashMap<RawFd, Listener>>> = Mutex::new(None);

pub enum Setup {
    /// Connector: the acceptor's answer comes on this Unix listener.
    AwaitAnswer {
        listener: RawFd,
        dst_port: u16,
        dst: String,
        inherit: Option<Arc<Inherit>>,
    },
    /// Connector to another host: the acceptor's decision comes here.
    AwaitNet {
        offer: remote::Offer,
        dst: String,
        inherit: Option<Arc<Inherit>>,
    },
    /// Both ends said yes; the VI is made on first use. `inherit`: the
    /// record that hands an accepted connection to a program this one
    /// execs before using it (module `inherit`).
    /// `claimed`: the record, already claimed, of the answer awaited
    /// before (it becomes the connection's switchable record:
    /// `Inherit::become_switchable`).
    Agreed {
        side: Side,
        token: u64,
        control: Arc<Control>,
        inherit: Option<Arc<Inherit>>,
        claimed: Option<Arc<Inherit>>,
    },
    /// Both ends said yes between hosts (the connector knows the
    /// acceptor's network address); the VI is made on first use.
    /// `claimed`: the record, already claimed, of the offer this came
    /// from (it holds the hand-over page: `Inherit::net_page`).
    AgreedNet {
        side: Side,
        token: u64,
        peer_host: Vec<u8>,
        inherit: Option<Arc<Inherit>>,
        claimed: Option<Arc<Inherit>>,
    },
    Via(Arc<dyn Carried>),
    Kernel,
    /// Committed to openvia and then lost: reads reset, writes EPIPE.
    Broken,
    /// Carried by another process, out of reach (module `inherit`): as
    /// Broken, holding the record for any program this one execs.
    Refused {
        _record: Arc<Inherit>,
    },
}

pub struct Conn {
    setup: Mutex<Setup>,
    /// The process one of whose threads is settling it for a nonblocking
    /// socket (`settle`), 0 for none. In a child forked meanwhile that
    /// thread does not exist, and `setup` may have been copied locked: the
    /// child must never wait for it ([`Conn::lock_here`]).
    settling: AtomicU32,
    /// The kernel socket's inode (0 if unknown): how an exec finds the
    /// connection under whatever descriptor it was moved to (`exec`).
    inode: u64,
}

impl Conn {
    /// The setup, locked, unless a thread of another process (our parent
    /// before a fork) was settling it: then None, and the connection is
    /// not usable here.
    fn lock_here(&self) -> Option<std::sync::MutexGuard<'_, Setup>> {
        match self.settling.load(Ordering::Acquire) {
            0 => {}
            pid if pid != crate::process::id() => return None,
            _ => {}
        }
        Some(self.setup.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Where a call on a descriptor goes.
pub enum Route {
    Kernel,
    Via(Arc<dyn Carried>),
    Fail(i32),
}

pub fn insert(fd: RawFd, setup: Setup) {
    if fd < 0 || fd as usize >= MAX_FD {
        return;
    }
    let conn = Arc::new(Conn {
        setup: Mutex::new(setup),
        settling: AtomicU32::new(0),
        inode: crate::kernel::inode(fd).unwrap_or(0),
    });
    let old = {
        let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        let old = t.get_or_insert_with(HashMap::new).insert(fd, conn);
        EPOCH.fetch_add(1, Ordering::AcqRel);
        MARK[fd as usize].store(true, Ordering::Release);
        old
    };
    // The number came back for a new socket: the old one was closed
    // without our hook seeing it.
    if let Some(old) = old {
        defer(old);
    }
    end_deferred();
}

/// Connections whose socket the program closed without the library
/// seeing it (libuv, as in Node.js, closes with the raw system call),
/// found when their descriptor number came back for another socket —
/// perhaps one of the library's own, closed while it holds a VI's lock,
/// where ending a link (its memory deregistered on every VI) would wait
/// for that lock for good. Ended at the next new connection or at exit.
static STALE: Mutex<Vec<Arc<Conn>>> = Mutex::new(Vec::new());
static STALE_WAITING: AtomicBool = AtomicBool::new(false);

fn defer(conn: Arc<Conn>) {
    STALE.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
    STALE_WAITING.store(true, Ordering::Release);
}

/// Ends the connections `defer` kept: their sockets are gone, so there
/// is nothing to hand over or wait for; their links end.
fn end_deferred() {
    if !STALE_WAITING.swap(false, Ordering::AcqRel) {
        return;
    }
    let stale = std::mem::take(&mut *STALE.lock().unwrap_or_else(|e| e.into_inner()));
    for conn in stale {
        if Arc::strong_count(&conn) > 1 {
            continue; // another holder (a call under way) ends it
        }
        let Some(mut g) = conn.lock_here() else {
            continue;
        };
        match std::mem::replace(&mut *g, Setup::Kernel) {
            Setup::Via(link) if link.owner_pid() != crate::process::id() => std::mem::forget(link),
            Setup::AwaitAnswer { listener, .. } => {
                // SAFETY: the answer socket we opened for this connection.
                unsafe { (real().close)(listener) };
            }
            old => drop(old),
        }
    }
}

pub fn lookup(fd: RawFd) -> Option<Arc<Conn>> {
    if fd < 0 || fd as usize >= MAX_FD || !MARK[fd as usize].load(Ordering::Acquire) {
        return None;
    }
    let t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    t.as_ref()?.get(&fd).cloned()
}

/// `new` names the same connection as `old` (dup and friends).
pub fn alias(old: RawFd, new: RawFd) {
    forget(new);
    let Some(conn) = lookup(old) else { return };
    if new < 0 || new as usize >= MAX_FD {
        return;
    }
    let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    t.get_or_insert_with(HashMap::new).insert(new, conn);
    EPOCH.fetch_add(1, Ordering::AcqRel);
    MARK[new as usize].store(true, Ordering::Release);
}

/// Whether the tables know `fd` (a connection or a listener): only then
/// can a close or dup change them.
pub fn tracks(fd: RawFd) -> bool {
    if fd < 0 {
        return false;
    }
    if (fd as usize) < MAX_FD && MARK[fd as usize].load(Ordering::Acquire) {
        return true;
    }
    let l = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
    l.as_ref().is_some_and(|m| m.contains_key(&fd))
}

/// Drops `fd`'s entry; the last descriptor of a connection in this
/// process flushes it (waiting for the peer to hold what was sent) and
/// tears its VI down. The caller closes the kernel descriptor afterwards.
pub fn forget(fd: RawFd) {
    if fd >= 0 && (fd as usize) < MAX_FD && MARK[fd as usize].swap(false, Ordering::AcqRel) {
        let conn = {
            let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
            EPOCH.fetch_add(1, Ordering::AcqRel);
            t.as_mut().and_then(|m| m.remove(&fd))
        };
        // This thread's remembered link goes now (others' at their next
        // call), so that the last holder below ends the VI.
        let _ = LAST.try_with(|l| l.borrow_mut().take());
        if let Some(conn) = conn {
            if conn.inode != 0 && crate::kernel::inode(fd) != Some(conn.inode) {
                // Not the socket we tracked under this number: the
                // program closed that one unseen, and this close may be
                // the library's own (see `defer`).
                defer(conn);
            } else if Arc::strong_count(&conn) == 1 {
                finish(&conn, fd);
            }
        }
    }
    let registry = {
        let mut l = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
        l.as_mut().and_then(|m| m.remove(&fd))
    };
    if let Some(r) = registry {
        release(r);
    }
}

fn finish(conn: &Conn, fd: RawFd) {
    // Settling in our parent: nothing here is ours to end.
    let Some(mut g) = conn.lock_here() else {
        return;
    };
    match std::mem::replace(&mut *g, Setup::Kernel) {
        Setup::Via(link) => {
            if link.owner_pid() == crate::process::id() {
                link.let_go(fd);
                link.hand_over(fd, false);
                link.linger(fd);
                // Between hosts, what the peer has not acknowledged is
                // waited for aside: the program's close returns now.
                if !link.acknowledged_soon() && crate::netlink::acknowledged_later(fd, link.clone())
                {
                    return;
                }
                link.flush();
                link.shut();
                drop(link);
            } else {
                // Made by our parent before a fork: its VI is not ours to end.
                std::mem::forget(link);
            }
        }
        Setup::AwaitAnswer { listener, .. } => {
            // SAFETY: closing the answer socket we opened for this connection.
            unsafe { (real().close)(listener) };
        }
        _ => {}
    }
}

/// Rings late on the connection whose page is `page` (`unrung`), through
/// `fd` if that still names it, else through any descriptor that does;
/// nothing if none does (it was closed: its reader saw the end). False if
/// a connection was being changed (ask again later). The table stays
/// locked meanwhile, so no descriptor is closed and reused under the
/// doorbell's send.
pub fn ring_unrung(fd: RawFd, page: usize) -> bool {
    let t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(map) = t.as_ref() else {
        return true;
    };
    let first = map.get(&fd).map(|c| (fd, c));
    for (f, c) in first.into_iter().chain(map.iter().map(|(f, c)| (*f, c))) {
        let g = match c.setup.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        if let Setup::Via(link) = &*g {
            if link.ring_late(f, page) {
                return true;
            }
        }
    }
    true
}

/// Where calls on `fd` go, settling the connection first if needed.
pub fn route(fd: RawFd) -> Route {
    if fd < 0 || fd as usize >= MAX_FD || !MARK[fd as usize].load(Ordering::Acquire) {
        return Route::Kernel;
    }
    let epoch = EPOCH.load(Ordering::Acquire);
    let pid = crate::process::id();
    let remembered = LAST.try_with(|l| match &*l.borrow() {
        Some((f, e, link)) if *f == fd && *e == epoch && link.owner_pid() == pid => {
            Some(link.clone())
        }
        _ => None,
    });
    if let Ok(Some(link)) = remembered {
        if link.is_plain() {
            return now_kernel(fd);
        }
        return Route::Via(link);
    }
    let r = settle(fd);
    let keep = match &r {
        Route::Via(link) if link.is_plain() => return now_kernel(fd),
        Route::Via(link) => Some((fd, epoch, link.clone())),
        _ => None,
    };
    let _ = LAST.try_with(|l| *l.borrow_mut() = keep);
    r
}

/// A connection whose calls are the kernel socket's from now on
/// (`Carried::is_plain`, after a seccomp filter): the table says so.
fn now_kernel(fd: RawFd) -> Route {
    let _ = LAST.try_with(|l| *l.borrow_mut() = None);
    if let Some(mut g) = lookup(fd).as_ref().and_then(|c| c.lock_here()) {
        if matches!(&*g, Setup::Via(link) if link.is_plain()) {
            *g = Setup::Kernel;
        }
    }
    Route::Kernel
}

/// Changes whenever an entry of the table comes or goes.
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// Which entry of the table `fd` names now (to tell a closed and reused
/// number from the connection it named), if a connection.
pub fn entry_id(fd: RawFd) -> Option<usize> {
    lookup(fd).map(|c| Arc::as_ptr(&c) as usize)
}

/// What epoll may do with a connection (`epoll`).
pub enum PollLink {
    /// Carried by this process: its page can be looked at (one host), or
    /// its kernel socket is rung for every message (between hosts).
    Carried(Arc<dyn Carried>),
    /// Not settled yet (or being settled): ask again later.
    NotYet,
    /// Over the kernel, or not this process's to look at, for good.
    Never,
    /// The number no longer names the connection `id` was.
    Gone,
}

/// The link of `fd` for epoll, without waiting for any lock.
pub fn poll_link(fd: RawFd, id: usize) -> PollLink {
    let Some(conn) = lookup(fd) else {
        return PollLink::Gone;
    };
    if Arc::as_ptr(&conn) as usize != id {
        return PollLink::Gone;
    }
    let Ok(g) = conn.setup.try_lock() else {
        return PollLink::NotYet;
    };
    match &*g {
        Setup::Via(link) if link.owner_pid() == crate::process::id() => {
            if link.takes_poll_tokens() || link.rung_from_another_host() {
                PollLink::Carried(link.clone())
            } else {
                PollLink::Never
            }
        }
        Setup::Via(_) | Setup::Kernel | Setup::Broken | Setup::Refused { .. } => PollLink::Never,
        _ => PollLink::NotYet,
    }
}

/// The link of `fd` if this process carries it and it takes poll tokens,
/// without waiting for any lock (for poll and select).
pub fn carried_now(fd: RawFd) -> Option<Arc<dyn Carried>> {
    let conn = lookup(fd)?;
    let g = conn.setup.try_lock().ok()?;
    match &*g {
        Setup::Via(link)
            if link.owner_pid() == crate::process::id() && link.takes_poll_tokens() =>
        {
            Some(link.clone())
        }
        _ => None,
    }
}

/// Whether `fd` is a connection this process carries to another host,
/// its kernel socket rung for every message (for poll: `netwait`),
/// without waiting for any lock.
pub fn rung_from_another_host(fd: RawFd) -> bool {
    let Some(conn) = lookup(fd) else {
        return false;
    };
    let Ok(g) = conn.setup.try_lock() else {
        return false;
    };
    matches!(&*g, Setup::Via(link)
        if link.owner_pid() == crate::process::id() && link.rung_from_another_host())
}

/// The link of a connection already carried by this process, without
/// settling one that is not yet (for calls that only change its state).
pub fn carried(fd: RawFd) -> Option<Arc<dyn Carried>> {
    let conn = lookup(fd)?;
    let g = conn.lock_here()?;
    match &*g {
        Setup::Via(link) if link.owner_pid() == crate::process::id() => Some(link.clone()),
        _ => None,
    }
}

pub fn add_listener(fd: RawFd, listener: Listener) {
    let mut l = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
    let m = l.get_or_insert_with(HashMap::new);
    if let Some(old) = m.insert(fd, listener) {
        release(old);
    }
}

fn release(old: Listener) {
    if let Some(r) = old.local {
        // SAFETY: a registry socket of ours, no longer used.
        unsafe { (real().close)(r) };
    }
    if let Some(r) = old.remote {
        r.stop();
    }
}

pub fn registry_of(fd: RawFd) -> Option<Listener> {
    let l = LISTENERS.lock().unwrap_or_else(|e| e.into_inner());
    l.as_ref()?.get(&fd).cloned()
}

/// Before an exec: whether the connection on the socket `inode` (any, for
/// 0) is carried over a VI (ours or our parent's). By inode, not
/// descriptor: a vfork child moves and closes descriptors without telling
/// the table. No allocation; the locks are only tried (this may run in a
/// vfork child, beside the parent's other threads): one held reads as
/// not carried.
pub fn carries(inode: u64) -> bool {
    let Ok(t) = TABLE.try_lock() else {
        return false;
    };
    t.iter().flat_map(|m| m.values()).any(|c| {
        (inode == 0 || c.inode == inode)
            && c.inode != 0
            && c.setup
                .try_lock()
                .is_ok_and(|g| matches!(&*g, Setup::Via(_)))
    })
}

/// Before an exec (not in a vfork child): every connection this process
/// carries whose socket the new program keeps is handed to the kernel,
/// since our VI ends with this program (the new one takes it up from its
/// exec record). Locks are only tried.
pub fn hand_over_before_exec() {
    let Ok(t) = TABLE.try_lock() else { return };
    for (&fd, c) in t.iter().flat_map(|m| m.iter()) {
        // SAFETY: F_GETFD on a descriptor the table tracks.
        let flags = unsafe { (real().fcntl)(fd, libc::F_GETFD, 0) };
        if flags < 0 || flags & libc::FD_CLOEXEC != 0 {
            continue;
        }
        if let Ok(g) = c.setup.try_lock() {
            if let Setup::Via(link) = &*g {
                if link.owner_pid() == crate::process::id() {
                    link.hand_over(fd, true);
                }
            }
        }
    }
}

/// Before an exec of a program without the library (`bare`), here or in
/// a vfork child: each connection whose socket it keeps and that both
/// sides agreed to carry on one host but neither used yet stays on the
/// kernel instead (`Control::go_bare`): the peer says no hello, or the
/// one it said is taken off our stream here, and the peer's first use
/// (or the one it waits in) ends on the kernel. A connection already
/// carried on one host is switched with a plain stream for the program
/// (`Carried::go_bare`), when nothing the peer sent lies unread. What
/// cannot follow (that, and between hosts any connection) gets a line on
/// stderr. Nothing here allocates; locks are only tried.
pub fn go_bare_before_exec() {
    let mut done = [0u64; 64];
    let mut n = 0;
    crate::closing::each_kept_socket(|fd, ino| {
        // The table knows the socket under the descriptor this process
        // (or the parent whose memory a vfork child borrows) gave it,
        // perhaps another than the one the program keeps.
        if done[..n].contains(&ino) {
            return true;
        }
        if let Some(stays) = bare_by_inode(ino, fd) {
            if !stays {
                warn_bare(fd);
            }
            if n < done.len() {
                done[n] = ino;
                n += 1;
            }
        }
        true
    });
}

/// `go_bare_before_exec` for the connection of socket inode `ino`, kept
/// as `fd`: None if the table does not know it; else whether it stays
/// on the kernel for the bare program.
fn bare_by_inode(ino: u64, fd: RawFd) -> Option<bool> {
    // Not held past the lookup: taking the answer calls hooked functions
    // (fcntl), which look in the table themselves.
    let c = {
        let t = TABLE.try_lock().ok()?;
        t.iter()
            .flat_map(|m| m.values())
            .find(|c| c.inode == ino)?
            .clone()
    };
    let Ok(mut g) = c.setup.try_lock() else {
        return Some(false);
    };
    Some(make_plain(&mut g, fd))
}

/// Makes the kernel stream of connection `fd` (its state `g`) plain for a
/// program that reads only the kernel socket, as far as it can be:
/// whether it now is. The state itself is left as it was (a vfork child
/// must not change its parent's); where the stream is plain, the program
/// reads and writes it and the peer follows. Nothing allocated, unless a
/// connector still awaits its answer (not in a vfork child).
fn make_plain(g: &mut Setup, fd: RawFd) -> bool {
    // A connector not answered yet (`nc -e`: it execs right after its
    // connect) takes the answer first — on one host the acceptor's, between
    // hosts its decision —, where it may wait and allocate (not in a vfork
    // child: it would wait in its parent's stead).
    if let Setup::AwaitAnswer { inherit, .. } | Setup::AwaitNet { inherit, .. } = &*g {
        if crate::process::borrowing_parent_memory() || inherit.as_ref().is_some_and(|i| !i.claim())
        {
            return false;
        }
    }
    let next = match &*g {
        Setup::AwaitAnswer {
            listener,
            dst_port,
            dst,
            inherit,
        } => Some(settle::answered(fd, *listener, *dst_port, dst, inherit)),
        Setup::AwaitNet {
            offer,
            dst,
            inherit,
        } => Some(settle::decided(fd, offer, dst, inherit)),
        _ => None,
    };
    if let Some(next) = next {
        *g = next;
    }
    let (stays, side) = match &*g {
        Setup::Agreed { side, control, .. } => match control.go_bare(*side) {
            Some(crate::control::PeerHello::Never) => (true, Some(*side)),
            // Its hello heads our stream (or is on its way): taken off.
            Some(crate::control::PeerHello::Said) => (
                crate::kernel::take_byte_within(fd, std::time::Duration::from_secs(2))
                    == Some(crate::link::HELLO),
                Some(*side),
            ),
            None => (false, None),
        },
        Setup::AgreedNet {
            side,
            inherit,
            claimed,
            ..
        } => (
            net_go_bare(fd, inherit.as_ref(), claimed.as_ref()),
            Some(*side),
        ),
        Setup::Via(link) => (link.go_bare(fd), None),
        Setup::Kernel | Setup::Broken | Setup::Refused { .. } => (true, None),
        _ => (false, None),
    };
    // Agreed on a device, it stays on the kernel after all: counted so
    // (the peer, waiting in its handshake, says so too if it runs under
    // the same `viarun --stats`).
    if let (true, Some(side)) = (stays, side) {
        crate::stats::record_in_exec("back", fd, side);
    }
    stays
}

/// Every connection of the table with its descriptor, listed so that
/// the table's lock is not held while they are worked on.
fn every_conn() -> Vec<(RawFd, Arc<Conn>)> {
    listed(&TABLE.lock().unwrap_or_else(|e| e.into_inner()))
}

fn listed(t: &Option<HashMap<RawFd, Arc<Conn>>>) -> Vec<(RawFd, Arc<Conn>)> {
    t.as_ref()
        .map(|m| m.iter().map(|(fd, c)| (*fd, c.clone())).collect())
        .unwrap_or_default()
}

/// Before this process puts itself under a seccomp filter (`sandbox`),
/// after which any system call of ours beyond the program's own may kill
/// it (OpenSSH's pre-authentication child is allowed read, write, poll
/// and little else): every connection it holds is made plain kernel TCP
/// now, as for a program without the library (`make_plain`), and its
/// calls go straight to the kernel from then on. What cannot be made
/// plain (between hosts, a connection already carried: the bytes unread
/// lie in our receive buffers) keeps its state, with a line on stderr.
pub fn plain_before_sandbox() {
    let conns = every_conn();
    for (fd, c) in conns {
        let Some(mut g) = c.lock_here() else {
            warn_sandboxed(fd);
            continue;
        };
        if matches!(*g, Setup::Kernel | Setup::Broken | Setup::Refused { .. }) {
            continue;
        }
        if !make_plain(&mut g, fd) {
            // Between hosts, a connection already carried: handed over
            // and moved on to plain data, what we had not read kept in
            // memory for the reads to come.
            let settled = match &*g {
                Setup::Via(link) => link.settle_for_sandbox(fd),
                _ => None,
            };
            let Some(settled) = settled else {
                warn_sandboxed(fd);
                continue;
            };
            let next = if settled.is_plain() {
                Setup::Kernel
            } else {
                Setup::Via(settled)
            };
            match std::mem::replace(&mut *g, next) {
                Setup::Via(link) if link.owner_pid() != crate::process::id() => {
                    std::mem::forget(link)
                }
                old => drop(old),
            }
            continue;
        }
        match std::mem::replace(&mut *g, Setup::Kernel) {
            // A parent's link is not ours to end (its VI, its NIC).
            Setup::Via(link) if link.owner_pid() != crate::process::id() => std::mem::forget(link),
            old => drop(old),
        }
    }
}

/// `go_bare_before_exec` for a connection agreed on between hosts and
/// not yet used: no page is shared with the peer, so the word goes in the
/// stream (`link::BARE`, our last byte before the program's). A peer that
/// began its first use before that byte came said its hello: it is on its
/// way, and taken off our stream here (or the peer's own `BARE`, when its
/// side went bare too). One that did not says none. `inherit`/`claimed`:
/// the connection's exec record, which tells our other processes that it
/// stays on the kernel. Whether it does.
fn net_go_bare(
    fd: RawFd,
    inherit: Option<&Arc<crate::inherit::Inherit>>,
    claimed: Option<&Arc<crate::inherit::Inherit>>,
) -> bool {
    // A process of ours (one forked from this one) used it first: its VI
    // holds the stream, out of reach here.
    if inherit.is_some_and(|i| !i.claim()) {
        return false;
    }
    if crate::kernel::send_byte(fd, crate::link::BARE).is_err() {
        return false;
    }
    let _ = crate::kernel::take_if_within(
        fd,
        |b| b == crate::link::HELLO || b == crate::link::BARE,
        PEER_HELLO_WITHIN,
    );
    if let Some(record) = inherit.or(claimed) {
        record.note_kernel();
    }
    true
}

/// How long an exec waits for the hello of a peer that began its first
/// use just before our `BARE` reached it (a round trip and the peer's
/// scheduling; an idle peer costs the exec this much).
const PEER_HELLO_WITHIN: std::time::Duration = std::time::Duration::from_millis(500);

/// One line on stderr: the program about to run cannot use connection
/// `fd` (formatted by hand: this may run in a vfork child).
fn warn_bare(fd: RawFd) {
    warn_unusable(
        fd,
        b" is a connection carried over openvia, and the program about to run \
does not load the library; it cannot use it (docs/sockets.md)\n",
    );
}

/// One line on stderr: connection `fd` could not be made plain before
/// the process put itself under a seccomp filter.
fn warn_sandboxed(fd: RawFd) {
    warn_unusable(
        fd,
        b" is a connection carried over openvia that could not be handed to \
the kernel before a seccomp filter; the filter may refuse its calls (docs/sockets.md)\n",
    );
}

/// "viarun: descriptor FD" and `tail` on stderr, without allocating.
fn warn_unusable(fd: RawFd, tail: &[u8]) {
    let mut line = [0u8; 200];
    let head: &[u8] = b"viarun: descriptor ";
    let mut at = 0;
    line[..head.len()].copy_from_slice(head);
    at += head.len();
    let mut digits = [0u8; 10];
    let mut v = fd.max(0) as u32;
    let mut k = digits.len();
    loop {
        k -= 1;
        digits[k] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    line[at..at + digits.len() - k].copy_from_slice(&digits[k..]);
    at += digits.len() - k;
    let tail = &tail[..tail.len().min(line.len() - at)];
    line[at..at + tail.len()].copy_from_slice(tail);
    at += tail.len();
    // SAFETY: writing our own bytes to stderr.
    let _ = unsafe { (real().write)(2, line.as_ptr().cast(), at) };
}

/// For the hand-over watcher (`netlink::start_watcher`): serves every
/// request a process without the VI made for a connection this process
/// carries. Whether there was one.
pub fn serve_requests() -> bool {
    let Ok(t) = TABLE.try_lock() else {
        return false;
    };
    let conns = listed(&t);
    drop(t);
    let mut served = false;
    for (fd, c) in conns {
        let Ok(g) = c.setup.try_lock() else { continue };
        if let Setup::Via(link) = &*g {
            if link.owner_pid() == crate::process::id() {
                served |= link.serve_request(fd);
            }
        }
    }
    served
}

/// Before exit: every connection carried here hands over what it sent
/// (to the kernel, if a process we forked may still use it).
pub fn flush_all() {
    end_deferred();
    let conns = every_conn();
    for (fd, c) in conns {
        let Some(g) = c.lock_here() else { continue };
        if let Setup::Via(link) = &*g {
            if link.owner_pid() == crate::process::id() {
                link.hand_over(fd, false);
                link.linger(fd);
                link.flush();
            }
        }
    }
}
