//! libviarun.so: preloaded by `viarun`, it carries TCP stream connections
//! whose two ends both run under viarun over openvia, and leaves every
//! other descriptor to the kernel untouched.
//!
//! - `real`: the C library's calls (`dlsym(RTLD_NEXT)`).
//! - `rendezvous`: agreeing per connection, out of band, on openvia with
//!   a peer on this host; `remote`: with a peer on another host.
//! - `conn`: descriptor → connection state; `carried`: what a carried
//!   connection offers the hooks; `link` (setup, writes) and `reader`: the
//!   VI data path on one host; `control`: its shared page that decides
//!   when a doorbell is needed; `netlink`: the data path between hosts;
//!   `kernel`: the doorbell bytes on the program's own TCP socket.
//! - `stats`: the lines `viarun --stats` counts; `stdio`: buffered
//!   streams on a carried connection; `descriptors`: the hooks that
//!   close, duplicate or reconfigure a descriptor.
//!
//! The hooks below decide per call: not ours → the real call, unchanged.
//! No panic leaves a hook: one becomes -1/EIO.

mod aliases;
mod bare;
mod carried;
mod closing;
mod conn;
mod control;
mod descriptors;
mod epoll;
mod exec;
mod fdroom;
mod forkheld;
mod holder;
mod inherit;
mod kernel;
mod link;
mod netlink;
mod netwait;
mod poll;
mod process;
mod rawsys;
mod reader;
mod real;
mod region;
mod remote;
mod rendezvous;
mod room;
mod sandbox;
mod select;
mod spinwait;
mod splice;
mod stats;
mod stdio;
mod switched;
mod unrung;
mod waitspin;

use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};
use std::panic::{catch_unwind, AssertUnwindSafe};

use carried::Carried;
use conn::{Route, Setup};
use real::real;

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always writable.
    unsafe { *libc::__errno_location() = e };
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Runs a hook's body; a panic becomes `fallback` with errno EIO.
fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(libc::EIO);
        fallback
    })
}

fn result(r: Result<usize, i32>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn sockopt_int(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: an int option into our own int.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut c_int).cast(), &mut len) };
    (r == 0).then_some(v)
}

/// The family of a TCP socket of IPv4 or IPv6 (None for anything else).
/// Two questions: in those families TCP is the stream type's alone.
fn tcp_family(fd: c_int) -> Option<c_int> {
    if sockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) != Some(libc::IPPROTO_TCP) {
        return None;
    }
    sockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)
        .filter(|&f| f == libc::AF_INET || f == libc::AF_INET6)
}

fn is_tcp(fd: c_int) -> bool {
    tcp_family(fd).is_some()
}

fn iov_slices<'a>(iov: *const iovec, cnt: c_int) -> Vec<&'a mut [u8]> {
    if iov.is_null() || cnt <= 0 {
        return Vec::new();
    }
    // SAFETY: the program's iovec array of `cnt` entries, each describing
    // memory it owns for the duration of the call.
    unsafe {
        std::slice::from_raw_parts(iov, cnt as usize)
            .iter()
            .filter(|v| v.iov_len > 0 && !v.iov_base.is_null())
            .map(|v| std::slice::from_raw_parts_mut(v.iov_base as *mut u8, v.iov_len))
            .collect()
    }
}

fn via_read(link: &dyn Carried, fd: c_int, bufs: &mut [&mut [u8]], flags: c_int) -> ssize_t {
    if flags & libc::MSG_OOB != 0 {
        return result(Err(libc::EINVAL));
    }
    let dontwait = flags & libc::MSG_DONTWAIT != 0;
    result(link.read(
        fd,
        bufs,
        dontwait,
        flags & libc::MSG_PEEK != 0,
        flags & libc::MSG_WAITALL != 0,
    ))
}

