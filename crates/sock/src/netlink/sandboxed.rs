//! A connection between hosts in a process under a seccomp filter
//! (`crate::sandbox`): handed to the kernel and its stream moved on to
//! plain data before the filter went in (`NetSwitched::settle_for_sandbox`),
//! with what the VI had brought and the program not read still in the
//! page. Reads hand that out from memory, with no system call; once it is
//! used up the connection is the kernel's (`is_plain`: the table then
//! says so, and the program's own calls go to the kernel). Writes are the
//! kernel's from the start (`kernel_writes`).

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use super::page::Page;
use crate::carried::{copy_out, Carried};

pub struct Sandboxed {
    page: Arc<Page>,
}

impl Sandboxed {
    pub fn new(page: Arc<Page>) -> Sandboxed {
        Sandboxed { page }
    }

    fn flags(dontwait: bool, extra: i32) -> i32 {
        if dontwait {
            extra | libc::MSG_DONTWAIT
        } else {
            extra
        }
    }
}

impl Carried for Sandboxed {
    fn read(
        &self,
        fd: RawFd,
        out: &mut [&mut [u8]],
        dontwait: bool,
        peek: bool,
        all: bool,
    ) -> Result<usize, i32> {
        if let Some(_lock) = self.page.lock(false) {
            let (read, len) = self.page.left();
            if read < len {
                let want: usize = out.iter().map(|o| o.len()).sum();
                let (mut seg, mut off) = (0usize, 0usize);
                let n = copy_out(self.page.left_bytes(read, want), out, &mut seg, &mut off);
                if !peek {
                    self.page.set_left_read(read + n as u64);
                }
                return Ok(n);
            }
        }
        // Used up meanwhile (another thread): the kernel, as the table
        // says from the next call on.
        let mut extra = 0;
        if peek {
            extra |= libc::MSG_PEEK;
        }
        if all {
            extra |= libc::MSG_WAITALL;
        }
        let bufs = out.iter_mut().map(|b| (b.as_mut_ptr(), b.len()));
        crate::switched::transfer(fd, bufs, Self::flags(dontwait, extra), false)
    }
    fn write(
        &self,
        fd: RawFd,
        data: &[&[u8]],
        dontwait: bool,
        nosignal: bool,
    ) -> Result<usize, i32> {
        let extra = if nosignal { libc::MSG_NOSIGNAL } else { 0 };
        let bufs = data.iter().map(|b| (b.as_ptr() as *mut u8, b.len()));
        crate::switched::transfer(fd, bufs, Self::flags(dontwait, extra), true)
    }
    fn flush(&self) {}
    fn shut(&self) {}
    fn set_nonblocking(&self, _on: bool) {}
    fn owner_pid(&self) -> u32 {
        crate::process::id()
    }
    fn unread(&self, _fd: RawFd) -> usize {
        let (read, len) = self.page.left();
        len.saturating_sub(read) as usize
    }
    fn writable(&self) -> bool {
        true
    }
    fn wait_room(&self, _fd: RawFd, _limit: Duration) {}
    /// While bytes are left in memory, poll and select look here (the
    /// kernel socket may hold none of them).
    fn takes_poll_tokens(&self) -> bool {
        !self.is_plain()
    }
    fn ready_in_user_space(&self) -> bool {
        !self.is_plain()
    }
    fn is_plain(&self) -> bool {
        let (read, len) = self.page.left();
        read >= len
    }
    fn kernel_writes(&self) -> bool {
        true
    }
}
