//! epoll on carried connections: a waiter that spins before it sleeps.
//!
//! The kernel socket of a carried connection is readable while data is
//! unread (its writer rings a doorbell byte: `control`), so the kernel's
//! epoll is right without us, but every message then costs its writer a
//! send and its reader a receive of that byte: as many system calls as
//! kernel TCP itself, and an event-loop server (redis) gains nothing.
//!
//! So `epoll_wait` on a set that holds carried connections first asks the
//! kernel without waiting and looks at each connection's page (data
//! arrived and unread needs no kernel to see). With nothing ready it
//! offers a token on each connection (as a blocking read does, see
//! `reader`) and spins for `VIARUN_SPIN_US` on the pages, asking the
//! kernel now and then for the set's other descriptors. A message that
//! comes meanwhile takes its connection's token instead of ringing. A
//! wait that has something to report (poll's and select's too,
//! `spinwait::report`) leaves the other tokens standing,
//! and a read that uses every message up offers its connection's again:
//! a busy event loop, whose peers' messages come while it works between
//! waits, then finds them on the pages at its next wait, and no message
//! costs either end a system call. Only with nothing at all to report
//! does the waiter take every token back (those taken are reported
//! readable) and sleep in the kernel, writers ringing again. A wait that
//! does not look at the pages (another process's, a system call made by
//! hand, the wait of a set this one is nested in) is woken by the
//! writer's late ring (`unrung`); a set added to another set lets no
//! token stand, and a fork takes them all back.
//!
//! Only connections registered for EPOLLIN without EPOLLONESHOT are
//! looked at (a one-shot registration is the kernel's to disarm); one
//! thread per set spins with tokens, others wait in the kernel. The table
//! of sets follows epoll_ctl; a closed descriptor leaves every set it was
//! in, a closed set goes.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libc::{c_int, epoll_event};

mod members;

use members::Members;

use crate::carried::Carried;
use crate::conn::{self, PollLink};
use crate::real::real;
use crate::spinwait::{self, limit_of_ms, ms_of};
use crate::unrung;
use crate::waitspin::WaitSpin;

/// Sets with at least one connection (so a wait on any other set pays
/// one load).
static WATCHED: AtomicUsize = AtomicUsize::new(0);
static SETS: Mutex<Sets> = Mutex::new(None);

/// Most connections a set may hold and still be looked at in user space
/// (each wait reads one word per connection): past it, only the kernel.
const MOST_LOOKED_AT: usize = 1024;

struct Member {
    fd: RawFd,
    events: u32,
    data: u64,
    /// The connection's entry when `link` was found (a closed and reused
    /// number names another).
    conn: usize,
    link: Option<Arc<dyn Carried>>,
    /// Never carried here (kernel TCP, another process's link).
    never: bool,
}

struct Set {
    members: Mutex<Members>,
    /// A thread spins with tokens on this set.
    spinning: AtomicBool,
    /// The table of connections as of the members' last check
    /// (`conn::epoch`).
    epoch: AtomicU64,
    /// This set is itself a member of another set: a wait on that one
    /// goes to the kernel without looking at our pages, so no token of
    /// ours stands between waits.
    nested: AtomicBool,
    /// Bumped (under the members' lock) whenever the members change.
    generation: AtomicU64,
    /// The connections to look at as of a generation and a table epoch:
    /// a wait on a set that has not changed takes it whole instead of
    /// going through every member (a server with hundreds of clients
    /// waits thousands of times a second).
    snapshot: Mutex<Option<Snapshot>>,
    /// When a wait last stamped its connections as looked at (µs).
    stamped: AtomicU64,
    /// How long a wait on connections between hosts looks at the kernel
    /// before it sleeps (adapts, see `netwait`).
    net_spin: Mutex<WaitSpin>,
    /// How long a wait on connections on this host spins on their pages
    /// before it sleeps (adapts, see `waitspin`).
    local_spin: Mutex<WaitSpin>,
}

struct Snapshot {
    generation: u64,
    epoch: u64,
    looked: Arc<Vec<Looked>>,
}

impl Set {
    fn new(members: Vec<Member>) -> Set {
        Set {
            members: Mutex::new(Members::new(members)),
            spinning: AtomicBool::new(false),
            epoch: AtomicU64::new(u64::MAX),
            nested: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            snapshot: Mutex::new(None),
            stamped: AtomicU64::new(0),
            net_spin: Mutex::new(crate::netlink::spin_window()),
            local_spin: Mutex::new(WaitSpin::default()),
        }
    }

