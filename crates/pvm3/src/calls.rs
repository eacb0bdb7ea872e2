//! The rest of the libpvm API: enrollment, buffers, sending, spawn
//! and the requests answered by the pvmd.

use std::ffi::{c_char, c_int, c_void};

use openvia_pvm::codec::{self, Elem};
use openvia_pvm::frame::op;
use openvia_pvm::task::Wait;
use openvia_pvm::{tid, PvmError};

use crate::{code, leave, text, with};

fn err(name: &str, e: PvmError) -> c_int {
    code(name, |_| Err(e))
}

#[no_mangle]
pub extern "C" fn pvm_mytid() -> c_int {
    code("pvm_mytid", |t| Ok(t.mytid))
}

#[no_mangle]
pub extern "C" fn pvm_parent() -> c_int {
    code("pvm_parent", |t| {
        if t.ptid > 0 {
            Ok(t.ptid)
        } else {
            Err(PvmError::NoParent)
        }
    })
}

#[no_mangle]
pub extern "C" fn pvm_exit() -> c_int {
    crate::handlers::clear();
    leave()
}

#[no_mangle]
pub extern "C" fn pvm_tidtohost(t: c_int) -> c_int {
    tid::host_of(t)
}

#[no_mangle]
pub extern "C" fn pvm_version() -> *const c_char {
    c"3.4.6".as_ptr()
}

#[no_mangle]
pub extern "C" fn pvm_archcode(arch: *mut c_char) -> c_int {
    // SAFETY: C string from the caller.
    match unsafe { text(arch) } {
        Some(a) if a == openvia_pvm::paths::arch() => 1,
        Some(_) => err("pvm_archcode", PvmError::NotFound),
        None => err("pvm_archcode", PvmError::BadParam),
    }
}

// ---- buffers ----

#[no_mangle]
pub extern "C" fn pvm_mkbuf(enc: c_int) -> c_int {
    code("pvm_mkbuf", |t| t.mkbuf(enc))
}

#[no_mangle]
pub extern "C" fn pvm_freebuf(id: c_int) -> c_int {
    code("pvm_freebuf", |t| t.freebuf(id).map(|_| 0))
}

#[no_mangle]
pub extern "C" fn pvm_initsend(enc: c_int) -> c_int {
    code("pvm_initsend", |t| t.initsend(enc))
}

#[no_mangle]
pub extern "C" fn pvm_getsbuf() -> c_int {
    code("pvm_getsbuf", |t| Ok(t.sbuf))
}

#[no_mangle]
pub extern "C" fn pvm_getrbuf() -> c_int {
    code("pvm_getrbuf", |t| Ok(t.rbuf))
}

#[no_mangle]
pub extern "C" fn pvm_setsbuf(id: c_int) -> c_int {
    code("pvm_setsbuf", |t| t.setsbuf(id))
}

#[no_mangle]
pub extern "C" fn pvm_setrbuf(id: c_int) -> c_int {
    code("pvm_setrbuf", |t| t.setrbuf(id))
}

#[no_mangle]
pub unsafe extern "C" fn pvm_bufinfo(
    id: c_int,
    bytes: *mut c_int,
    tag: *mut c_int,
    src: *mut c_int,
) -> c_int {
    match with("pvm_bufinfo", |t| t.bufinfo(id)) {
        Ok((b, g, s)) => {
            // SAFETY: caller's out-pointers, each may be NULL.
            unsafe {
                if !bytes.is_null() {
                    *bytes = b;
                }
                if !tag.is_null() {
                    *tag = g;
                }
                if !src.is_null() {
                    *src = s;
                }
            }
            0
        }
        Err(c) => c,
    }
}

/// Same layout as struct pvmminfo.
#[repr(C)]
pub struct MInfo {
    len: c_int,
    ctx: c_int,
    tag: c_int,
    wid: c_int,
    enc: c_int,
    crc: c_int,
    src: c_int,
    dst: c_int,
}

