//! `viabench serve`: the passive end of every test.
//!
//! It listens, announces `READY <address>` (on the readiness pipe when the
//! client started it, on stdout otherwise), then for each client runs the
//! requests of the session protocol until `Bye` or the client disappears.
//! Errors of one client are reported and the server goes on to the next,
//! except with `--once`, where the client's fate is the server's.

use crate::cli::ServeArgs;
use crate::driver_bandwidth::{self, BandwidthParams};
use crate::driver_latency;
use crate::error::{BenchError, Result};
use crate::pinning::pin_current_thread;
use crate::session::{recv_control, send_control, RefusalCode, Reply, Request, CONTROL_LEN};
use crate::transports::{self, BindScope, Endpoint, EndpointOptions, ListenOptions};
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Per-message deadline for transports that can lose data (UDP).
pub const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a server waits for a silent client's next request before
/// deciding the client is gone (only transports without EOF need this).
const IDLE_LIMIT: Duration = Duration::from_secs(60);

pub fn run(args: &ServeArgs) -> Result<()> {
    let transport = transports::find(&args.transport)?;
    transport.available().map_err(BenchError::Unavailable)?;
    if let Some(cpu) = args.cpu {
        pin_current_thread(cpu)?;
    }
    let endpoint = EndpointOptions {
        mode: args.mode.unwrap_or_else(|| transport.default_mode()),
        max_message: args.max_size,
        max_window: args.max_window,
        timeout: ENDPOINT_TIMEOUT,
    };
    let scope = if args.local {
        BindScope::Loopback
    } else {
        BindScope::Any
    };
    let mut listener = transport.listen(&ListenOptions {
        endpoint: endpoint.clone(),
        scope,
        port: args.port,
    })?;
    announce_ready(args.ready_fd, &listener.address())?;
    loop {
        let outcome = listener
            .accept()
            .and_then(|mut ep| serve_client(ep.as_mut(), &endpoint));
        match outcome {
            Ok(()) if args.once => return Ok(()),
            Err(e) if args.once => return Err(e),
            Ok(()) => {}
            Err(e) => eprintln!("viabench serve: client failed: {e}"),
        }
    }
}

fn announce_ready(ready_fd: Option<i32>, address: &str) -> Result<()> {
    let line = format!("READY {address}\n");
    match ready_fd {
        Some(fd) => {
            // SAFETY: the parent passed this descriptor to us for this one
            // use; owning it makes sure it is closed after the line is written.
            let file = unsafe { OwnedFd::from_raw_fd(fd) };
            let mut file = std::fs::File::from(file);
            file.write_all(line.as_bytes())
                .map_err(|e| BenchError::io("writing READY", e))
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(line.as_bytes())
                .and_then(|_| out.flush())
                .map_err(|e| BenchError::io("writing READY", e))
        }
    }
}

/// Runs one client's requests until it says `Bye` or goes away.
fn serve_client(ep: &mut dyn Endpoint, limits: &EndpointOptions) -> Result<()> {
    // Size of the last latency test's pings on an endpoint that loses
    // messages: its client repeats the last ping if the echo was lost.
    let mut last_pings = None;
    loop {
        let request = match next_request(ep, last_pings) {
            Ok(req) => req,
            // A client that closes without Bye has still finished.
            Err(BenchError::PeerClosed(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        match request {
            Request::Bye => return Ok(()),
            Request::Latency { size, rounds } => {
                let Some(size) = admit(ep, size, 1, limits)? else {
                    continue;
                };
                driver_latency::respond(ep, size, rounds)?;
                last_pings = ep.loses_messages().then_some(size);
            }
            Request::Bandwidth {
                size,
                warmup,
                count,
                window,
                verify,
            } => {
                let Some(size) = admit(ep, size, window, limits)? else {
                    continue;
                };
                let params = BandwidthParams {
                    size,
                    messages: count,
                    warmup,
                    window,
                    verify,
                };
                driver_bandwidth::respond(ep, &params)?;
            }
        }
    }
}

/// Waits for the next request, riding out receive timeouts of lossy
/// transports until the client has been silent for [`IDLE_LIMIT`]. With
/// `last_pings` (a latency test just ended on an endpoint that loses
/// messages), a message of that size that is no request is the client
/// repeating its last ping because the echo was lost: it is echoed again.
fn next_request(ep: &mut dyn Endpoint, last_pings: Option<usize>) -> Result<Request> {
    let mut since = Instant::now();
    let mut buf = vec![0u8; last_pings.unwrap_or(0).max(CONTROL_LEN)];
    loop {
        let received = match last_pings {
            None => recv_control(ep).map(Some),
            Some(size) => {
                ep.recv(&mut buf)
                    .and_then(|n| match <[u8; CONTROL_LEN]>::try_from(&buf[..n]) {
                        Ok(b) if Request::decode(&b).is_ok() => Ok(Some(b)),
                        _ if n == size => ep.send(&buf[..n]).map(|()| None),
                        _ => Err(BenchError::Protocol(format!(
                            "message of {n} bytes is neither a request nor a ping"
                        ))),
                    })
            }
        };
        match received {
            Ok(Some(b)) => return Request::decode(&b),
            Ok(None) => since = Instant::now(),
            Err(BenchError::Timeout(_)) if since.elapsed() < IDLE_LIMIT => continue,
            Err(BenchError::Timeout(_)) => {
                return Err(BenchError::Timeout("client silent; dropping it".into()))
            }
            Err(e) => return Err(e),
        }
    }
}

/// Refuses a test beyond this server's limits; `Some(size)` when admitted.
fn admit(
    ep: &mut dyn Endpoint,
    size: u64,
    window: u32,
    limits: &EndpointOptions,
) -> Result<Option<usize>> {
    let refusal = if size == 0 || size > limits.max_message as u64 {
        Some(RefusalCode::SizeTooLarge)
    } else if window > limits.max_window {
        Some(RefusalCode::WindowTooLarge)
    } else {
        None
    };
    match refusal {
        Some(code) => {
            send_control(ep, &Reply::Refused(code).encode())?;
            Ok(None)
        }
        None => Ok(Some(size as usize)),
    }
}
