//! In-process scenarios shared by the devices' end-to-end tests: two NICs
//! in one process, connected over the device under test, exercising
//! posting, completion, RDMA, errors and autonomous progress. Used by
//! `crates/core/tests/loopback.rs` (shared memory) and
//! `tests/netns/tests/udp_loopback.rs` (UDP on loopback).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use openvia_core::descriptor::{control, status, DataSegment, Descriptor};
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi, ViAttributes};
use openvia_core::{connect_request, connect_wait, Address};

pub mod dereg;
mod udp_env;
pub use udp_env::udp_env;

pub const SHM: &str = "/dev/via_lo";
pub const UDP: &str = "/dev/via_udp";

/// Settings a device needs before its first NIC opens in this process.
fn prepare(dev: &str) {
    if dev == UDP {
        udp_env();
    }
}

/// 64-byte aligned, registered memory for descriptors and data.
pub struct Arena {
    _buf: Vec<u8>,
    base: usize,
    pub handle: u32,
}

impl Arena {
    pub fn new(nic: &Nic, ptag: openvia_core::mem::PtagId, len: usize) -> Self {
        let buf = vec![0u8; len + 64];
        let base = (buf.as_ptr() as usize + 63) & !63;
        let handle = nic
            .register_mem(base as u64, len as u64, ptag, true, true)
            .unwrap();
        Arena {
            _buf: buf,
            base,
            handle,
        }
    }
    pub fn desc(&self, i: usize) -> *mut Descriptor {
        (self.base + i * 128) as *mut Descriptor
    }
    pub fn data(&self, off: usize) -> *mut u8 {
        (self.base + off) as *mut u8
    }
}

pub fn attrs(ptag: openvia_core::mem::PtagId, rel: u16) -> ViAttributes {
    ViAttributes {
        reliability: rel,
        max_transfer: 1 << 24,
        ptag,
        rdma_write: true,
        rdma_read: rel != reliability::UNRELIABLE,
    }
}

pub fn set_desc(d: *mut Descriptor, ctl: u16, segs: &[(u64, u32, u32)], imm: u32) {
    // SAFETY: `d` points into an arena with room for the segments.
    unsafe {
        std::ptr::write_bytes(d as *mut u8, 0, 32 + 16 * segs.len().max(2));
        (*d).cs.control = ctl;
        (*d).cs.seg_count = segs.len() as u16;
        (*d).cs.immediate_data = imm;
        let base = (d as *mut u8).add(32) as *mut DataSegment;
        for (i, &(a, h, l)) in segs.iter().enumerate() {
            *base.add(i) = DataSegment {
                data: a,
                handle: h,
                length: l,
            };
        }
    }
}

pub struct Pair {
    pub _nics: (Nic, Nic),
    pub a: Arc<Vi>,
    pub b: Arc<Vi>,
    pub ma: Arena,
    pub mb: Arena,
}

pub fn pair(dev: &str, rel: u16, disc: &str, mem: usize) -> Pair {
    prepare(dev);
    let na = Nic::open(Some(dev)).unwrap();
    let nb = Nic::open(Some(dev)).unwrap();
    let pa = na.create_ptag().unwrap();
    let pb = nb.create_ptag().unwrap();
    let a = na.create_vi(attrs(pa, rel), None, None).unwrap();
    let b = nb.create_vi(attrs(pb, rel), None, None).unwrap();
    let ma = Arena::new(&na, pa, mem);
    let mb = Arena::new(&nb, pb, mem);
    let host = na.query().address.to_vec();
    let server_addr = Address {
        host: host.clone(),
        discriminator: disc.as_bytes().to_vec(),
    };
    let client_addr = Address {
        host,
        discriminator: format!("{disc}-c").into_bytes(),
    };
    let nbs = nb.shared().clone();
    let b2 = b.clone();
    let sa = server_addr.clone();
    let t = std::thread::spawn(move || {
        let req = connect_wait(&nbs, &sa, Some(Duration::from_secs(10))).unwrap();
        req.accept(&b2).unwrap();
    });
    connect_request(
        &a,
        &client_addr,
        &server_addr,
        Some(Duration::from_secs(10)),
    )
    .unwrap();
    t.join().unwrap();
    Pair {
        _nics: (na, nb),
        a,
        b,
        ma,
        mb,
    }
}