#[no_mangle]
pub unsafe extern "C" fn pvm_getminfo(id: c_int, mi: *mut MInfo) -> c_int {
    if mi.is_null() {
        return err("pvm_getminfo", PvmError::BadParam);
    }
    code("pvm_getminfo", |t| {
        let me = t.mytid;
        let b = t.bufs.get(id)?;
        let v = MInfo {
            len: b.len() as c_int,
            ctx: b.ctx,
            tag: b.tag,
            wid: 0,
            enc: b.enc,
            crc: 0,
            src: b.src,
            dst: me,
        };
        // SAFETY: checked non-NULL; caller's struct.
        unsafe { mi.write(v) };
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pvm_setminfo(id: c_int, mi: *mut MInfo) -> c_int {
    if mi.is_null() {
        return err("pvm_setminfo", PvmError::BadParam);
    }
    // SAFETY: checked non-NULL.
    let v = unsafe { mi.read() };
    code("pvm_setminfo", |t| {
        let b = t.bufs.get(id)?;
        b.ctx = v.ctx;
        b.tag = v.tag;
        b.src = v.src;
        Ok(0)
    })
}

// ---- send and receive ----

#[no_mangle]
pub extern "C" fn pvm_send(dst: c_int, tag: c_int) -> c_int {
    code("pvm_send", |t| t.send(dst, tag).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn pvm_mcast(tids: *mut c_int, n: c_int, tag: c_int) -> c_int {
    if tids.is_null() || n < 0 {
        return err("pvm_mcast", PvmError::BadParam);
    }
    // SAFETY: caller's array of n tids.
    let list = unsafe { std::slice::from_raw_parts(tids, n as usize) }.to_vec();
    code("pvm_mcast", |t| t.mcast(&list, tag).map(|_| 0))
}

#[no_mangle]
pub unsafe extern "C" fn pvm_psend(
    dst: c_int,
    tag: c_int,
    buf: *mut c_void,
    n: c_int,
    ty: c_int,
) -> c_int {
    let (Some(elem), false, true) = (Elem::from_pvm_type(ty), buf.is_null(), n >= 0) else {
        return err("pvm_psend", PvmError::BadParam);
    };
    let len = codec::span(elem, n as usize, 1);
    // SAFETY: caller's array of n items of type ty.
    let src = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
    code("pvm_psend", |t| {
        let saved = t.sbuf;
        let id = t.mkbuf(codec::ENC_RAW)?;
        t.bufs.get(id)?.pack(elem, src, n as usize, 1);
        t.sbuf = id;
        let r = t.send(dst, tag);
        t.sbuf = saved;
        let _ = t.bufs.remove(id);
        r.map(|_| 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pvm_precv(
    src: c_int,
    tag: c_int,
    buf: *mut c_void,
    n: c_int,
    ty: c_int,
    rtid: *mut c_int,
    rtag: *mut c_int,
    rcnt: *mut c_int,
) -> c_int {
    let (Some(elem), false, true) = (Elem::from_pvm_type(ty), buf.is_null(), n >= 0) else {
        return err("pvm_precv", PvmError::BadParam);
    };
    let len = codec::span(elem, n as usize, 1);
    // SAFETY: caller's array with room for n items of type ty.
    let dst = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) };
    if let Err(c) = crate::receive::before_receive("pvm_precv") {
        return c;
    }
    code("pvm_precv", |t| {
        let saved = t.setrbuf(0)?;
        let id = t.recv(src, tag, Wait::Forever)?;
        let b = t.bufs.get(id)?;
        let (s, g, bytes) = (b.src, b.tag, b.len());
        let got = (bytes / elem.size()).min(n as usize);
        let r = b.unpack(elem, dst, got, 1);
        let _ = t.freebuf(id);
        t.rbuf = saved;
        r?;
        // SAFETY: caller's out-pointers, each may be NULL.
        unsafe {
            if !rtid.is_null() {
                *rtid = s;
            }
            if !rtag.is_null() {
                *rtag = g;
            }
            if !rcnt.is_null() {
                *rcnt = got as c_int;
            }
        }
        Ok(0)
    })
}

type RecvF = Option<unsafe extern "C" fn(c_int, c_int, c_int) -> c_int>;
static RECVF: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// Replaces the receive matching function. Matching here is always by
/// (source, tag, context); the function is recorded and returned only.
#[no_mangle]
pub extern "C" fn pvm_recvf(f: RecvF) -> RecvF {
    let mut g = RECVF.lock().unwrap_or_else(|p| p.into_inner());
    let old = std::mem::replace(&mut *g, f.map(|f| f as usize).unwrap_or(0));
    // SAFETY: the value was stored from a function pointer of this type.
    unsafe { std::mem::transmute::<usize, RecvF>(old) }
}

// ---- contexts and options ----

#[no_mangle]
pub extern "C" fn pvm_getcontext() -> c_int {
    code("pvm_getcontext", |t| Ok(t.ctx))
}

#[no_mangle]
pub extern "C" fn pvm_setcontext(ctx: c_int) -> c_int {
    code("pvm_setcontext", |t| Ok(std::mem::replace(&mut t.ctx, ctx)))
}

#[no_mangle]
pub extern "C" fn pvm_newcontext() -> c_int {
    code("pvm_newcontext", |t| Ok(t.newcontext()))
}

#[no_mangle]
pub extern "C" fn pvm_freecontext(_ctx: c_int) -> c_int {
    code("pvm_freecontext", |_| Ok(0))
}

#[no_mangle]
pub extern "C" fn pvm_setopt(what: c_int, val: c_int) -> c_int {
    code("pvm_setopt", |t| {
        let o = &mut t.opts;
        let slot = match what {
            1 => &mut o.route,
            3 => &mut o.auto_err,
            4 | 12 => &mut o.out_tid,
            5 | 13 => &mut o.out_code,
            21 | 23 => &mut o.out_ctx,
            10 => &mut o.frag_size,
            18 => &mut o.show_tids,
            25 => &mut o.no_reset,
            11 => &mut o.resv_tids,
            2 | 6..=9 | 14..=17 | 19 | 20 | 22 | 24 => return Ok(0),
            _ => return Err(PvmError::BadParam),
        };
        Ok(std::mem::replace(slot, val))
    })
}

#[no_mangle]
pub extern "C" fn pvm_getopt(what: c_int) -> c_int {
    code("pvm_getopt", |t| {
        let o = &t.opts;
        Ok(match what {
            1 => o.route,
            3 => o.auto_err,
            4 | 12 => o.out_tid,
            5 | 13 => o.out_code,
            21 | 23 => o.out_ctx,
            10 => o.frag_size,
            18 => o.show_tids,
            25 => o.no_reset,
            11 => o.resv_tids,
            2 | 6..=9 | 14..=17 | 19 | 20 | 22 | 24 => 0,
            _ => return Err(PvmError::BadParam),
        })
    })
}

#[no_mangle]
pub extern "C" fn pvm_settmask(_who: c_int, _mask: *mut c_char) -> c_int {
    code("pvm_settmask", |_| Ok(0))
}

#[no_mangle]
pub unsafe extern "C" fn pvm_gettmask(_who: c_int, mask: *mut c_char) -> c_int {
    if !mask.is_null() {
        // SAFETY: trace masks are strings; an empty one means no tracing.
        unsafe { *mask = 0 };
    }
    code("pvm_gettmask", |_| Ok(0))
}

// ---- tasks and hosts ----

#[no_mangle]
pub unsafe extern "C" fn pvm_spawn(
    file: *mut c_char,
    argv: *mut *mut c_char,
    flags: c_int,
    where_: *mut c_char,
    count: c_int,
    tids: *mut c_int,
) -> c_int {
    // SAFETY: C strings from the caller.
    let Some(file) = (unsafe { text(file) }) else {
        return err("pvm_spawn", PvmError::BadParam);
    };
    // SAFETY: as above.
    let where_ = unsafe { text(where_) }.unwrap_or_default();
    let mut args = Vec::new();
    if !argv.is_null() {
        let mut i = 0;
        // SAFETY: argv is a NULL-terminated array of C strings.
        while let Some(a) = unsafe { text(*argv.add(i)) } {
            args.push(a);
            i += 1;
        }
    }
    match with("pvm_spawn", |t| {
        let ctx = t.ctx;
        crate::context::with_context_exported(ctx, || t.spawn(&file, &args, flags, &where_, count))
    }) {
        Ok(list) => {
            if !tids.is_null() {
                for (i, &v) in list.iter().enumerate().take(count.max(0) as usize) {
                    // SAFETY: caller's array of count ints.
                    unsafe { *tids.add(i) = v };
                }
            }
            let ok = list.iter().filter(|&&v| v > 0).count() as c_int;
            if ok == 0 {
                if let Some(&e) = list.first() {
                    if e < 0 && count == 1 {
                        return e;
                    }
                }
            }
            ok
        }
        Err(c) => c,
    }
}

#[no_mangle]
pub extern "C" fn pvm_kill(t: c_int) -> c_int {
    code("pvm_kill", |task| task.simple(op::KILL, vec![t], vec![]))
}

#[no_mangle]
pub extern "C" fn pvm_sendsig(t: c_int, sig: c_int) -> c_int {
    code("pvm_sendsig", |task| {
        task.simple(op::SENDSIG, vec![t, sig], vec![])
    })
}

#[no_mangle]
pub extern "C" fn pvm_pstat(t: c_int) -> c_int {
    code("pvm_pstat", |task| task.simple(op::PSTAT, vec![t], vec![]))
}

#[no_mangle]
pub unsafe extern "C" fn pvm_mstat(host: *mut c_char) -> c_int {
    // SAFETY: C string from the caller.
    let h = unsafe { text(host) }.unwrap_or_default();
    code("pvm_mstat", |task| task.simple(op::MSTAT, vec![], vec![h]))
}

#[no_mangle]
pub extern "C" fn pvm_halt() -> c_int {
    let r = code("pvm_halt", |task| task.simple(op::HALT, vec![], vec![]));
    let _ = leave();
    r
}

#[no_mangle]
pub unsafe extern "C" fn pvm_notify(
    what: c_int,
    tag: c_int,
    cnt: c_int,
    tids: *mut c_int,
) -> c_int {
    let list = if tids.is_null() || cnt <= 0 {
        Vec::new()
    } else {
        // SAFETY: caller's array of cnt tids.
        unsafe { std::slice::from_raw_parts(tids, cnt as usize) }.to_vec()
    };
    // PvmRouteAdd / PvmRouteDelete report task-to-task sockets opening and
    // closing. Local messages here go through the shared pool, never such a
    // socket, so the event never happens: the request is accepted (xep asks
    // for it at startup) and nothing is ever sent.
    const ROUTE_ADD: c_int = 4;
    const ROUTE_DELETE: c_int = 5;
    const CANCEL: c_int = 256;
    if matches!(what & !CANCEL, ROUTE_ADD | ROUTE_DELETE) {
        return code("pvm_notify", |_| Ok(0));
    }
    code("pvm_notify", |task| {
        let mut ints = vec![what, tag, task.ctx];
        ints.extend(list);
        task.simple(op::NOTIFY, ints, vec![])
    })
}

unsafe fn host_list(names: *mut *mut c_char, n: c_int) -> Vec<String> {
    (0..n.max(0) as usize)
        // SAFETY: caller's array of n C strings.
        .filter_map(|i| unsafe { text(*names.add(i)) })
        .collect()
}

unsafe fn host_op(
    name: &str,
    opcode: u32,
    names: *mut *mut c_char,
    n: c_int,
    infos: *mut c_int,
) -> c_int {
    if names.is_null() || n < 1 {
        return err(name, PvmError::BadParam);
    }
    // SAFETY: forwarded caller contract.
    let hosts = unsafe { host_list(names, n) };
    match with(name, |t| {
        t.call_via_rm(
            opcode,
            openvia_pvm::frame::Args {
                strs: hosts,
                ..Default::default()
            },
        )
    }) {
        Ok((_, a)) => {
            if !infos.is_null() {
                for (i, &c) in a.ints.iter().enumerate().take(n as usize) {
                    // SAFETY: caller's array of n ints.
                    unsafe { *infos.add(i) = c };
                }
            }
            a.ints.iter().filter(|&&c| c >= 0).count() as c_int
        }
        Err(c) => c,
    }
}

#[no_mangle]
pub unsafe extern "C" fn pvm_addhosts(
    names: *mut *mut c_char,
    n: c_int,
    infos: *mut c_int,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe { host_op("pvm_addhosts", op::ADDHOSTS, names, n, infos) }
}

#[no_mangle]
pub unsafe extern "C" fn pvm_delhosts(
    names: *mut *mut c_char,
    n: c_int,
    infos: *mut c_int,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe { host_op("pvm_delhosts", op::DELHOSTS, names, n, infos) }
}

#[no_mangle]
pub unsafe extern "C" fn pvm_hostsync(
    _host: c_int,
    clk: *mut libc::timeval,
    delta: *mut libc::timeval,
) -> c_int {
    // One host: its clock is ours and the difference is zero.
    // SAFETY: caller's out-pointers, each may be NULL.
    unsafe {
        if !clk.is_null() {
            libc::gettimeofday(clk, std::ptr::null_mut());
        }
        if !delta.is_null() {
            *delta = libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            };
        }
    }
    code("pvm_hostsync", |_| Ok(0))
}

#[no_mangle]
pub unsafe extern "C" fn pvm_start_pvmd(
    _argc: c_int,
    _argv: *mut *mut c_char,
    _block: c_int,
) -> c_int {
    if std::os::unix::net::UnixStream::connect(openvia_pvm::paths::daemon_socket()).is_ok() {
        return err("pvm_start_pvmd", PvmError::DupHost);
    }
    match openvia_pvm::task::start_daemon() {
        Ok(()) => code("pvm_start_pvmd", |_| Ok(0)),
        Err(_) => err("pvm_start_pvmd", PvmError::CantStart),
    }
}

// ---- mailbox ----

#[no_mangle]
pub unsafe extern "C" fn pvm_putinfo(name: *mut c_char, id: c_int, flags: c_int) -> c_int {
    // SAFETY: C string from the caller.
    let Some(n) = (unsafe { text(name) }) else {
        return err("pvm_putinfo", PvmError::BadParam);
    };
    code("pvm_putinfo", |t| t.putinfo(&n, id, flags))
}

#[no_mangle]
pub unsafe extern "C" fn pvm_recvinfo(name: *mut c_char, index: c_int, flags: c_int) -> c_int {
    // SAFETY: C string from the caller.
    let Some(n) = (unsafe { text(name) }) else {
        return err("pvm_recvinfo", PvmError::BadParam);
    };
    code("pvm_recvinfo", |t| t.recvinfo(&n, index, flags))
}

#[no_mangle]
pub unsafe extern "C" fn pvm_delinfo(name: *mut c_char, index: c_int, _flags: c_int) -> c_int {
    // SAFETY: C string from the caller.
    let Some(n) = (unsafe { text(name) }) else {
        return err("pvm_delinfo", PvmError::BadParam);
    };
    code("pvm_delinfo", |t| {
        t.simple(op::DELINFO, vec![index, 0], vec![n])
    })
}

// ---- errors and environment ----

#[no_mangle]
pub unsafe extern "C" fn pvm_perror(s: *mut c_char) -> c_int {
    // SAFETY: C string from the caller.
    let s = unsafe { text(s) }.unwrap_or_default();
    // SAFETY: int globals.
    let (me, e) = unsafe { (crate::pvmmytid, crate::pvm_errno) };
    let msg = openvia_pvm::error::describe(e);
    if me > 0 {
        eprintln!("libpvm [t{:x}]: {s}: {msg}", me as u32);
    } else {
        eprintln!("libpvm [pid{}]: {s}: {msg}", std::process::id());
    }
    0
}

#[no_mangle]
pub extern "C" fn pvm_strerror() -> *const c_char {
    // SAFETY: int global.
    let e = unsafe { crate::pvm_errno };
    let i = (-e).clamp(0, 36) as usize;
    crate::pvm_errlist.0[i]
}

fn edit_export(name: &str, add: bool) {
    let cur = std::env::var("PVM_EXPORT").unwrap_or_default();
    let mut list: Vec<&str> = cur
        .split(':')
        .filter(|s| !s.is_empty() && *s != name)
        .collect();
    if add {
        list.push(name);
    }
    std::env::set_var("PVM_EXPORT", list.join(":"));
}

#[no_mangle]
pub unsafe extern "C" fn pvm_export(name: *mut c_char) -> c_int {
    // SAFETY: C string from the caller.
    match unsafe { text(name) } {
        Some(n) => {
            edit_export(&n, true);
            0
        }
        None => err("pvm_export", PvmError::BadParam),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pvm_unexport(name: *mut c_char) -> c_int {
    // SAFETY: C string from the caller.
    match unsafe { text(name) } {
        Some(n) => {
            edit_export(&n, false);
            0
        }
        None => err("pvm_unexport", PvmError::BadParam),
    }
}

#[no_mangle]
pub extern "C" fn pvmgetrsh() -> *const c_char {
    static RSH: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    RSH.get_or_init(|| {
        std::ffi::CString::new(std::env::var("PVM_RSH").unwrap_or_else(|_| "ssh".into()))
            .unwrap_or_default()
    })
    .as_ptr()
}

#[no_mangle]
pub extern "C" fn pvmgettmp() -> *const c_char {
    static TMP: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    TMP.get_or_init(|| {
        std::ffi::CString::new(std::env::var("PVM_TMP").unwrap_or_else(|_| "/tmp".into()))
            .unwrap_or_default()
    })
    .as_ptr()
}

/// Entry points PVM 3.4.6 declares that this implementation does not
/// provide: they report PvmNotImpl instead of pretending to work.
macro_rules! not_implemented {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name($($arg: $ty),*) -> c_int {
            $(let _ = $arg;)*
            err(stringify!($name), PvmError::NotImpl)
        }
    )*};
}

not_implemented! {
    pvm_tickle(n: c_int, a: *mut c_int, b: *mut c_int, c: *mut c_int);
    pvm_reg_hoster();
    pvm_reg_tasker();
    pvm_reg_tracer(a: c_int, b: c_int, c: c_int, d: c_int, e: *mut c_char, f: c_int, g: c_int);
    pvm_pkmesg(id: c_int);
    pvm_pkmesgbody(id: c_int);
    pvm_upkmesg();
    pvm_getnoresets(t: *mut c_void, n: *mut c_int);
    pvm_catchout(f: *mut c_void);
    pvm_insert(n: *mut c_char, r: c_int, d: c_int);
    pvm_lookup(n: *mut c_char, r: c_int, d: *mut c_int);
    pvm_delete(n: *mut c_char, r: c_int);
}
