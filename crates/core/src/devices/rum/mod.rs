//! The RUM channel: a connected VI over any datagram medium, with the RUM
//! protocol core (`openvia_proto`) doing sequencing, flow control and loss
//! recovery. Network devices share it; each brings its own link.
//!
//! - `channel`: the [`Channel`](crate::device::Channel) that drives the protocol,
//!   generic over the link.
//! - `link`: [`DatagramLink`](link::DatagramLink), what a device's medium provides.
//! - `tx`, `rx`: the datagrams of one send and one receive.
//! - `direct`: data placed in the VI's receives as it arrives.
//! - `fault`: seeded fault injection on received datagrams (tests).
//! - `mac`: SHA-256/HMAC for the cluster key; `gmac` and `packet_auth`:
//!   every packet authenticated under it.
//! - `rendezvous`: the connect request's user data (which server, when).
//! - `setup`: connection setup common to network devices.
//! - `sink`: where delivered messages go (posted descriptors, RDMA read
//!   answers, refusals).
//! - `stats`: drop counters.
//! - `settings`: the protocol settings from the environment, shared by
//!   network devices.

pub mod channel;
mod direct;
pub mod fault;
pub mod gmac;
pub mod link;
pub mod mac;
pub mod packet_auth;
pub mod rendezvous;
pub mod rx;
pub mod settings;
pub mod setup;
mod sink;
pub mod stats;
pub mod tx;
