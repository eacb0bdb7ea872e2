//! Deregistration against memory still in use: a region a posted
//! descriptor names (or lies in) is refused with `InvalidState`, the
//! bytes stay as the descriptor leaves them, and once deregistration
//! succeeds the memory can be unmapped while the peer keeps talking.

use std::time::Duration;

use openvia_core::descriptor::{control, status, Descriptor};
use openvia_core::error::ViaError;
use openvia_core::nic::Nic;
use openvia_core::vi::reliability;

use super::{pair, set_desc};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

/// An anonymous private mapping of its own, so it can be unmapped.
struct Mapping {
    addr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize, fill: u8) -> Self {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping is `len` bytes, ours.
        unsafe { std::ptr::write_bytes(p as *mut u8, fill, len) };
        Mapping {
            addr: p as *mut u8,
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: mapped and ours until unmap.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }

    fn unmap(self) {
        // SAFETY: unmapping exactly the mapping made in `new`.
        assert_eq!(unsafe { libc::munmap(self.addr as *mut _, self.len) }, 0);
    }
}

fn status_of(d: *mut Descriptor) -> u32 {
    // SAFETY: the descriptor is ours; the provider stores its status atomically.
    unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*d).cs.status)) }
}

fn refused(r: openvia_core::error::Result<()>) -> bool {
    matches!(r, Err(ViaError::InvalidState(_)))
}

/// A posted receive keeps its buffer (and the region its descriptor lies
/// in) registered: deregistration is refused and the buffer untouched
/// until the peer's data completes the receive. Deregistered afterwards
/// and unmapped, the memory is never written again: a peer's RDMA write
/// naming it is refused, and the process lives on.
pub fn deregistering_a_posted_receive_is_refused(dev: &str, disc: &str) {
    let p = pair(dev, reliability::RELIABLE_RECEPTION, disc, 1 << 20);
    let nb: &Nic = &p._nics.1;
    let ptag_b = p.b.attributes().ptag;
    let buf = Mapping::new(1 << 16, 0xee);
    let hbuf = nb
        .register_mem(buf.addr as u64, buf.len as u64, ptag_b, true, false)
        .unwrap();
    let rd = p.mb.desc(0);
    set_desc(rd, 0, &[(buf.addr as u64, hbuf, 4096)], 0);
    p.b.post_recv(rd, p.mb.handle).unwrap();
    assert!(
        refused(nb.deregister_mem(buf.addr as u64, hbuf)),
        "the buffer of a posted receive was deregistered"
    );
    assert!(
        refused(nb.deregister_mem(p.mb.data(0) as u64, p.mb.handle)),
        "the region a posted receive lies in was deregistered"
    );
    assert!(
        buf.bytes().iter().all(|&b| b == 0xee),
        "buffer written early"
    );
    assert_eq!(status_of(rd), 0, "the receive completed without a message");

    // The peer's message arrives, completed by the progress thread; the
    // program sees DONE in memory and deregisters at once.
    let sd = p.ma.desc(0);
    // SAFETY: inside A's arena.
    unsafe { std::ptr::write_bytes(p.ma.data(4096), 0x5a, 100) };
    set_desc(sd, 0, &[(p.ma.data(4096) as u64, p.ma.handle, 100)], 0);
    p.a.post_send(sd, p.ma.handle).unwrap();
    let start = std::time::Instant::now();
    while status_of(rd) & status::DONE == 0 {
        assert!(start.elapsed() < WAIT.unwrap(), "receive never completed");
        std::thread::yield_now();
    }
    assert_eq!(
        nb.deregister_mem(buf.addr as u64, hbuf),
        Ok(()),
        "refused once the receive had completed"
    );
    assert_eq!(status_of(rd) & status::ERROR_MASK, 0);
    assert!(buf.bytes()[..100].iter().all(|&b| b == 0x5a));
    assert!(buf.bytes()[100..].iter().all(|&b| b == 0xee));
    assert_eq!(p.b.recv_done().unwrap().0, rd);
    p.a.send_wait(WAIT).unwrap();
    let old = buf.addr as u64;
    buf.unmap();

    // A's RDMA write to the old buffer: refused at B, nothing touched.
    set_desc(
        sd,
        control::OP_RDMAWRITE,
        &[(old, hbuf, 0), (p.ma.data(4096) as u64, p.ma.handle, 100)],
        0,
    );
    p.a.post_send(sd, p.ma.handle).unwrap();
    p.a.send_wait(WAIT).unwrap();
    assert_ne!(
        status_of(sd) & status::ERROR_MASK,
        0,
        "write to freed memory"
    );
}

