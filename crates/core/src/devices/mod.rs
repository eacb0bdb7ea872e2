//! The devices, one folder each, every one with the same parts: `mod.rs`
//! (the device: open, attributes, name service), `connect.rs` (pairing
//! two VIs), `channel.rs` (the [`Channel`](crate::device::Channel) of a
//! connected pair), and the files of its medium. `rum` is not a device:
//! it is the channel network devices share over their datagram links.
//! See docs/devices.md.

pub mod ether;
pub mod rum;
pub mod shm;
pub mod udp;