fn via_write(link: &dyn Carried, fd: c_int, bufs: &[&[u8]], flags: c_int) -> ssize_t {
    if flags & libc::MSG_OOB != 0 {
        return result(Err(libc::EOPNOTSUPP));
    }
    let dontwait = flags & libc::MSG_DONTWAIT != 0;
    let nosignal = flags & libc::MSG_NOSIGNAL != 0;
    room::answered(fd);
    let mut r = link.write(fd, bufs, dontwait, nosignal);
    if r == Err(libc::EAGAIN) && room::backoff(fd, link) {
        r = link.write(fd, bufs, dontwait, nosignal);
    }
    // A short count says the socket is full, as EAGAIN does: a program
    // waiting for an EPOLLOUT edge after it (nginx) needs one as much.
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    if matches!(r, Err(libc::EAGAIN)) || matches!(r, Ok(n) if n < total) {
        room::watch(fd);
    }
    result(r)
}

/// The program's buffer of `n` bytes (empty if none): one per call, on
/// the stack, so a read or write allocates nothing.
fn one<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if buf.is_null() || n == 0 {
        return &mut [];
    }
    // SAFETY: the program's buffer of `n` bytes, valid for the call.
    unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n) }
}

/// An iovec array as read-only parts, for writes.
fn iov_parts<'a>(iov: *const iovec, cnt: c_int) -> Vec<&'a [u8]> {
    iov_slices(iov, cnt).into_iter().map(|b| &*b).collect()
}

/// A data call: to the kernel, or to the connection's link. The core's
/// own I/O (under a VI lock, or on its threads) passes through these hooks
/// too, and is never a program's connection. `writes`: a link whose writes
/// are the kernel's (`Carried::kernel_writes`) gets the program's own call.
macro_rules! hook {
    ($writes:expr, $fd:expr, $kernel:expr, $via:expr) => {
        guarded(-1, || {
            if openvia_core::transport_busy() {
                return $kernel;
            }
            match conn::route($fd) {
                Route::Kernel => $kernel,
                Route::Via(link) if $writes && link.kernel_writes() => $kernel,
                Route::Via(link) => $via(&*link),
                Route::Fail(e) => result(Err(e)),
            }
        })
    };
}

macro_rules! data_hook {
    ($fd:expr, $kernel:expr, $via:expr) => {
        hook!(false, $fd, $kernel, $via)
    };
}

macro_rules! write_hook {
    ($fd:expr, $kernel:expr, $via:expr) => {
        hook!(true, $fd, $kernel, $via)
    };
}

/// # Safety
/// The C prototype of read(2).
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    data_hook!(fd, (real().read)(fd, buf, n), |l| via_read(
        l,
        fd,
        &mut [one(buf, n)],
        0
    ))
}

/// # Safety
/// The C prototype of glibc's fortified read.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    _buflen: size_t,
) -> ssize_t {
    read(fd, buf, n)
}

/// # Safety
/// The C prototype of write(2).
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    write_hook!(fd, (real().write)(fd, buf, n), |l| via_write(
        l,
        fd,
        &[one(buf as *mut c_void, n)],
        0
    ))
}

/// # Safety
/// The C prototype of readv(2).
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    data_hook!(fd, (real().readv)(fd, iov, cnt), |l| via_read(
        l,
        fd,
        &mut iov_slices(iov, cnt),
        0
    ))
}

/// # Safety
/// The C prototype of writev(2).
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    write_hook!(fd, (real().writev)(fd, iov, cnt), |l| via_write(
        l,
        fd,
        &iov_parts(iov, cnt),
        0
    ))
}

/// # Safety
/// The C prototype of recv(2).
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    data_hook!(fd, (real().recv)(fd, buf, n, flags), |l| via_read(
        l,
        fd,
        &mut [one(buf, n)],
        flags
    ))
}

/// # Safety
/// The C prototype of glibc's fortified recv.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    _buflen: size_t,
    flags: c_int,
) -> ssize_t {
    recv(fd, buf, n, flags)
}

/// # Safety
/// The C prototype of send(2).
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    write_hook!(fd, (real().send)(fd, buf, n, flags), |l| via_write(
        l,
        fd,
        &[one(buf as *mut c_void, n)],
        flags
    ))
}

/// # Safety
/// The C prototype of recvfrom(2).
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    data_hook!(fd, (real().recvfrom)(fd, buf, n, flags, addr, alen), |l| {
        if !alen.is_null() {
            // A connected stream socket reports no source address.
            *alen = 0;
        }
        via_read(l, fd, &mut [one(buf, n)], flags)
    })
}

