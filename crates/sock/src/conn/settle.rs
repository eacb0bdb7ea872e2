//! Settling a connection: from its agreement on openvia (or the wait for
//! the acceptor's answer) to carried over a VI or left on the kernel, at
//! its first use by whichever process uses it first, a sibling from a
//! fork included.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{lookup, Conn, Route, Setup};
use crate::carried::Carried;
use crate::control::{Control, Side};
use crate::link::{HandshakeEnd, Link, Medium};
use crate::netlink::NetLink;
use crate::real::real;
use crate::{rendezvous, stats};

/// `route` through the table.
///
/// Settling a connection waits for its peer: for the acceptor's answer,
/// then for the peer's first use (the VI handshake). A nonblocking socket
/// must not wait, and must not deadlock a program whose one thread is
/// both ends (an event loop that connects to its own listener, as
/// asyncio tests do): so its first call hands the settling to a thread of
/// its own and says EAGAIN, as do its calls until that thread is done;
/// the thread then makes the socket report itself writable (`room`), and
/// the peer's doorbells make it readable.
pub(super) fn settle(fd: RawFd) -> Route {
    let Some(conn) = lookup(fd) else {
        return Route::Kernel;
    };
    // Once the kernel stream holds something (the peer's hello, its
    // first doorbell, its FIN), the peer is settling too and ours ends
    // soon without this thread: waiting is then safe, and saying EAGAIN
    // to a socket that polls readable would cost an edge-triggered reader
    // its only edge.
    let waits_for_peer = || {
        crate::kernel::is_nonblocking(fd)
            && matches!(crate::kernel::peek_state(fd), crate::kernel::Peek::Empty)
    };
    match conn.settling.load(Ordering::Acquire) {
        0 => {
            // Between hosts the settling takes a round trip or two: a
            // program that writes once the socket says writable (a
            // nonblocking connect, then select) gets EAGAIN only if it
            // takes longer; kernel TCP would not say it to a first small
            // write at all. (On one host it waits for the peer program's
            // first use, often longer: ab -c 10 lost an eighth of its
            // requests a second when its loop waited here.)
            let net = between_hosts(&conn);
            if unsettled(&conn)
                && waits_for_peer()
                && settle_aside(fd, &conn)
                && !(net && settled_within(&conn, crate::process::id(), SETTLE_WAIT))
            {
                return Route::Fail(libc::EAGAIN);
            }
        }
        // Our parent was settling it when it forked us: as for a
        // connection it carries, not usable here (and never waited for).
        pid if pid != crate::process::id() => return Route::Fail(libc::EIO),
        me => {
            // A program told EAGAIN often asks again at once (a
            // level-triggered EPOLLOUT: the kernel socket has room), and
            // the settling thread needs a CPU: sleep until it is done,
            // for a while, rather than spin beside it.
            if waits_for_peer() && !settled_within(&conn, me, SETTLE_WAIT) {
                return Route::Fail(libc::EAGAIN);
            }
        }
    }
    let route = match conn.lock_here() {
        Some(g) => settle_locked(fd, g),
        None => Route::Fail(libc::EIO),
    };
    route
}

/// How long a call on a connection this process is settling aside waits
/// for the settling to end before it says EAGAIN. Long enough for a
/// settling on a busy host (the peer's first use and the VI handshake:
/// ~0.5 ms on two CPUs), short enough that a one-threaded program that is
/// both ends (its own first use comes only after this call returns) is
/// slowed, not stopped.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// Sleeps until no thread of process `me` settles `conn` any more, at
/// most `limit`; whether it ended.
fn settled_within(conn: &Conn, me: u32, limit: std::time::Duration) -> bool {
    let until = std::time::Instant::now() + limit;
    loop {
        if conn.settling.load(Ordering::Acquire) != me {
            return true;
        }
        let now = std::time::Instant::now();
        if now >= until {
            return false;
        }
        openvia_core::sys::futex::wait(&conn.settling, me, Some(until - now));
    }
}

/// Whether `conn` is agreed (or being agreed) with another host.
fn between_hosts(conn: &Conn) -> bool {
    conn.setup
        .try_lock()
        .is_ok_and(|g| matches!(&*g, Setup::AwaitNet { .. } | Setup::AgreedNet { .. }))
}

/// Whether `conn` still waits for its peer (its first use to come).
fn unsettled(conn: &Conn) -> bool {
    match conn.setup.try_lock() {
        Ok(g) => !matches!(
            &*g,
            Setup::Kernel | Setup::Broken | Setup::Refused { .. } | Setup::Via(_)
        ),
        Err(_) => false,
    }
}

