//! The shared-memory device (`/dev/via_lo`): VIs between processes on
//! one host.
//!
//! - `connect`: pairing two VIs over an abstract Unix socket.
//! - `channel`: the [`Channel`](crate::device::Channel) of a connected pair.
//! - `ring`, `region`: the rings in the shared connection region.

pub mod channel;
pub mod connect;
pub mod region;
pub mod ring;
