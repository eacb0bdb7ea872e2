//! Starting tasks: find the executable the PVM way, fork it with its tid in
//! the environment and its output on a pipe the daemon reads.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::{Daemon, OutputPipe, TaskRec};
use crate::error::PvmError;

/// Environment variables that tell a spawned task who it is.
pub const ENV_TID: &str = "OPENVIA_PVM_TID";
pub const ENV_SOCK: &str = "OPENVIA_PVM_SOCK";

/// One pvm_spawn request.
pub struct SpawnRequest {
    pub parent: i32,
    pub file: String,
    pub argv: Vec<String>,
    pub flags: i32,
    pub where_: String,
    pub count: usize,
    pub env: Vec<(String, String)>,
    pub out_tid: i32,
    pub out_code: i32,
    pub out_ctx: i32,
}

pub const TASK_HOST: i32 = 1;
pub const TASK_ARCH: i32 = 2;
const NO_SPAWN_PARENT: i32 = 64;
/// Between pvmds: more tasks of this spawn run on other hosts, so the
/// sibling list comes later (a bit PVM's flags never use).
pub const SIBLINGS_LATER: i32 = 1 << 30;

impl Daemon {
    fn find_executable(&self, file: &str) -> Option<PathBuf> {
        if file.contains('/') {
            let p = PathBuf::from(file);
            return p.is_file().then_some(p);
        }
        self.cfg
            .exec_path
            .iter()
            .map(|d| d.join(file))
            .find(|p| p.is_file())
    }

    /// Starts `count` tasks here (the host was chosen by the caller); one
    /// tid or error code per task. With `siblings_later` the tasks' sibling
    /// lists are completed by a later D_SIBLINGS.
    pub(super) fn spawn(&mut self, req: SpawnRequest, siblings_later: bool) -> Vec<i32> {
        let fail = |e: PvmError| vec![e.code(); req.count];
        let Some(path) = self.find_executable(&req.file) else {
            return fail(PvmError::NoFile);
        };
        let tids: Vec<i32> = (0..req.count).map(|_| self.new_tid()).collect();
        let ptid = if req.flags & NO_SPAWN_PARENT != 0 {
            0
        } else {
            req.parent
        };
        let mut result = Vec::with_capacity(req.count);
        for &t in &tids {
            match self.start_one(&path, &req, t) {
                Ok((pid, pipe)) => {
                    let slot = self.claim_slot(t, pid);
                    self.tasks.insert(
                        t,
                        TaskRec {
                            ptid,
                            pid,
                            name: req.file.clone(),
                            spawned: true,
                            conn: None,
                            pending: Vec::new(),
                            siblings: tids.clone(),
                            slot,
                            siblings_pending: siblings_later,
                            hello_wait: None,
                        },
                    );
                    self.outputs.insert(
                        pipe.as_raw_fd(),
                        OutputPipe {
                            tid: t,
                            file: pipe,
                            out_tid: req.out_tid,
                            out_code: req.out_code,
                            out_ctx: req.out_ctx,
                        },
                    );
                    self.logln(&format!("spawned t{t:x} pid {pid}: {}", path.display()));
                    result.push(t);
                }
                Err(e) => result.push(e.code()),
            }
        }
        result
    }

    fn start_one(
        &self,
        path: &PathBuf,
        req: &SpawnRequest,
        t: i32,
    ) -> Result<(i32, std::fs::File), PvmError> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(PvmError::OutOfRes);
        }
        // SAFETY: both descriptors are fresh and owned only here.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let wr2 = wr.try_clone().map_err(|_| PvmError::OutOfRes)?;
        let mut cmd = Command::new(path);
        cmd.args(&req.argv)
            .env(ENV_TID, t.to_string())
            .env(ENV_SOCK, &self.cfg.socket)
            .stdin(Stdio::null())
            .stdout(Stdio::from(wr))
            .stderr(Stdio::from(wr2));
        for (k, v) in &req.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => PvmError::NoFile,
            std::io::ErrorKind::PermissionDenied => PvmError::Denied,
            _ => PvmError::OutOfRes,
        })?;
        drop(cmd);
        Ok((child.id() as i32, std::fs::File::from(rd)))
    }
}
