//! The `pvm` console of PVM 3.4.6, as its users know it: the same 27
//! commands with the same syntax and output, aliases, `$HOME/.pvmrc`, and
//! jobs whose output is printed as it arrives while the console waits for
//! the next line. It is an ordinary task; once its pvmd is gone every call
//! fails and the console exits (status 1) instead of waiting.
//!
//! `words` splits lines as stock's acav does, this file runs the loop and
//! dispatches, `cmds` holds the commands, `vm` their requests to the pvmd, `jobs` the output of spawned
//! jobs, `trace` the trace mask, `help` the help text.

mod cmds;
mod help;
mod jobs;
mod trace;
mod vm;
mod words;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::task::Task;

/// The console's prompt.
pub const PROMPT: &str = "pvm> ";

/// A command: its name, the fewest and most words it takes (0: any), and
/// what runs it.
struct Command {
    name: &'static str,
    min: usize,
    max: usize,
    run: fn(&mut Console, &[String]),
}

/// The table, in the order `help` lists it (stock's).
const COMMANDS: &[Command] = &[
    Command {
        name: "add",
        min: 2,
        max: 0,
        run: cmds::add,
    },
    Command {
        name: "alias",
        min: 1,
        max: 0,
        run: cmds::alias,
    },
    Command {
        name: "conf",
        min: 1,
        max: 1,
        run: cmds::conf,
    },
    Command {
        name: "delete",
        min: 2,
        max: 0,
        run: cmds::delete,
    },
    Command {
        name: "echo",
        min: 1,
        max: 0,
        run: cmds::echo,
    },
    Command {
        name: "export",
        min: 1,
        max: 0,
        run: cmds::export,
    },
    Command {
        name: "getopt",
        min: 1,
        max: 2,
        run: cmds::getopt,
    },
    Command {
        name: "halt",
        min: 1,
        max: 1,
        run: cmds::halt,
    },
    Command {
        name: "help",
        min: 1,
        max: 2,
        run: cmds::help,
    },
    Command {
        name: "id",
        min: 1,
        max: 1,
        run: cmds::id,
    },
    Command {
        name: "jobs",
        min: 1,
        max: 2,
        run: cmds::jobs,
    },
    Command {
        name: "kill",
        min: 2,
        max: 0,
        run: cmds::kill,
    },
    Command {
        name: "mstat",
        min: 2,
        max: 0,
        run: cmds::mstat,
    },
    Command {
        name: "names",
        min: 1,
        max: 2,
        run: cmds::names,
    },
    Command {
        name: "ps",
        min: 1,
        max: 2,
        run: cmds::ps,
    },
    Command {
        name: "pstat",
        min: 2,
        max: 0,
        run: cmds::pstat,
    },
    Command {
        name: "put",
        min: 4,
        max: 4,
        run: cmds::put,
    },
    Command {
        name: "quit",
        min: 1,
        max: 1,
        run: cmds::quit,
    },
    Command {
        name: "reset",
        min: 1,
        max: 4,
        run: cmds::reset,
    },
    Command {
        name: "setenv",
        min: 1,
        max: 0,
        run: cmds::setenv,
    },
    Command {
        name: "setopt",
        min: 3,
        max: 3,
        run: cmds::setopt,
    },
    Command {
        name: "sig",
        min: 3,
        max: 0,
        run: cmds::sig,
    },
    Command {
        name: "spawn",
        min: 2,
        max: 0,
        run: cmds::spawn,
    },
    Command {
        name: "trace",
        min: 1,
        max: 0,
        run: cmds::trace,
    },
    Command {
        name: "unalias",
        min: 2,
        max: 0,
        run: cmds::unalias,
    },
    Command {
        name: "unexport",
        min: 1,
        max: 0,
        run: cmds::unexport,
    },
    Command {
        name: "version",
        min: 1,
        max: 1,
        run: cmds::version,
    },
];

/// The console's state.
pub struct Console {
    t: Task,
    aliases: BTreeMap<String, Vec<String>>,
    jobs: jobs::Jobs,
    trace: trace::Trace,
    /// PVM options by number (1..=25) as the console task holds them.
    opts: [i32; 26],
}

