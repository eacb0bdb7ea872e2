//! Two network NICs in one process, connected over UDP on the loopback
//! interface (no namespace needed): every VIPL operation through the
//! agent, the protocol and the UDP channel, at every reliability level.

use std::sync::Arc;
use std::time::Duration;

use openvia_core::descriptor::{control, status, DataSegment, Descriptor};
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi, ViAttributes};
use openvia_core::{connect_request, connect_wait, Address};

/// 64-byte aligned, registered memory for descriptors and data.
struct Arena {
    _buf: Vec<u8>,
    base: usize,
    handle: u32,
}

impl Arena {
    fn new(nic: &Nic, ptag: openvia_core::mem::PtagId, len: usize) -> Self {
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
    fn desc(&self, i: usize) -> *mut Descriptor {
        (self.base + i * 128) as *mut Descriptor
    }
    fn data(&self, off: usize) -> *mut u8 {
        (self.base + off) as *mut u8
    }
}

fn attrs(ptag: openvia_core::mem::PtagId, rel: u16) -> ViAttributes {
    ViAttributes {
        reliability: rel,
        max_transfer: 1 << 24,
        ptag,
        rdma_write: true,
        rdma_read: rel != reliability::UNRELIABLE,
    }
}

fn set_desc(d: *mut Descriptor, ctl: u16, segs: &[(u64, u32, u32)], imm: u32) {
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

struct Pair {
    _nics: (Nic, Nic),
    a: Arc<Vi>,
    b: Arc<Vi>,
    ma: Arena,
    mb: Arena,
}

fn udp_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // A port of our own, so parallel test runs never meet.
        let port = 20000 + (std::process::id() % 30000);
        std::env::set_var("OPENVIA_UDP_BIND", "127.0.0.1");
        std::env::set_var("OPENVIA_AGENT_PORT", port.to_string());
        std::env::set_var("OPENVIA_UDP_DEAD_MS", "1500");
        std::env::set_var("OPENVIA_UDP_KEEPALIVE_MS", "200");
    });
}

fn pair(rel: u16, disc: &str, mem: usize) -> Pair {
    udp_env();
    let na = Nic::open(Some("/dev/via_udp")).unwrap();
    let nb = Nic::open(Some("/dev/via_udp")).unwrap();
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

fn roundtrip_sizes(rel: u16, disc: &str) {
    let p = pair(rel, disc, 8 << 20);
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

#[test]
fn send_receive_every_size_reliable_delivery() {
    roundtrip_sizes(reliability::RELIABLE_DELIVERY, "t-rd");
}

#[test]
fn send_receive_every_size_reliable_reception() {
    roundtrip_sizes(reliability::RELIABLE_RECEPTION, "t-rr");
}

#[test]
fn send_receive_every_size_unreliable() {
    roundtrip_sizes(reliability::UNRELIABLE, "t-ur");
}

#[test]
fn rdma_write_with_immediate_and_read() {
    let p = pair(reliability::RELIABLE_DELIVERY, "t-rdma", 4 << 20);
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

#[test]
fn rdma_write_to_bad_handle_breaks_reliable_connection() {
    let p = pair(reliability::RELIABLE_RECEPTION, "t-prot", 1 << 20);
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

#[test]
fn descriptor_checks() {
    let p = pair(reliability::UNRELIABLE, "t-desc", 1 << 20);
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

#[test]
fn nic_reports_network_attributes() {
    udp_env();
    let nic = Nic::open(Some("/dev/via_udp")).unwrap();
    let q = nic.query();
    assert_eq!(q.name, "/dev/via_udp");
    assert_eq!(&q.address[10..], &[0xff, 0xff, 127, 0, 0, 1]);
    assert!(q.native_mtu >= 1280, "mtu {}", q.native_mtu);
    assert!(q.max_transfer_size >= 1 << 20);
    let lo = Nic::open(Some("/dev/via_lo")).unwrap();
    assert_eq!(lo.query().name, "/dev/via_lo");
    assert!(Nic::open(Some("/dev/via_nosuchif0")).is_err());
}

#[test]
fn peer_vanishing_breaks_the_connection() {
    let p = pair(reliability::RELIABLE_DELIVERY, "t-dead", 1 << 20);
    let errors = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let e2 = errors.clone();
    p._nics
        .0
        .set_error_handler(Some(std::sync::Arc::new(move |_e| {
            e2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })))
        .unwrap();
    let rd = p.ma.desc(3);
    set_desc(rd, 0, &[(p.ma.data(4096) as u64, p.ma.handle, 100)], 0);
    p.a.post_recv(rd, p.ma.handle).unwrap();
    // The peer's NIC goes away without a word: close it abruptly by
    // dropping its channel's socket through a NIC close.
    let start = std::time::Instant::now();
    p._nics.1.close().unwrap();
    // Orderly close sends a disconnect: the VI must leave Connected fast.
    let d = p.a.recv_wait(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(d.0, rd);
    assert_ne!(unsafe { (*rd).cs.status } & status::DESC_FLUSHED_ERROR, 0);
    assert_eq!(p.a.state(), openvia_core::vi::ViState::Error);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(errors.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}