/// Both ends ask for each other at once (VipConnectPeerRequest) and meet,
/// whichever side the rendezvous makes wait; then a message crosses.
pub fn peer_to_peer(dev: &str, disc: &str) {
    prepare(dev);
    let na = Nic::open(Some(dev)).unwrap();
    let nb = Nic::open(Some(dev)).unwrap();
    let (pa, pb) = (na.create_ptag().unwrap(), nb.create_ptag().unwrap());
    let rel = reliability::RELIABLE_DELIVERY;
    let a = na.create_vi(attrs(pa, rel), None, None).unwrap();
    let b = nb.create_vi(attrs(pb, rel), None, None).unwrap();
    let (ma, mb) = (Arena::new(&na, pa, 1 << 16), Arena::new(&nb, pb, 1 << 16));
    let host = na.query().address.to_vec();
    let at = |s: &str| Address {
        host: host.clone(),
        discriminator: format!("{disc}-{s}").into_bytes(),
    };
    let limit = Some(Duration::from_secs(10));
    openvia_core::peer_request(&a, &at("a"), &at("b"), limit).unwrap();
    openvia_core::peer_request(&b, &at("b"), &at("a"), limit).unwrap();
    openvia_core::peer_wait(&a).unwrap();
    openvia_core::peer_wait(&b).unwrap();
    for (from, to, mf, mt) in [(&a, &b, &ma, &mb), (&b, &a, &mb, &ma)] {
        let rd = mt.desc(0);
        set_desc(rd, 0, &[(mt.data(4096) as u64, mt.handle, 100)], 0);
        to.post_recv(rd, mt.handle).unwrap();
        let sd = mf.desc(0);
        // SAFETY: inside the arena.
        unsafe { std::ptr::write_bytes(mf.data(4096), 0x5a, 100) };
        set_desc(sd, 0, &[(mf.data(4096) as u64, mf.handle, 100)], 0);
        from.post_send(sd, mf.handle).unwrap();
        to.recv_wait(limit).unwrap();
        // SAFETY: the descriptor is ours and complete; inside the arena.
        unsafe {
            assert_eq!((*rd).cs.status & status::ERROR_MASK, 0);
            assert_eq!((*rd).cs.length, 100);
            assert_eq!(*mt.data(4096 + 99), 0x5a);
        }
    }
    drop((na, nb));
}

