//! libpvm's exported helper functions that are not part of the documented
//! API but that Debian's example binaries call directly (bwtest's timer
//! and pauses, srm's tracer settings and tag names). Without them the
//! dynamic linker refuses to start those programs at all.

use std::ffi::{c_char, c_int, CString};
use std::sync::Mutex;
use std::time::Duration;

/// Sleeps whole seconds (libpvm's portable sleep).
#[no_mangle]
pub extern "C" fn pvmsleep(secs: c_int) -> c_int {
    std::thread::sleep(Duration::from_secs(secs.max(0) as u64));
    0
}

/// Wall-clock time into `tv` (libpvm's portable gettimeofday).
#[no_mangle]
pub unsafe extern "C" fn pvmgetclock(tv: *mut libc::timeval) -> c_int {
    if tv.is_null() {
        return -1;
    }
    // SAFETY: the caller passes a timeval to fill; a NULL timezone is allowed.
    unsafe { libc::gettimeofday(tv, std::ptr::null_mut()) }
}

/// Trace settings handed to spawned children (struct Pvmtracer, same
/// size as `pvmtrc`); all zero: children are not traced.
#[no_mangle]
pub static mut pvmctrc: [u8; 68] = [0; 68];

/// Name of a system message tag. This library has no pvmd-protocol tags
/// a task could see, so every tag is reported as not found and named by
/// its number, as libpvm does for unknown tags.
#[no_mangle]
pub unsafe extern "C" fn pvmnametag(tag: c_int, found: *mut c_int) -> *const c_char {
    static LAST: Mutex<Option<CString>> = Mutex::new(None);
    if !found.is_null() {
        // SAFETY: caller's out-pointer.
        unsafe { *found = 0 };
    }
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    let name = last.insert(CString::new(tag.to_string()).expect("digits have no NUL"));
    name.as_ptr()
}
