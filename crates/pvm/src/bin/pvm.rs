//! The `pvm` console: reads commands from stdin (add, delete, conf, ps,
//! spawn, kill, halt, quit, help) and runs them as a PVM task. `spawn ->`
//! collects the children's output and prints it as `[n:tid] line`.

use std::io::{self, BufRead, Write};

use openvia_pvm::codec;
use openvia_pvm::frame::{op, Args};
use openvia_pvm::task::{Task, Wait};

const OUTPUT_TAG: i32 = 0x7fff_0001;

fn main() {
    let mut t = match Task::enroll() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("pvm: can't enroll: {e}");
            std::process::exit(1);
        }
    };
    let stdin = io::stdin();
    let interactive = unsafe_isatty();
    let mut job = 0;
    loop {
        print!("pvm> ");
        let _ = io::stdout().flush();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).unwrap_or(0) == 0 {
            println!();
            break;
        }
        if !interactive {
            println!("{}", line.trim_end());
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(&cmd) = words.first() else { continue };
        match cmd {
            "quit" => break,
            "halt" => {
                let _ = t.call(op::HALT, Args::default());
                return;
            }
            "conf" => conf(&mut t),
            "ps" => ps(&mut t),
            "kill" => {
                for w in &words[1..] {
                    if let Ok(tid) = i32::from_str_radix(w.trim_start_matches('t'), 16) {
                        if let Err(e) = t.simple(op::KILL, vec![tid], vec![]) {
                            println!("kill {w}: {e}");
                        }
                    }
                }
            }
            "add" | "delete" => {
                let opc = if cmd == "add" {
                    op::ADDHOSTS
                } else {
                    op::DELHOSTS
                };
                let hosts: Vec<String> = words[1..].iter().map(|s| s.to_string()).collect();
                match t.call(
                    opc,
                    Args {
                        strs: hosts.clone(),
                        ..Args::default()
                    },
                ) {
                    Ok((_, a)) => {
                        for (h, c) in hosts.iter().zip(a.ints) {
                            match c {
                                c if c > 0 => println!("{h}\tadded, pvmd t{c:x}"),
                                0 => println!("{h}\tdeleted"),
                                c => println!("{h}\t{}", openvia_pvm::error::describe(c)),
                            }
                        }
                    }
                    Err(e) => println!("{cmd}: {e}"),
                }
            }
            "spawn" => {
                job += 1;
                spawn(&mut t, &words[1..], job);
            }
            "help" | "?" => println!(
                "add delete conf ps spawn [-count] [-host] [->] prog [args] kill halt quit"
            ),
            other => println!("{other}: unknown command"),
        }
    }
    let _ = t.exit();
    println!("Console: exit handler called");
    println!("pvmd still running.");
}

fn unsafe_isatty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(0) == 1 }
}

fn conf(t: &mut Task) {
    match t.call(op::CONFIG, Args::default()) {
        Ok((n, a)) => {
            println!("{n} host{}, 1 data format", if n == 1 { "" } else { "s" });
            println!("                    HOST     DTID     ARCH   SPEED       DSIG");
            for i in 0..n.max(0) as usize {
                println!(
                    "{:>24} {:>8x} {:>8} {:>7} 0x{:08x}",
                    a.strs[2 * i],
                    a.ints[3 * i],
                    a.strs[2 * i + 1],
                    a.ints[3 * i + 1],
                    a.ints[3 * i + 2]
                );
            }
        }
        Err(e) => println!("conf: {e}"),
    }
}

fn ps(t: &mut Task) {
    match t.call(
        op::TASKS,
        Args {
            ints: vec![0],
            ..Args::default()
        },
    ) {
        Ok((n, a)) => {
            println!("                    HOST      TID   FLAG 0x COMMAND");
            for i in 0..n.max(0) as usize {
                let v = &a.ints[5 * i..5 * i + 5];
                println!("{:>24} {:>8x} {:>9x} {}", t.hostname, v[0], v[3], a.strs[i]);
            }
        }
        Err(e) => println!("ps: {e}"),
    }
}

/// `spawn [-N] [-host] [->] prog [args...]`.
fn spawn(t: &mut Task, words: &[&str], job: i32) {
    let (mut count, mut host, mut collect) = (1, String::new(), false);
    let mut rest = words;
    while let Some(w) = rest.first() {
        if *w == "->" {
            collect = true;
        } else if let Some(n) = w.strip_prefix('-').and_then(|n| n.parse().ok()) {
            count = n;
        } else if let Some(h) = w.strip_prefix('-') {
            if h == ">" {
                collect = true;
            } else {
                host = h.to_string();
            }
        } else {
            break;
        }
        rest = &rest[1..];
    }
    let Some((prog, args)) = rest.split_first() else {
        println!("spawn: no program");
        return;
    };
    let flags = if host.is_empty() { 0 } else { 1 };
    if collect {
        t.opts.out_tid = t.mytid;
        t.opts.out_code = OUTPUT_TAG;
        t.opts.out_ctx = t.ctx;
    }
    let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let r = t.spawn(prog, &argv, flags, &host, count);
    t.opts.out_tid = 0;
    match r {
        Ok(tids) => {
            if collect {
                println!("[{job}]");
            }
            let ok = tids.iter().filter(|&&x| x > 0).count();
            println!("{ok} successful");
            for x in &tids {
                if *x > 0 {
                    println!("t{x:x}");
                } else {
                    println!("{}", openvia_pvm::error::describe(*x));
                }
            }
            if collect {
                collect_output(t, job, tids.iter().filter(|&&x| x > 0).count());
            }
        }
        Err(e) => println!("spawn: {e}"),
    }
}

/// Prints children's output until every one has ended it.
fn collect_output(t: &mut Task, job: i32, mut open: usize) {
    let mut partial: std::collections::HashMap<i32, String> = Default::default();
    while open > 0 {
        let id = match t.recv(-1, OUTPUT_TAG, Wait::Forever) {
            Ok(id) => id,
            Err(_) => return,
        };
        let Ok(b) = t.bufs.get(id) else { return };
        let (enc, body) = (b.enc, b.data.to_vec());
        let mut pos = 0;
        let (Ok(tid), Ok(len)) = (
            codec::unpack_i32(enc, &body, &mut pos),
            codec::unpack_i32(enc, &body, &mut pos),
        ) else {
            continue;
        };
        let p = partial.entry(tid).or_default();
        if len <= 0 {
            if !p.is_empty() {
                println!("[{job}:t{tid:x}] {p}");
            }
            println!("[{job}:t{tid:x}] EOF");
            open -= 1;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        if codec::unpack(
            enc,
            codec::Elem::Byte,
            &body,
            &mut pos,
            len as usize,
            1,
            &mut data,
        )
        .is_err()
        {
            continue;
        }
        p.push_str(&String::from_utf8_lossy(&data));
        while let Some(i) = p.find('\n') {
            let line: String = p.drain(..=i).collect();
            println!("[{job}:t{tid:x}] {}", line.trim_end_matches('\n'));
        }
    }
}
