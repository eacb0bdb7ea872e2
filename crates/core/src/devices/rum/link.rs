//! What the RUM channel needs of a network device's medium: a link that
//! carries datagrams to and from one peer. The channel is generic over it
//! ([`RumChannel<L>`](super::channel::RumChannel)), so each device's link
//! is called directly on the per-datagram path, with no dynamic dispatch.
//!
//! A link is connected: it sends only to its peer and receives only what
//! its peer sent (the UDP device: a connected socket; a raw-frame device:
//! its frame I/O plus a filter on the peer's address and connection id).
//! Datagrams are RUM packets as `openvia_wire::rum` writes them, with the
//! authentication trailer under a cluster key; a link adds and strips only
//! its own framing. Sends and receives take the link mutably (a frame
//! ring's cursors move; `crate::sys::frames::FrameIo` is `&mut self`).

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use super::rx::RxBatch;
use super::tx::TxBatch;

pub trait DatagramLink: Send + 'static {
    /// Sends one datagram. Ok(1): handed on; Ok(0): no room now (the
    /// caller keeps it and tries later).
    fn send(&mut self, datagram: &[u8]) -> io::Result<usize>;

    /// Sends the datagrams of `tx` in order, in as few calls as it can
    /// (the UDP device: GSO runs in one sendmmsg; another link may loop).
    /// Returns how many leading datagrams went out; the rest stay queued
    /// when the medium has no room (not an error).
    fn send_batch(&mut self, tx: &TxBatch) -> io::Result<usize>;

    /// Receives what is queued, without waiting, into at most `max` (1 to
    /// [`RX_BATCH`](super::rx::RX_BATCH)) buffers of `rx`; returns how
    /// many it filled (0: nothing waits).
    fn recv_batch(&mut self, rx: &mut RxBatch, max: usize) -> io::Result<usize>;

    /// Waits until a datagram may be waiting or `timeout` passes; true if
    /// one may be.
    fn wait_readable(&self, timeout: Duration) -> bool;

    /// A descriptor that polls readable while datagrams wait, for the
    /// progress thread's epoll (also what it watches for the link's end).
    fn raw_fd(&self) -> RawFd;

    /// Whether a send or receive error means the peer is gone (the UDP
    /// device: its host answered ICMP port unreachable). The channel then
    /// ends the connection, or under a cluster key (where such an answer
    /// may be forged) asks the peer first. Other errors are ignored as
    /// transient.
    fn peer_gone(&self, e: &io::Error) -> bool;

    /// Bytes each receive buffer needs for datagrams of up to `longest`
    /// bytes (more where the link glues a burst into one buffer).
    fn rx_buffer_len(&self, longest: usize) -> usize {
        longest.max(2048)
    }

    /// Lets receives glue bursts together (UDP's GRO), where the link can.
    /// The channel turns it on when datagrams come in numbers.
    fn set_gro(&mut self, _on: bool) {}

    /// Stops gluing if nothing is queued once it has; false if something
    /// was (gluing stays on). The channel asks when datagrams come alone.
    fn gro_off_if_quiet(&mut self) -> bool {
        true
    }
}