    /// Its members changed (the caller holds their lock): the snapshot
    /// goes, for the caller to drop once it holds no lock (its links may
    /// be the last references, see `take_out`).
    fn changed(&self) -> Option<Snapshot> {
        self.generation.fetch_add(1, Ordering::AcqRel);
        lock(&self.snapshot).take()
    }
}

fn set_of(epfd: RawFd) -> Option<Arc<Set>> {
    if WATCHED.load(Ordering::Acquire) == 0 {
        return None;
    }
    let s = SETS.lock().unwrap_or_else(|e| e.into_inner());
    s.as_ref()?.get(&epfd).cloned()
}

/// After the kernel's epoll_ctl succeeded: follows `fd` in `epfd`'s table
/// if it names a connection.
pub fn ctl(epfd: RawFd, op: c_int, fd: RawFd, event: Option<&epoll_event>) {
    if op == libc::EPOLL_CTL_ADD {
        if let Some(inner) = set_of(fd) {
            inner.nested.store(true, Ordering::Release);
            for m in lock(&inner.members).iter() {
                if let Some(l) = &m.link {
                    l.revoke_poll_token();
                }
            }
        }
    }
    let entry = match (op, event) {
        (libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD, Some(_)) => conn::entry_id(fd),
        _ => None,
    };
    let (Some(ev), Some(entry)) = (event, entry) else {
        // Removed, or not a connection (any more): the kernel alone.
        if let Some(set) = set_of(epfd) {
            let mut members = lock(&set.members);
            let gone = members.take(fd);
            let old = gone
                .as_ref()
                .is_some_and(Member::looked_at)
                .then(|| set.changed())
                .flatten();
            drop(members);
            drop(gone);
            drop(old);
        }
        return;
    };
    let set = {
        let mut s = SETS.lock().unwrap_or_else(|e| e.into_inner());
        let map = s.get_or_insert_with(HashMap::new);
        map.entry(epfd)
            .or_insert_with(|| {
                WATCHED.fetch_add(1, Ordering::AcqRel);
                Arc::new(Set::new(Vec::new()))
            })
            .clone()
    };
    if op == libc::EPOLL_CTL_MOD && modified_in_place(&set, fd, entry, ev) {
        return;
    }
    // Found now if it can be (it usually is settled by then): the
    // thread's reads and writes stamp it before its next wait (`stamp_mine`).
    let (link, never) = match conn::poll_link(fd, entry) {
        PollLink::Carried(l) => (Some(l), false),
        PollLink::Never => (None, true),
        PollLink::NotYet | PollLink::Gone => (None, false),
    };
    let mut members = lock(&set.members);
    let member = Member {
        fd,
        events: ev.events,
        data: ev.u64,
        conn: entry,
        link,
        never,
    };
    let looked = member.looked_at();
    let gone = members.put(member);
    // A member no wait looks at (EPOLLOUT alone, as an event loop adds
    // before a write and removes after it) leaves the snapshot as it is.
    let old = (looked || gone.as_ref().is_some_and(Member::looked_at))
        .then(|| set.changed())
        .flatten();
    drop(members);
    drop(gone);
    drop(old);
}

impl Member {
    /// Whether a wait looks at this member's page: registered for
    /// EPOLLIN, not one-shot (a one-shot registration is the kernel's to
    /// disarm). Only such members are in a set's snapshot.
    fn looked_at(&self) -> bool {
        self.events & libc::EPOLLIN as u32 != 0 && self.events & libc::EPOLLONESHOT as u32 == 0
    }
}

/// The event bits a wait's look depends on (`looked_at`, `ready_event`):
/// a change of the others (EPOLLOUT, EPOLLET...) leaves it as it was.
const LOOKED_BITS: u32 = (libc::EPOLLIN | libc::EPOLLRDNORM | libc::EPOLLONESHOT) as u32;

/// An EPOLL_CTL_MOD of a member that changes nothing a wait looks at: an
/// event loop turning EPOLLOUT on before a write and off after it, twice
/// per request for redis-benchmark. Its events are updated where they
/// are, and the snapshot of the set stays: dropping it made every wait
/// after such a change go through every member again (with 500 clients,
/// redis-benchmark under viarun spent more time there than in its
/// requests). False: the caller replaces the member.
fn modified_in_place(set: &Set, fd: RawFd, entry: usize, ev: &epoll_event) -> bool {
    let mut members = lock(&set.members);
    let Some(m) = members.get_mut(fd) else {
        return false;
    };
    let same = m.conn == entry
        && m.data == ev.u64
        && m.events & LOOKED_BITS == ev.events & LOOKED_BITS
        && (m.link.is_some() || m.never);
    if same {
        m.events = ev.events;
    }
    same
}

