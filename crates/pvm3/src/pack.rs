//! pvm_pk* / pvm_upk*: the caller's array, `n` items every `stride`, seen
//! as a byte span and handed to the codec. A stride of 0 (libpvm accepts
//! it; PVM's srm passes it with one item) repeats the first item.

use std::ffi::{c_char, c_int};

use openvia_pvm::codec::{span, Elem};
use openvia_pvm::PvmError;

use crate::code;

unsafe fn pack_raw(name: &str, elem: Elem, p: *const u8, n: c_int, stride: c_int) -> c_int {
    if p.is_null() || n < 0 || stride < 0 {
        return code(name, |_| Err(PvmError::BadParam));
    }
    let len = span(elem, n as usize, stride as usize);
    // SAFETY: PVM's contract: p points at n items spaced by stride.
    let src = unsafe { std::slice::from_raw_parts(p, len) };
    code(name, |t| {
        t.send_buf()?.pack(elem, src, n as usize, stride as usize);
        Ok(0)
    })
}

unsafe fn unpack_raw(name: &str, elem: Elem, p: *mut u8, n: c_int, stride: c_int) -> c_int {
    if p.is_null() || n < 0 || stride < 0 {
        return code(name, |_| Err(PvmError::BadParam));
    }
    let len = span(elem, n as usize, stride as usize);
    // SAFETY: PVM's contract: p has room for n items spaced by stride.
    let dst = unsafe { std::slice::from_raw_parts_mut(p, len) };
    code(name, |t| {
        t.recv_buf()?
            .unpack(elem, dst, n as usize, stride as usize)?;
        Ok(0)
    })
}

macro_rules! pk_upk {
    ($pk:ident, $upk:ident, $t:ty, $elem:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $pk(p: *mut $t, n: c_int, stride: c_int) -> c_int {
            // SAFETY: forwarded contract of the C caller.
            unsafe { pack_raw(stringify!($pk), $elem, p as *const u8, n, stride) }
        }
        #[no_mangle]
        pub unsafe extern "C" fn $upk(p: *mut $t, n: c_int, stride: c_int) -> c_int {
            // SAFETY: forwarded contract of the C caller.
            unsafe { unpack_raw(stringify!($upk), $elem, p as *mut u8, n, stride) }
        }
    };
}

pk_upk!(pvm_pkbyte, pvm_upkbyte, c_char, Elem::Byte);
pk_upk!(pvm_pkshort, pvm_upkshort, i16, Elem::Short);
pk_upk!(pvm_pkushort, pvm_upkushort, u16, Elem::Short);
pk_upk!(pvm_pkint, pvm_upkint, c_int, Elem::Int);
pk_upk!(pvm_pkuint, pvm_upkuint, u32, Elem::Int);
pk_upk!(pvm_pklong, pvm_upklong, i64, Elem::Long);
pk_upk!(pvm_pkulong, pvm_upkulong, u64, Elem::Long);
pk_upk!(pvm_pkfloat, pvm_upkfloat, f32, Elem::Float);
pk_upk!(pvm_pkdouble, pvm_upkdouble, f64, Elem::Double);
pk_upk!(pvm_pkcplx, pvm_upkcplx, f32, Elem::Cplx);
pk_upk!(pvm_pkdcplx, pvm_upkdcplx, f64, Elem::Dcplx);

#[no_mangle]
pub unsafe extern "C" fn pvm_pkstr(s: *mut c_char) -> c_int {
    if s.is_null() {
        return code("pvm_pkstr", |_| Err(PvmError::BadParam));
    }
    // SAFETY: s is a NUL-terminated string.
    let bytes = unsafe { std::ffi::CStr::from_ptr(s) }.to_bytes();
    code("pvm_pkstr", |t| {
        let b = t.send_buf()?;
        let enc = if b.enc == 2 { 1 } else { b.enc };
        openvia_pvm::codec::pack_str(enc, bytes, &mut b.data);
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pvm_upkstr(s: *mut c_char) -> c_int {
    if s.is_null() {
        return code("pvm_upkstr", |_| Err(PvmError::BadParam));
    }
    code("pvm_upkstr", |t| {
        let b = t.recv_buf()?;
        let enc = if b.enc == 2 { 1 } else { b.enc };
        let mut pos = b.pos;
        let bytes = openvia_pvm::codec::unpack_str(enc, &b.data, &mut pos)?;
        // SAFETY: PVM's contract: s has room for the string and its NUL.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), s as *mut u8, bytes.len()) };
        b.pos = pos;
        Ok(0)
    })
}