/// A large send still on its way keeps its buffer registered (the network
/// device reads it in place for retransmission; shared memory streams it
/// through the ring as room appears, or lets the peer pull it with CMA):
/// deregistration is refused until it completes. `len` must exceed what
/// the device takes in at once (the shared-memory ring's size).
pub fn deregistering_a_pending_large_send_is_refused(dev: &str, disc: &str, len: usize) {
    let p = pair(dev, reliability::RELIABLE_DELIVERY, disc, len + (64 << 10));
    let na: &Nic = &p._nics.0;
    let ptag_a = p.a.attributes().ptag;
    let buf = Mapping::new(len, 0);
    // SAFETY: the mapping is `len` bytes, ours.
    let src = unsafe { std::slice::from_raw_parts_mut(buf.addr, len) };
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i % 253) as u8;
    }
    let hs = na
        .register_mem(buf.addr as u64, len as u64, ptag_a, false, false)
        .unwrap();
    // No receive is posted yet: the send cannot complete.
    let sd = p.ma.desc(1);
    set_desc(sd, 0, &[(buf.addr as u64, hs, len as u32)], 0);
    p.a.post_send(sd, p.ma.handle).unwrap();
    assert_eq!(
        status_of(sd),
        0,
        "the send completed with no receive posted"
    );
    assert!(
        refused(na.deregister_mem(buf.addr as u64, hs)),
        "the buffer of a pending send was deregistered"
    );
    let rd = p.mb.desc(1);
    let dst = p.mb.data(4096);
    set_desc(rd, 0, &[(dst as u64, p.mb.handle, len as u32)], 0);
    p.b.post_recv(rd, p.mb.handle).unwrap();
    p.b.recv_wait(WAIT).unwrap();
    assert_eq!(status_of(rd) & status::ERROR_MASK, 0);
    // SAFETY: inside B's arena.
    let got = unsafe { std::slice::from_raw_parts(dst, len) };
    assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 253) as u8));
    p.a.send_wait(WAIT).unwrap();
    assert_eq!(status_of(sd) & status::ERROR_MASK, 0);
    assert_eq!(na.deregister_mem(buf.addr as u64, hs), Ok(()));
    buf.unmap();
    // The connection goes on without the old buffer.
    set_desc(rd, 0, &[(dst as u64, p.mb.handle, 64)], 0);
    p.b.post_recv(rd, p.mb.handle).unwrap();
    set_desc(sd, 0, &[(p.ma.data(4096) as u64, p.ma.handle, 64)], 0);
    p.a.post_send(sd, p.ma.handle).unwrap();
    p.b.recv_wait(WAIT).unwrap();
    assert_eq!(status_of(rd) & status::ERROR_MASK, 0);
}

/// A peer's RDMA write into (`read`: RDMA read from) a region of ours that
/// is deregistered while the operation runs: the rest is refused, and the
/// memory, made inaccessible right after deregistration returns, is never
/// touched again (a touch would kill this process). The peer's descriptor
/// completes with an error unless everything had moved before; what
/// arrived is a prefix of the data.
pub fn peer_rdma_on_region_deregistered_midway(dev: &str, disc: &str, read: bool, len: usize) {
    let p = pair(dev, reliability::RELIABLE_RECEPTION, disc, len + (64 << 10));
    let nb: &Nic = &p._nics.1;
    let pattern = |i: usize| (i % 251) as u8 + 1;
    let target = Mapping::new(len, 0);
    if read {
        // SAFETY: the mapping is `len` bytes, ours.
        let t = unsafe { std::slice::from_raw_parts_mut(target.addr, len) };
        for (i, b) in t.iter_mut().enumerate() {
            *b = pattern(i);
        }
    }
    let ptag_b = p.b.attributes().ptag;
    let ht = nb
        .register_mem(target.addr as u64, len as u64, ptag_b, true, true)
        .unwrap();
    let local = p.ma.data(4096);
    for i in 0..len {
        // SAFETY: inside A's arena.
        unsafe { *local.add(i) = if read { 0 } else { pattern(i) } };
    }
    let op = if read {
        control::OP_RDMAREAD
    } else {
        control::OP_RDMAWRITE
    };
    let sd = p.ma.desc(2);
    set_desc(
        sd,
        op,
        &[
            (target.addr as u64, ht, 0),
            (local as u64, p.ma.handle, len as u32),
        ],
        0,
    );
    p.a.post_send(sd, p.ma.handle).unwrap();
    // Under way: its first bytes have landed.
    let landed = if read { local } else { target.addr };
    let start = std::time::Instant::now();
    // SAFETY: inside A's arena or B's mapping, both still there.
    while unsafe { std::ptr::read_volatile(landed) } == 0 {
        assert!(start.elapsed() < WAIT.unwrap(), "the RDMA never started");
        std::thread::yield_now();
    }
    assert_eq!(nb.deregister_mem(target.addr as u64, ht), Ok(()));
    // SAFETY: our own mapping; any later touch by the provider faults.
    assert_eq!(
        unsafe { libc::mprotect(target.addr as *mut _, len, libc::PROT_NONE) },
        0
    );
    p.a.send_wait(WAIT).unwrap();
    let failed = status_of(sd) & status::ERROR_MASK != 0;
    // SAFETY: our own mapping, deregistered: nothing writes it any more.
    assert_eq!(
        unsafe { libc::mprotect(target.addr as *mut _, len, libc::PROT_READ) },
        0
    );
    let moved: &[u8] = if read {
        // SAFETY: inside A's arena; the read is over.
        unsafe { std::slice::from_raw_parts(local, len) }
    } else {
        target.bytes()
    };
    let k = (0..len).find(|&i| moved[i] != pattern(i)).unwrap_or(len);
    assert!(
        moved[k..].iter().all(|&b| b == 0),
        "bytes after {k} written out of order"
    );
    assert_eq!(failed, k < len, "status and data disagree (prefix {k})");
    target.unmap();
}
