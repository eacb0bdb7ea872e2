//! RDMA across processes.
//!
//! `rdma-server` exposes a target region (RDMA write and read enabled)
//! and a protected one (neither), tells the client where they are, and
//! answers the client's control messages: "check write k" (verify the
//! bytes an RDMA write without immediate data left), "prepare read k"
//! (fill the read area), "end". An RDMA write with immediate data needs no
//! control message: its receive completion tells the server to check.
//!
//! `prot-server` / `prot-client` play one violation per connection (bad
//! handle, no rights, out of bounds, small and large) and report what each
//! side saw: the initiator's status, both VIs' states, the error codes.

use openvia_core::descriptor::{control, status};
use openvia_core::vi::{reliability, Vi, ViState};
use openvia_tests::arena::{self, spread, uneven_split, Arena};
use openvia_tests::pattern::{fill, first_mismatch, splitmix64};

use crate::endpoint::{assert_clean, expect_flushed, recv_done, send_done, Endpoint, Opts, WAIT};

/// Sizes of the RDMA transfers.
pub const RDMA_SIZES: &[usize] = &[0, 1, 63, 4097, 16385, 65536, 300_000, (1 << 20) + 13];
/// Room for the largest transfer plus misalignment.
const AREA: usize = (2 << 20) + 4096;
const CTRL: usize = 4096;
const WRITE_OFF: usize = CTRL + 3;
const READ_OFF: usize = CTRL + AREA + 5;
const CHECK: u32 = 1 << 16;
const PREPARE_READ: u32 = 2 << 16;
const END: u32 = 3 << 16;
const RECVS: usize = 4;

fn write_seed(k: usize) -> u64 {
    splitmix64(0x77 + k as u64)
}

fn read_seed(k: usize) -> u64 {
    splitmix64(0x88 + k as u64)
}

/// Where the server's memory is: sent to the client as five words.
#[derive(Clone, Copy)]
struct Info {
    write_addr: u64,
    read_addr: u64,
    target_handle: u32,
    protected_addr: u64,
    protected_handle: u32,
    target_end: u64,
}

impl Info {
    const LEN: usize = 48;

