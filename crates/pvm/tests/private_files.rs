//! The files a pvmd makes for its user are that user's alone: the log (it
//! holds what tasks print) and the socket (it hands out the pool) are mode
//! 0600, even when an older log was left with a wider mode.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use openvia_pvm::frame::op;
use openvia_pvm::task::Task;

fn mode(p: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o777
}

#[test]
fn pvmd_log_and_socket_are_0600() {
    let dir = std::env::temp_dir().join(format!("openvia-pvm-test-{}-private", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("pvmd.sock");
    let log = dir.join("pvmd.sock.log");
    std::env::set_var("OPENVIA_PVM_SOCK", &sock);
    std::env::set_var("OPENVIA_PVMD", env!("CARGO_BIN_EXE_pvmd"));
    // A log from an older pvmd, readable by everyone.
    std::fs::write(&log, b"old line\n").unwrap();
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();

    let mut t = Task::enroll().unwrap();
    let (log_mode, sock_mode) = (mode(&log), mode(&sock));
    let _ = t.simple(op::HALT, vec![], vec![]);
    assert_eq!(log_mode, 0o600, "log mode {log_mode:o}");
    assert_eq!(sock_mode, 0o600, "socket mode {sock_mode:o}");
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .starts_with("old line\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
