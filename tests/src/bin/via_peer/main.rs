//! `via_peer`: one end of a multi-process test, in the role named by the
//! first argument; `key=value` arguments tune it. It prints `READY` when it
//! listens for a connection, `PROGRESS n` as a stream advances (so a test
//! can kill it mid-transfer), and `RESULT key=value ...` lines with what it
//! saw. Any check that fails panics: exit status 101, message on stderr.

mod endpoint;
mod many;
mod peer;
mod rdma;
mod setup;
mod sizes;
mod stream;

use endpoint::Opts;

fn die_with_parent() {
    // SAFETY: prctl with an integer argument changes only this process's
    // death signal.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    // The parent may have died before the call above: then we were
    // reparented and must not linger.
    if let Ok(p) = std::env::var(openvia_tests::harness::PARENT_ENV) {
        // SAFETY: getppid has no preconditions.
        let now = unsafe { libc::getppid() };
        if p.parse::<i32>().ok() != Some(now) {
            std::process::exit(3);
        }
    }
}

fn main() {
    die_with_parent();
    let mut argv = std::env::args().skip(1);
    let role = argv.next().unwrap_or_default();
    let opts = Opts::parse(argv);
    match role.as_str() {
        "sizes-server" => sizes::server(&opts),
        "sizes-client" => sizes::client(&opts),
        "many-server" => many::server(&opts),
        "many-client" => many::client(&opts),
        "rdma-server" => rdma::server(&opts),
        "rdma-client" => rdma::client(&opts),
        "prot-server" => rdma::prot_server(&opts),
        "prot-client" => rdma::prot_client(&opts),
        "stream-send" => stream::sender(&opts),
        "stream-recv" => stream::receiver(&opts),
        "peer" => peer::peer(&opts),
        "connect-once" => setup::connect_once(&opts),
        "accept-once" => setup::accept_once(&opts),
        "abandon-client" => setup::abandon_client(&opts),
        "abandon-server" => setup::abandon_server(&opts),
        _ => {
            eprintln!("usage: via_peer <role> [key=value ...]; unknown role `{role}`");
            std::process::exit(2);
        }
    }
}
