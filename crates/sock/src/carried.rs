//! What a connection carried over openvia offers the hooks, whichever
//! device carries it: the one-host link over the shared-memory device
//! (`link`, `reader`) or the link between hosts over the network device
//! (`netlink`).

use std::os::fd::RawFd;

pub trait Carried: Send + Sync {
    /// read/recv into `out`: Ok(0) at EOF. `dontwait`: the call asked not
    /// to block; `peek` leaves the data; `all` waits for the whole of `out`.
    fn read(
        &self,
        fd: RawFd,
        out: &mut [&mut [u8]],
        dontwait: bool,
        peek: bool,
        all: bool,
    ) -> Result<usize, i32>;
    /// write/send: Ok(bytes taken) or Err(errno); `nosignal`: no SIGPIPE.
    fn write(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32>;
    /// Waits (bounded) until the peer holds everything sent.
    fn flush(&self);
    /// After flush, before the kernel's FIN.
    fn shut(&self);
    /// The program changed the socket's O_NONBLOCK.
    fn set_nonblocking(&self, on: bool);
    /// The process that made the link (only it may use it).
    fn owner_pid(&self) -> u32;
}
