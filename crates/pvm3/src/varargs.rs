//! pvm_packf and pvm_unpackf are C varargs functions (c/varargs.c). rustc
//! only exports symbols it defines, so each gets a naked trampoline here
//! that jumps to the C body with every argument register untouched
//! (including %al, the count of vector registers a varargs call uses).

extern "C" {
    fn openvia_pvm_packf(fmt: *const std::ffi::c_char, ...) -> std::ffi::c_int;
    fn openvia_pvm_unpackf(fmt: *const std::ffi::c_char, ...) -> std::ffi::c_int;
}

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn pvm_packf() {
    core::arch::naked_asm!("jmp {f}@PLT", f = sym openvia_pvm_packf)
}

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn pvm_unpackf() {
    core::arch::naked_asm!("jmp {f}@PLT", f = sym openvia_pvm_unpackf)
}
