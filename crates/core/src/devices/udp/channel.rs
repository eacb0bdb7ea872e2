//! The UDP device's channel: the RUM channel ([`RumChannel`]) over the
//! VI's own UDP socket, connected to the peer's. The socket is the link:
//! sends gathered with GSO runs (`gso`), batched receives with GRO while
//! datagrams come in numbers, ICMP port unreachable (ECONNREFUSED) as the
//! sign of a peer that is gone.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use super::gso::send_batch;
use super::socket::{refused, UdpSock, RX_BUF};
use crate::devices::rum::channel::RumChannel;
use crate::devices::rum::link::DatagramLink;
use crate::devices::rum::rx::RxBatch;
use crate::devices::rum::tx::TxBatch;

/// A connected VI on the UDP device.
pub type UdpChannel = RumChannel<UdpSock>;

impl DatagramLink for UdpSock {
    #[inline]
    fn send(&mut self, datagram: &[u8]) -> io::Result<usize> {
        self.send_one(datagram)
    }

    #[inline]
    fn send_batch(&mut self, tx: &TxBatch) -> io::Result<usize> {
        send_batch(self, tx)
    }

    #[inline]
    fn recv_batch(&mut self, rx: &mut RxBatch, max: usize) -> io::Result<usize> {
        UdpSock::recv_batch(self, rx, max)
    }

    fn wait_readable(&self, timeout: Duration) -> bool {
        UdpSock::wait_readable(self, timeout)
    }

    fn raw_fd(&self) -> RawFd {
        UdpSock::raw_fd(self)
    }

    fn peer_gone(&self, e: &io::Error) -> bool {
        refused(e)
    }

    /// With GSO on, the peer's bursts may come glued by GRO: a whole
    /// 64 KiB super-datagram per buffer.
    fn rx_buffer_len(&self, longest: usize) -> usize {
        if self.gso {
            RX_BUF
        } else {
            longest.max(2048)
        }
    }

    fn set_gro(&mut self, on: bool) {
        UdpSock::set_gro(self, on)
    }

    fn gro_off_if_quiet(&mut self) -> bool {
        UdpSock::gro_off_if_quiet(self)
    }
}