pub fn roundtrip_sizes(dev: &str, rel: u16, disc: &str) {
    let p = pair(dev, rel, disc, 8 << 20);
    let sizes = [
        0usize,
        1,
        7,
        64,
        1000,
        4096,
        16384,
        16385,
        100_000,
        1 << 20,
        3 << 20,
    ];
    for (k, &n) in sizes.iter().enumerate() {
        let src = p.ma.data(4096 + 3); // misaligned on purpose
        for i in 0..n {
            // SAFETY: inside the arena.
            unsafe { *src.add(i) = (i as u8).wrapping_mul(31).wrapping_add(k as u8) };
        }
        let rd = p.mb.desc(1);
        let dst = p.mb.data(4096 + 5);
        // Two scatter segments on the receive side.
        let half = (n / 2) as u32;
        set_desc(
            rd,
            0,
            &[
                (dst as u64, p.mb.handle, half),
                (dst as u64 + half as u64, p.mb.handle, n as u32 - half + 10),
            ],
            0,
        );
        p.b.post_recv(rd, p.mb.handle).unwrap();
        let sd = p.ma.desc(1);
        set_desc(
            sd,
            control::IMMEDIATE,
            &[(src as u64, p.ma.handle, n as u32)],
            0xabc0 + k as u32,
        );
        p.a.post_send(sd, p.ma.handle).unwrap();
        let got = p.b.recv_wait(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(got.0, rd);
        // SAFETY: the descriptor is ours and complete.
        let (st, len, imm) = unsafe { ((*rd).cs.status, (*rd).cs.length, (*rd).cs.immediate_data) };
        assert_eq!(st & status::ERROR_MASK, 0, "size {n} status {st:#x}");
        assert_eq!(st & status::OP_MASK, status::OP_RECEIVE);
        assert_ne!(st & status::IMMEDIATE, 0);
        assert_eq!(imm, 0xabc0 + k as u32);
        assert_eq!(len as usize, n);
        for i in 0..n {
            // SAFETY: inside the arena.
            assert_eq!(
                unsafe { *dst.add(i) },
                (i as u8).wrapping_mul(31).wrapping_add(k as u8),
                "size {n} byte {i}"
            );
        }
        let sdone = p.a.send_wait(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(sdone.0, sd);
        // SAFETY: as above.
        assert_eq!(unsafe { (*sd).cs.status } & status::ERROR_MASK, 0);
    }
}

pub fn rdma_write_with_immediate_and_read(dev: &str, disc: &str) {
    let p = pair(dev, reliability::RELIABLE_DELIVERY, disc, 4 << 20);
    for &n in &[8usize, 5000, 300_000] {
        let src = p.ma.data(8192);
        for i in 0..n {
            // SAFETY: inside the arena.
            unsafe { *src.add(i) = (i % 251) as u8 };
        }
        let target = p.mb.data(1 << 20) as u64;
        let rd = p.mb.desc(2);
        set_desc(rd, 0, &[], 0);
        p.b.post_recv(rd, p.mb.handle).unwrap();
        let sd = p.ma.desc(2);
        set_desc(
            sd,
            control::OP_RDMAWRITE | control::IMMEDIATE,
            &[
                (target, p.mb.handle, 0),
                (src as u64, p.ma.handle, n as u32),
            ],
            77,
        );
        p.a.post_send(sd, p.ma.handle).unwrap();
        p.a.send_wait(Some(Duration::from_secs(5))).unwrap();
        p.b.recv_wait(Some(Duration::from_secs(5))).unwrap();
        // SAFETY: completed descriptor.
        let st = unsafe { (*rd).cs.status };
        assert_eq!(st & status::OP_MASK, status::OP_REMOTE_RDMA_WRITE);
        assert_eq!(unsafe { (*rd).cs.immediate_data }, 77);
        for i in 0..n {
            assert_eq!(unsafe { *(target as *const u8).add(i) }, (i % 251) as u8);
        }
        // Read it back into another place.
        let back = p.ma.data(2 << 20);
        set_desc(
            sd,
            control::OP_RDMAREAD,
            &[
                (target, p.mb.handle, 0),
                (back as u64, p.ma.handle, n as u32),
            ],
            0,
        );
        p.a.post_send(sd, p.ma.handle).unwrap();
        p.a.send_wait(Some(Duration::from_secs(5))).unwrap();
        let st = unsafe { (*sd).cs.status };
        assert_eq!(st & status::ERROR_MASK, 0, "read status {st:#x}");
        assert_eq!(st & status::OP_MASK, status::OP_RDMA_READ);
        for i in 0..n {
            assert_eq!(unsafe { *back.add(i) }, (i % 251) as u8);
        }
    }
}

pub fn rdma_write_to_bad_handle_breaks_reliable_connection(dev: &str, disc: &str) {
    let p = pair(dev, reliability::RELIABLE_RECEPTION, disc, 1 << 20);
    let sd = p.ma.desc(0);
    set_desc(
        sd,
        control::OP_RDMAWRITE,
        &[
            (p.mb.data(0) as u64, p.mb.handle ^ 0x5000, 0),
            (p.ma.data(4096) as u64, p.ma.handle, 100),
        ],
        0,
    );
    p.a.post_send(sd, p.ma.handle).unwrap();
    p.a.send_wait(Some(Duration::from_secs(5))).unwrap();
    let st = unsafe { (*sd).cs.status };
    assert_ne!(st & status::ERROR_MASK, 0, "status {st:#x}");
}

pub fn descriptor_checks(dev: &str, disc: &str) {
    let p = pair(dev, reliability::UNRELIABLE, disc, 1 << 20);
    // Misaligned descriptor: refused outright.
    let bad = (p.ma.desc(0) as usize + 8) as *mut Descriptor;
    assert!(p.a.post_send(bad, p.ma.handle).is_err());
    // Wrong memory handle for the descriptor.
    assert!(p.a.post_send(p.ma.desc(0), p.ma.handle ^ 0x1000).is_err());
    // A data segment outside its region: protection error in the status.
    let sd = p.ma.desc(0);
    set_desc(
        sd,
        0,
        &[(p.ma.data(0) as u64, p.ma.handle, (2 << 20) as u32)],
        0,
    );
    p.a.post_send(sd, p.ma.handle).unwrap();
    let d = p.a.send_done().unwrap();
    assert_eq!(d.0, sd);
    assert_ne!(unsafe { (*sd).cs.status } & status::PROTECTION_ERROR, 0);
    // Reserved control bits: format error.
    set_desc(sd, 0x100, &[], 0);
    p.a.post_send(sd, p.ma.handle).unwrap();
    p.a.send_done().unwrap();
    assert_ne!(unsafe { (*sd).cs.status } & status::FORMAT_ERROR, 0);
    // Too long for the receive buffer: length error at the receiver.
    let rd = p.mb.desc(0);
    set_desc(rd, 0, &[(p.mb.data(4096) as u64, p.mb.handle, 10)], 0);
    p.b.post_recv(rd, p.mb.handle).unwrap();
    set_desc(sd, 0, &[(p.ma.data(4096) as u64, p.ma.handle, 11)], 0);
    p.a.post_send(sd, p.ma.handle).unwrap();
    p.b.recv_wait(Some(Duration::from_secs(5))).unwrap();
    assert_ne!(unsafe { (*rd).cs.status } & status::LENGTH_ERROR, 0);
}

/// VIA semantics: the NIC works on its own. A receive completes — its
/// status word turns DONE in the program's memory — while the program
/// never calls into the library again; a notify handler fires the same way.
pub fn completes_without_the_program_calling_in(dev: &str, disc: &str) {
    let p = pair(dev, reliability::RELIABLE_DELIVERY, disc, 1 << 20);
    let rd = p.mb.desc(3);
    set_desc(rd, 0, &[(p.mb.data(8192) as u64, p.mb.handle, 64)], 0);
    p.b.post_recv(rd, p.mb.handle).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let rd2 = p.mb.desc(4);
    set_desc(rd2, 0, &[(p.mb.data(16384) as u64, p.mb.handle, 64)], 0);
    p.b.post_recv(rd2, p.mb.handle).unwrap();
    // From here on B's side is only watched, never called (except the
    // handler registration, before the data exists).
    let sd = p.ma.desc(3);
    set_desc(sd, 0, &[(p.ma.data(8192) as u64, p.ma.handle, 64)], 0);
    p.a.post_send(sd, p.ma.handle).unwrap();
    let status = |d: *mut Descriptor| {
        // SAFETY: the descriptor is ours; the provider stores its status atomically.
        unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*d).cs.status)) }
    };
    let start = std::time::Instant::now();
    while status(rd) & status::DONE == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "receive never completed on its own"
        );
        std::thread::yield_now();
    }
    // The completed receive is still handed out first; the notify handler
    // then gets the next one.
    assert_eq!(p.b.recv_done().unwrap().0, rd);
    p.b.recv_notify(Box::new(move |d| {
        let _ = tx.send(d.0 as usize);
    }))
    .unwrap();
    p.a.post_send(sd, p.ma.handle).unwrap();
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("notify handler never ran");
    assert_eq!(got, rd2 as usize);
}

