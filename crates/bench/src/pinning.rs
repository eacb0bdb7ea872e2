//! CPU pinning of the two ends (sched_setaffinity).
//!
//! On a 2-vCPU machine an unpinned ping-pong measures the scheduler as much
//! as the transport: the ends migrate, share a CPU, or wake on the wrong
//! one. viabench therefore pins the client to CPU 0 and the server to CPU 1
//! unless told otherwise, and every report says which pinning was used.

use crate::cli::PinRequest;
use crate::error::{BenchError, Result};

/// CPUs this process may run on.
pub fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: passes the set's exact size; the kernel writes within it.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(BenchError::last_os("sched_getaffinity"));
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET only reads the set, and i < CPU_SETSIZE.
    Ok((0..max)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect())
}

/// Binds the calling thread (the whole process, for single-threaded viabench) to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return Err(BenchError::Usage(format!("CPU {cpu} is out of range")));
    }
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: writes bit `cpu`, checked above to be below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: passes the set's exact size; the kernel only reads it.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(BenchError::last_os(format!("sched_setaffinity(CPU {cpu})")));
    }
    Ok(())
}

/// Where each end runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinPlan {
    pub client: Option<usize>,
    pub server: Option<usize>,
    /// The server runs on another host (its pinning is its own business).
    pub remote_server: bool,
}

impl PinPlan {
    /// The `pin` field of reports: `client:0,server:1`, `none`, ...
    pub fn describe(&self) -> String {
        let end = |cpu: Option<usize>| cpu.map_or("any".to_string(), |c| c.to_string());
        if self.remote_server {
            return format!("client:{},server:remote", end(self.client));
        }
        if self.client.is_none() && self.server.is_none() {
            return "none".into();
        }
        format!("client:{},server:{}", end(self.client), end(self.server))
    }
}

/// Turns `--cpu` (or its absence) into a plan this host can honour. The
/// default (0,1) quietly degrades to the first two allowed CPUs, or to no
/// pinning on a one-CPU host; an explicit request that cannot be met is an error.
pub fn resolve(
    request: Option<PinRequest>,
    remote_server: bool,
    allowed: &[usize],
) -> Result<PinPlan> {
    let plan = |client, server| PinPlan {
        client,
        server: if remote_server { None } else { server },
        remote_server,
    };
    match request {
        Some(PinRequest::None) => Ok(plan(None, None)),
        Some(PinRequest::Cpus { client, server }) => {
            for cpu in [Some(client), (!remote_server).then_some(server)]
                .into_iter()
                .flatten()
            {
                if !allowed.contains(&cpu) {
                    return Err(BenchError::Usage(format!(
                        "--cpu: CPU {cpu} is not available (allowed: {allowed:?}); use --cpu none"
                    )));
                }
            }
            Ok(plan(Some(client), Some(server)))
        }
        None => match allowed {
            [a, b, ..] => Ok(plan(Some(*a), Some(*b))),
            [a] if remote_server => Ok(plan(Some(*a), None)),
            _ => {
                eprintln!("viabench: fewer than 2 CPUs available ({allowed:?}): not pinning");
                Ok(plan(None, None))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_takes_first_two_allowed() {
        let p = resolve(None, false, &[0, 1]).unwrap();
        assert_eq!(p.describe(), "client:0,server:1");
        let p = resolve(None, false, &[2, 5, 7]).unwrap();
        assert_eq!((p.client, p.server), (Some(2), Some(5)));
        assert_eq!(resolve(None, false, &[0]).unwrap().describe(), "none");
    }

    #[test]
    fn explicit_requests() {
        let none = resolve(Some(PinRequest::None), false, &[0, 1]).unwrap();
        assert_eq!(none.describe(), "none");
        let swapped = resolve(
            Some(PinRequest::Cpus {
                client: 1,
                server: 0,
            }),
            false,
            &[0, 1],
        )
        .unwrap();
        assert_eq!(swapped.describe(), "client:1,server:0");
        assert!(resolve(
            Some(PinRequest::Cpus {
                client: 0,
                server: 9
            }),
            false,
            &[0, 1]
        )
        .is_err());
        let remote = resolve(
            Some(PinRequest::Cpus {
                client: 0,
                server: 9,
            }),
            true,
            &[0, 1],
        )
        .unwrap();
        assert_eq!(remote.describe(), "client:0,server:remote");
    }

    #[test]
    fn this_process_has_cpus_and_can_pin_to_one() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        // Pinning inside a test thread affects only that thread.
        let cpu = cpus[0];
        std::thread::spawn(move || pin_current_thread(cpu))
            .join()
            .unwrap()
            .unwrap();
    }
}