/// # Safety
/// The C prototype of sendto(2).
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    write_hook!(fd, (real().sendto)(fd, buf, n, flags, addr, alen), |l| {
        via_write(l, fd, &[one(buf as *mut c_void, n)], flags)
    })
}

/// # Safety
/// The C prototype of recvmsg(2).
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    data_hook!(fd, (real().recvmsg)(fd, msg, flags), |l| {
        if msg.is_null() {
            return result(Err(libc::EFAULT));
        }
        (*msg).msg_namelen = 0;
        (*msg).msg_controllen = 0;
        (*msg).msg_flags = 0;
        via_read(
            l,
            fd,
            &mut iov_slices((*msg).msg_iov, (*msg).msg_iovlen as c_int),
            flags,
        )
    })
}

/// # Safety
/// The C prototype of sendmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    write_hook!(fd, (real().sendmsg)(fd, msg, flags), |l| {
        if msg.is_null() {
            return result(Err(libc::EFAULT));
        }
        if (*msg).msg_controllen > 0 {
            return result(Err(libc::EOPNOTSUPP));
        }
        via_write(
            l,
            fd,
            &iov_parts((*msg).msg_iov, (*msg).msg_iovlen as c_int),
            flags,
        )
    })
}

/// # Safety
/// The C prototype of sendfile(2).
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    input: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    data_hook!(
        out,
        (real().sendfile)(out, input, offset, count),
        |l: &dyn Carried| sendfile_via(l, out, input, offset, count)
    )
}

/// sendfile into a carried connection: the file is read into a bounce
/// buffer a message at a time and written as the program would, until
/// `count` bytes are sent or the connection has no room. A short count
/// tells an event loop that the socket is full (nginx then waits for an
/// EPOLLOUT edge), so it is returned only then, and `via_write` makes
/// sure the edge comes.
///
/// # Safety
/// `offset` is null or the program's offset, as sendfile(2) takes it.
unsafe fn sendfile_via(
    l: &dyn Carried,
    out: c_int,
    input: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    let mut buf = vec![0u8; count.min(link::SLOT_BYTES)];
    let mut sent: usize = 0;
    while sent < count {
        let want = buf.len().min(count - sent);
        // SAFETY: at most `want` bytes into our own buffer; the program's
        // file and offset, as it gave them.
        let n = unsafe {
            if offset.is_null() {
                (real().read)(input, buf.as_mut_ptr().cast(), want)
            } else {
                libc::pread(input, buf.as_mut_ptr().cast(), want, *offset)
            }
        };
        if n <= 0 {
            return if sent > 0 { sent as ssize_t } else { n };
        }
        let w = via_write(l, out, &[&buf[..n as usize]], 0);
        let took = w.max(0);
        // SAFETY: the program's offset (or the file's own position).
        unsafe {
            if !offset.is_null() {
                *offset += took as libc::off_t;
            } else if took < n {
                libc::lseek(input, (took - n) as libc::off_t, libc::SEEK_CUR);
            }
        }
        if w < 0 {
            return if sent > 0 { sent as ssize_t } else { w };
        }
        sent += w as usize;
        if w < n {
            break;
        }
    }
    sent as ssize_t
}

/// # Safety
/// The C prototype of shutdown(2).
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    guarded(-1, || {
        // Settle first: the peer must see our hello (and VI) before a FIN.
        if let Route::Via(link) = conn::route(fd) {
            if how != libc::SHUT_RD {
                // Between hosts the FIN waits aside for the peer's
                // acknowledgements: the program's call returns now.
                if !link.acknowledged_soon()
                    && crate::netlink::shutdown_when_acknowledged(fd, link.clone())
                {
                    link.close_writes();
                    return match how {
                        libc::SHUT_RDWR => (real().shutdown)(fd, libc::SHUT_RD),
                        _ => 0,
                    };
                }
                link.flush();
                link.shut();
            }
        }
        (real().shutdown)(fd, how)
    })
}

