//! One error type for the whole instrument.
//!
//! The crate may depend only on libc, clap, serde, serde_json and
//! openvia-core, so the `Display`/`Error` impls are written by hand instead of
//! derived with thiserror. Every variant says which stage failed, so a
//! benchmark that stops early tells the user why (a lost datagram, a peer that
//! died, a corrupted byte) instead of printing a bare OS error.

use std::fmt;
use std::io;

/// Everything that can stop a measurement.
#[derive(Debug)]
pub enum BenchError {
    /// A system call failed; `context` names what we were doing.
    Io { context: String, source: io::Error },
    /// The command line asked for something impossible.
    Usage(String),
    /// The transport cannot be used here (not registered, not built, remote only...).
    Unavailable(String),
    /// Nothing arrived within the deadline (unreliable transports, dead peers).
    Timeout(String),
    /// The peer sent something that does not follow the session protocol.
    Protocol(String),
    /// The peer closed the connection.
    PeerClosed(String),
    /// `--verify` found bytes that differ from the expected pattern.
    VerifyFailed { mismatches: u64, detail: String },
    /// The server process could not be started or failed.
    Server(String),
}

impl BenchError {
    /// Wraps an `io::Error` with a short description of the failed step.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }

    /// Shortcut for the most common case: `errno` right after a libc call.
    pub fn last_os(context: impl Into<String>) -> Self {
        Self::io(context, io::Error::last_os_error())
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Io { context, source } => write!(f, "{context}: {source}"),
            BenchError::Usage(msg) => write!(f, "usage: {msg}"),
            BenchError::Unavailable(msg) => write!(f, "transport unavailable: {msg}"),
            BenchError::Timeout(msg) => write!(f, "timeout: {msg}"),
            BenchError::Protocol(msg) => write!(f, "protocol error: {msg}"),
            BenchError::PeerClosed(msg) => write!(f, "peer closed the connection: {msg}"),
            BenchError::VerifyFailed { mismatches, detail } => {
                write!(
                    f,
                    "verification failed: {mismatches} corrupted message part(s); {detail}"
                )
            }
            BenchError::Server(msg) => write!(f, "server: {msg}"),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, BenchError>;
