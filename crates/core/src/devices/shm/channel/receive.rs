//! The receiving side of a shared-memory channel: a message's First
//! record (inline data, a CMA pull straight into the posted buffer, or
//! the start of a chunked stream) and its Cont chunks, placed through the
//! VI's `Placement`. Arriving RDMA is checked against the registry for
//! every chunk it touches.

use openvia_wire::shm::{self as rec, Op, RecordHeader, RecordKind, FLAG_CMA, FLAG_IMMEDIATE};

use super::{Inbound, Pending, ShmChannel};
use crate::descriptor::status;
use crate::device::ChannelFailed;
use crate::devices::shm::ring::Peeked;
use crate::ranges::{self, Range};
use crate::sys::cma;
use crate::vi::placement::{Fault, Placement};

impl ShmChannel {
    /// Handles the First record of a message. Returns None to stall (no
    /// receive posted yet), Some(done) otherwise.
    pub(super) fn on_first(
        &mut self,
        pk: &Peeked,
        place: &mut Placement,
    ) -> Result<Option<bool>, ChannelFailed> {
        let h = pk.header;
        let imm = (h.flags & FLAG_IMMEDIATE != 0).then_some(h.immediate);
        let cma_rec = h.flags & FLAG_CMA != 0;
        let iovs = if cma_rec {
            rec::parse_iovs(pk.payload()).map_err(|_| ChannelFailed("bad CMA list"))?
        } else {
            Vec::new()
        };
        if cma_rec && iovs.iter().map(|x| x.1).sum::<u64>() != h.total_len {
            return Err(ChannelFailed("CMA list length mismatch"));
        }
        let remote: Vec<Range> = iovs
            .iter()
            .map(|&(addr, len)| Range { addr, len })
            .collect();
        let inline_len = if cma_rec {
            h.total_len
        } else {
            pk.header.payload_len as u64
        };
        match h.op {
            Op::Send => {
                let Some(cap) = place.recv_capacity() else {
                    return Ok(None);
                };
                if h.total_len > cap {
                    place.recv_complete(0, imm, false, status::LENGTH_ERROR);
                    return Ok(Some(self.start_discard(h.total_len, inline_len)));
                }
                if cma_rec {
                    let local = place.recv_ranges().to_vec();
                    let got = self.pull(h.msg_seq, &local, &remote, h.total_len);
                    let err = match cma_fault(&got, h.total_len) {
                        None => 0,
                        Some(f) => {
                            place.faults.push(f);
                            status::TRANSPORT_ERROR
                        }
                    };
                    place.recv_complete(h.total_len, imm, false, err);
                    return Ok(Some(true));
                }
                place.recv_write(0, pk.payload());
                if inline_len == h.total_len {
                    place.recv_complete(h.total_len, imm, false, 0);
                    return Ok(Some(true));
                }
                self.inbound = Some(Inbound::Recv {
                    total: h.total_len,
                    offset: inline_len,
                    imm,
                });
                self.start_streaming(h.total_len);
                Ok(Some(false))
            }
            Op::RdmaWrite => {
                if let Err(bits) =
                    place.check_rdma(true, h.remote_addr, h.remote_handle, h.total_len)
                {
                    place.faults.push(Fault::RdmaWriteProtection);
                    self.queue_control(RecordKind::Nack, h.msg_seq, bits);
                    return Ok(Some(self.start_discard(h.total_len, inline_len)));
                }
                if imm.is_some() && place.recv_capacity().is_none() {
                    return Ok(None);
                }
                let target = [Range {
                    addr: h.remote_addr,
                    len: h.total_len,
                }];
                if cma_rec {
                    let got = self.pull(h.msg_seq, &target, &remote, h.total_len);
                    let fault = cma_fault(&got, h.total_len);
                    let ok = fault.is_none();
                    if let Some(f) = fault {
                        place.faults.push(f);
                        self.queue_control(RecordKind::Nack, h.msg_seq, status::TRANSPORT_ERROR);
                    }
                    if imm.is_some() {
                        let err = if ok { 0 } else { status::TRANSPORT_ERROR };
                        place.recv_complete(h.total_len, imm, true, err);
                    }
                    return Ok(Some(true));
                }
                // SAFETY: `target` was checked against the registry above
                // (registered, our ptag, RDMA write enabled, in bounds).
                unsafe { ranges::scatter(&target, 0, pk.payload()) };
                if inline_len == h.total_len {
                    if imm.is_some() {
                        place.recv_complete(h.total_len, imm, true, 0);
                    }
                    return Ok(Some(true));
                }
                self.inbound = Some(Inbound::RdmaWrite {
                    addr: h.remote_addr,
                    handle: h.remote_handle,
                    seq: h.msg_seq,
                    total: h.total_len,
                    offset: inline_len,
                    imm,
                });
                self.start_streaming(h.total_len);
                Ok(Some(false))
            }
            Op::ReadRequest => {
                if let Err(bits) =
                    place.check_rdma(false, h.remote_addr, h.remote_handle, h.total_len)
                {
                    place.faults.push(Fault::RdmaReadProtection);
                    self.queue_control(RecordKind::Nack, h.msg_seq, bits);
                    return Ok(Some(true));
                }
                let source = vec![Range {
                    addr: h.remote_addr,
                    len: h.total_len,
                }];
                if cma_rec {
                    let ok = matches!(cma::write_to(self.peer_pid, &source, &remote), Ok(n) if n == h.total_len);
                    let bits = if ok { 0 } else { status::TRANSPORT_ERROR };
                    self.queue_control(RecordKind::ReadDone, h.msg_seq, bits);
                } else {
                    let mut rh = RecordHeader::new(RecordKind::First, Op::ReadResponse);
                    rh.total_len = h.total_len;
                    rh.msg_seq = h.msg_seq;
                    self.next_seq += 1;
                    self.pending.push_back(Pending::Data {
                        header: rh,
                        source,
                        offset: 0,
                        started: false,
                        seq: self.next_seq,
                        rdma_source: Some(h.remote_handle),
                    });
                }
                Ok(Some(true))
            }
            Op::ReadResponse => {
                let Some(local) = place.read_ranges(h.msg_seq) else {
                    return Ok(Some(self.start_discard(h.total_len, inline_len)));
                };
                if ranges::total(local) < h.total_len {
                    return Err(ChannelFailed("read response longer than asked"));
                }
                // SAFETY: the read's local ranges were validated at post.
                unsafe { ranges::scatter(local, 0, pk.payload()) };
                if inline_len == h.total_len {
                    place.read_done(h.msg_seq, 0);
                    return Ok(Some(true));
                }
                self.inbound = Some(Inbound::ReadResponse {
                    seq: h.msg_seq,
                    total: h.total_len,
                    offset: inline_len,
                });
                Ok(Some(false))
            }
        }
    }

