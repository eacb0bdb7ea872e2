//! The console's trace mask. openvia runs no trace collector: the mask is
//! accepted, kept and shown exactly as stock shows it, and `spawn -@`
//! starts jobs whose events nobody records (docs/pvm.md says so).

/// PVM 3.4.6's trace events, by name, in the order `trace` lists them.
const EVENTS: &[&str] = &[
    "addhosts",
    "addmhf",
    "archcode",
    "barrier",
    "bcast",
    "bufinfo",
    "catchout",
    "config",
    "delete",
    "delhosts",
    "delinfo",
    "delmhf",
    "exit",
    "freebuf",
    "freecontext",
    "gather",
    "getcontext",
    "getfds",
    "getinfo",
    "getinst",
    "getmboxinfo",
    "getminfo",
    "getmwid",
    "getopt",
    "getrbuf",
    "getsbuf",
    "gettid",
    "gettmask",
    "gsize",
    "halt",
    "hostsync",
    "initsend",
    "insert",
    "joingroup",
    "kill",
    "lookup",
    "lvgroup",
    "mcast",
    "mhf_invoke",
    "mkbuf",
    "mstat",
    "mytid",
    "newcontext",
    "notify",
    "nrecv",
    "packf",
    "parent",
    "perror",
    "pkbyte",
    "pkcplx",
    "pkdcplx",
    "pkdouble",
    "pkfloat",
    "pkint",
    "pklong",
    "pkshort",
    "pkstr",
    "pkuint",
    "pkulong",
    "pkushort",
    "precv",
    "probe",
    "psend",
    "pstat",
    "putinfo",
    "recv",
    "recvf",
    "reduce",
    "reg_hoster",
    "reg_rm",
    "reg_tasker",
    "reg_tracer",
    "scatter",
    "send",
    "sendsig",
    "setcontext",
    "setminfo",
    "setmwid",
    "setopt",
    "setrbuf",
    "setsbuf",
    "settmask",
    "siblings",
    "spawn",
    "start_pvmd",
    "tasks",
    "tickle",
    "tidtohost",
    "trecv",
    "unpackf",
    "upkbyte",
    "upkcplx",
    "upkdcplx",
    "upkdouble",
    "upkfloat",
    "upkint",
    "upklong",
    "upkshort",
    "upkstr",
    "upkuint",
    "upkulong",
    "upkushort",
    "user_defined",
    "version",
];

/// The events of `trace xpvm` (what XPVM displays), the console's default.
const XPVM: &[&str] = &[
    "barrier",
    "bcast",
    "joingroup",
    "lvgroup",
    "mytid",
    "parent",
    "siblings",
    "spawn",
    "sendsig",
    "kill",
    "exit",
    "mcast",
    "send",
    "recv",
    "recvf",
    "nrecv",
    "psend",
    "precv",
    "trecv",
    "probe",
    "addmhf",
    "delmhf",
    "mhf_invoke",
    "user_defined",
];

/// PvmTraceFull, PvmTraceTime, PvmTraceCount.
const OPTS: &[(&str, i32)] = &[("full", 1), ("time", 2), ("count", 3)];

/// The mask, trace buffer size and trace option of the console's jobs.
pub struct Trace {
    on: Vec<bool>,
    pub buffer: i32,
    pub option: i32,
}

impl Default for Trace {
    fn default() -> Trace {
        let mut t = Trace {
            on: vec![false; EVENTS.len()],
            buffer: 0,
            option: 1,
        };
        t.xpvm();
        t
    }
}

impl Trace {
    fn xpvm(&mut self) {
        for (i, e) in EVENTS.iter().enumerate() {
            self.on[i] = XPVM.contains(e);
        }
    }

    /// `trace [args]`: what it prints.
    pub fn command(&mut self, args: &[String]) -> String {
        if args.is_empty() {
            return self.show();
        }
        let mut out = String::new();
        let mut set = true;
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            match a {
                "+" => set = true,
                "-" => set = false,
                "*" => self.on.iter_mut().for_each(|b| *b = set),
                "buf" => match args.get(i + 1) {
                    Some(n) => {
                        self.buffer = atoi(n);
                        i += 1;
                    }
                    None => out += &format!("\nTrace Buffering set to {} bytes\n\n", self.buffer),
                },
                "opt" => match args.get(i + 1) {
                    Some(o) => {
                        match OPTS.iter().find(|(n, _)| n == o) {
                            Some(&(_, v)) => self.option = v,
                            None => out += &format!("\nError:  Unknown Trace Option \"{o}\"\n\n"),
                        }
                        i += 1;
                    }
                    None => {
                        let name = OPTS
                            .iter()
                            .find(|(_, v)| *v == self.option)
                            .map(|(n, _)| n.to_string())
                            .unwrap_or_else(|| format!("<Unknown={}>", self.option));
                        out += &format!("\nTrace Options set to \"{name}\"\n\n");
                    }
                },
                "xpvm" => self.xpvm(),
                name => {
                    let bare = name.strip_prefix("pvm_").unwrap_or(name);
                    match EVENTS.iter().position(|e| *e == bare) {
                        Some(k) => self.on[k] = set,
                        None => out += &format!("no such event \"{name}\"\n"),
                    }
                }
            }
            i += 1;
        }
        out
    }

    /// The mask in four columns, down then across, `*` marking events on.
    fn show(&self) -> String {
        let rows = EVENTS.len().div_ceil(4);
        let mut out = String::new();
        for r in 0..rows {
            let cells: Vec<String> = (0..4)
                .filter_map(|c| {
                    let k = c * rows + r;
                    EVENTS.get(k).map(|e| {
                        let mark = if self.on[k] { " * " } else { "   " };
                        format!("{mark}{e:<15}")
                    })
                })
                .collect();
            out += &cells.join(" ");
            out.push('\n');
        }
        out
    }
}

/// C's atoi: leading digits (with a sign), 0 if none.
pub fn atoi(s: &str) -> i32 {
    let s = s.trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| {
            (n * 10 + i64::from(d - b'0')).min(i64::from(i32::MAX) + 1)
        });
    (if neg { -n } else { n }) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_starts_as_xpvm_and_changes_by_name() {
        let mut t = Trace::default();
        let shown = t.command(&[]);
        assert_eq!(shown.lines().count(), 26);
        assert_eq!(
            shown.lines().nth(1).unwrap(),
            " * addmhf             gettmask           pkint              setrbuf        "
        );
        assert_eq!(t.command(&["-".into(), "*".into()]), "");
        assert_eq!(
            t.command(&["pvm_send".into(), "bogus".into()]),
            "no such event \"bogus\"\n"
        );
        assert_eq!(t.command(&[]).matches(" * ").count(), 1);
        assert_eq!(
            t.command(&["opt".into()]),
            "\nTrace Options set to \"full\"\n\n"
        );
    }

    #[test]
    fn atoi_reads_like_c() {
        assert_eq!(atoi("12abc"), 12);
        assert_eq!(atoi("-3"), -3);
        assert_eq!(atoi("x"), 0);
    }
}