/// `fd` is closed (or replaced by dup2): it leaves every set, and a set
/// it was goes.
pub fn closed(fd: RawFd) {
    closed_range(fd, fd);
}

/// Every descriptor from `first` to `last` is closed.
pub fn closed_range(first: RawFd, last: RawFd) {
    if WATCHED.load(Ordering::Acquire) == 0 {
        return;
    }
    let inside = |fd: RawFd| (first..=last).contains(&fd);
    let mut gone_sets = Vec::new();
    let mut gone = Vec::new();
    let mut old = Vec::new();
    {
        let mut s = SETS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(map) = s.as_mut() else { return };
        let closed: Vec<RawFd> = map.keys().copied().filter(|&e| inside(e)).collect();
        for e in closed {
            gone_sets.extend(map.remove(&e));
            WATCHED.fetch_sub(1, Ordering::AcqRel);
        }
        for set in map.values() {
            let mut members = lock(&set.members);
            // One descriptor (a close) is found by its number, not by a
            // walk through every member.
            let out = if first == last {
                members.take(first).into_iter().collect()
            } else {
                members.take_out(|m| inside(m.fd))
            };
            if out.iter().any(Member::looked_at) {
                old.extend(set.changed());
            }
            gone.extend(out);
        }
    }
    // Dropped with no lock held (see `take_out`).
    drop(gone);
    drop(old);
    drop(gone_sets);
}

type Sets = Option<HashMap<RawFd, Arc<Set>>>;

/// Before fork (`forkheld`): the table's lock is taken, so that the
/// child does not inherit it held by a thread it does not have; the
/// tokens our waits let stand come back (the child's waits go to the
/// kernel, and a message that took one would ring no doorbell for it).
/// In the child its sets' connections are its parent's links, which it
/// does not look at (`conn::poll_link`), so it forgets the table (its
/// waits go to the kernel). Leaked, not dropped: dropping a link there
/// must not touch what the parent still uses.
pub fn hold_across_fork() {
    crate::forkheld::hold_after(
        &SETS,
        |sets| {
            for set in sets.iter().flat_map(|m| m.values()) {
                for m in lock(&set.members).iter() {
                    if let Some(l) = &m.link {
                        l.revoke_poll_token();
                    }
                }
            }
        },
        |sets| {
            std::mem::forget(sets.take());
            WATCHED.store(0, Ordering::Release);
        },
    );
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection looked at in this wait.
struct Looked {
    data: u64,
    events: u32,
    link: Arc<dyn Carried>,
}

/// The connections of `set` to look at now, carried here and registered
/// for EPOLLIN (not one-shot): the snapshot if the set and the table of
/// connections are as when it was taken; else found again (links found
/// where they were not yet; members whose number now names another
/// connection dropped), and kept as the snapshot unless a member's
/// connection is still being set up (its link may come without any
/// change the generation or epoch would show).
fn looked_at(set: &Set) -> Arc<Vec<Looked>> {
    let epoch = conn::epoch();
    if let Some(s) = lock(&set.snapshot).as_ref() {
        if s.generation == set.generation.load(Ordering::Acquire) && s.epoch == epoch {
            return s.looked.clone();
        }
    }
    let mut members = lock(&set.members);
    if members.len() > MOST_LOOKED_AT {
        return Arc::new(Vec::new());
    }
    let mut out = Vec::with_capacity(members.len());
    let mut stale = Vec::new();
    let mut pending = false;
    let before = members.len();
    // Numbers are checked again only when the table of connections changed.
    let recheck = set.epoch.swap(epoch, Ordering::AcqRel) != epoch;
    members.retain_mut(|m| {
        if !m.looked_at() {
            return true;
        }
        if m.never {
            return true;
        }
        if m.link.is_none() {
            match conn::poll_link(m.fd, m.conn) {
                PollLink::Carried(l) => m.link = Some(l),
                PollLink::NotYet => {
                    pending = true;
                    return true;
                }
                PollLink::Never => {
                    m.never = true;
                    return true;
                }
                PollLink::Gone => return false,
            }
        } else if recheck && conn::entry_id(m.fd) != Some(m.conn) {
            // Its link is dropped below, with no lock held.
            stale.extend(m.link.take());
            return false;
        }
        if let Some(link) = &m.link {
            out.push(Looked {
                data: m.data,
                events: m.events,
                link: link.clone(),
            });
        }
        true
    });
    let old = if members.len() != before {
        set.changed()
    } else {
        None
    };
    let looked = Arc::new(out);
    let replaced = if pending {
        None
    } else {
        lock(&set.snapshot).replace(Snapshot {
            generation: set.generation.load(Ordering::Acquire),
            epoch,
            looked: looked.clone(),
        })
    };
    drop(members);
    drop(stale);
    drop(old);
    drop(replaced);
    looked
}

fn ready_event(l: &Looked) -> epoll_event {
    epoll_event {
        events: l.events & (libc::EPOLLIN | libc::EPOLLRDNORM) as u32 | libc::EPOLLIN as u32,
        u64: l.data,
    }
}

/// Adds to the `n` events of `out` those of `ready` not there yet.
fn merge(out: &mut [epoll_event], mut n: usize, ready: &[&Looked]) -> usize {
    for l in ready {
        if n == out.len() {
            break;
        }
        if let Some(e) = out[..n].iter_mut().find(|e| e.u64 == l.data) {
            e.events |= libc::EPOLLIN as u32;
            continue;
        }
        out[n] = ready_event(l);
        n += 1;
    }
    n
}

/// The kernel's wait on a set: epoll_pwait or epoll_pwait2 with the
/// program's signal mask, for at most the given time (None: no limit).
type KernelWait<'a> = &'a dyn Fn(&mut [epoll_event], Option<Duration>) -> c_int;

std::thread_local! {
    /// The sets this thread waited on in the library (a few), when it last
    /// stamped their connections, and its reads and writes since.
    static MINE: std::cell::RefCell<(Vec<std::sync::Weak<Set>>, u64, u32)> =
        const { std::cell::RefCell::new((Vec::new(), 0, 0)) };
}

/// Most sets a thread keeps stamping between its waits.
const MINE_MOST: usize = 8;

/// A wait on `set` by this thread: keeps it among the thread's sets.
fn remember(set: &Arc<Set>) {
    let _ = MINE.try_with(|m| {
        // (Busy only under a signal handler's call: nothing to keep.)
        let Ok(mut m) = m.try_borrow_mut() else {
            return;
        };
        if m.0
            .iter()
            .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(set)))
        {
            return;
        }
        m.0.retain(|w| w.strong_count() > 0);
        if m.0.len() == MINE_MOST {
            m.0.remove(0);
        }
        m.0.push(Arc::downgrade(set));
    });
}

