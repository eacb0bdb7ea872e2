//! Raw Ethernet frames, whatever the way onto the wire.
//!
//! The Ethernet device sends VIA traffic as frames of its own EtherType,
//! without IP or UDP. Two ways onto the wire implement [`FrameIo`]:
//! AF_PACKET with memory-mapped rings (works wherever raw sockets are
//! allowed) and AF_XDP (an XDP program steers our EtherType to a user
//! ring; fastest, one socket per interface queue). The device above sees
//! only this trait, so it picks one at open time and never names the
//! other. A link writes the Ethernet header itself (destination, its own
//! MAC, EtherType): callers hand it and get back only the payload that
//! follows the 14 header bytes.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Bytes of the Ethernet header (destination, source, EtherType).
pub const ETH_HEADER_LEN: usize = 14;

/// A 48-bit Ethernet address.
pub type Mac = [u8; 6];

/// Why a link could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The process lacks a capability (e.g. "CAP_NET_RAW", "CAP_BPF"):
    /// named so that a user can be told what to grant.
    #[error("permission denied: {0} is needed")]
    Permission(&'static str),
    /// No interface of that name.
    #[error("no such interface")]
    NoInterface,
    /// The kernel or the driver cannot do this (e.g. no AF_XDP, queue busy).
    #[error("not supported here: {0}")]
    Unsupported(&'static str),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Which frames a link receives: those of `ethertype` and, when `dst_id`
/// is given, whose payload holds that big-endian value at that offset
/// (the destination connection id of the Ethernet device's header), so
/// that the kernel, not a user-space loop, separates connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameFilter {
    pub ethertype: u16,
    /// (offset in the payload after the Ethernet header, value), 16 bits.
    pub dst_id: Option<(usize, u16)>,
}

/// One way of sending and receiving raw frames on one interface.
pub trait FrameIo: Send {
    /// The interface's own MAC address (the source of every frame sent).
    fn local_mac(&self) -> Mac;

    /// The interface MTU: the most payload bytes after the Ethernet header.
    fn mtu(&self) -> usize;

    /// Sends frames to `dst`, each given as the parts of its payload
    /// (gathered, never copied by the caller). Returns how many leading
    /// frames were handed on; fewer than asked (0 included) means the
    /// kernel or ring had no room now and the rest must be sent later.
    fn send(&mut self, dst: Mac, frames: &[&[&[u8]]]) -> io::Result<usize>;

    /// Takes up to `max` waiting frames without blocking and calls
    /// `each(source MAC, payload after the Ethernet header)` for each.
    /// Returns how many were taken (0: nothing waits).
    fn recv(&mut self, max: usize, each: &mut dyn FnMut(Mac, &[u8])) -> io::Result<usize>;

    /// A descriptor that polls readable while frames wait (for epoll).
    fn raw_fd(&self) -> RawFd;

    /// Waits up to `timeout` for a frame; true if one may be waiting.
    fn wait_readable(&self, timeout: Duration) -> bool;
}