/// Settles `conn` aside (`aside`: on a kept thread), through a duplicate
/// of `fd` (the program may close its descriptor meanwhile); false if
/// there was no descriptor for that (the caller then settles it itself).
fn settle_aside(fd: RawFd, conn: &Arc<Conn>) -> bool {
    let me = crate::process::id();
    if conn
        .settling
        .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return true; // another call started it just now
    }
    // SAFETY: dup of the program's socket, closed by the thread.
    let dup = unsafe { (real().dup)(fd) };
    if dup < 0 {
        conn.settling.store(0, Ordering::Release);
        return false;
    }
    let c = conn.clone();
    super::aside::SETTLERS.run(Box::new(move || {
        let g = c.setup.lock().unwrap_or_else(|e| e.into_inner());
        let _ = settle_locked(dup, g);
        c.settling.store(0, Ordering::Release);
        openvia_core::sys::futex::wake_all(&c.settling);
        crate::room::poke(dup);
        // SAFETY: closing the duplicate this job was given.
        unsafe { (real().close)(dup) };
    }));
    true
}

fn settle_locked(fd: RawFd, mut g: std::sync::MutexGuard<'_, Setup>) -> Route {
    loop {
        let next = match &*g {
            Setup::Kernel => return Route::Kernel,
            Setup::Broken | Setup::Refused { .. } => return Route::Fail(libc::ECONNRESET),
            Setup::Via(link) => {
                if link.owner_pid() == crate::process::id() {
                    return Route::Via(link.clone());
                }
                // Carried by the parent before a fork: handed back to the
                // kernel, which both processes can then share (between
                // hosts that cannot be done: EIO).
                let Some(s) = link.switched(fd) else {
                    return Route::Fail(libc::EIO);
                };
                // The parent's link is not ours to drop (its VI, its NIC).
                std::mem::forget(std::mem::replace(&mut *g, Setup::Via(s.clone())));
                return Route::Via(s);
            }
            Setup::Agreed {
                inherit: Some(i), ..
            }
            | Setup::AgreedNet {
                inherit: Some(i), ..
            }
            | Setup::AwaitAnswer {
                inherit: Some(i), ..
            }
            | Setup::AwaitNet {
                inherit: Some(i), ..
            } if !i.claim() => {
                // A process this one forked used it first (and may be
                // gone with its VI): through the page, the connection
                // goes back to the kernel, as for a program exec'd on it.
                match used_by_sibling(fd, &g) {
                    Some(s) => s,
                    None => return Route::Fail(libc::EIO),
                }
            }
            Setup::AwaitAnswer {
                listener,
                dst_port,
                dst,
                inherit,
            } => answered(fd, *listener, *dst_port, dst, inherit),
            Setup::Agreed {
                side,
                token,
                control,
                inherit,
                claimed,
            } => match Link::handshake(
                fd,
                *side,
                *token,
                control.clone(),
                inherit.as_ref().or(claimed.as_ref()).cloned(),
            ) {
                Ok(link) => {
                    if link.generation != 0 && stats::wanted() {
                        stats::record("kept", &stats::key_of(fd, None), *side);
                    }
                    Setup::Via(Arc::new(link))
                }
                Err(HandshakeEnd::PeerNeverCame) => Setup::Kernel,
                Err(HandshakeEnd::PeerWentBare) => {
                    // Counted over the device when both sides agreed.
                    stats::record("back", &stats::key_of(fd, None), *side);
                    Setup::Kernel
                }
                Err(HandshakeEnd::Broken) => Setup::Broken,
                Err(HandshakeEnd::Switched) => {
                    Setup::Via(Arc::new(crate::switched::Switched::new(
                        control.clone(),
                        *side,
                        fd,
                        inherit.as_ref().or(claimed.as_ref()).cloned(),
                    )))
                }
            },
            Setup::AwaitNet {
                offer,
                dst,
                inherit,
            } => decided(fd, offer, dst, inherit),
            Setup::AgreedNet {
                side,
                token,
                peer_host,
                inherit,
                claimed,
            } => {
                let host = matches!(side, Side::Connector).then_some(&peer_host[..]);
                let record = inherit.as_ref().or(claimed.as_ref()).cloned();
                match NetLink::handshake(fd, *side, *token, host, record) {
                    Ok(link) => Setup::Via(Arc::new(link)),
                    Err(HandshakeEnd::PeerNeverCame) => Setup::Kernel,
                    Err(HandshakeEnd::PeerWentBare) => {
                        // Counted over the device when both sides agreed.
                        stats::record("back", &stats::key_of(fd, None), *side);
                        Setup::Kernel
                    }
                    Err(HandshakeEnd::Broken | HandshakeEnd::Switched) => Setup::Broken,
                }
            }
        };
        *g = next;
    }
}

/// A connector's state once the acceptor's decision between hosts came
/// (`offer`; it may wait for it).
pub(super) fn decided(
    fd: RawFd,
    offer: &crate::remote::Offer,
    dst: &str,
    inherit: &Option<Arc<crate::inherit::Inherit>>,
) -> Setup {
    let key = stats::key_of(fd, Some(dst.to_string()));
    match offer.decision(fd) {
        Some(yes) => {
            stats::record(
                crate::link::device_short_name(Medium::Network),
                &key,
                Side::Connector,
            );
            Setup::AgreedNet {
                side: Side::Connector,
                token: yes.token,
                peer_host: yes.host().to_vec(),
                inherit: None,
                claimed: inherit.clone(),
            }
        }
        None => {
            stats::record("tcp", &key, Side::Connector);
            if let Some(i) = inherit {
                i.note_kernel();
            }
            Setup::Kernel
        }
    }
}

