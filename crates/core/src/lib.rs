//! openvia's core: the VI Architecture in user space.
//!
//! The objects of VIA map onto modules one to one: a [`nic::Nic`] owns
//! protection tags and [registered memory](mem), [VIs](vi) with their send
//! and receive queues of [descriptors](descriptor), and
//! [completion queues](cq). A VI moves data through a
//! [`device::Channel`] of its NIC's device. The core drives every device
//! through one interface ([`device::Device`], opened by name in
//! [`device::registry`]); the shared-memory device lives in
//! [`devices::shm`], the network device (UDP) in [`devices::udp`], the
//! channel network devices share in [`devices::rum`] (docs/devices.md).
//! Everything below is plain Rust; the C interface
//! (`libvipl.so`) is a thin shell over it.
//!
//! ```no_run
//! use openvia_core::nic::Nic;
//! use openvia_core::vi::{reliability, ViAttributes};
//!
//! let nic = Nic::open(Some("/dev/via_lo")).unwrap();
//! let ptag = nic.create_ptag().unwrap();
//! let attrs = ViAttributes {
//!     reliability: reliability::RELIABLE_DELIVERY,
//!     max_transfer: 1 << 20,
//!     ptag,
//!     rdma_write: true,
//!     rdma_read: false,
//! };
//! let vi = nic.create_vi(attrs, None, None).unwrap();
//! # let _ = vi;
//! ```

pub mod config;
pub mod connect;
pub mod cq;
pub mod descriptor;
pub mod device;
pub mod devices;
pub mod doorbell;
pub mod error;
pub mod mem;
pub mod nic;
pub mod ns;
pub mod ranges;
pub mod settings;
pub mod slots;
pub mod spin;
pub mod sys;
pub mod vi;
mod wait;

pub use connect::{
    connect_request, connect_wait, connect_wait_end, peer_done, peer_request, peer_wait,
    ConnRequest,
};
pub use devices::rum::stats::{stats as udp_stats, StatsSnapshot as UdpStats};
pub use error::{Result, ViaError};
pub use openvia_wire::handshake::{Address, ViAttrs};
pub use sys::floor::set_descriptor_floor;
pub use vi::held::transport_busy;
