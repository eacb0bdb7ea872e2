//! Message handlers (pvm_addmhf / pvm_delmhf): a function registered for a
//! (source, tag, context) pattern, -1 being a wildcard, is called with the
//! buffer id of each matching message instead of that message ever being
//! received. libpvm calls handlers as messages come in; here they run from
//! the receive calls (see `receive.rs`), which hand every matching queued
//! message to its handler before looking for the caller's own. The table
//! is plain data; handlers are called with no lock held, since they call
//! back into the library.

use std::ffi::{c_char, c_int};
use std::sync::Mutex;

use openvia_pvm::PvmError;

use crate::{code, text};

/// The C type of a handler: `int f(int mid)`.
pub(crate) type HandlerFn = unsafe extern "C" fn(c_int) -> c_int;

#[derive(Clone, Copy)]
pub(crate) struct Handler {
    pub mhid: c_int,
    pub src: c_int,
    pub tag: c_int,
    pub ctx: c_int,
    pub f: HandlerFn,
}

static TABLE: Mutex<Vec<Handler>> = Mutex::new(Vec::new());

fn table() -> std::sync::MutexGuard<'static, Vec<Handler>> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

fn field_matches(pattern: c_int, value: c_int) -> bool {
    pattern == -1 || value == -1 || pattern == value
}

/// The registered handlers, in the order they were added.
pub(crate) fn snapshot() -> Vec<Handler> {
    table().clone()
}

pub(crate) fn any() -> bool {
    !table().is_empty()
}

/// The handler for a message with these header fields, if any.
pub(crate) fn for_message(src: c_int, tag: c_int, ctx: c_int) -> Option<Handler> {
    table().iter().copied().find(|h| {
        (h.src == -1 || h.src == src)
            && (h.tag == -1 || h.tag == tag)
            && (h.ctx == -1 || h.ctx == ctx)
    })
}

/// pvm_exit drops every handler, as libpvm does.
pub(crate) fn clear() {
    table().clear();
}

/// Registers `f` for messages matching (src, tag, ctx); returns its id.
/// A pattern that overlaps one already registered (wildcards included)
/// is PvmExists, as in libpvm, so a message never has two handlers.
#[no_mangle]
pub extern "C" fn pvm_addmhf(src: c_int, tag: c_int, ctx: c_int, f: Option<HandlerFn>) -> c_int {
    let Some(f) = f else {
        return code("pvm_addmhf", |_| Err(PvmError::BadParam));
    };
    let added = {
        let mut t = table();
        let overlaps = t.iter().any(|h| {
            field_matches(h.src, src) && field_matches(h.tag, tag) && field_matches(h.ctx, ctx)
        });
        if overlaps {
            None
        } else {
            // Ids are reused lowest first, so they stay small.
            let mhid = (0..).find(|i| t.iter().all(|h| h.mhid != *i)).unwrap_or(0);
            t.push(Handler {
                mhid,
                src,
                tag,
                ctx,
                f,
            });
            Some(mhid)
        }
    };
    match added {
        Some(mhid) => mhid,
        None => code("pvm_addmhf", |_| Err(PvmError::Exists)),
    }
}

/// Removes the handler with id `mhid`.
#[no_mangle]
pub extern "C" fn pvm_delmhf(mhid: c_int) -> c_int {
    if mhid < 0 {
        return code("pvm_delmhf", |_| Err(PvmError::BadParam));
    }
    let found = {
        let mut t = table();
        let before = t.len();
        t.retain(|h| h.mhid != mhid);
        t.len() != before
    };
    if found {
        0
    } else {
        code("pvm_delmhf", |_| Err(PvmError::NotFound))
    }
}

/// libpvm's debugging dump of the handler table (mhf_server calls it).
#[no_mangle]
pub unsafe extern "C" fn pvmdisplaymhfinfo(who: *const c_char, msg: *const c_char, tid: c_int) {
    // SAFETY: C strings from the caller (NULL allowed).
    let (who, msg) = unsafe { (text(who).unwrap_or_default(), text(msg).unwrap_or_default()) };
    let t = snapshot();
    let mut out = format!(
        "\n{who} t{:x}: message handlers: {} active\n{who} t{:x}: {msg}\n",
        tid as u32,
        t.len(),
        tid as u32
    );
    for h in &t {
        out.push_str(&format!(
            "{who} t{:x}: mhid {:2}  src t{:<8x}  ctx {:8}  tag {:8}\n",
            tid as u32, h.mhid, h.src as u32, h.ctx, h.tag
        ));
    }
    out.push('\n');
    // Through C stdio, like the program's own printf, so the two stay in
    // order in a pipe.
    let c = std::ffi::CString::new(out.replace('\0', "")).expect("NULs removed");
    // SAFETY: a valid C string and format; fflush(NULL) flushes all streams.
    unsafe {
        libc::printf(c"%s".as_ptr(), c.as_ptr());
        libc::fflush(std::ptr::null_mut());
    }
}