/// From this thread's reads and writes on carried connections: a thread
/// busy with a batch of events between two waits still counts as looking
/// at the sets it waits on (their connections are stamped every
/// `LOOK_STAMP_US`, the clock asked every 64 calls), so their writers ring
/// no late doorbell meanwhile (`unrung`). A thread asleep in the kernel
/// makes no such calls: its connections' stamps age.
pub fn stamp_mine() {
    let _ = MINE.try_with(|m| {
        // (Busy only under a signal handler's call: its stamp can wait.)
        let Ok(mut m) = m.try_borrow_mut() else {
            return;
        };
        m.2 = m.2.wrapping_add(1);
        if m.0.is_empty() || m.2 % 64 != 0 {
            return;
        }
        let now = spinwait::now_us();
        if now.saturating_sub(m.1) < spinwait::LOOK_STAMP_US {
            return;
        }
        m.1 = now;
        for set in m.0.iter().filter_map(|w| w.upgrade()) {
            // Only those its waits look at: one registered without
            // EPOLLIN, or one-shot, is not waited for (stamped, its
            // writer would put its late ring off for as long).
            for l in lock(&set.members)
                .iter()
                .filter(|m| m.looked_at())
                .filter_map(|m| m.link.as_ref())
            {
                l.stamp_looked(now);
            }
        }
    });
}

