//! Taking connections up in a new program: the library's constructor
//! finds the exec records among its descriptors (the parent module's
//! `Record`s) and enters each connection they name in the connection
//! table, in the state the record keeps — or, for a record another
//! program used, switched to the kernel through the page it reaches.

use std::os::fd::{FromRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::*;
use crate::conn::{self, Setup};
use crate::control::{Control, Side};
use crate::kernel::inode;
use crate::real::real;
use crate::remote;

/// What `/proc/self/fd/N` links to.
pub(super) fn link_of(fd: RawFd) -> Option<String> {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
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
pub(super) fn net_page_of_used(record_fd: RawFd) -> Option<crate::netlink::page::Page> {
    let page = crate::netlink::page::Page::map_in(record_fd, PAGE_AT)?;
    (page.owner() != 0).then_some(page)
}

/// The kind of the record in memfd `fd`, read without mapping it.
pub(super) fn record_kind(fd: RawFd) -> Option<u32> {
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

pub(super) fn take_up_one(record_fd: RawFd, sockets: &[(RawFd, u64)]) {
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
                offer: remote::Offer::adopt(udp, ports[0], ports[1], token),
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
