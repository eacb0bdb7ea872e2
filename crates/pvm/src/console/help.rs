//! The console's help: the text of PVM 3.4.6's, so that `help` and
//! `help CMD` read as its users know them. Each line belongs to a topic;
//! the first line of a command's topic is its one-line summary, which the
//! command list shows.

/// (topic, line) in the order stock prints them.
const TEXT: &[(&str, &str)] = &[
    ("add", "add         Add hosts to virtual machine"),
    ("add", "Syntax:  add hostname ..."),
    ("alias", "alias       Define/list command aliases"),
    ("alias", "Syntax:  alias [name command args ...]"),
    ("conf", "conf        List virtual machine configuration"),
    ("conf", "Syntax:  conf"),
    ("conf", "Output fields:"),
    ("conf", "  HOST    host name"),
    ("conf", "  DTID    tid base of pvmd"),
    ("conf", "  ARCH    xhost architecture"),
    ("conf", "  SPEED   host relative speed"),
    ("delete", "delete      Delete hosts from virtual machine"),
    ("delete", "Syntax:  delete hostname ..."),
    ("echo", "echo        Echo arguments"),
    ("echo", "Syntax:  echo [ arg ... ]"),
    (
        "export",
        "export      Add environment variables to spawn export list",
    ),
    ("export", "Syntax:  export [ varname ... ]"),
    (
        "getopt",
        "getopt      Display PVM options for the console task",
    ),
    ("getopt", "Syntax:  getopt [ what ]"),
    ("halt", "halt        Stop pvmds"),
    ("halt", "Syntax:  halt"),
    (
        "help",
        "help        Print helpful information about a command",
    ),
    ("help", "Syntax:  help [ command ]"),
    ("id", "id          Print console task id"),
    ("id", "Syntax:  id"),
    ("jobs", "jobs        Display list of running jobs"),
    ("jobs", "Syntax:  jobs [ options ]"),
    ("jobs", "Options:  -l   give long listing"),
    ("kill", "kill        Terminate tasks"),
    ("kill", "Syntax:  kill [ options ] tid ..."),
    ("kill", "Options:  -c   kill children of tid"),
    ("names", "names       List message mailbox names"),
    ("names", "Syntax:  names [ pattern ]"),
    ("mstat", "mstat       Show status of hosts"),
    ("mstat", "Syntax:  mstat name ..."),
    ("ps", "ps          List tasks"),
    ("ps", "Syntax:  ps [ -axh ]"),
    ("ps", "Options:  -a       all hosts (default is local)"),
    ("ps", "          -hhost   specific host tid"),
    ("ps", "          -nhost   specific host name"),
    ("ps", "          -l       long (show process id)"),
    (
        "ps",
        "          -x       show all tasks (e.g. console and nulls)",
    ),
    ("ps", "Output fields:"),
    ("ps", "  HOST    host name"),
    ("ps", "  TID     task id"),
    ("ps", "  PTID    parent task id"),
    ("ps", "  PID     task process id"),
    ("ps", "  FLAG    status"),
    ("ps", "  COMMAND executable name"),
    ("ps", "FLAG values:"),
    ("ps", "  f   task process is child of pvmd"),
    ("ps", "  c   task connected to pvmd"),
    ("ps", "  a   task waiting authorization"),
    ("ps", "  o   task connection being closed"),
    (
        "ps",
        "  s   task needs too many shared pages, is deadlocked",
    ),
    ("ps", "  H   hoster task"),
    ("ps", "  R   resource manager task"),
    ("ps", "  T   tasker task"),
    ("pstat", "pstat       Show status of tasks"),
    ("pstat", "Syntax:  pstat tid ..."),
    ("put", "put         Add entry to message mailbox"),
    ("put", "Syntax:  put name flags"),
    ("quit", "quit        Exit console"),
    ("quit", "Syntax:  quit"),
    (
        "reset",
        "reset       Kill all tasks, delete leftover mboxes",
    ),
    ("reset", "Syntax:  reset\n"),
    (
        "reset",
        "reset info    Delete orphaned persistent mbox entries",
    ),
    ("reset", "Syntax:  reset info [ class [ index ] ]"),
    ("setenv", "setenv      Display or set environment variables"),
    ("setenv", "Syntax:  setenv [ name [ value ] ]"),
    (
        "setopt",
        "setopt      Set PVM options - for the console task *only*!",
    ),
    ("setopt", "Syntax:  setopt what value"),
    ("sig", "sig         Send signal to task"),
    ("sig", "Syntax:  sig signum task ..."),
    ("spawn", "spawn       Spawn task"),
    ("spawn", "Syntax:  spawn [ options ] file [ arg ... ]"),
    (
        "spawn",
        "Options:  -(count)         number of tasks, default is 1",
    ),
    (
        "spawn",
        "          -(host)          spawn on host, default is any",
    ),
    (
        "spawn",
        "          -(host):(wd)     spawn on host, in directory 'wd'",
    ),
    (
        "spawn",
        "          --host=(IP)      spawn on host with given IP addr",
    ),
    (
        "spawn",
        "          --host=(IP):(wd) spawn on IP, in directory 'wd'",
    ),
    ("spawn", "          -(ARCH)          spawn on hosts of ARCH"),
    (
        "spawn",
        "          -(ARCH):(wd)     spawn on hosts of ARCH, in 'wd'",
    ),
    (
        "spawn",
        "          -:(wd)           spawn in working directory 'wd'",
    ),
    ("spawn", "          -?               enable debugging"),
    (
        "spawn",
        "          ->               redirect job output to console",
    ),
    (
        "spawn",
        "          ->(file)         redirect output of job to file",
    ),
    (
        "spawn",
        "          ->>(file)        append output of job to file",
    ),
    (
        "spawn",
        "          -@               trace job, output to terminal",
    ),
    (
        "spawn",
        "          -@(file)         trace job, output to file",
    ),
    ("trace", "trace       Set/display trace event mask"),
    ("trace", "Syntax:  trace"),
    ("trace", "         trace [+] name ..."),
    ("trace", "         trace - name ..."),
    ("trace", "         trace [+] *"),
    ("trace", "         trace - *"),
    (
        "trace",
        "         trace xpvm (default mask for XPVM display)",
    ),
    ("trace", "         trace buf nbytes"),
    ("trace", "         trace buf"),
    ("trace", "         trace opt < full | time | count >"),
    ("trace", "         trace opt"),
    ("unalias", "unalias     Undefine command alias"),
    ("unalias", "Syntax:  unalias name ..."),
    (
        "unexport",
        "unexport    Remove environment variables from spawn export list",
    ),
    ("unexport", "Syntax:  unexport [ varname ... ]"),
    ("version", "version     Show libpvm version"),
    ("version", "Syntax:  version"),
];

/// What `help [topic]` prints: the topic's lines, and for `help` itself
/// the list of commands (`commands`, in the console's table order).
pub fn help(topic: Option<&str>, commands: &[&str]) -> String {
    let topic = topic.unwrap_or("help");
    let mut out = String::new();
    for (t, line) in TEXT {
        if *t == topic {
            out.push_str(line);
            out.push('\n');
        }
    }
    if topic == "help" {
        out.push_str("Commands are:\n");
        for c in commands {
            if let Some((_, line)) = TEXT.iter().find(|(t, _)| t == c) {
                out.push_str("  ");
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::help;

    #[test]
    fn help_lists_every_command_with_its_summary() {
        let h = help(None, &["add", "version"]);
        assert!(h.starts_with("help        Print helpful information about a command\n"));
        assert!(h.ends_with("Commands are:\n  add         Add hosts to virtual machine\n  version     Show libpvm version\n"));
        assert_eq!(help(Some("nosuch"), &["add"]), "");
        assert_eq!(
            help(Some("id"), &[]),
            "id          Print console task id\nSyntax:  id\n"
        );
    }
}