/// epoll_wait/epoll_pwait/epoll_pwait2 on `epfd` for at most `limit`
/// (None: no limit); None: not a set we look at (the caller asks the
/// kernel as usual).
pub fn wait(
    epfd: RawFd,
    out: &mut [epoll_event],
    limit: Option<Duration>,
    kernel_wait: KernelWait<'_>,
) -> Option<c_int> {
    let set = set_of(epfd)?;
    let all = looked_at(&set);
    // Once handed back to the kernel, a connection takes no token.
    let looked: Vec<&Looked> = all.iter().filter(|l| l.link.takes_poll_tokens()).collect();
    if out.is_empty() {
        return None;
    }
    if looked.is_empty() {
        if all.iter().any(|l| l.link.rung_from_another_host()) {
            // Only the set's spinner uses its window: a copy for the wait.
            let spinner = !set.spinning.swap(true, Ordering::AcqRel);
            let mut window = spinner.then(|| *lock(&set.net_spin));
            let n = crate::netwait::look_then_sleep(
                window.as_mut(),
                limit,
                |l| kernel_wait(out, l),
                || {
                    if spinner {
                        set.spinning.store(false, Ordering::Release);
                    }
                },
            );
            if let Some(w) = window {
                *lock(&set.net_spin) = w;
            }
            return Some(n);
        }
        return None;
    }
    let timeout_ms = spinwait::millis(limit);
    let kernel = |out: &mut [epoll_event], ms: c_int| -> c_int {
        kernel_wait(out, (ms >= 0).then(|| Duration::from_millis(ms as u64)))
    };
    let start = Instant::now();
    let links: Vec<&dyn Carried> = looked.iter().map(|l| &*l.link).collect();
    spinwait::stamp_looked(&links, &set.stamped);
    remember(&set);
    // Tokens go out first, before the kernel is asked: the peer of an
    // event loop answers fast, and its next message should find one.
    let spinner = timeout_ms != 0 && !set.spinning.swap(true, Ordering::AcqRel);
    let timeout_ms = timeout_ms.clamp(-1, c_int::MAX as i64) as c_int;
    let offered = spinwait::offer(&links, spinner);
    let mut n = kernel(out, 0);
    let mut run = None;
    if n == 0 && spinner && !links.iter().any(|l| l.ready_in_user_space()) {
        let run = run.insert(lock(&set.local_spin).start());
        n = spinwait::spin(
            &links,
            &offered,
            spinwait::limit(timeout_ms.into()),
            run,
            out,
            kernel,
        );
    }
    if spinner {
        set.spinning.store(false, Ordering::Release);
    }
    // Something to report: the other connections' tokens stand on until
    // the next wait (see the module's text), unless this set is nested in
    // another; before the kernel sleeps, every token comes back.
    let stand = !set.nested.load(Ordering::Acquire);
    let ready: Vec<&Looked> = spinwait::report(&links, &offered, n, timeout_ms.into(), stand)
        .into_iter()
        .map(|i| looked[i])
        .collect();
    if n < 0 {
        return Some(n);
    }
    let n = merge(out, n as usize, &ready);
    if n > 0 || timeout_ms == 0 {
        if let Some(run) = run {
            lock(&set.local_spin).settle(&run);
        }
        return Some(n as c_int);
    }
    // Nothing: sleep in the kernel (writers ring, the tokens are back).
    let rest = limit.map(|d| d.saturating_sub(start.elapsed()));
    let n = unrung::sleep(rest, |l| kernel_wait(out, l));
    if let Some(run) = run {
        // Something came: the window by the wait's length; nothing within
        // the program's timeout: as a long wait.
        let mut w = lock(&set.local_spin);
        match n {
            1.. => w.settle(&run),
            0 => w.settle_timed_out(),
            _ => {}
        }
    }
    Some(n)
}

/// # Safety
/// The C prototype of epoll_ctl(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut epoll_event,
) -> c_int {
    crate::guarded(-1, || {
        // SAFETY: the program's arguments, passed on as they came.
        let r = unsafe { (real().epoll_ctl)(epfd, op, fd, event) };
        if r == 0 {
            // SAFETY: on success the kernel read `event` (for ADD and MOD).
            ctl(epfd, op, fd, unsafe { event.as_ref() });
        }
        r
    })
}

/// The program's event array as a slice (empty if it gave none).
fn events<'a>(events: *mut epoll_event, max: c_int) -> &'a mut [epoll_event] {
    if events.is_null() || max <= 0 {
        return &mut [];
    }
    // SAFETY: the program's array of `max` events, ours for the call.
    unsafe { std::slice::from_raw_parts_mut(events, max as usize) }
}

/// epoll_pwait for `wait`: the program's set, array and signal mask.
fn pwait(
    epfd: c_int,
    sigmask: *const libc::sigset_t,
) -> impl Fn(&mut [epoll_event], Option<Duration>) -> c_int {
    move |out, limit| {
        // SAFETY: the program's event array of `out.len()` entries and
        // its signal mask (or null).
        unsafe {
            (real().epoll_pwait)(
                epfd,
                out.as_mut_ptr(),
                out.len() as c_int,
                ms_of(limit),
                sigmask,
            )
        }
    }
}

