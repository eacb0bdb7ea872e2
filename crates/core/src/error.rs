//! Typed errors of the core. Each maps to exactly one VIPL return code, so
//! the C shell translates without guessing.

use thiserror::Error;

/// What went wrong in a core call.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ViaError {
    /// A handle, pointer, length or attribute the caller passed is not valid.
    #[error("invalid parameter: {0}")]
    InvalidParameter(&'static str),
    /// Out of a resource (VIs, CQ entries, memory, descriptors).
    #[error("out of resources: {0}")]
    Resource(&'static str),
    /// A wait ran out of time.
    #[error("timed out")]
    Timeout,
    /// The peer refused the connection.
    #[error("connection rejected")]
    Rejected,
    /// The two ends asked for different reliability levels, or an unsupported one.
    #[error("invalid reliability level")]
    InvalidReliability,
    /// MaxTransferSize larger than the NIC allows.
    #[error("invalid maximum transfer size")]
    InvalidMtu,
    /// The protection tag does not belong to this NIC or does not match.
    #[error("invalid protection tag")]
    InvalidPtag,
    /// RDMA read asked of a VI or reliability level that cannot do it.
    #[error("RDMA read not supported here")]
    InvalidRdmaRead,
    /// The descriptor is malformed.
    #[error("descriptor error: {0}")]
    Descriptor(&'static str),
    /// The object is not in a state that allows the call.
    #[error("invalid state: {0}")]
    InvalidState(&'static str),
    /// A name could not be resolved.
    #[error("name service: {0}")]
    NameService(String),
    /// Nothing matched (no server at that address).
    #[error("no match")]
    NoMatch,
    /// Nothing is ready yet (poll calls).
    #[error("not done")]
    NotDone,
}

pub type Result<T> = std::result::Result<T, ViaError>;
