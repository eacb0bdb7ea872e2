//! `libvipl.so`: the VIPL 1.0 C interface over openvia's core.
//!
//! A thin shell: every entry point checks its handles and pointers, calls
//! the core, and maps the typed error to a `VIP_RETURN`. Handles are
//! table entries, never raw pointers (see [`handles`]), so a stale or
//! foreign handle gives `VIP_INVALID_PARAMETER`; panics are caught at the
//! boundary ([`state::guard`]). The C declarations are in
//! `include/vipl.h`; [`types`] mirrors them with layout checks.
#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod handles;
pub mod state;
pub mod types;

mod ffi_conn;
mod ffi_cq;
mod ffi_nic;
mod ffi_vi;
