//! Wire formats of openvia: every byte layout that crosses a process or a
//! host boundary, parsed with bounds checks and emitted without I/O.
//!
//! - [`shm`]: records in the shared-memory rings between two processes.
//! - [`handshake`]: connection-setup messages on the local Unix socket.
//! - [`rum`]: datagrams of the reliable UDP transport (RUM).
//! - [`ether`]: RUM in raw Ethernet frames of our own EtherType.
//!
//! Parsers take bytes another process or host wrote and may not trust any
//! of them: every length is checked before use and errors are typed.

pub mod cursor;
pub mod ether;
pub mod handshake;
pub mod rum;
pub mod shm;

pub use cursor::WireError;