/// A large send is read in place (not copied at post); the program
/// overwrites its buffer the moment the send completes, and the receiver
/// must still get the bytes as they were at post. On the unreliable level
/// a message may be lost (the attempt is made again, up to five times);
/// what arrives must be whole.
pub fn in_place_send_reused_at_completion(dev: &str, rel: u16, disc: &str) {
    let p = pair(dev, rel, disc, 4 << 20);
    let n = 1usize << 20;
    let pattern = |attempt: usize, i: usize| (i as u8).wrapping_mul(7) ^ (attempt as u8);
    let src = p.ma.data(4096);
    let dst = p.mb.data(4096);
    let rd = p.mb.desc(1);
    set_desc(rd, 0, &[(dst as u64, p.mb.handle, n as u32)], 0);
    p.b.post_recv(rd, p.mb.handle).unwrap();
    for attempt in 0..5 {
        for i in 0..n {
            // SAFETY: inside the arena.
            unsafe { *src.add(i) = pattern(attempt, i) };
        }
        let sd = p.ma.desc(1);
        set_desc(sd, 0, &[(src as u64, p.ma.handle, n as u32)], 0);
        p.a.post_send(sd, p.ma.handle).unwrap();
        p.a.send_wait(Some(Duration::from_secs(10))).unwrap();
        // SAFETY: a completed descriptor of ours.
        assert_eq!(unsafe { (*sd).cs.status } & status::ERROR_MASK, 0);
        // The program reuses its buffer at once.
        // SAFETY: inside the arena; the send completed.
        unsafe { std::ptr::write_bytes(src, 0xEE, n) };
        let Ok(got) = p.b.recv_wait(Some(Duration::from_secs(3))) else {
            assert_eq!(rel, reliability::UNRELIABLE, "a reliable send was lost");
            continue;
        };
        assert_eq!(got.0, rd);
        // SAFETY: the receive completed; its buffer is inside the arena.
        unsafe {
            assert_eq!((*rd).cs.status & status::ERROR_MASK, 0);
            assert_eq!((*rd).cs.length as usize, n);
            for i in 0..n {
                assert_eq!(
                    *dst.add(i),
                    pattern(attempt, i),
                    "attempt {attempt} byte {i}"
                );
            }
        }
        return;
    }
    panic!("five unreliable sends of 1 MiB lost in a row on loopback");
}

