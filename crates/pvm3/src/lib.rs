//! libpvm3.so.3: the PVM 3.4.6 C ABI over openvia. Each exported function
//! converts C arguments, runs the operation on the process's one enrolled
//! [`Task`] and turns errors into PVM's negative codes (printing them, as
//! libpvm does, while PvmAutoErr is on). The Debian group library
//! (libgpvm3) also reads a few of libpvm's internal globals; they are
//! exported here with the layout it expects.
#![allow(clippy::missing_safety_doc)]
#![allow(non_upper_case_globals)]

mod calls;
mod context;
mod handlers;
mod helpers;
mod info;
mod mboxinfo;
mod pack;
mod receive;
mod varargs;

use std::ffi::{c_char, c_int, CStr};
use std::sync::Mutex;

use openvia_pvm::task::Task;
use openvia_pvm::{PvmError, PvmResult};

static TASK: Mutex<Option<Task>> = Mutex::new(None);

/// Last error code (libpvm's global).
#[no_mangle]
pub static mut pvm_errno: c_int = 0;
/// This task's tid, -1 before enrollment (read by libgpvm3).
#[no_mangle]
pub static mut pvmmytid: c_int = -1;
/// Nonzero while not inside a libpvm call (libgpvm3's tracing guard).
#[no_mangle]
pub static mut pvmtoplvl: c_int = 1;
/// Current message context.
#[no_mangle]
pub static mut pvmmyctx: c_int = 0;
/// Trace settings; all zero means tracing is off, which it always is here.
#[no_mangle]
pub static mut pvmtrc: [u8; 68] = [0; 68];
/// Trace code filter pointer (unused while tracing is off).
#[no_mangle]
pub static mut pvmtrccodef: usize = 0;
/// Number of entries in pvm_errlist.
#[no_mangle]
pub static pvm_nerr: c_int = 37;

/// Error texts indexed by -code.
#[repr(transparent)]
pub struct ErrList([*const c_char; 37]);
// SAFETY: the pointers are to immutable static strings.
unsafe impl Sync for ErrList {}

macro_rules! cs {
    ($s:expr) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

#[no_mangle]
pub static pvm_errlist: ErrList = ErrList([
    cs!("Error 0"),
    cs!("Error 1"),
    cs!("Bad parameter"),
    cs!("Parameter mismatch"),
    cs!("Value too large"),
    cs!("End of buffer"),
    cs!("No such host"),
    cs!("No such file"),
    cs!("Permission denied"),
    cs!("Error 9"),
    cs!("Malloc failed"),
    cs!("Error 11"),
    cs!("Can't decode message"),
    cs!("Error 13"),
    cs!("Can't contact local daemon"),
    cs!("No current buffer"),
    cs!("No such buffer"),
    cs!("Null group name"),
    cs!("Already in group"),
    cs!("No such group"),
    cs!("Not in group"),
    cs!("No such instance"),
    cs!("Host failed"),
    cs!("No parent task"),
    cs!("Not implemented"),
    cs!("Pvmd system error"),
    cs!("Version mismatch"),
    cs!("Out of resources"),
    cs!("Duplicate host"),
    cs!("Can't start pvmd"),
    cs!("Already in progress"),
    cs!("No such task"),
    cs!("Not Found"),
    cs!("Already exists"),
    cs!("Hoster run on non-master host"),
    cs!("Spawning parent set PvmNoSpawnParent"),
    cs!("Master Host IP is Loopback"),
]);

fn set_errno(code: c_int) {
    // SAFETY: libpvm is not thread-safe by contract; the global is an int.
    unsafe { pvm_errno = code };
}

fn print_error(name: &str, e: PvmError) {
    // SAFETY: reading an int global.
    let me = unsafe { pvmmytid };
    if me > 0 {
        eprintln!("libpvm [t{:x}]: {name}(): {e}", me as u32);
    } else {
        eprintln!("libpvm [pid{}]: {name}(): {e}", std::process::id());
    }
}

/// Runs `f` on the enrolled task (enrolling first if needed).
pub(crate) fn with<T>(name: &str, f: impl FnOnce(&mut Task) -> PvmResult<T>) -> Result<T, c_int> {
    let mut guard = TASK.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        match Task::enroll() {
            Ok(mut t) => {
                // SAFETY: int globals, see above.
                unsafe {
                    pvmmytid = t.mytid;
                    t.ctx = context::at_enrollment(pvmmyctx);
                    pvmmyctx = t.ctx;
                }
                *guard = Some(t);
            }
            Err(e) => {
                set_errno(e.code());
                print_error(name, e);
                return Err(e.code());
            }
        }
    }
    let t = guard.as_mut().expect("enrolled above");
    let auto = t.opts.auto_err;
    // Once the pvmd is known gone, every call fails as in libpvm.
    let r = if t.pvmd_gone() {
        Err(PvmError::SysErr)
    } else {
        f(t)
    };
    match r {
        Ok(v) => {
            // SAFETY: int global.
            unsafe { pvmmyctx = t.ctx };
            Ok(v)
        }
        Err(e) => {
            set_errno(e.code());
            if auto != 0 && e != PvmError::NotFound && e != PvmError::NoParent {
                print_error(name, e);
            }
            Err(e.code())
        }
    }
}

/// Like [`with`], mapping to the int PVM returns.
pub(crate) fn code(name: &str, f: impl FnOnce(&mut Task) -> PvmResult<c_int>) -> c_int {
    with(name, f).unwrap_or_else(|c| c)
}

/// Drops the enrollment (pvm_exit).
pub(crate) fn leave() -> c_int {
    let mut guard = TASK.lock().unwrap_or_else(|p| p.into_inner());
    let r = match guard.as_mut() {
        Some(t) => t.exit().map(|_| 0).unwrap_or_else(|e| e.code()),
        None => 0,
    };
    *guard = None;
    // SAFETY: int global.
    unsafe { pvmmytid = -1 };
    r
}

/// A C string argument as Rust text (None for NULL).
pub(crate) unsafe fn text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// Makes sure this process is enrolled (libgpvm3 calls it directly).
#[no_mangle]
pub extern "C" fn pvmbeatask() -> c_int {
    with("pvmbeatask", |_| Ok(0)).unwrap_or_else(|c| c)
}

/// Error reporter libgpvm3 calls: prints like libpvm and returns the code.
#[no_mangle]
pub unsafe extern "C" fn lpvmerr(f: *const c_char, code: c_int) -> c_int {
    // SAFETY: f is a C string from the caller.
    let name = unsafe { text(f) }.unwrap_or_default();
    if let Some(e) = PvmError::from_code(code) {
        print_error(&name, e);
    }
    code
}

/// Trace event hooks; tracing is never on (pvmtrc is zero), so libgpvm3
/// only reaches these if a program enables it, and they decline.
#[no_mangle]
pub extern "C" fn tev_begin(_kind: c_int, _entry_exit: c_int) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn tev_fin() -> c_int {
    0
}