/// Whether a listener bound to `a` can be reached from another host (not
/// bound to a loopback address).
fn reachable_from_afar(a: &std::net::SocketAddr) -> bool {
    match a.ip() {
        std::net::IpAddr::V4(v4) => !v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            !v6.is_loopback() && v6.to_ipv4_mapped().map_or(true, |v4| !v4.is_loopback())
        }
    }
}

/// # Safety
/// The C prototype of listen(2).
#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    guarded(-1, || {
        let r = (real().listen)(fd, backlog);
        if r == 0 && conn::registry_of(fd).is_none() && is_tcp(fd) {
            let e = errno();
            let name = rendezvous::name_of(fd, false);
            let port = name.as_ref().and_then(rendezvous::port_of);
            let local = port.and_then(rendezvous::register_listener);
            let remote = name
                .as_ref()
                .and_then(remote::socket_addr)
                .filter(reachable_from_afar)
                .and_then(|a| remote::Registry::start(a, backlog));
            if local.is_some() || remote.is_some() {
                conn::add_listener(fd, conn::Listener { local, remote });
            }
            set_errno(e);
        }
        r
    })
}

/// An accepted connection from another host: the listener's agent
/// decides with the connector (module `remote`).
fn accepted_from_afar(reg: &remote::Registry, fd: c_int, peer: &libc::sockaddr_storage, key: &str) {
    let Some(peer) = remote::socket_addr(peer) else {
        return;
    };
    let offer =
        (reg.committed(peer) && (fd as usize) < conn::MAX_FD && inherit::room_for_a_record(fd))
            .then(|| link::process_nic(link::Medium::Network).ok())
            .flatten()
            .map(|(nic, _)| nic.query().address.to_vec());
    let token = openvia_core::sys::random_u64() | 1;
    match reg.decide(peer, offer.as_deref().map(|host| (token, host))) {
        Some(token) => {
            conn::insert(
                fd,
                Setup::AgreedNet {
                    side: control::Side::Acceptor,
                    token,
                    peer_host: Vec::new(),
                    inherit: inherit::Inherit::offer(
                        fd,
                        inherit::Offered::AgreedNet {
                            side: control::Side::Acceptor,
                            token,
                            host: &[],
                        },
                    ),
                    claimed: None,
                },
            );
            stats::record(
                link::device_short_name(link::Medium::Network),
                key,
                control::Side::Acceptor,
            );
        }
        None => stats::record("tcp", key, control::Side::Acceptor),
    }
}

fn accepted(listener: c_int, fd: c_int) {
    let Some(reg) = conn::registry_of(listener) else {
        declined(fd);
        return;
    };
    let e = errno();
    if let Some(local) = reg.local {
        rendezvous::drain_probes(local);
    }
    let peer = rendezvous::name_of(fd, true);
    let local = rendezvous::name_of(fd, false);
    if let (Some(peer), Some(local)) = (peer, local) {
        let key = stats::key(rendezvous::text_of(&local), rendezvous::text_of(&peer));
        let from_here = rendezvous::is_local(
            (&peer as *const libc::sockaddr_storage).cast(),
            std::mem::size_of::<libc::sockaddr_storage>() as socklen_t,
        );
        match (&reg.remote, from_here) {
            (Some(remote), false) => accepted_from_afar(remote, fd, &peer, &key),
            (_, true) if reg.local.is_some() => accepted_here(fd, &peer, &local, &key),
            _ => stats::record("tcp", &key, control::Side::Acceptor),
        }
    }
    set_errno(e);
}

/// An accepted connection on a listener that holds no registration of
/// its own: another listener on the port took the names (SO_REUSEPORT,
/// two local addresses), or this program was exec'd with the listener. A
/// connector that found the port's registration waits for an answer that
/// this acceptor must give: "no", so both stay on the kernel (without it
/// the connector waited for good). On this host the answer goes to the
/// connector's Unix socket; from another host, to the port's agent
/// (`remote::decline`).
fn declined(fd: c_int) {
    let e = errno();
    let peer = rendezvous::name_of(fd, true);
    let local = rendezvous::name_of(fd, false);
    // A TCP connection only (this library's own accepts of Unix sockets
    // come through this hook too).
    if let (Some(peer), Some(local)) = (peer, local) {
        if let Some((p, l)) = rendezvous::port_of(&peer).zip(rendezvous::port_of(&local)) {
            let here = rendezvous::is_local(
                (&peer as *const libc::sockaddr_storage).cast(),
                std::mem::size_of::<libc::sockaddr_storage>() as socklen_t,
            );
            if here {
                rendezvous::answer(p, l, |_| None);
            } else if let (Some(l), Some(p)) =
                (remote::socket_addr(&local), remote::socket_addr(&peer))
            {
                remote::decline(l, p);
            }
            let key = stats::key(rendezvous::text_of(&local), rendezvous::text_of(&peer));
            stats::record("tcp", &key, control::Side::Acceptor);
        }
    }
    set_errno(e);
}