/// # Safety
/// The C prototype of epoll_wait(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    ev: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    if openvia_core::transport_busy() {
        // The core's own wait (its progress thread; see data_hook).
        return (real().epoll_wait)(epfd, ev, max, timeout);
    }
    crate::guarded(-1, || {
        let kernel = pwait(epfd, std::ptr::null());
        wait(epfd, events(ev, max), limit_of_ms(timeout), &kernel).unwrap_or_else(|| {
            unrung::sleep_ms(timeout.into(), |ms| {
                // SAFETY: the program's arguments, passed on as they came
                // (the timeout perhaps in two parts).
                unsafe { (real().epoll_wait)(epfd, ev, max, ms) }
            })
        })
    })
}

/// # Safety
/// The C prototype of epoll_pwait(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    ev: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const libc::sigset_t,
) -> c_int {
    crate::guarded(-1, || {
        let kernel = pwait(epfd, sigmask);
        wait(epfd, events(ev, max), limit_of_ms(timeout), &kernel).unwrap_or_else(|| {
            unrung::sleep_ms(timeout.into(), |ms| {
                // SAFETY: the program's arguments, passed on as they came
                // (the timeout perhaps in two parts).
                unsafe { (real().epoll_pwait)(epfd, ev, max, ms, sigmask) }
            })
        })
    })
}

/// epoll_pwait2 through the system call (C libraries before glibc 2.35
/// have no wrapper): ENOSYS from a kernel before 5.11, as from glibc's.
fn pwait2_call(
    epfd: c_int,
    ev: *mut epoll_event,
    max: c_int,
    timeout: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the program's arguments (or ours: an array and timespec we
    // hold for the call); the signal set's size is the kernel's.
    unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait2,
            epfd,
            ev,
            max,
            timeout,
            sigmask,
            8usize,
        ) as c_int
    }
}

/// # Safety
/// The C prototype of epoll_pwait2(2): as epoll_pwait, with a timespec.
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    ev: *mut epoll_event,
    max: c_int,
    timeout: *const libc::timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    crate::guarded(-1, || {
        // SAFETY: the program's timeout, if it gave one.
        let limit = spinwait::limit_of(unsafe { timeout.as_ref() });
        let call = |ev: *mut epoll_event, max: c_int, limit: Option<Duration>| -> c_int {
            let t = limit.map(spinwait::timespec);
            let tp = t.as_ref().map_or(std::ptr::null(), |t| t as *const _);
            pwait2_call(epfd, ev, max, tp, sigmask)
        };
        let kernel = |out: &mut [epoll_event], l: Option<Duration>| {
            call(out.as_mut_ptr(), out.len() as c_int, l)
        };
        wait(epfd, events(ev, max), limit, &kernel)
            .unwrap_or_else(|| unrung::sleep(limit, |l| call(ev, max, l)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn member(fd: RawFd) -> Member {
        Member {
            fd,
            events: libc::EPOLLIN as u32,
            data: fd as u64,
            conn: 0,
            link: None,
            never: false,
        }
    }

    fn add_set(epfd: RawFd, fds: &[RawFd]) -> Arc<Set> {
        let set = Arc::new(Set::new(fds.iter().map(|&f| member(f)).collect()));
        let mut s = SETS.lock().unwrap();
        s.get_or_insert_with(HashMap::new).insert(epfd, set.clone());
        WATCHED.fetch_add(1, Ordering::AcqRel);
        set
    }

    /// A closed descriptor leaves every set; a closed set goes (its number
    /// may name a new set next, which must not inherit its members).
    #[test]
    fn closing_a_member_or_a_set_updates_the_table() {
        let (a, b) = (900_001, 900_002);
        let set_a = add_set(a, &[900_010, 900_011]);
        let _set_b = add_set(b, &[900_011]);
        closed(900_011);
        assert_eq!(
            set_a
                .members
                .lock()
                .unwrap()
                .iter()
                .map(|m| m.fd)
                .collect::<Vec<_>>(),
            [900_010]
        );
        assert!(set_of(b).unwrap().members.lock().unwrap().is_empty());
        closed_range(900_001, 900_002);
        assert!(set_of(a).is_none() && set_of(b).is_none());
    }
}