    fn encode(&self) -> [u8; Self::LEN] {
        let words = [
            self.write_addr,
            self.read_addr,
            self.target_handle as u64,
            self.protected_addr,
            self.protected_handle as u64,
            self.target_end,
        ];
        let mut b = [0u8; Self::LEN];
        for (c, w) in b.chunks_mut(8).zip(words) {
            c.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Info {
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        Info {
            write_addr: w(0),
            read_addr: w(1),
            target_handle: w(2) as u32,
            protected_addr: w(3),
            protected_handle: w(4) as u32,
            target_end: w(5),
        }
    }
}

/// The server's two regions.
struct Regions {
    target: Arena,
    protected: Arena,
}

impl Regions {
    fn new(ep: &Endpoint) -> Regions {
        Regions {
            target: Arena::new(&ep.nic, ep.ptag, 8, CTRL + 2 * AREA, true, true),
            protected: Arena::new(&ep.nic, ep.ptag, 1, 64 * 1024, false, false),
        }
    }

    fn info(&self) -> Info {
        let t = &self.target;
        Info {
            write_addr: t.addr(WRITE_OFF),
            read_addr: t.addr(READ_OFF),
            target_handle: t.handle,
            protected_addr: self.protected.addr(0),
            protected_handle: self.protected.handle,
            target_end: t.addr(t.data_len()),
        }
    }

    /// Sends the info from send slot `slot` of the target arena.
    fn send_info(&self, vi: &Vi, slot: usize) {
        let t = &self.target;
        // SAFETY: the first bytes of the control area are never posted
        // for receiving and no send of them is outstanding.
        unsafe { t.bytes(0, Info::LEN) }.copy_from_slice(&self.info().encode());
        t.set_desc(slot, 0, &[(t.addr(0), t.handle, Info::LEN as u32)], 0);
        vi.post_send(t.desc(slot), t.handle).expect("post info");
        assert_clean(send_done(vi, t.desc(slot)), "info");
    }
}

pub fn server(opts: &Opts) {
    let ep = Endpoint::open();
    let vi = ep.vi(opts.reliability());
    let r = Regions::new(&ep);
    let t = &r.target;
    let post = |slot: usize| {
        t.set_desc(slot, 0, &[], 0);
        vi.post_recv(t.desc(slot), t.handle).expect("post recv");
    };
    for slot in 0..RECVS {
        post(slot);
    }
    ep.establish(opts, &vi);
    r.send_info(&vi, RECVS);
    let (mut writes, mut reads) = (0, 0);
    let mut n = 0;
    loop {
        let slot = n % RECVS;
        n += 1;
        let (st, len, imm) = recv_done(&vi, t.desc(slot));
        assert_clean(st, "control message");
        post(slot);
        let (op, code, k) = (
            st & status::OP_MASK,
            imm & 0xffff_0000,
            (imm & 0xffff) as usize,
        );
        let check_write = |what: &str| {
            let n = RDMA_SIZES[k];
            // SAFETY: the client wrote and then waited for our answer.
            let got = unsafe { t.bytes(WRITE_OFF, n) };
            assert_eq!(
                first_mismatch(got, write_seed(k)),
                None,
                "{what} {k} ({n} bytes)"
            );
        };
        match (op, code) {
            (status::OP_REMOTE_RDMA_WRITE, 0) => {
                assert_eq!(
                    len as usize, RDMA_SIZES[k],
                    "write {k}: length in the receive"
                );
                check_write("RDMA write with immediate");
                writes += 1;
            }
            (status::OP_RECEIVE, CHECK) => {
                check_write("RDMA write");
                writes += 1;
            }
            (status::OP_RECEIVE, PREPARE_READ) => {
                // SAFETY: no RDMA read is outstanding (the client waits).
                fill(unsafe { t.bytes(READ_OFF, RDMA_SIZES[k]) }, read_seed(k));
                reads += 1;
            }
            (status::OP_RECEIVE, END) => break,
            _ => panic!("unexpected control message: status {st:#x} immediate {imm:#x}"),
        }
        let ack = t.desc(RECVS + 1);
        t.set_desc(RECVS + 1, control::IMMEDIATE, &[], imm);
        vi.post_send(ack, t.handle).expect("post ack");
        assert_clean(send_done(&vi, ack), "ack");
    }
    println!("RESULT writes={writes} reads={reads}");
    // The receives still posted go when the client hangs up.
    expect_flushed(&vi, t.desc(n % RECVS));
}

pub fn client(opts: &Opts) {
    let ep = Endpoint::open();
    let rel = opts.reliability();
    let vi = ep.vi(rel);
    let m = Arena::new(&ep.nic, ep.ptag, 8, 2 * AREA, false, false);
    m.set_desc(0, 0, &[(m.addr(0), m.handle, Info::LEN as u32)], 0);
    vi.post_recv(m.desc(0), m.handle).expect("post recv");
    ep.establish(opts, &vi);
    let (st, _, _) = recv_done(&vi, m.desc(0));
    assert_clean(st, "info");
    // SAFETY: the info receive completed.
    let info = Info::decode(unsafe { m.bytes(0, Info::LEN) });

    // One control exchange: send `imm` (unless `send` is false: an RDMA
    // write with immediate data was the message) and wait for the ack.
    let expect_ack = |imm: u32| {
        let (st, _, got) = recv_done(&vi, m.desc(1));
        assert_clean(st, "ack");
        assert_eq!(got, imm, "ack for another request");
    };
    let post_ack = || {
        m.set_desc(1, 0, &[], 0);
        vi.post_recv(m.desc(1), m.handle).expect("post ack recv");
    };
    let send_ctl = |imm: u32| {
        m.set_desc(3, control::IMMEDIATE, &[], imm);
        vi.post_send(m.desc(3), m.handle).expect("post control");
        assert_clean(send_done(&vi, m.desc(3)), "control");
    };
    let mut reads = 0;
    for (k, &n) in RDMA_SIZES.iter().enumerate() {
        let src = spread(0, &uneven_split(n, 2, k), 1 + k % 7, 4097);
        let mut data = vec![0u8; n];
        fill(&mut data, write_seed(k));
        // SAFETY: nothing is posted on the source pieces.
        unsafe { m.write_pieces(&src, &data) };
        let with_imm = k % 2 == 0;
        post_ack();
        let mut segs = vec![(info.write_addr, info.target_handle, 0)];
        segs.extend(m.segs(&src));
        let ctl = control::OP_RDMAWRITE | if with_imm { control::IMMEDIATE } else { 0 };
        m.set_desc(2, ctl, &segs, k as u32);
        vi.post_send(m.desc(2), m.handle).expect("post RDMA write");
        let st = send_done(&vi, m.desc(2));
        assert_clean(st, &format!("RDMA write {k} ({n} bytes)"));
        assert_eq!(st & status::OP_MASK, status::OP_RDMA_WRITE);
        if with_imm {
            expect_ack(k as u32);
        } else {
            send_ctl(CHECK | k as u32);
            expect_ack(CHECK | k as u32);
        }
        if rel == reliability::UNRELIABLE {
            continue;
        }
        post_ack();
        send_ctl(PREPARE_READ | k as u32);
        expect_ack(PREPARE_READ | k as u32);
        let dst = spread(AREA, &uneven_split(n, 3, k + 1), 7 - k % 7, 4099);
        let mut segs = vec![(info.read_addr, info.target_handle, 0)];
        segs.extend(m.segs(&dst));
        m.set_desc(4, control::OP_RDMAREAD, &segs, 0);
        vi.post_send(m.desc(4), m.handle).expect("post RDMA read");
        let st = send_done(&vi, m.desc(4));
        assert_clean(st, &format!("RDMA read {k} ({n} bytes)"));
        assert_eq!(st & status::OP_MASK, status::OP_RDMA_READ);
        // SAFETY: the read completed.
        let got = unsafe { m.read_pieces(&dst, n) };
        assert_eq!(
            first_mismatch(&got, read_seed(k)),
            None,
            "RDMA read {k} ({n} bytes)"
        );
        reads += 1;
    }
    send_ctl(END);
    println!("RESULT writes={} reads={reads}", RDMA_SIZES.len());
    vi.disconnect().expect("disconnect");
}

/// One protection violation: (name, is a read, bytes, target).
#[derive(Clone, Copy)]
enum Target {
    BadHandle,
    Protected,
    PastTheEnd,
}

const CASES: &[(&str, bool, usize, Target)] = &[
    ("write_bad_handle", false, 100, Target::BadHandle),
    ("write_bad_handle_large", false, 300_000, Target::BadHandle),
    ("write_no_rights", false, 100, Target::Protected),
    ("write_no_rights_large", false, 300_000, Target::Protected),
    ("write_past_end", false, 100, Target::PastTheEnd),
    ("read_no_rights", true, 100, Target::Protected),
];

fn state_name(vi: &Vi) -> &'static str {
    match vi.state() {
        ViState::Error => "Error",
        ViState::Idle => "Idle",
        ViState::Connected => "Connected",
        ViState::ConnectPending => "ConnectPending",
    }
}

fn code_name(ep: &Endpoint, vi: &Vi) -> String {
    ep.errors
        .first_for(vi.id(), std::time::Duration::from_secs(5))
        .map_or("none".into(), |c| format!("{c:?}"))
}

/// Waits for `slot`'s receive, which only the broken connection completes.
fn flushed(vi: &Vi, m: &Arena, slot: usize) -> bool {
    let d = vi
        .recv_wait(Some(WAIT))
        .expect("receive wait on the broken VI");
    assert_eq!(d.0, m.desc(slot));
    arena::completion(d).0 & status::DESC_FLUSHED_ERROR != 0
}

pub fn prot_server(opts: &Opts) {
    let ep = Endpoint::open();
    let rel = opts.reliability();
    let r = Regions::new(&ep);
    let t = &r.target;
    let disc = opts.str("disc");
    ep.listen(disc).expect("listen");
    println!("READY");
    let mut keep = Vec::new();
    for (name, ..) in CASES {
        let vi = ep.vi(rel);
        t.set_desc(0, 0, &[], 0);
        vi.post_recv(t.desc(0), t.handle).expect("post recv");
        ep.accept(disc, &vi);
        r.send_info(&vi, 1);
        let f = flushed(&vi, t, 0);
        println!(
            "RESULT {name}_server_flushed={} {name}_server_state={} {name}_server_code={}",
            f as u8,
            state_name(&vi),
            code_name(&ep, &vi)
        );
        keep.push(vi);
    }
}

pub fn prot_client(opts: &Opts) {
    let ep = Endpoint::open();
    let rel = opts.reliability();
    let m = Arena::new(&ep.nic, ep.ptag, 4, 512 * 1024, false, false);
    let mut keep = Vec::new();
    for &(name, read, n, target) in CASES {
        let vi = ep.vi(rel);
        m.set_desc(0, 0, &[(m.addr(0), m.handle, Info::LEN as u32)], 0);
        vi.post_recv(m.desc(0), m.handle).expect("post recv");
        m.set_desc(1, 0, &[], 0);
        vi.post_recv(m.desc(1), m.handle).expect("post recv");
        ep.connect(&vi, opts.str("disc"));
        assert_clean(recv_done(&vi, m.desc(0)).0, "info");
        // SAFETY: the info receive completed.
        let info = Info::decode(unsafe { m.bytes(0, Info::LEN) });
        let remote = match target {
            Target::BadHandle => (info.write_addr, info.target_handle ^ 0x8000_0000, 0),
            Target::Protected => (info.protected_addr, info.protected_handle, 0),
            Target::PastTheEnd => (info.target_end - 50, info.target_handle, 0),
        };
        let op = if read {
            control::OP_RDMAREAD
        } else {
            control::OP_RDMAWRITE
        };
        m.set_desc(2, op, &[remote, (m.addr(4096), m.handle, n as u32)], 0);
        vi.post_send(m.desc(2), m.handle).expect("post RDMA");
        let st = send_done(&vi, m.desc(2));
        let f = flushed(&vi, &m, 1);
        println!(
            "RESULT {name}_status={st:#x} {name}_flushed={} {name}_state={} {name}_code={}",
            f as u8,
            state_name(&vi),
            code_name(&ep, &vi)
        );
        keep.push(vi);
    }
}