/// `recv_done_at_hand` hands out only what has completed already: nothing
/// before a message has arrived; then, two messages sent, the first
/// through `recv_done` (which drives the device) and the second from
/// what the VI holds, in order, once the device has taken both in.
pub fn recv_done_at_hand_takes_only_what_completed(dev: &str, disc: &str) {
    let p = pair(dev, reliability::RELIABLE_DELIVERY, disc, 1 << 20);
    let (rd1, rd2) = (p.mb.desc(3), p.mb.desc(4));
    set_desc(rd1, 0, &[(p.mb.data(8192) as u64, p.mb.handle, 64)], 0);
    set_desc(rd2, 0, &[(p.mb.data(16384) as u64, p.mb.handle, 64)], 0);
    p.b.post_recv(rd1, p.mb.handle).unwrap();
    p.b.post_recv(rd2, p.mb.handle).unwrap();
    assert!(p.b.recv_done_at_hand().is_err(), "nothing has come");
    let (sd1, sd2) = (p.ma.desc(3), p.ma.desc(4));
    // SAFETY: the arena's data area, ours.
    unsafe {
        std::ptr::write_bytes(p.ma.data(8192), 1, 64);
        std::ptr::write_bytes(p.ma.data(16384), 2, 64);
    }
    set_desc(sd1, 0, &[(p.ma.data(8192) as u64, p.ma.handle, 64)], 0);
    set_desc(sd2, 0, &[(p.ma.data(16384) as u64, p.ma.handle, 64)], 0);
    p.a.post_send(sd1, p.ma.handle).unwrap();
    p.a.post_send(sd2, p.ma.handle).unwrap();
    let status = |d: *mut Descriptor| {
        // SAFETY: the descriptor is ours; the provider stores its status atomically.
        unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*d).cs.status)) }
    };
    let start = std::time::Instant::now();
    let first = loop {
        if let Ok(d) = p.b.recv_done() {
            break d;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no message came");
        std::thread::yield_now();
    };
    assert_eq!(first.0, rd1);
    // The second: taken in by the device (by the call above, by its
    // progress thread, or from the memory the channel holds), never by a
    // look of this call at the network.
    let second = loop {
        if let Ok(d) = p.b.recv_done_at_hand() {
            break d;
        }
        let _ = p.a.send_done();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "second never came"
        );
        std::thread::yield_now();
    };
    assert_eq!(second.0, rd2);
    assert_ne!(status(rd2) & status::DONE, 0);
    // SAFETY: completed receives, ours to read.
    unsafe {
        assert_eq!(*p.mb.data(8192 + 63), 1);
        assert_eq!(*p.mb.data(16384 + 63), 2);
    }
    assert!(p.b.recv_done_at_hand().is_err(), "nothing more");
}
