// Gives libpvm3.so its SONAME and compiles the varargs entry points
// (pvm_packf, pvm_unpackf), which stable Rust cannot define, from C.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("varargs.o");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args([
            "-c",
            "-O2",
            "-fPIC",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            "../../include",
            "c/varargs.c",
            "-o",
        ])
        .arg(&obj)
        .status()
        .expect("running the C compiler");
    assert!(status.success(), "compiling c/varargs.c failed");
    println!("cargo:rerun-if-changed=c/varargs.c");
    println!("cargo:rerun-if-changed=../../include/pvm3.h");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpvm3.so.3");
    // Named on the link line so the object is kept whole; src/varargs.rs
    // exports its two functions under their PVM names.
    println!("cargo:rustc-link-arg={}", obj.display());
}