impl Console {
    /// A console on an enrolled task, with stock's console settings
    /// (PvmDontRoute, PvmNoReset, the xpvm trace mask).
    pub fn new(t: Task) -> Console {
        let mut c = Console {
            t,
            aliases: BTreeMap::new(),
            jobs: jobs::Jobs::default(),
            trace: trace::Trace::default(),
            opts: cmds::initial_options(),
        };
        cmds::apply_options(&mut c);
        cmds::mark_no_reset(&mut c);
        cmds::watch_new_hosts(&mut c);
        c
    }

    /// Runs `line` as stock's docmd: aliases resolved, then the command.
    pub fn docmd(&mut self, line: &str) {
        let mut av = match words::split(line) {
            Ok(v) => v,
            Err(q) => {
                println!("unmatched {q}");
                return;
            }
        };
        if av.is_empty() {
            return;
        }
        // Aliases, each at most once (a loop is an error).
        let mut used = Vec::new();
        while let Some(exp) = self.aliases.get(&av[0]).cloned() {
            if used.contains(&av[0]) {
                println!("alias loop");
                return;
            }
            used.push(av[0].clone());
            let own = exp.first() == Some(&av[0]);
            av.splice(0..1, exp);
            if own {
                break;
            }
        }
        let name = av[0].clone();
        match COMMANDS.iter().find(|c| c.name == name) {
            Some(c) if av.len() >= c.min && (c.max == 0 || av.len() <= c.max) => (c.run)(self, &av),
            Some(_) => println!("{name}: wrong #args"),
            None => println!("{name}: not found"),
        }
    }

    /// Commands from `$HOME/.pvmrc`, before the first prompt, each shown
    /// as it runs (stock echoes a command line that ends in a newline).
    pub fn read_pvmrc(&mut self) {
        let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
        if let Ok(text) = std::fs::read_to_string(format!("{home}/.pvmrc")) {
            for line in text.split_inclusive('\n') {
                let cmd = line.strip_suffix('\n');
                if let Some(c) = cmd {
                    println!("{c}");
                }
                self.docmd(cmd.unwrap_or(line));
            }
        }
    }

    /// Prints job output that has arrived; exits (status 1) if the pvmd
    /// is gone, as stock's console does.
    fn check_messages(&mut self) {
        let show = self.opts[cmds::SHOW_TIDS] != 0;
        let r = self
            .t
            .check_pvmd()
            .and_then(|_| cmds::new_hosts(self))
            .and_then(|_| self.jobs.drain(&mut self.t, show));
        if let Err(e) = r {
            let _ = io::stdout().flush();
            eprintln!("libpvm [t{:x}]: pvm_nrecv(): {e}", self.t.mytid);
            std::process::exit(1);
        }
    }

    /// The loop: prompt, then job output while waiting for a line. Every
    /// line is echoed after the prompt, as Debian's stock console (built
    /// without readline) does, on a terminal too; end of input quits.
    pub fn run(&mut self) -> ! {
        let mut input = words::LineReader::default();
        loop {
            self.check_messages();
            print!("{PROMPT}");
            let _ = io::stdout().flush();
            let line = loop {
                match input.next_line(Duration::from_millis(100)) {
                    Ok(Some(l)) => break Some(l),
                    Ok(None) => {
                        self.check_messages();
                        let _ = io::stdout().flush();
                    }
                    Err(_) => break None,
                }
            };
            let Some(line) = line else {
                println!("quit");
                cmds::quit(self, &[]);
                continue;
            };
            println!("{line}");
            self.docmd(&line);
            let _ = io::stdout().flush();
        }
    }

    /// Sets PVM option `what` (pvm3.h's number) of the console task.
    pub fn set_option(&mut self, what: usize, value: i32) {
        if let Some(o) = self.opts.get_mut(what) {
            *o = value;
            cmds::apply_options(self);
        }
    }
}

/// Standard input's descriptor (for the line reader).
fn stdin_fd() -> i32 {
    io::stdin().as_raw_fd()
}
