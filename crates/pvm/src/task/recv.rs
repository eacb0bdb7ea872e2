//! A task's receiving side: messages queued from the pool and the pvmd
//! socket, matched by (source, tag, context) as PVM defines it, and the
//! waits of pvm_recv / pvm_trecv / pvm_nrecv / pvm_probe.

use std::os::fd::AsRawFd;
use std::time::Instant;

use super::buffers::MsgBuf;
use super::direct::DirectWait;
use super::{Queued, Task, Wait};
use crate::error::PvmResult;
use crate::pool::Body;

impl Task {
    pub(super) fn matches(m: &Queued, src: i32, tag: i32, ctx: i32) -> bool {
        (src == -1 || m.src == src) && (tag == -1 || m.tag == tag) && m.ctx == ctx
    }

    pub(super) fn take_match(&mut self, src: i32, tag: i32) -> Option<Queued> {
        let ctx = self.ctx;
        let i = self
            .queue
            .iter()
            .position(|m| Self::matches(m, src, tag, ctx))?;
        self.queue.remove(i)
    }

    /// Reads every frame the pvmd has written so far, without waiting;
    /// true if there was any.
    pub(super) fn drain_socket(&mut self) -> PvmResult<bool> {
        let mut got = false;
        loop {
            let mut p = libc::pollfd {
                fd: self.rd.get_ref().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if self.rd.buffer().is_empty() && unsafe { libc::poll(&mut p, 1, 0) } <= 0 {
                return Ok(got);
            }
            self.pump(None)?;
            got = true;
        }
    }

    /// Moves heads from the ring and frames from the socket into the
    /// queue; true if anything came.
    pub(super) fn gather(&mut self) -> PvmResult<bool> {
        let Some(home) = self.home.clone() else {
            return Ok(false);
        };
        let mut got = false;
        while let Some(d) = home.pool.take(home.slot) {
            let body = if d.start == u32::MAX {
                Body::new(Some(home.clone()))
            } else {
                Body::received(home.clone(), d.start, d.pages, d.len as usize)
            };
            self.arrive(Queued {
                src: d.src,
                tag: d.tag,
                ctx: d.ctx,
                enc: d.enc,
                body,
            });
            got = true;
        }
        let sb = home.pool.sock_bell(home.slot);
        if sb != self.seen_sock_bell || !self.rd.buffer().is_empty() {
            self.seen_sock_bell = sb;
            got |= self.drain_socket()?;
        }
        got |= self.direct_progress()?;
        Ok(got)
    }

    /// Waits for a matching message; returns its new buffer id (0 if none
    /// arrived in time). The old receive buffer is freed, as in PVM.
    pub fn recv(&mut self, src: i32, tag: i32, wait: Wait) -> PvmResult<i32> {
        let r = self.recv_wait(src, tag, wait);
        self.rearm_select()?;
        r
    }

    pub(super) fn recv_wait(&mut self, src: i32, tag: i32, wait: Wait) -> PvmResult<i32> {
        let deadline = match wait {
            Wait::Forever => None,
            Wait::Never => Some(Instant::now()),
            Wait::For(d) => Some(Instant::now() + d),
        };
        // As in PVM, the old receive buffer goes at once, not when the next
        // message arrives: its pool pages may be what the sender waits for.
        if self.rbuf > 0 {
            let _ = self.bufs.remove(self.rbuf);
            self.rbuf = 0;
        }
        let Some(home) = self.home.clone() else {
            return self.recv_socket_only(src, tag, deadline);
        };
        let mut direct_wait = DirectWait::default();
        loop {
            self.check_pvmd()?;
            let bell = home.pool.bell(home.slot);
            if let Some(m) = self.take_match(src, tag) {
                self.direct.settle_spin(&direct_wait);
                return Ok(self.install_rbuf(m));
            }
            if self.gather()? {
                continue;
            }
            if matches!(deadline, Some(d) if Instant::now() >= d) {
                return Ok(0);
            }
            if deadline.is_none() && src > 0 {
                let sock = self.rd.get_ref().as_raw_fd();
                if self.direct.wait_direct(src, sock, &mut direct_wait) {
                    continue;
                }
            }
            self.direct.stop_polling();
            // The watcher rings the bell when the pvmd dies.
            let remote = src > 0 && crate::tid::host_of(src) != crate::tid::host_of(self.mytid);
            home.pool.wait_bell(home.slot, bell, deadline, remote);
            crate::trace::mark("task.woke", 0);
        }
    }

    pub(super) fn recv_socket_only(
        &mut self,
        src: i32,
        tag: i32,
        deadline: Option<Instant>,
    ) -> PvmResult<i32> {
        loop {
            if let Some(m) = self.take_match(src, tag) {
                return Ok(self.install_rbuf(m));
            }
            if matches!(deadline, Some(d) if Instant::now() >= d) && self.rd.buffer().is_empty() {
                // One last non-blocking look at the socket.
                let mut p = libc::pollfd {
                    fd: self.rd.get_ref().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                if unsafe { libc::poll(&mut p, 1, 0) } <= 0 {
                    return Ok(0);
                }
            }
            self.pump(deadline)?;
        }
    }

    /// Like recv but leaves the message queued; returns a buffer id for
    /// bufinfo without making it the receive buffer.
    pub fn probe(&mut self, src: i32, tag: i32) -> PvmResult<i32> {
        self.check_pvmd()?;
        self.drain_socket()?;
        self.gather()?;
        self.rearm_select()?;
        let ctx = self.ctx;
        match self
            .queue
            .iter_mut()
            .find(|m| Self::matches(m, src, tag, ctx))
        {
            Some(m) => {
                let b = MsgBuf {
                    enc: m.enc,
                    data: m.body.share(),
                    src: m.src,
                    tag: m.tag,
                    ctx: m.ctx,
                    ..MsgBuf::default()
                };
                Ok(self.bufs.insert(b))
            }
            None => Ok(0),
        }
    }

    pub(super) fn install_rbuf(&mut self, m: Queued) -> i32 {
        crate::trace::mark("task.recv", m.body.len());
        if self.rbuf > 0 {
            let _ = self.bufs.remove(self.rbuf);
        }
        let b = MsgBuf {
            enc: m.enc,
            data: m.body,
            src: m.src,
            tag: m.tag,
            ctx: m.ctx,
            ..MsgBuf::default()
        };
        self.rbuf = self.bufs.insert(b);
        self.rbuf
    }
}
