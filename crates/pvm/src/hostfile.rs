//! PVM's hostfile: one host per line with `key=value` options, `#`
//! comments, `*` lines setting defaults for the lines after them, and `&`
//! marking hosts that are only described (started later by `add`).
//!
//! Options understood: `lo=` login, `so=` (kept, unused), `dx=` daemon
//! path, `ep=` executable path (colon-separated), `sp=` speed, `wd=`
//! working directory, `ip=` address to reach the host at. `bx=` (debugger)
//! and `id=` are accepted and ignored.

use std::collections::BTreeMap;

/// One host and its options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostEntry {
    pub name: String,
    /// `&host`: not started with the virtual machine.
    pub delayed: bool,
    pub opts: HostOptions,
}

/// The options a line (or `*` line) may set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostOptions {
    pub login: Option<String>,
    pub daemon: Option<String>,
    pub exec_path: Option<Vec<String>>,
    pub speed: Option<i32>,
    pub workdir: Option<String>,
    pub ip: Option<String>,
}

/// A hostfile that does not parse: the line and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hostfile line {line}: {why}")]
pub struct HostfileError {
    pub line: usize,
    pub why: String,
}

fn apply(opts: &mut HostOptions, word: &str, line: usize) -> Result<(), HostfileError> {
    let err = |why: String| HostfileError { line, why };
    let (k, v) = word
        .split_once('=')
        .ok_or_else(|| err(format!("option without '=': {word}")))?;
    let v = v.to_string();
    match k {
        "lo" => opts.login = Some(v),
        "dx" => opts.daemon = Some(v),
        "ep" => opts.exec_path = Some(v.split(':').map(str::to_string).collect()),
        "sp" => {
            opts.speed = Some(
                v.parse()
                    .map_err(|_| err(format!("speed is not a number: {v}")))?,
            )
        }
        "wd" => opts.workdir = Some(v),
        "ip" => opts.ip = Some(v),
        "so" | "bx" | "id" => {}
        _ => return Err(err(format!("unknown option {k}"))),
    }
    Ok(())
}

/// Parses a hostfile's text.
pub fn parse(text: &str) -> Result<Vec<HostEntry>, HostfileError> {
    let mut defaults = HostOptions::default();
    let mut out: Vec<HostEntry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        let mut words = content.split_whitespace();
        let Some(first) = words.next() else { continue };
        if first == "*" {
            for w in words {
                apply(&mut defaults, w, line)?;
            }
            continue;
        }
        let (delayed, name) = match first.strip_prefix('&') {
            Some(n) => (true, n),
            None => (false, first),
        };
        if name.is_empty() || name.contains('=') {
            return Err(HostfileError {
                line,
                why: format!("expected a host name, got {first}"),
            });
        }
        let mut opts = defaults.clone();
        for w in words {
            apply(&mut opts, w, line)?;
        }
        out.push(HostEntry {
            name: name.to_string(),
            delayed,
            opts,
        });
    }
    Ok(out)
}

/// Hosts by name, for `add` of a host the file described with `&`.
pub fn by_name(entries: &[HostEntry]) -> BTreeMap<String, HostEntry> {
    entries
        .iter()
        .map(|e| (e.name.clone(), e.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pvm_hostfile_with_defaults_and_delayed_hosts() {
        let text = "# my machine\n\
                    alpha\n\
                    * ep=/opt/bin:/usr/bin dx=/opt/pvmd\n\
                    beta ip=10.0.0.2 sp=2000   # fast one\n\
                    &gamma lo=bob wd=/tmp\n";
        let h = parse(text).unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h[0].name, "alpha");
        assert_eq!(h[0].opts, HostOptions::default());
        assert_eq!(h[1].opts.ip.as_deref(), Some("10.0.0.2"));
        assert_eq!(h[1].opts.speed, Some(2000));
        assert_eq!(h[1].opts.daemon.as_deref(), Some("/opt/pvmd"));
        assert_eq!(
            h[1].opts.exec_path,
            Some(vec!["/opt/bin".to_string(), "/usr/bin".to_string()])
        );
        assert!(h[2].delayed && !h[1].delayed);
        assert_eq!(h[2].opts.login.as_deref(), Some("bob"));
        assert_eq!(h[2].opts.daemon.as_deref(), Some("/opt/pvmd"));
    }

    #[test]
    fn bad_lines_name_their_line() {
        assert_eq!(parse("a\nb xx=1\n").unwrap_err().line, 2);
        assert_eq!(parse("a sp=fast\n").unwrap_err().line, 1);
        assert_eq!(parse("a noequals\n").unwrap_err().line, 1);
        assert!(parse("&\n").is_err());
    }
}
