//! viaip: IP over openvia, the IPoIB analogue. A TUN interface whose IPv4
//! packets travel as VIA messages over a network device of openvia's
//! core, one message per packet, to the peer holding the destination
//! address.
//!
//! Layers: `tun` (the kernel's interface), `vnet` (its offload header),
//! `segment` (datagram mode's software segmentation), `packet` (the IPv4
//! header checks), `peers` (the peers file), `link` (VIs and registered
//! buffers), `daemon` (the threads that move packets, the sending loop in
//! `sender`), `control` (`viaip show`).

pub mod control;
pub mod counters;
pub mod daemon;
pub mod discovery;
pub mod link;
pub mod packet;
pub mod peers;
pub mod segment;
pub mod sender;
pub mod tun;
pub mod vnet;
pub mod wait;