/// An accepted connection from this host: answered over the connector's
/// Unix socket (module `rendezvous`).
fn accepted_here(
    fd: c_int,
    peer: &libc::sockaddr_storage,
    local: &libc::sockaddr_storage,
    key: &str,
) {
    let ports = rendezvous::port_of(peer).zip(rendezvous::port_of(local));
    // A connection we can carry gets its control page, sent with the yes.
    let mut control = None;
    let mut page_fd = None;
    let answer = ports.and_then(|(p, l)| {
        rendezvous::answer(p, l, |connector| {
            // Carried only with room for its exec record (`inherit`).
            if fd as usize >= conn::MAX_FD || !inherit::room_for_a_record(fd) {
                return None;
            }
            let (page, memfd) = control::Control::create()?;
            // Whose VIs kept from earlier connections may serve this one
            // (`link::reuse`): until either end's first use says otherwise,
            // this process's and the connector's.
            page.note_user(control::Side::Acceptor, crate::process::id());
            page.note_user(control::Side::Connector, connector);
            control = Some(page);
            page_fd = Some(memfd);
            page_fd
        })
    });
    let inherit = answer.zip(page_fd).and_then(|(token, control)| {
        let side = control::Side::Acceptor;
        inherit::Inherit::offer(
            fd,
            inherit::Offered::Agreed {
                side,
                token,
                control,
            },
        )
    });
    if let Some(memfd) = page_fd {
        // SAFETY: the page's descriptor: mapped and handed on, ours to close.
        unsafe { (real().close)(memfd) };
    }
    match answer.zip(control) {
        Some((token, control)) => {
            conn::insert(
                fd,
                Setup::Agreed {
                    side: control::Side::Acceptor,
                    token,
                    control: std::sync::Arc::new(control),
                    inherit,
                    claimed: None,
                },
            );
            stats::record(
                link::device_short_name(link::Medium::Local),
                key,
                control::Side::Acceptor,
            );
        }
        None => stats::record("tcp", key, control::Side::Acceptor),
    }
}

/// # Safety
/// The C prototype of accept(2).
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, alen: *mut socklen_t) -> c_int {
    guarded(-1, || {
        let r = (real().accept)(fd, addr, alen);
        if r >= 0 {
            conn::forget(r);
            accepted(fd, r);
        }
        r
    })
}

/// # Safety
/// The C prototype of accept4(2).
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
    flags: c_int,
) -> c_int {
    guarded(-1, || {
        let r = (real().accept4)(fd, addr, alen, flags);
        if r >= 0 {
            conn::forget(r);
            accepted(fd, r);
        }
        r
    })
}

/// connect on a socket whose connection is already under way or up (a
/// nonblocking connect asked again to learn that it completed, as
/// hiredis and most event loops do): its agreement stands — redoing it
/// would drop the acceptor's answer, which may have come already, and
/// wait for one that never comes. Only a connect that failed ends it.
///
/// # Safety
/// As connect(2).
unsafe fn connect_again(fd: c_int, addr: *const sockaddr, alen: socklen_t) -> c_int {
    let r = (real().connect)(fd, addr, alen);
    let e = errno();
    if r != 0 && !matches!(e, libc::EINPROGRESS | libc::EALREADY | libc::EISCONN) {
        conn::forget(fd);
    }
    set_errno(e);
    r
}

