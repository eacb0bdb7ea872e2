//! Helper processes in a namespace, on top of the shared child harness of
//! `openvia-tests`: launched with `ip netns exec` (which execs, so the
//! child's pid is the helper's own and SIGKILL reaches it).

use std::process::Command;
use std::time::Duration;

pub use openvia_tests::harness::{Finished, Peer, PARENT_ENV};

/// Runs `exe args` inside namespace `ns`, killed if still running after
/// `timeout`.
pub fn spawn_in(
    ns: &str,
    name: &str,
    exe: &str,
    args: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Peer {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, exe]).args(args);
    Peer::start(name, cmd, env, timeout)
}
