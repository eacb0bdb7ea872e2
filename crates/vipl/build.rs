// Gives libvipl.so its SONAME, so programs link against the ABI version.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvipl.so.1");
}