    /// A message that streams through the ring begins: time it when it
    /// is long enough for its pace to say something (two chunks or more),
    /// and once the ring's pages are all in place (on the first lap, and
    /// the lap after the sender gave cold pages back, pages fault in, in
    /// both processes: 64 KiB messages took 35-50 µs there against 2-6
    /// after it).
    fn start_streaming(&mut self, total: u64) {
        let timed = total >= 2 * self.cfg.chunk_bytes as u64 && self.rx.pages_settled();
        self.streaming_since = timed.then(crate::sys::now_ns);
    }

    pub(super) fn start_discard(&mut self, total: u64, first_chunk: u64) -> bool {
        if first_chunk >= total {
            return true;
        }
        self.inbound = Some(Inbound::Discard {
            total,
            offset: first_chunk,
        });
        false
    }

    /// Handles a continuation chunk; returns whether the message is complete.
    pub(super) fn on_cont(
        &mut self,
        data: &[u8],
        place: &mut Placement,
    ) -> Result<bool, ChannelFailed> {
        let Some(state) = self.inbound else {
            return Err(ChannelFailed("continuation without a message"));
        };
        let n = data.len() as u64;
        let (total, offset) = match state {
            Inbound::Recv { total, offset, .. }
            | Inbound::RdmaWrite { total, offset, .. }
            | Inbound::ReadResponse { total, offset, .. }
            | Inbound::Discard { total, offset } => (total, offset),
        };
        if offset + n > total {
            return Err(ChannelFailed("message longer than announced"));
        }
        let end = offset + n;
        let done = end == total;
        match state {
            Inbound::Recv { imm, .. } => {
                place.recv_write(offset, data);
                if done {
                    place.recv_complete(total, imm, false, 0);
                }
                self.inbound = Some(Inbound::Recv {
                    total,
                    offset: end,
                    imm,
                });
            }
            Inbound::RdmaWrite {
                addr,
                handle,
                seq,
                imm,
                ..
            } => {
                // The region may have been deregistered since the last
                // chunk: the rest is refused as the whole would have been.
                if let Err(bits) = place.check_rdma(true, addr, handle, total) {
                    place.faults.push(Fault::RdmaWriteProtection);
                    self.queue_control(RecordKind::Nack, seq, bits);
                    self.inbound = Some(Inbound::Discard { total, offset: end });
                } else {
                    let target = [Range { addr, len: total }];
                    // SAFETY: checked against the registry just above, in
                    // this critical section of the VI's lock (which
                    // deregistration waits for).
                    unsafe { ranges::scatter(&target, offset, data) };
                    if done && imm.is_some() {
                        place.recv_complete(total, imm, true, 0);
                    }
                    self.inbound = Some(Inbound::RdmaWrite {
                        addr,
                        handle,
                        seq,
                        total,
                        offset: end,
                        imm,
                    });
                }
            }
            Inbound::ReadResponse { seq, .. } => {
                if let Some(local) = place.read_ranges(seq) {
                    // SAFETY: validated at post.
                    unsafe { ranges::scatter(local, offset, data) };
                }
                if done {
                    place.read_done(seq, 0);
                }
                self.inbound = Some(Inbound::ReadResponse {
                    seq,
                    total,
                    offset: end,
                });
            }
            Inbound::Discard { .. } => {
                self.inbound = Some(Inbound::Discard { total, offset: end });
            }
        }
        if done {
            self.inbound = None;
            self.streamed(total);
        }
        Ok(done)
    }
}

/// What a CMA copy's outcome means: None when all `want` bytes moved.
fn cma_fault(got: &std::io::Result<u64>, want: u64) -> Option<Fault> {
    match got {
        Ok(n) if *n == want => None,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Some(Fault::PeerGone),
        _ => Some(Fault::Transport),
    }
}