/// The state of a connection another process of this end (one forked
/// from this one before its first use) used first: switched to the
/// kernel through its page — the control page on one host, the hand-over
/// page in the record between hosts (`Inherit::net_page`); on one host
/// the connector's page is the one its first user stashed on the answer
/// socket. None where the page cannot be reached (not made yet: the
/// first user is still setting the connection up).
fn used_by_sibling(fd: RawFd, setup: &Setup) -> Option<Setup> {
    // The first user may still be setting the connection up (both
    // processes of a fork using it at once): its page comes within the
    // handshake, or word that the connection stays on the kernel.
    let deadline = std::time::Instant::now() + SIBLING_WAIT;
    loop {
        if let Some(s) = sibling_state(fd, setup) {
            return Some(s);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// How long a process waits for the page of a connection a sibling is
/// setting up (`used_by_sibling`) before it gives up (EIO).
const SIBLING_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// `used_by_sibling`'s one look.
fn sibling_state(fd: RawFd, setup: &Setup) -> Option<Setup> {
    let went_kernel = match setup {
        Setup::AwaitAnswer { inherit, .. }
        | Setup::AwaitNet { inherit, .. }
        | Setup::AgreedNet { inherit, .. } => inherit.as_ref(),
        _ => None,
    };
    if went_kernel.is_some_and(|i| i.went_kernel()) {
        return Some(Setup::Kernel);
    }
    // One host: the switch byte must follow the claimer's hello.
    let hello_awaited = match setup {
        Setup::Agreed { inherit, .. } | Setup::AwaitAnswer { inherit, .. } => {
            inherit.as_ref().is_some_and(|i| !i.hello_sent())
        }
        _ => false,
    };
    if hello_awaited {
        return None;
    }
    let carried: Arc<dyn Carried> = match setup {
        Setup::Agreed {
            side,
            control,
            inherit,
            ..
        } => Arc::new(crate::switched::Switched::new(
            control.clone(),
            *side,
            fd,
            inherit.clone(),
        )),
        Setup::AwaitAnswer {
            listener,
            inherit: Some(i),
            ..
        } => {
            let page = rendezvous::unstash_page(*listener)?;
            let control = Control::map(page);
            // SAFETY: our copy of the stashed page's memfd.
            unsafe { (real().close)(page) };
            let control = control?;
            // The page keeps no copy: the stash stays for a third process.
            if let Some(copy) = control.take_fd() {
                // SAFETY: the page's copy Control::map just made.
                unsafe { (real().close)(copy) };
            }
            Arc::new(crate::switched::Switched::new(
                Arc::new(control),
                Side::Connector,
                fd,
                Some(i.clone()),
            ))
        }
        Setup::AgreedNet {
            inherit: Some(i), ..
        }
        | Setup::AwaitNet {
            inherit: Some(i), ..
        } => Arc::new(crate::netlink::switched::NetSwitched::new(
            Arc::new(i.used_net_page()?),
            Some(i.clone()),
        )),
        _ => return None,
    };
    Some(Setup::Via(carried))
}

/// The acceptor's answer to a connector (`Setup::AwaitAnswer`), and what
/// the connection is then: agreed on, or on the kernel.
pub(super) fn answered(
    fd: RawFd,
    listener: RawFd,
    dst_port: u16,
    dst: &str,
    inherit: &Option<Arc<crate::inherit::Inherit>>,
) -> Setup {
    let answer = rendezvous::await_answer(listener, dst_port, fd);
    if let (Some((_, page)), Some(i)) = (&answer, inherit) {
        if i.may_be_shared() {
            // The record's other holders (our parent, a
            // process we forked) keep it used: a program the
            // parent runs on the socket after us, or that
            // process using it, needs the page (`inherit`).
            rendezvous::stash_page(listener, *page);
        }
    }
    // SAFETY: closing the answer socket we opened.
    unsafe { (real().close)(listener) };
    let key = stats::key_of(fd, Some(dst.to_string()));
    match answer {
        Some((token, page)) => {
            stats::record(
                crate::link::device_short_name(Medium::Local),
                &key,
                Side::Connector,
            );
            let control = Control::map(page);
            // SAFETY: the received page's descriptor, ours to close.
            unsafe { (real().close)(page) };
            match control {
                Some(control) => Setup::Agreed {
                    side: Side::Connector,
                    token,
                    control: Arc::new(control),
                    inherit: None,
                    claimed: inherit.clone(),
                },
                // Both committed; without the page we cannot follow.
                None => Setup::Broken,
            }
        }
        None => {
            stats::record("tcp", &key, Side::Connector);
            if let Some(i) = inherit {
                i.note_kernel();
            }
            Setup::Kernel
        }
    }
}
