//! The shared-memory device (`/dev/via_lo`): VIs between processes on
//! one host.
//!
//! - `connect`: pairing two VIs over an abstract Unix socket.
//! - `channel`: the [`Channel`](crate::transport::Channel) of a connected pair.
//! - `ring`, `region`: the rings in the shared connection region.
//! - `doorbell`: waking a peer that sleeps, without syscalls otherwise.
//! - `notice`: telling a peer's CQ which VI has work.

pub mod channel;
pub mod connect;
pub mod doorbell;
pub mod notice;
pub mod region;
pub mod ring;
