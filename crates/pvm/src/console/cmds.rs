//! The console's commands, each printing what PVM 3.4.6's prints. Errors
//! of the underlying calls go to stderr as libpvm prints them while
//! PvmAutoErr is on (`libpvm [tTID]: pvm_call(): text`).

use std::fs::OpenOptions;

use super::trace::atoi;
use super::vm::{args, hosts, lib_error, request, task_header, task_line, tasks, tidtoi};
use super::{help as help_text, Console, COMMANDS};
use crate::codec::Elem;
use crate::error::{describe, PvmError};
use std::time::Duration;

use crate::codec;
use crate::frame::op;
use crate::task::Wait;
use crate::tid;
use crate::PvmResult;

/// Option numbers (pvm3.h) the console uses by name.
const ROUTE: usize = 1;
pub(super) const AUTO_ERR: usize = 3;
const OUTPUT_TID: usize = 4;
const OUTPUT_CODE: usize = 5;
const TRACE_BUFFER: usize = 8;
const TRACE_OPTIONS: usize = 9;
const FRAG_SIZE: usize = 10;
pub(super) const SHOW_TIDS: usize = 18;
const OUTPUT_CONTEXT: usize = 21;
const NO_RESET: usize = 25;

/// Option names by number; empty ones do not exist on this machine.
const OPTION_NAMES: [&str; 26] = [
    "",
    "PvmRoute",
    "PvmDebugMask",
    "PvmAutoErr",
    "PvmOutputTid",
    "PvmOutputCode",
    "PvmTraceTid",
    "PvmTraceCode",
    "PvmTraceBuffer",
    "PvmTraceOptions",
    "PvmFragSize",
    "PvmResvTids",
    "PvmSelfOutputTid",
    "PvmSelfOutputCode",
    "PvmSelfTraceTid",
    "PvmSelfTraceCode",
    "PvmSelfTraceBuffer",
    "PvmSelfTraceOptions",
    "PvmShowTids",
    "",
    "",
    "PvmOutputContext",
    "PvmTraceContext",
    "PvmSelfOutputContext",
    "PvmSelfTraceContext",
    "PvmNoReset",
];

/// The mailbox class where tasks that survive `reset` are listed.
const NO_RESET_CLASS: &str = "###_PVM_NO_RESET_###";
const MBOX_MULTI_INSTANCE: i32 = 2;
const TASK_HOST: i32 = 1;
const TASK_ARCH: i32 = 2;
const TASK_DEBUG: i32 = 4;
const HOST_COMPL: i32 = 32;
const NO_SPAWN_PARENT: i32 = 64;

/// The console task's options as stock's console sets them.
pub(super) fn initial_options() -> [i32; 26] {
    let mut o = [0; 26];
    for (k, v) in [
        (ROUTE, 1),
        (AUTO_ERR, 1),
        (OUTPUT_TID, -1),
        (6, -1),
        (TRACE_OPTIONS, 1),
        (FRAG_SIZE, 4080),
        (11, 1),
        (12, -1),
        (14, -1),
        (SHOW_TIDS, 1),
        (NO_RESET, 1),
    ] {
        o[k] = v;
    }
    o
}

/// Gives the task the options that mean something to it.
pub(super) fn apply_options(c: &mut Console) {
    let o = c.opts;
    let t = &mut c.t.opts;
    t.route = o[ROUTE];
    t.auto_err = o[AUTO_ERR];
    t.frag_size = o[FRAG_SIZE];
    t.show_tids = o[SHOW_TIDS];
    t.no_reset = o[NO_RESET];
}

/// Lists the console where `reset` looks for tasks to spare.
pub(super) fn mark_no_reset(c: &mut Console) {
    let me = c.t.mytid;
    let r = c.t.mkbuf(0).and_then(|id| {
        c.t.bufs.get(id)?.pack(Elem::Int, &me.to_ne_bytes(), 1, 1);
        let r = c.t.putinfo(NO_RESET_CLASS, id, MBOX_MULTI_INSTANCE);
        let _ = c.t.freebuf(id);
        r
    });
    if let Err(e) = r {
        lib_error(c, "pvm_putinfo", e);
    }
}

/// The tag of PvmHostAdd notifications to the console.
const HOSTS_ADDED: i32 = 0x7fef_0001;
const NOTIFY_HOST_ADD: i32 = 3;

