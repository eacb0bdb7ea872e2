//! pvm_getmboxinfo: the mailbox classes whose names match a pattern, with
//! each entry's index, owner and flags (the pvmd's MBOXINFO request, the
//! one the console's `names` uses). As in PVM the array, its names and
//! its per-class arrays belong to the library and stay valid until the
//! next call.

use std::ffi::{c_char, c_int, CString};
use std::sync::Mutex;

use openvia_pvm::frame::{op, Args};

use crate::{text, with};

/// `struct pvmmboxinfo` of pvm3.h.
#[repr(C)]
pub struct PvmMboxInfo {
    mi_name: *mut c_char,
    mi_nentries: c_int,
    mi_indices: *mut c_int,
    mi_owners: *mut c_int,
    mi_flags: *mut c_int,
}

/// One class's storage, pointed into by its PvmMboxInfo.
struct Class {
    name: CString,
    indices: Vec<c_int>,
    owners: Vec<c_int>,
    flags: Vec<c_int>,
}

struct Kept {
    items: Vec<PvmMboxInfo>,
    _classes: Vec<Class>,
}

// SAFETY: the raw pointers point into `_classes`, owned alongside, whose
// heap buffers do not move when the Vec holding them does.
unsafe impl Send for Kept {}

static MBOXES: Mutex<Option<Kept>> = Mutex::new(None);

/// Decodes the MBOXINFO reply: per class its name (in `strs`), then in
/// `ints` its entry count and (index, owner, flags) per entry. A reply
/// cut short ends the list there.
fn decode(a: &Args) -> Vec<Class> {
    let mut ints = a.ints.iter().copied();
    let mut out = Vec::new();
    for name in &a.strs {
        let Some(n) = ints.next() else { break };
        let mut c = Class {
            name: CString::new(name.replace('\0', "")).expect("NULs removed"),
            indices: Vec::new(),
            owners: Vec::new(),
            flags: Vec::new(),
        };
        for _ in 0..n.max(0) {
            let (Some(i), Some(o), Some(f)) = (ints.next(), ints.next(), ints.next()) else {
                break;
            };
            c.indices.push(i);
            c.owners.push(o);
            c.flags.push(f);
        }
        out.push(c);
    }
    out
}

#[no_mangle]
pub unsafe extern "C" fn pvm_getmboxinfo(
    pattern: *mut c_char,
    nclasses: *mut c_int,
    classes: *mut *mut PvmMboxInfo,
) -> c_int {
    // SAFETY: a C string from the caller, or NULL (taken as "*").
    let pattern = unsafe { text(pattern) }.unwrap_or_else(|| "*".into());
    let r = with("pvm_getmboxinfo", |t| {
        t.call(
            op::MBOXINFO,
            Args {
                strs: vec![pattern],
                ..Args::default()
            },
        )
    });
    let a = match r {
        Ok((_, a)) => a,
        Err(c) => return c,
    };
    let mut kept_classes = decode(&a);
    let items = kept_classes
        .iter_mut()
        .map(|c| PvmMboxInfo {
            mi_name: c.name.as_ptr() as *mut c_char,
            mi_nentries: c.indices.len() as c_int,
            mi_indices: c.indices.as_mut_ptr(),
            mi_owners: c.owners.as_mut_ptr(),
            mi_flags: c.flags.as_mut_ptr(),
        })
        .collect();
    let mut kept = MBOXES.lock().unwrap_or_else(|p| p.into_inner());
    *kept = Some(Kept {
        items,
        _classes: kept_classes,
    });
    let k = kept.as_mut().expect("just set");
    // SAFETY: out-pointers supplied by the caller (each may be NULL).
    unsafe {
        if !nclasses.is_null() {
            *nclasses = k.items.len() as c_int;
        }
        if !classes.is_null() {
            *classes = k.items.as_mut_ptr();
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_classes_and_stops_at_a_short_reply() {
        let a = Args {
            strs: vec!["a".into(), "b".into(), "c".into()],
            ints: vec![2, 0, 7, 1, 3, 8, 4, 1, 5],
            bytes: vec![],
        };
        let c = decode(&a);
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0].indices.clone(), c[0].owners.clone()),
            (vec![0, 3], vec![7, 8])
        );
        assert_eq!(c[0].flags, [1, 4]);
        // "b" says one entry but only two of its three ints came.
        assert!(c[1].indices.is_empty());
    }
}
