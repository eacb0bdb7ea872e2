//! pvm_config, pvm_tasks, pvm_siblings and pvm_getfds return pointers into
//! library-owned storage that stays valid until the next call of the same
//! function, as in PVM.

use std::ffi::{c_char, c_int, CString};
use std::sync::Mutex;

use openvia_pvm::frame::{op, Args};
use openvia_pvm::PvmError;

use crate::with;

#[repr(C)]
pub struct PvmHostInfo {
    hi_tid: c_int,
    hi_name: *mut c_char,
    hi_arch: *mut c_char,
    hi_speed: c_int,
    hi_dsig: c_int,
}

#[repr(C)]
pub struct PvmTaskInfo {
    ti_tid: c_int,
    ti_ptid: c_int,
    ti_host: c_int,
    ti_flag: c_int,
    ti_a_out: *mut c_char,
    ti_pid: c_int,
}

struct Kept<T> {
    items: Vec<T>,
    _strings: Vec<CString>,
}

// SAFETY: the raw pointers point into `_strings`, owned alongside.
unsafe impl<T> Send for Kept<T> {}

static HOSTS: Mutex<Option<Kept<PvmHostInfo>>> = Mutex::new(None);
static TASKS: Mutex<Option<Kept<PvmTaskInfo>>> = Mutex::new(None);
static SIBLINGS: Mutex<Vec<c_int>> = Mutex::new(Vec::new());
static FDS: Mutex<Vec<c_int>> = Mutex::new(Vec::new());
static RM_HOST: Mutex<Option<Kept<PvmHostInfo>>> = Mutex::new(None);

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("NULs removed")
}

