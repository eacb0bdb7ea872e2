//! What the console asks the pvmd: its requests (errors printed as
//! libpvm prints them while PvmAutoErr is on, `libpvm [tTID]: call():
//! text`), the host table and the task list, and how `ps` shows tasks.

use super::{cmds::AUTO_ERR, Console};
use crate::error::PvmError;
use crate::frame::{op, Args};

/// Prints an error as libpvm does with PvmAutoErr on.
pub(super) fn lib_error(c: &Console, call: &str, e: PvmError) {
    if c.opts[AUTO_ERR] != 0 {
        eprintln!("libpvm [t{:x}]: {call}(): {e}", c.t.mytid);
    }
}

/// A request's arguments.
pub(super) fn args(ints: Vec<i32>, strs: Vec<String>) -> Args {
    Args {
        ints,
        strs,
        bytes: vec![],
    }
}

/// A request whose reply is a code; errors printed as libpvm would.
pub(super) fn request(
    c: &mut Console,
    call: &str,
    opcode: u32,
    ints: Vec<i32>,
    strs: Vec<String>,
) -> Option<(i32, Args)> {
    // Spawns and host changes go to a resource manager if one is registered.
    match c.t.call_via_rm(opcode, args(ints, strs)) {
        Ok((code, a)) if code >= 0 => Some((code, a)),
        Ok((code, _)) => {
            lib_error(
                c,
                call,
                PvmError::from_code(code).unwrap_or(PvmError::SysErr),
            );
            None
        }
        Err(e) => {
            lib_error(c, call, e);
            None
        }
    }
}

/// stock's tidtoi: an optional 't', then hex digits (others end it).
pub(super) fn tidtoi(s: &str) -> i32 {
    let s = s.strip_prefix('t').unwrap_or(s);
    s.chars()
        .map_while(|c| c.to_digit(16))
        .fold(0u32, |n, d| n.wrapping_shl(4) | d) as i32
}

/// One host of the configuration.
pub(super) struct Host {
    pub(super) dtid: i32,
    pub(super) name: String,
    pub(super) arch: String,
    pub(super) speed: i32,
    pub(super) dsig: i32,
}

pub(super) fn hosts(c: &mut Console) -> Option<Vec<Host>> {
    let (n, a) = request(c, "pvm_config", op::CONFIG, vec![], vec![])?;
    Some(
        (0..n.max(0) as usize)
            .filter_map(|i| {
                Some(Host {
                    dtid: *a.ints.get(3 * i)?,
                    speed: *a.ints.get(3 * i + 1)?,
                    dsig: *a.ints.get(3 * i + 2)?,
                    name: a.strs.get(2 * i)?.clone(),
                    arch: a.strs.get(2 * i + 1)?.clone(),
                })
            })
            .collect(),
    )
}

/// One task as pvm_tasks gives it.
pub(super) struct TaskInfo {
    pub(super) tid: i32,
    pub(super) ptid: i32,
    pub(super) host: i32,
    pub(super) flag: i32,
    pub(super) pid: i32,
    pub(super) name: String,
}

pub(super) fn tasks(c: &mut Console, which: i32) -> Option<Vec<TaskInfo>> {
    let (n, a) = request(c, "pvm_tasks", op::TASKS, vec![which], vec![])?;
    Some(
        (0..n.max(0) as usize)
            .filter_map(|i| {
                let v = a.ints.get(5 * i..5 * i + 5)?;
                Some(TaskInfo {
                    tid: v[0],
                    ptid: v[1],
                    host: v[2],
                    flag: v[3],
                    pid: v[4],
                    name: a.strs.get(i)?.clone(),
                })
            })
            .collect(),
    )
}

/// Task flags as `ps` shows them: hex, then letters high bit first.
pub(super) fn task_flags(f: i32) -> String {
    const LETTERS: [(i32, &str); 8] = [
        (1 << 10, "T"),
        (1 << 9, "H"),
        (1 << 8, "R"),
        (1 << 5, "s"),
        (1 << 4, "o"),
        (1 << 3, "a"),
        (1 << 2, "c"),
        (1 << 1, "f"),
    ];
    let letters: Vec<&str> = LETTERS
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, l)| *l)
        .collect();
    if letters.is_empty() {
        format!("{f:x}")
    } else {
        format!("{f:x}/{}", letters.join(","))
    }
}

pub(super) fn task_header(long: bool) {
    if long {
        println!("                    HOST      TID     PTID    PID   FLAG 0x COMMAND");
    } else {
        println!("                    HOST      TID   FLAG 0x COMMAND");
    }
}

pub(super) fn task_line(me: i32, hosts: &[Host], t: &TaskInfo, long: bool) -> String {
    let mut s = match hosts.iter().rev().find(|h| h.dtid == t.host) {
        Some(h) => format!("{:>24}", h.name),
        None => format!("{:>24x}", t.host),
    };
    if t.tid == me {
        s += "   (cons)";
    } else {
        s += &format!(" {:>8x}", t.tid);
    }
    if long {
        s += &if t.ptid == me {
            "   (cons)".to_string()
        } else if t.ptid != 0 {
            format!(" {:>8x}", t.ptid)
        } else {
            "        -".to_string()
        };
        s += &format!(" {:>6}", t.pid);
    }
    let name = if t.name.is_empty() {
        "-"
    } else {
        t.name.as_str()
    };
    s + &format!(" {:>9} {name:<12}", task_flags(t.flag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_tids_read_as_stock() {
        assert_eq!(task_flags(6), "6/c,f");
        assert_eq!(task_flags(4), "4/c");
        assert_eq!(task_flags(0), "0");
        assert_eq!(tidtoi("t40001"), 0x40001);
        assert_eq!(tidtoi("40zz"), 0x40);
    }
}