/// # Safety
/// The C prototype of connect(2).
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, alen: socklen_t) -> c_int {
    guarded(-1, || {
        if addr.is_null() || fd < 0 || fd as usize >= conn::MAX_FD {
            return (real().connect)(fd, addr, alen);
        }
        // Asked again (a nonblocking connect's completion): known already.
        if conn::lookup(fd).is_some() {
            return connect_again(fd, addr, alen);
        }
        let Some(family) = tcp_family(fd) else {
            return (real().connect)(fd, addr, alen);
        };
        let mut dst: libc::sockaddr_storage = std::mem::zeroed();
        std::ptr::copy_nonoverlapping(
            addr.cast::<u8>(),
            (&mut dst as *mut libc::sockaddr_storage).cast::<u8>(),
            (alen as usize).min(std::mem::size_of::<libc::sockaddr_storage>()),
        );
        let (dst_port, dst_text) = match rendezvous::port_of(&dst) {
            Some(p) => (p, rendezvous::text_of(&dst)),
            None => return (real().connect)(fd, addr, alen),
        };
        // A listener on this host answers over Unix sockets, one on another
        // host over UDP; only one under viarun will.
        let mut answer_socket = None;
        let mut offer = None;
        let here = rendezvous::is_local(addr, alen);
        // No room for the connection's exec record: not carried (module
        // `inherit`), and nothing asked.
        let room = inherit::room_for_a_record(fd);
        if room && (!here || rendezvous::listener_exists(dst_port)) {
            let mut local = rendezvous::name_of(fd, false).and_then(|a| rendezvous::port_of(&a));
            if local == Some(0) {
                local = rendezvous::bind_any(fd, family)
                    .then(|| rendezvous::name_of(fd, false).and_then(|a| rendezvous::port_of(&a)))
                    .flatten();
            }
            if here {
                answer_socket = local.and_then(rendezvous::connector_socket);
            } else if let (Some(cport), Some(to)) = (local, remote::socket_addr(&dst)) {
                offer = remote::Offer::make(to, cport);
            }
        }
        let r = (real().connect)(fd, addr, alen);
        let e = errno();
        let started = r == 0 || e == libc::EINPROGRESS;
        match (answer_socket, offer) {
            (Some(listener), _) if started => conn::insert(
                fd,
                Setup::AwaitAnswer {
                    listener,
                    dst_port,
                    dst: dst_text,
                    inherit: inherit::Inherit::offer(
                        fd,
                        inherit::Offered::AwaitAnswer { listener, dst_port },
                    ),
                },
            ),
            (Some(listener), _) => {
                (real().close)(listener);
            }
            (None, Some(offer)) if started => {
                let (udp, lport, cport, nonce) = offer.parts();
                let what = inherit::Offered::AwaitNet {
                    udp,
                    lport,
                    cport,
                    nonce,
                };
                let inherit = inherit::Inherit::offer(fd, what);
                conn::insert(
                    fd,
                    Setup::AwaitNet {
                        offer,
                        dst: dst_text,
                        inherit,
                    },
                )
            }
            (None, None) if started => stats::record(
                "tcp",
                &stats::key_of(fd, Some(dst_text)),
                control::Side::Connector,
            ),
            _ => {}
        }
        set_errno(e);
        r
    })
}

extern "C" fn at_exit() {
    // The C library flushes its streams only after every exit handler:
    // what ours hold must go out before the connections are flushed.
    if stdio::any() {
        // SAFETY: flushing every stream, as exit is about to.
        unsafe { libc::fflush(std::ptr::null_mut()) };
    }
    let _ = catch_unwind(conn::flush_all);
    let _ = catch_unwind(netlink::wait_lingering);
}

extern "C" fn init() {
    process::init();
    // Before anything makes a descriptor of ours: where they go.
    let _ = catch_unwind(fdroom::init);
    // The exec hooks' own calls, found now: a vfork child must not load
    // symbols.
    let _ = catch_unwind(exec::init);
    // An accepted connection handed over by the exec that started us.
    let _ = catch_unwind(inherit::take_up);
    let _ = catch_unwind(stdio::init);
    // A program exec'd on a connection as its stdin, stdout or stderr.
    let _ = catch_unwind(|| {
        for fd in 0..=2 {
            stdio::follow_std(fd);
        }
    });
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(at_exit) };
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