#[no_mangle]
pub unsafe extern "C" fn pvm_config(
    nhost: *mut c_int,
    narch: *mut c_int,
    hostp: *mut *mut PvmHostInfo,
) -> c_int {
    let r = with("pvm_config", |t| t.call(op::CONFIG, Args::default()));
    let (n, a) = match r {
        Ok(v) => v,
        Err(c) => return c,
    };
    let mut strings = Vec::new();
    let mut items = Vec::new();
    for i in 0..n.max(0) as usize {
        let mut name = cstring(a.strs.get(2 * i).map(String::as_str).unwrap_or(""));
        let mut arch = cstring(a.strs.get(2 * i + 1).map(String::as_str).unwrap_or(""));
        items.push(PvmHostInfo {
            hi_tid: a.ints[3 * i],
            hi_name: name.as_ptr() as *mut c_char,
            hi_arch: arch.as_ptr() as *mut c_char,
            hi_speed: a.ints[3 * i + 1],
            hi_dsig: a.ints[3 * i + 2],
        });
        strings.push(std::mem::take(&mut name));
        strings.push(std::mem::take(&mut arch));
    }
    let mut archs: Vec<&String> = a.strs.iter().skip(1).step_by(2).collect();
    archs.sort();
    archs.dedup();
    let mut kept = HOSTS.lock().unwrap_or_else(|p| p.into_inner());
    *kept = Some(Kept {
        items,
        _strings: strings,
    });
    // SAFETY: out-pointers supplied by the caller (each may be NULL).
    unsafe {
        if !nhost.is_null() {
            *nhost = n;
        }
        if !narch.is_null() {
            *narch = archs.len() as c_int;
        }
        if !hostp.is_null() {
            *hostp = kept.as_mut().expect("just set").items.as_mut_ptr();
        }
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn pvm_tasks(
    which: c_int,
    ntask: *mut c_int,
    taskp: *mut *mut PvmTaskInfo,
) -> c_int {
    let r = with("pvm_tasks", |t| {
        let (n, a) = t.call(
            op::TASKS,
            Args {
                ints: vec![which],
                ..Args::default()
            },
        )?;
        if n < 0 {
            return Err(PvmError::from_code(n).unwrap_or(PvmError::SysErr));
        }
        Ok((n, a))
    });
    let (n, a) = match r {
        Ok(v) => v,
        Err(c) => return c,
    };
    let mut strings = Vec::new();
    let mut items = Vec::new();
    for i in 0..n as usize {
        let name = cstring(&a.strs[i]);
        let v = &a.ints[5 * i..5 * i + 5];
        items.push(PvmTaskInfo {
            ti_tid: v[0],
            ti_ptid: v[1],
            ti_host: v[2],
            ti_flag: v[3],
            ti_a_out: name.as_ptr() as *mut c_char,
            ti_pid: v[4],
        });
        strings.push(name);
    }
    let mut kept = TASKS.lock().unwrap_or_else(|p| p.into_inner());
    *kept = Some(Kept {
        items,
        _strings: strings,
    });
    // SAFETY: out-pointers supplied by the caller (each may be NULL).
    unsafe {
        if !ntask.is_null() {
            *ntask = n;
        }
        if !taskp.is_null() {
            *taskp = kept.as_mut().expect("just set").items.as_mut_ptr();
        }
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn pvm_siblings(tids: *mut *mut c_int) -> c_int {
    let sibs = match with("pvm_siblings", |t| Ok(t.siblings.clone())) {
        Ok(s) => s,
        Err(c) => return c,
    };
    let mut kept = SIBLINGS.lock().unwrap_or_else(|p| p.into_inner());
    *kept = sibs;
    if !tids.is_null() {
        // SAFETY: caller's out-pointer.
        unsafe { *tids = kept.as_mut_ptr() };
    }
    kept.len() as c_int
}

#[no_mangle]
pub unsafe extern "C" fn pvm_getfds(fds: *mut *mut c_int) -> c_int {
    let fd = match with("pvm_getfds", |t| t.select_fd()) {
        Ok(f) => f,
        Err(c) => return c,
    };
    let mut kept = FDS.lock().unwrap_or_else(|p| p.into_inner());
    *kept = vec![fd];
    if !fds.is_null() {
        // SAFETY: caller's out-pointer.
        unsafe { *fds = kept.as_mut_ptr() };
    }
    1
}

/// pvm_reg_rm: this task becomes the resource manager (spawn and host
/// requests of other tasks come to it as SM_ messages); `*hostp` is its
/// own host's entry, kept until the next call.
#[no_mangle]
pub unsafe extern "C" fn pvm_reg_rm(hostp: *mut *mut PvmHostInfo) -> c_int {
    let r = with("pvm_reg_rm", |t| {
        t.reg_rm()?;
        let (n, a) = t.call(op::CONFIG, Args::default())?;
        let me = openvia_pvm::tid::host_of(t.mytid);
        let i = (0..n.max(0) as usize)
            .find(|&i| a.ints.get(3 * i) == Some(&me))
            .ok_or(PvmError::SysErr)?;
        match (a.ints.get(3 * i..3 * i + 3), a.strs.get(2 * i..2 * i + 2)) {
            (Some(ints), Some(strs)) => Ok((ints.to_vec(), strs.to_vec())),
            _ => Err(PvmError::SysErr),
        }
    });
    let (ints, strs) = match r {
        Ok(v) => v,
        Err(c) => return c,
    };
    let (name, arch) = (cstring(&strs[0]), cstring(&strs[1]));
    let info = PvmHostInfo {
        hi_tid: ints[0],
        hi_name: name.as_ptr() as *mut c_char,
        hi_arch: arch.as_ptr() as *mut c_char,
        hi_speed: ints[1],
        hi_dsig: ints[2],
    };
    let mut kept = RM_HOST.lock().unwrap_or_else(|p| p.into_inner());
    *kept = Some(Kept {
        items: vec![info],
        _strings: vec![name, arch],
    });
    if !hostp.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *hostp = kept.as_mut().expect("just set").items.as_mut_ptr() };
    }
    0
}