/// Asks the pvmd to tell the console of hosts added by anyone.
pub(super) fn watch_new_hosts(c: &mut Console) {
    let ctx = c.t.ctx;
    let _ = request(
        c,
        "pvm_notify",
        op::NOTIFY,
        vec![NOTIFY_HOST_ADD, HOSTS_ADDED, ctx, -1],
        vec![],
    );
}

/// Prints the hosts that were added (`Console: N new hosts added` and
/// their conf lines), as stock does between commands.
pub(super) fn new_hosts(c: &mut Console) -> PvmResult<()> {
    loop {
        let id = c.t.recv(-1, HOSTS_ADDED, Wait::Never)?;
        if id <= 0 {
            return Ok(());
        }
        let b = c.t.bufs.get(id)?;
        let (enc, body) = (b.enc, b.data.to_vec());
        let mut pos = 0;
        let n = codec::unpack_i32(enc, &body, &mut pos)?.max(0);
        let mut added = Vec::new();
        for _ in 0..n {
            added.push(codec::unpack_i32(enc, &body, &mut pos)?);
        }
        println!(
            "\nConsole: {n} new host{} added",
            if n == 1 { "" } else { "s" }
        );
        if let Some(hs) = hosts(c) {
            println!("                    HOST     DTID     ARCH   SPEED");
            for d in added.iter().rev() {
                if let Some(h) = hs.iter().rev().find(|h| h.dtid == *d) {
                    println!("{:>24} {:>8x} {:>8}{:>8}", h.name, h.dtid, h.arch, h.speed);
                }
            }
        }
    }
}

// ---- the commands, alphabetically ----

pub(super) fn add(c: &mut Console, av: &[String]) {
    let names = av[1..].to_vec();
    let Some((n, a)) = request(c, "pvm_addhosts", op::ADDHOSTS, vec![], names.clone()) else {
        return;
    };
    if n > 0 {
        // Our own hosts: the notification is not news (stock drops it too).
        let _ =
            c.t.recv(-1, HOSTS_ADDED, Wait::For(Duration::from_secs(10)));
    }
    println!("{n} successful");
    println!("                    HOST     DTID");
    for (h, &code) in names.iter().zip(&a.ints) {
        if code < 0 {
            println!("{h:>24} {:>8}", describe(code));
        } else {
            println!("{h:>24} {code:>8x}");
        }
    }
}

pub(super) fn alias(c: &mut Console, av: &[String]) {
    if av.len() < 3 {
        for (name, words) in &c.aliases {
            println!("{name}\t{}", words.join(" "));
        }
    } else {
        c.aliases.insert(av[1].clone(), av[2..].to_vec());
    }
}

pub(super) fn conf(c: &mut Console, _: &[String]) {
    let Some(hs) = hosts(c) else { return };
    let mut sigs: Vec<i32> = hs.iter().map(|h| h.dsig).collect();
    sigs.sort_unstable();
    sigs.dedup();
    let plural = |n: usize| if n > 1 { "s" } else { "" };
    println!(
        "{} host{}, {} data format{}",
        hs.len(),
        plural(hs.len()),
        sigs.len(),
        plural(sigs.len())
    );
    println!("                    HOST     DTID     ARCH   SPEED       DSIG");
    for h in &hs {
        println!(
            "{:>24} {:>8x} {:>8}{:>8} 0x{:08x}",
            h.name, h.dtid, h.arch, h.speed, h.dsig
        );
    }
}

pub(super) fn delete(c: &mut Console, av: &[String]) {
    let names = av[1..].to_vec();
    let Some((_, a)) = request(c, "pvm_delhosts", op::DELHOSTS, vec![], names.clone()) else {
        return;
    };
    println!("{} successful", a.ints.iter().filter(|&&x| x >= 0).count());
    println!("                    HOST  STATUS");
    for (h, &code) in names.iter().zip(&a.ints) {
        if code < 0 {
            println!("{h:>24}  {:>8}", describe(code));
        } else {
            println!("{h:>24}  deleted");
        }
    }
}

pub(super) fn echo(_: &mut Console, av: &[String]) {
    println!("{}", av[1..].join(" "));
}

