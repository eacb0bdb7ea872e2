//! Context inheritance. A spawned task starts in the message context its
//! parent was in when it called pvm_spawn (the inherit* examples check
//! this). As in libpvm, the context travels in the child's environment as
//! PVMCTX and is read at enrollment. The pvmd's spawn request carries the
//! variables named in PVM_EXPORT, so pvm_spawn names PVMCTX there for the
//! duration of the one call and then restores both variables.

use std::ffi::OsString;

const ENV_CTX: &str = "PVMCTX";
const ENV_EXPORT: &str = "PVM_EXPORT";

fn restore(name: &str, old: Option<OsString>) {
    match old {
        Some(v) => std::env::set_var(name, v),
        None => std::env::remove_var(name),
    }
}

/// Runs `spawn` with PVMCTX=`ctx` exported to the tasks it starts.
pub(crate) fn with_context_exported<T>(ctx: i32, spawn: impl FnOnce() -> T) -> T {
    let old_export = std::env::var_os(ENV_EXPORT);
    let old_ctx = std::env::var_os(ENV_CTX);
    let list = std::env::var(ENV_EXPORT).unwrap_or_default();
    if !list.split(':').any(|n| n == ENV_CTX) {
        let sep = if list.is_empty() { "" } else { ":" };
        std::env::set_var(ENV_EXPORT, format!("{list}{sep}{ENV_CTX}"));
    }
    std::env::set_var(ENV_CTX, ctx.to_string());
    let r = spawn();
    restore(ENV_EXPORT, old_export);
    restore(ENV_CTX, old_ctx);
    r
}

/// libpvm reads numbers in C notation: 0x hex, leading-0 octal, decimal.
fn parse_c_int(s: &str) -> Option<i32> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if s.len() > 1 && s.starts_with('0') {
        i64::from_str_radix(&s[1..], 8).ok()?
    } else {
        s.parse::<i64>().ok()?
    };
    i32::try_from(if neg { -v } else { v }).ok()
}

/// The context a task starts in when it enrolls: its parent's (PVMCTX),
/// else `current`, the one it had before a pvm_exit (libpvm keeps the
/// context across leaving and rejoining).
pub(crate) fn at_enrollment(current: i32) -> i32 {
    std::env::var(ENV_CTX)
        .ok()
        .and_then(|s| parse_c_int(&s))
        .unwrap_or(current)
}

#[cfg(test)]
mod tests {
    use super::parse_c_int;

    #[test]
    fn c_notation_numbers() {
        assert_eq!(parse_c_int("262209"), Some(262209));
        assert_eq!(parse_c_int("0x40041"), Some(0x40041));
        assert_eq!(parse_c_int("010"), Some(8));
        assert_eq!(parse_c_int("0"), Some(0));
        assert_eq!(parse_c_int("-3"), Some(-3));
        assert_eq!(parse_c_int("ctx"), None);
        assert_eq!(parse_c_int("99999999999"), None);
    }
}