pub(super) fn export(_: &mut Console, av: &[String]) {
    let list = std::env::var("PVM_EXPORT").unwrap_or_default();
    if av.len() == 1 {
        println!("PVM_EXPORT={list}");
        return;
    }
    let mut names: Vec<String> = list
        .split(':')
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect();
    for n in &av[1..] {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    std::env::set_var("PVM_EXPORT", names.join(":"));
}

pub(super) fn getopt(c: &mut Console, av: &[String]) {
    match av.get(1) {
        None => {
            for (k, name) in OPTION_NAMES
                .iter()
                .enumerate()
                .filter(|(_, n)| !n.is_empty())
            {
                println!("{name} Currently Set to {}", c.opts[k]);
            }
        }
        Some(name) => match option_number(name) {
            Some(k) => println!("{name} Currently Set to {}", c.opts[k]),
            None => println!("PVM Option \"{name}\" Unknown."),
        },
    }
}

fn option_number(name: &str) -> Option<usize> {
    OPTION_NAMES
        .iter()
        .position(|n| !n.is_empty() && *n == name)
}

pub(super) fn halt(c: &mut Console, _: &[String]) {
    if request(c, "pvm_halt", op::HALT, vec![], vec![]).is_some() {
        std::process::exit(0);
    }
}

pub(super) fn help(_: &mut Console, av: &[String]) {
    let names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
    print!("{}", help_text::help(av.get(1).map(String::as_str), &names));
}

pub(super) fn id(c: &mut Console, _: &[String]) {
    println!("t{:x}", c.t.mytid);
}

pub(super) fn jobs(c: &mut Console, av: &[String]) {
    let long = av.get(1).is_some_and(|a| a == "-l");
    let (hs, ts) = if long {
        task_header(false);
        (
            hosts(c).unwrap_or_default(),
            tasks(c, 0).unwrap_or_default(),
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let me = c.t.mytid;
    c.jobs.list(long, |tid| {
        ts.iter()
            .find(|t| t.tid == tid)
            .map(|t| task_line(me, &hs, t, false))
    });
}

pub(super) fn kill(c: &mut Console, av: &[String]) {
    let mut args = &av[1..];
    let mut children = false;
    if let Some(flags) = args.first().and_then(|a| a.strip_prefix('-')) {
        for f in flags.chars() {
            match f {
                'c' => children = true,
                '-' => {}
                other => println!("unknown flag -{other}"),
            }
        }
        args = &args[1..];
    }
    if args.is_empty() {
        println!("incorrect arg count");
        return;
    }
    let all = if children {
        match tasks(c, 0) {
            Some(t) => t,
            None => return,
        }
    } else {
        Vec::new()
    };
    let me = c.t.mytid;
    for a in args {
        let t = tidtoi(a);
        if children {
            for k in all.iter().filter(|k| k.ptid == t && k.tid != me) {
                let _ = request(c, "pvm_kill", op::KILL, vec![k.tid], vec![]);
            }
        } else if t == me {
            println!("t{t:x}: that's me.");
        } else if t <= 0 {
            lib_error(c, "pvm_kill", PvmError::BadParam);
        } else {
            let _ = request(c, "pvm_kill", op::KILL, vec![t], vec![]);
        }
    }
}

pub(super) fn mstat(c: &mut Console, av: &[String]) {
    for h in &av[1..] {
        let text = status(c, op::MSTAT, vec![], vec![h.clone()], "ok");
        println!("{h:>24}  {text}");
    }
}

/// A query's answer as mstat and pstat print it: `ok` text or the error.
fn status(c: &mut Console, opcode: u32, ints: Vec<i32>, strs: Vec<String>, ok: &str) -> String {
    match c.t.call(opcode, args(ints, strs)) {
        Ok((code, _)) if code >= 0 => ok.to_string(),
        Ok((code, _)) => describe(code),
        Err(e) => e.to_string(),
    }
}

pub(super) fn names(c: &mut Console, av: &[String]) {
    let pattern = av.get(1).cloned().unwrap_or_else(|| "*".into());
    let Some((_, a)) = request(c, "pvm_getmboxinfo", op::MBOXINFO, vec![], vec![pattern]) else {
        return;
    };
    let mut ints = a.ints.iter().copied();
    for name in &a.strs {
        println!("<{name}>:");
        let n = ints.next().unwrap_or(0);
        for _ in 0..n {
            let (i, o, f) = (
                ints.next().unwrap_or(0),
                ints.next().unwrap_or(0),
                ints.next().unwrap_or(0),
            );
            println!("\tindex={i} owner=0x{o:x}/{o} flags=0x{f:x}");
        }
        println!();
    }
}

pub(super) fn ps(c: &mut Console, av: &[String]) {
    let hs = hosts(c).unwrap_or_default();
    let me = c.t.mytid;
    let mut host = tid::host_of(me);
    let (mut long, mut all_tasks) = (false, false);
    if let Some(arg) = av.get(1) {
        let mut chars = arg.chars();
        while let Some(f) = chars.next() {
            match f {
                'n' => {
                    let name: String = chars.by_ref().collect();
                    if name != "." {
                        match hs.iter().rev().find(|h| h.name == name) {
                            Some(h) => host = h.dtid,
                            None => println!("unknown host {name}"),
                        }
                    }
                }
                'h' => host = tidtoi(&chars.by_ref().collect::<String>()),
                'a' => host = 0,
                'l' => long = true,
                'x' => all_tasks = true,
                '-' => {}
                other => println!("unknown flag -{other}"),
            }
        }
    }
    let Some(ts) = tasks(c, host) else { return };
    task_header(long);
    for t in ts
        .iter()
        .filter(|t| all_tasks || (t.tid != me && t.tid != 0))
    {
        println!("{}", task_line(me, &hs, t, long));
    }
}

pub(super) fn pstat(c: &mut Console, av: &[String]) {
    for a in &av[1..] {
        let t = tidtoi(a);
        let text = status(c, op::PSTAT, vec![t], vec![], "run");
        println!("t{t:>8x}  {text}");
    }
}

pub(super) fn put(c: &mut Console, av: &[String]) {
    // As in stock: the flags are the third word (the syntax line says
    // `put name flags` but four words are required).
    let flags = atoi(&av[2]);
    let r = c.t.mkbuf(0).and_then(|id| {
        c.t.bufs.get(id)?.pack(Elem::Int, &0i32.to_ne_bytes(), 1, 1);
        let r = c.t.putinfo(&av[1], id, flags);
        let _ = c.t.freebuf(id);
        r
    });
    if let Err(e) = r {
        println!("{e}");
    }
}

pub(super) fn quit(c: &mut Console, _: &[String]) {
    println!();
    let _ = c.t.exit();
    println!("Console: exit handler called");
    println!("pvmd still running.");
    std::process::exit(0);
}

pub(super) fn reset(c: &mut Console, av: &[String]) {
    let (kill_tasks, class, index) = match av.get(1).map(String::as_str) {
        None => (true, String::new(), -1),
        Some("info") => (
            false,
            av.get(2).cloned().unwrap_or_default(),
            av.get(3).map_or(-1, |i| atoi(i)),
        ),
        Some(other) => {
            println!("\"{other}\" arg to reset not valid");
            return;
        }
    };
    // Tasks listed as PvmNoReset (the console among them) are spared.
    let mut keep = vec![c.t.mytid];
    if let Some((_, a)) = request(
        c,
        "pvm_getmboxinfo",
        op::MBOXINFO,
        vec![],
        vec![NO_RESET_CLASS.into()],
    ) {
        keep.extend(a.ints.iter().skip(1).skip(1).step_by(3));
    }
    if kill_tasks {
        for t in tasks(c, 0).unwrap_or_default() {
            if !keep.contains(&t.tid) && t.tid != 0 {
                let _ = request(c, "pvm_kill", op::KILL, vec![t.tid], vec![]);
            }
        }
    }
    let mut ints = vec![index, i32::from(kill_tasks)];
    ints.extend(keep);
    let _ = request(c, "pvm_delinfo", op::RESETINFO, ints, vec![class]);
}

pub(super) fn setenv(_: &mut Console, av: &[String]) {
    match av.len() {
        1 => {
            for (k, v) in std::env::vars_os() {
                println!("{}={}", k.to_string_lossy(), v.to_string_lossy());
            }
        }
        2 => {
            if let Some(v) = std::env::var_os(&av[1]) {
                println!("{}", v.to_string_lossy());
            }
        }
        _ => std::env::set_var(&av[1], av[2..].join(" ")),
    }
}

pub(super) fn setopt(c: &mut Console, av: &[String]) {
    let Some(k) = option_number(&av[1]) else {
        println!("PVM Option \"{}\" Unknown.", av[1]);
        return;
    };
    let value = atoi(&av[2]);
    let old = std::mem::replace(&mut c.opts[k], value);
    match k {
        TRACE_BUFFER => c.trace.buffer = value,
        TRACE_OPTIONS => c.trace.option = value,
        _ => {}
    }
    apply_options(c);
    println!("{} Changed from {old} to {value}", av[1]);
}

pub(super) fn sig(c: &mut Console, av: &[String]) {
    let signum = atoi(&av[1]);
    for a in &av[2..] {
        let t = tidtoi(a);
        if t <= 0 {
            lib_error(c, "pvm_sendsig", PvmError::BadParam);
            continue;
        }
        let _ = request(c, "pvm_sendsig", op::SENDSIG, vec![t, signum], vec![]);
    }
}

pub(super) fn spawn(c: &mut Console, av: &[String]) {
    let mut av = av;
    let mut flags = NO_SPAWN_PARENT;
    let (mut count, mut place) = (1, String::new());
    // Output: None, or Some(file name, append) with "" for the console.
    let mut output: Option<(String, bool)> = None;
    while av.get(1).is_some_and(|a| a.starts_with('-')) {
        if av.len() < 3 {
            println!("incorrect arg count");
            return;
        }
        let mut o = &av[1][1..];
        if let Some(rest) = o.strip_prefix('~') {
            flags |= HOST_COMPL;
            o = rest;
        }
        let first = o.chars().next().unwrap_or('\0');
        if first == '.' || first.is_ascii_lowercase() {
            place = o.to_string();
            flags |= TASK_HOST;
        } else if first == ':' {
            place = o.to_string();
        } else if first.is_ascii_uppercase() {
            place = o.to_string();
            flags |= TASK_ARCH;
        } else if first == '?' {
            flags |= TASK_DEBUG;
        } else if first.is_ascii_digit() {
            count = atoi(o);
        } else if let Some(f) = o.strip_prefix('>') {
            output = Some(match f.strip_prefix('>') {
                Some(f) => (f.to_string(), true),
                None => (f.to_string(), false),
            });
        } else if first == '@' {
            // No trace collector runs: a traced job is an output job.
            output.get_or_insert((String::new(), false));
        } else if let Some(h) = o.strip_prefix("-host=") {
            place = h.to_string();
            flags |= TASK_HOST;
        }
        av = &av[1..];
    }
    let job = match &output {
        Some((file, append)) => {
            let f = if file.is_empty() {
                None
            } else {
                match OpenOptions::new()
                    .create(true)
                    .write(true)
                    .append(*append)
                    .truncate(!*append)
                    .open(file)
                {
                    Ok(f) => Some(f),
                    Err(e) => {
                        eprintln!("{file}: {e}");
                        return;
                    }
                }
            };
            let (number, code) = c.jobs.start(f);
            c.opts[OUTPUT_TID] = c.t.mytid;
            c.opts[OUTPUT_CODE] = code;
            c.opts[OUTPUT_CONTEXT] = c.t.ctx;
            println!("[{number}]");
            Some(number)
        }
        None => {
            c.opts[OUTPUT_TID] = 0;
            None
        }
    };
    let (out_tid, out_code, out_ctx) = match job {
        Some(_) => (
            c.opts[OUTPUT_TID],
            c.opts[OUTPUT_CODE],
            c.opts[OUTPUT_CONTEXT],
        ),
        None => (0, 0, 0),
    };
    c.t.opts.out_tid = out_tid;
    c.t.opts.out_code = out_code;
    c.t.opts.out_ctx = out_ctx;
    let argv: Vec<String> = av[2..].to_vec();
    let r = c.t.spawn(&av[1], &argv, flags, &place, count);
    c.t.opts.out_tid = 0;
    match r {
        Ok(tids) => {
            let started: Vec<i32> = tids.iter().copied().filter(|&t| t > 0).collect();
            if let Some(number) = job {
                c.jobs.started(number, &started);
            }
            println!("{} successful", started.len());
            for &t in &tids {
                if t > 0 {
                    println!("t{t:x}");
                } else {
                    println!("{}", describe(t));
                }
            }
        }
        Err(e) => {
            if let Some(number) = job {
                c.jobs.started(number, &[]);
            }
            lib_error(c, "pvm_spawn", e);
        }
    }
}

pub(super) fn trace(c: &mut Console, av: &[String]) {
    print!("{}", c.trace.command(&av[1..]));
    c.opts[TRACE_BUFFER] = c.trace.buffer;
    c.opts[TRACE_OPTIONS] = c.trace.option;
}

pub(super) fn unalias(c: &mut Console, av: &[String]) {
    for a in &av[1..] {
        c.aliases.remove(a);
    }
}

pub(super) fn unexport(_: &mut Console, av: &[String]) {
    let list = std::env::var("PVM_EXPORT").unwrap_or_default();
    let kept: Vec<&str> = list
        .split(':')
        .filter(|n| !n.is_empty() && !av[1..].iter().any(|a| a == n))
        .collect();
    std::env::set_var("PVM_EXPORT", kept.join(":"));
}

pub(super) fn version(_: &mut Console, _: &[String]) {
    println!("3.4.6");
}
