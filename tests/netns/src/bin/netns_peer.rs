//! One end of a namespace test. Run as `netns_peer role=server|client
//! key=value...` inside a namespace; prints `READY` when waiting for its
//! peer, `PROGRESS n` while streaming, `RESULT key=value...` at the end,
//! and exits non-zero (with the reason on stderr) on any wrong byte,
//! status or immediate.
//!
//! Modes: `sizes` — the client sends one message of each size class, the
//! server checks it and echoes it back, the client checks the echo; then
//! RDMA writes (with immediate, checked by the server) and RDMA reads of
//! the same region back. `stream` — the client sends `count` messages of
//! `size` bytes keeping `window` in flight, the server checks every one in
//! order; in `survive=1` the client instead runs until its VI breaks (the
//! server was killed) and reports how the break looked. `open` (client)
//! — opens the NIC and reports which device served. `role=peer` —
//! peer-to-peer connection, one message each way. `gather` (with
//! `cq=1`) — one message gathered from three segments apart, scattered
//! into three on the server, echoed back gathered, completions taken
//! through a CQ. `last` — the server answers the client's message and
//! its send must end done, though the client exits the moment it has the
//! answer, its VI held by another thread (never dropped, never closed).

use std::collections::HashMap;
use std::process::exit;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openvia_core::cq::CompletionQueue;
use openvia_core::descriptor::{control, status};
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi, ViAttributes, ViState};
use openvia_core::{connect_request, connect_wait, Address};
use openvia_netns_tests::memory::{fill, first_mismatch, Arena};

const HELLO: u32 = 0x4845_4c4f;
const STOP: u32 = 0x5354_4f50;
const ACK: u32 = 0x41434b00;
const RDMA_KEY: u32 = 0x1000;
const WAIT: Duration = Duration::from_secs(30);
const SIZES: [usize; 8] = [0, 1, 1471, 1472, 1473, 4096, 64 << 10, 1 << 20];
const RDMA_SIZES: [usize; 4] = [8, 5000, 300_000, 1 << 20];
/// The largest message; every buffer slot has this much room.
const SLOT: usize = (1 << 20) + 4096;
/// `last`: small enough that its acknowledgement is held for a reply.
const LAST_LEN: usize = 100;

fn fail(msg: String) -> ! {
    eprintln!("netns_peer: {msg}");
    exit(1);
}

struct Args(HashMap<String, String>);

impl Args {
    fn parse() -> Args {
        Args(
            std::env::args()
                .skip(1)
                .filter_map(|a| a.split_once('=').map(|(k, v)| (k.into(), v.into())))
                .collect(),
        )
    }
    fn str(&self, k: &str) -> &str {
        self.0
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| fail(format!("missing {k}=")))
    }
    fn num(&self, k: &str, default: usize) -> usize {
        self.0.get(k).map_or(default, |v| {
            v.parse().unwrap_or_else(|_| fail(format!("bad {k}={v}")))
        })
    }
}

/// IPv4-mapped IPv6: the 16-byte NIC address of an IPv4 host.
fn mapped(ip: &str) -> Vec<u8> {
    let v4: std::net::Ipv4Addr = ip.parse().unwrap_or_else(|_| fail(format!("bad ip {ip}")));
    v4.to_ipv6_mapped().octets().to_vec()
}

struct End {
    nic: Nic,
    vi: Arc<Vi>,
    mem: Arena,
    /// With `cq=1`: one CQ for both work queues.
    cq: Option<Arc<CompletionQueue>>,
    /// `lossy=1`: the test drops datagrams or frames.
    lossy: bool,
}

fn open(args: &Args, slots: usize) -> End {
    let nic = Nic::open(Some(args.str("dev"))).unwrap_or_else(|e| fail(format!("open: {e}")));
    let _ = DEVICE.set(nic.shared().device().info().short_name.to_string());
    let ptag = nic
        .create_ptag()
        .unwrap_or_else(|e| fail(format!("ptag: {e}")));
    let rel = match args.str("rel") {
        "ur" => reliability::UNRELIABLE,
        "rd" => reliability::RELIABLE_DELIVERY,
        "rr" => reliability::RELIABLE_RECEPTION,
        r => fail(format!("bad rel={r}")),
    };
    let attrs = ViAttributes {
        reliability: rel,
        max_transfer: 1 << 24,
        ptag,
        rdma_write: true,
        rdma_read: rel != reliability::UNRELIABLE,
    };
    let cq = (args.num("cq", 0) == 1).then(|| {
        nic.create_cq(64)
            .unwrap_or_else(|e| fail(format!("create cq: {e}")))
    });
    let vi = nic
        .create_vi(attrs, cq.clone(), cq.clone())
        .unwrap_or_else(|e| fail(format!("create vi: {e}")));
    let mem = Arena::new(&nic, ptag, 256, slots * SLOT);
    let lossy = args.num("lossy", 0) == 1;
    End {
        nic,
        vi,
        mem,
        cq,
        lossy,
    }
}

impl End {
    fn post_recv(&self, slot: usize, d: usize) {
        self.mem.set_desc(
            d,
            0,
            &[(self.mem.addr(slot * SLOT), self.mem.handle, SLOT as u32)],
            0,
        );
        self.vi
            .post_recv(self.mem.desc(d), self.mem.handle)
            .unwrap_or_else(|e| fail(format!("post_recv: {e}")));
    }

    fn send(&self, d: usize, ctl: u16, segs: &[(u64, u32, u32)], imm: u32) {
        self.mem.set_desc(d, ctl, segs, imm);
        self.vi
            .post_send(self.mem.desc(d), self.mem.handle)
            .unwrap_or_else(|e| fail(format!("post_send: {e}")));
    }

    fn send_from(&self, d: usize, slot: usize, len: usize, imm: u32) {
        let segs = [(self.mem.addr(slot * SLOT), self.mem.handle, len as u32)];
        self.send(d, control::IMMEDIATE, &segs, imm);
    }

    /// Waits for the next send completion; it must be `want` and clean.
    fn sent(&self, want: usize) {
        let got = self
            .vi
            .send_wait(Some(WAIT))
            .unwrap_or_else(|e| fail(format!("send_wait: {e}")));
        if got.0 != self.mem.desc(want) {
            fail("send completed out of order".into());
        }
        let (st, _, _) = self.mem.result_of(got.0);
        if st & status::ERROR_MASK != 0 {
            fail(format!("send status {st:#x}"));
        }
    }

    /// Waits for the next receive completion; returns (status, len, imm).
    fn received(&self, want: usize) -> (u32, usize, u32) {
        let got = self
            .vi
            .recv_wait(Some(WAIT))
            .unwrap_or_else(|e| fail(format!("recv_wait: {e}")));
        if got.0 != self.mem.desc(want) {
            fail("receive completed out of order".into());
        }
        let (st, len, imm) = self.mem.result_of(got.0);
        if st & status::ERROR_MASK != 0 {
            fail(format!("receive status {st:#x}"));
        }
        (st, len as usize, imm)
    }

    fn check(&self, slot: usize, len: usize, key: u32, what: &str) {
        if let Some(i) = first_mismatch(self.mem.data(slot * SLOT, len), key) {
            fail(format!(
                "{what}: {len} bytes, key {key:#x}: wrong byte at {i}"
            ));
        }
    }
}

fn server(args: &Args) {
    // Slots: 0..window receive buffers, then the RDMA region.
    let window = args.num("window", 4).max(1);
    let end = open(args, window + 1);
    let host = end.nic.query().address.to_vec();
    let me = Address {
        host,
        discriminator: args.str("disc").as_bytes().to_vec(),
    };
    if args.str("mode") == "gather" {
        end.post_scatter();
    } else {
        for i in 0..window {
            end.post_recv(i, i);
        }
    }
    println!("READY");
    let req = connect_wait(end.nic.shared(), &me, Some(WAIT))
        .unwrap_or_else(|e| fail(format!("connect_wait: {e}")));
    req.accept(&end.vi)
        .unwrap_or_else(|e| fail(format!("accept: {e}")));
    match args.str("mode") {
        "sizes" => serve_sizes(&end, window),
        "stream" => serve_stream(&end, args, window),
        "gather" => serve_gather(&end),
        "last" => serve_last(&end),
        "idle" => {
            // Connected and idle until the test kills this process.
            println!("CONNECTED");
            std::thread::sleep(WAIT);
            fail("idle server was not killed".into());
        }
        m => fail(format!("bad mode={m}")),
    }
}

fn serve_sizes(end: &End, window: usize) {
    let region = window;
    let send_d = 200;
    let (mut messages, mut writes) = (0u64, 0u64);
    let mut next = 0usize;
    loop {
        let slot = next % window;
        let (st, len, imm) = end.received(slot);
        next += 1;
        let reply_imm = if st & status::OP_MASK == status::OP_REMOTE_RDMA_WRITE {
            end.check(region, len, imm, "rdma write target");
            writes += 1;
            ACK | (imm & 0xff)
        } else if imm == HELLO {
            let info = end.mem.data(slot * SLOT, 16);
            info[..8].copy_from_slice(&end.mem.addr(region * SLOT).to_le_bytes());
            info[8..12].copy_from_slice(&end.mem.handle.to_le_bytes());
            HELLO
        } else if imm == STOP {
            println!("RESULT messages={messages} rdma_writes={writes}");
            end.sent_after_stop(slot, send_d);
            return;
        } else {
            end.check(slot, len, imm, "message");
            messages += 1;
            imm
        };
        let echo_len = match reply_imm {
            HELLO => 16,
            x if x & !0xff == ACK => 0,
            _ => len,
        };
        end.send_from(send_d, slot, echo_len, reply_imm);
        end.sent(send_d);
        end.post_recv(slot, slot);
    }
}

impl End {
    /// Confirms STOP so the client knows the server checked everything.
    /// The client exits once it has the confirmation, its close (or its
    /// exit) sending the acknowledgement: this send must end done. Only
    /// where the test drops datagrams (`lossy=1`) may the network have
    /// lost both that acknowledgement and the disconnect carrying it
    /// again, and the send end flushed — both are a finished run there,
    /// anything else is not.
    fn sent_after_stop(&self, slot: usize, d: usize) {
        self.send_from(d, slot, 0, STOP);
        let got = self
            .vi
            .send_wait(Some(WAIT))
            .unwrap_or_else(|e| fail(format!("send_wait: {e}")));
        let (st, _, _) = self.mem.result_of(got.0);
        let allowed = if self.lossy {
            status::DESC_FLUSHED_ERROR
        } else {
            0
        };
        if st & status::ERROR_MASK & !allowed != 0 {
            fail(format!("final send status {st:#x}"));
        }
    }
}

fn client_connect(args: &Args, end: &End) {
    let server = Address {
        host: mapped(args.str("peer")),
        discriminator: args.str("disc").as_bytes().to_vec(),
    };
    let me = Address {
        host: end.nic.query().address.to_vec(),
        discriminator: format!("{}-client", args.str("disc")).into_bytes(),
    };
    connect_request(&end.vi, &me, &server, Some(WAIT))
        .unwrap_or_else(|e| fail(format!("connect_request: {e}")));
}

fn client_sizes(args: &Args) {
    // Slots: 0 source, 1 echo, 2 RDMA read-back.
    let end = open(args, 3);
    client_connect(args, &end);
    let (sd, rd) = (0, 1);
    // Ask for the server's RDMA region.
    end.post_recv(1, rd);
    end.send_from(sd, 0, 0, HELLO);
    end.sent(sd);
    let (_, len, imm) = end.received(rd);
    if len != 16 || imm != HELLO {
        fail(format!("hello reply: {len} bytes imm {imm:#x}"));
    }
    let info = end.mem.data(SLOT, 16).to_vec();
    let raddr = u64::from_le_bytes(info[..8].try_into().unwrap());
    let rhandle = u32::from_le_bytes(info[8..12].try_into().unwrap());
    for (k, &n) in SIZES.iter().enumerate() {
        let key = k as u32 + 1;
        fill(end.mem.data(0, n), key);
        end.post_recv(1, rd);
        end.send_from(sd, 0, n, key);
        end.sent(sd);
        let (_, len, imm) = end.received(rd);
        if len != n || imm != key {
            fail(format!("echo of {n} bytes: got {len} bytes imm {imm:#x}"));
        }
        end.check(1, n, key, "echo");
    }
    let read = args.str("rel") != "ur";
    for (k, &n) in RDMA_SIZES.iter().enumerate() {
        let key = RDMA_KEY + k as u32;
        fill(end.mem.data(0, n), key);
        end.post_recv(1, rd);
        end.send(
            sd,
            control::OP_RDMAWRITE | control::IMMEDIATE,
            &[
                (raddr, rhandle, 0),
                (end.mem.addr(0), end.mem.handle, n as u32),
            ],
            key,
        );
        end.sent(sd);
        let (_, _, imm) = end.received(rd);
        if imm != ACK | (key & 0xff) {
            fail(format!("rdma write {n}: ack imm {imm:#x}"));
        }
        if read {
            end.mem.data(2 * SLOT, n).fill(0);
            end.send(
                sd,
                control::OP_RDMAREAD,
                &[
                    (raddr, rhandle, 0),
                    (end.mem.addr(2 * SLOT), end.mem.handle, n as u32),
                ],
                0,
            );
            end.sent(sd);
            end.check(2, n, key, "rdma read");
        }
    }
    end.post_recv(1, rd);
    end.send_from(sd, 0, 0, STOP);
    end.sent(sd);
    let (_, _, imm) = end.received(rd);
    if imm != STOP {
        fail(format!("stop reply imm {imm:#x}"));
    }
    println!(
        "RESULT sizes={} rdma={} reads={}",
        SIZES.len(),
        RDMA_SIZES.len(),
        if read { RDMA_SIZES.len() } else { 0 }
    );
}

fn serve_stream(end: &End, args: &Args, window: usize) {
    let size = args.num("size", 65536);
    let count = args.num("count", 100) as u64;
    let start = Instant::now();
    for m in 0..count {
        let slot = (m as usize) % window;
        let (_, len, imm) = end.received(slot);
        if len != size || imm != m as u32 {
            fail(format!("message {m}: {len} bytes imm {imm}"));
        }
        end.check(slot, len, imm, "stream message");
        end.post_recv(slot, slot);
        if m == 9 {
            println!("PROGRESS {}", m + 1);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let mb = (count * size as u64) as f64 / 1e6;
    println!(
        "RESULT received={count} verified_mb={mb:.1} mb_per_s={:.1}",
        mb / secs
    );
    end.sent_after_stop(0, 200);
}

fn client_stream(args: &Args) {
    let window = args.num("window", 4).max(1);
    let size = args.num("size", 65536);
    let count = args.num("count", 100) as u64;
    let survive = args.num("survive", 0) == 1;
    let end = open(args, window);
    for s in 0..window {
        fill(end.mem.data(s * SLOT, size), 0);
    }
    client_connect(args, &end);
    // The server's end-of-stream confirmation lands in descriptor 250.
    end.mem.set_desc(250, 0, &[], 0);
    end.vi
        .post_recv(end.mem.desc(250), end.mem.handle)
        .unwrap_or_else(|e| fail(format!("post_recv: {e}")));
    let mut posted = 0u64;
    let mut done = 0u64;
    let mut last_ok = Instant::now();
    while done < count {
        while posted < count && posted - done < window as u64 {
            let slot = (posted as usize) % window;
            // Each message carries its own key: rewrite only what differs
            // would be cheaper, but a stale slot must show as wrong bytes.
            fill(end.mem.data(slot * SLOT, size), posted as u32);
            let segs = [(end.mem.addr(slot * SLOT), end.mem.handle, size as u32)];
            end.mem
                .set_desc(slot, control::IMMEDIATE, &segs, posted as u32);
            if let Err(e) = end.vi.post_send(end.mem.desc(slot), end.mem.handle) {
                if survive {
                    return report_break(&end, done, last_ok, posted - done);
                }
                fail(format!("post_send: {e}"));
            }
            posted += 1;
        }
        let got = end
            .vi
            .send_wait(Some(WAIT))
            .unwrap_or_else(|e| fail(format!("send_wait: {e}")));
        let (st, _, _) = end.mem.result_of(got.0);
        if st & status::ERROR_MASK != 0 {
            if survive {
                return report_break(&end, done, last_ok, posted - done - 1);
            }
            fail(format!("send {done} status {st:#x}"));
        }
        done += 1;
        last_ok = Instant::now();
        if done == 10 {
            println!("PROGRESS {done}");
        }
    }
    if survive {
        fail("the stream ended without the peer breaking".into());
    }
    let got = end
        .vi
        .recv_wait(Some(WAIT))
        .unwrap_or_else(|e| fail(format!("recv_wait: {e}")));
    let (_, _, imm) = end.mem.result_of(got.0);
    if imm != STOP {
        fail(format!("final imm {imm:#x}"));
    }
    println!("RESULT sent={count}");
}

/// Pieces of the gather/scatter message and where each lies in its slot
/// (apart, so that a descriptor's segments are really scattered).
const PIECES: [(usize, usize); 3] = [(0, 100), (8192, 5000), (65536, 70000)];
const PIECES_LEN: usize = 75_100;
const GATHER_KEY: u32 = 0x6a7e;

impl End {
    /// Segments of slot `slot` at the pieces' places, the last `extra`
    /// bytes longer (a scatter list may hold more than arrives).
    fn pieces(&self, slot: usize, extra: usize) -> Vec<(u64, u32, u32)> {
        PIECES
            .iter()
            .enumerate()
            .map(|(k, &(at, len))| {
                let len = if k == PIECES.len() - 1 {
                    len + extra
                } else {
                    len
                };
                (self.mem.addr(slot * SLOT + at), self.mem.handle, len as u32)
            })
            .collect()
    }

    /// Slot `from`'s pieces, one after the other, into slot `to`.
    fn join_pieces(&self, from: usize, to: usize) {
        let mut off = 0;
        for (at, len) in PIECES {
            let piece = self.mem.data(from * SLOT + at, len).to_vec();
            self.mem.data(to * SLOT + off, len).copy_from_slice(&piece);
            off += len;
        }
    }

    /// Slot `from`'s first bytes, cut into the pieces of slot `to`.
    fn split_pieces(&self, from: usize, to: usize) {
        let mut off = 0;
        for (at, len) in PIECES {
            let piece = self.mem.data(from * SLOT + off, len).to_vec();
            self.mem.data(to * SLOT + at, len).copy_from_slice(&piece);
            off += len;
        }
    }

    fn post_scatter(&self) {
        self.mem.set_desc(0, 0, &self.pieces(0, 10_000), 0);
        self.vi
            .post_recv(self.mem.desc(0), self.mem.handle)
            .unwrap_or_else(|e| fail(format!("post_recv: {e}")));
    }

    /// The next completion through the CQ: (receive?, status, len, imm).
    fn cq_next(&self) -> (bool, u32, usize, u32) {
        let cq = self.cq.as_ref().unwrap_or_else(|| fail("no cq=1".into()));
        let e = self
            .nic
            .cq_wait(cq, Some(WAIT))
            .unwrap_or_else(|e| fail(format!("cq_wait: {e}")));
        if e.vi_id != self.vi.id() {
            fail("CQ entry of another VI".into());
        }
        let d = if e.recv {
            self.vi.recv_done()
        } else {
            self.vi.send_done()
        }
        .unwrap_or_else(|err| fail(format!("done after a CQ entry: {err}")));
        let (st, len, imm) = self.mem.result_of(d.0);
        if st & status::ERROR_MASK != 0 {
            fail(format!("status {st:#x}"));
        }
        (e.recv, st, len as usize, imm)
    }
}

/// Scatter: the message lands in three segments apart, seen through the
/// CQ; checked joined, then sent back gathered from the same pieces.
fn serve_gather(end: &End) {
    let (recv, _, len, imm) = end.cq_next();
    if !recv || len != PIECES_LEN || imm != GATHER_KEY {
        fail(format!("scatter: recv {recv} len {len} imm {imm:#x}"));
    }
    end.join_pieces(0, 1);
    end.check(1, PIECES_LEN, GATHER_KEY, "scattered message");
    end.send(1, control::IMMEDIATE, &end.pieces(0, 0), GATHER_KEY + 1);
    let (recv, _, _, _) = end.cq_next();
    if recv {
        fail("expected the echo's send completion".into());
    }
    println!("RESULT scattered={PIECES_LEN}");
}

/// Gather: one message sent from three segments apart; its echo comes
/// back scattered the other way into one buffer; completions by the CQ.
fn client_gather(args: &Args) {
    let end = open(args, 3);
    fill(end.mem.data(SLOT, PIECES_LEN), GATHER_KEY);
    end.split_pieces(1, 0);
    end.post_recv(2, 1);
    client_connect(args, &end);
    end.send(0, control::IMMEDIATE, &end.pieces(0, 0), GATHER_KEY);
    let mut echo = None;
    let mut sent = false;
    while echo.is_none() || !sent {
        let (recv, _, len, imm) = end.cq_next();
        if recv {
            echo = Some((len, imm));
        } else {
            sent = true;
        }
    }
    if echo != Some((PIECES_LEN, GATHER_KEY + 1)) {
        fail(format!("echo {echo:?}"));
    }
    end.check(2, PIECES_LEN, GATHER_KEY, "gathered echo");
    println!("RESULT gathered={PIECES_LEN}");
}

/// `last`: answers the client's message; the answer must end done (the
/// client placed it) though the client exits at once without closing.
fn serve_last(end: &End) {
    let (_, len, imm) = end.received(0);
    if len != LAST_LEN || imm != HELLO {
        fail(format!("last: {len} bytes imm {imm:#x}"));
    }
    end.check(0, len, imm, "last message");
    fill(end.mem.data(SLOT, LAST_LEN), STOP);
    end.send_from(200, 1, LAST_LEN, STOP);
    end.sent(200);
    println!("RESULT answered={LAST_LEN}");
}

/// `last`: sends a message, takes the answer by polling (so the progress
/// thread, napping `OPENVIA_PROGRESS_US` while the program polls, leaves
/// the acknowledgement held for a reply to it) and exits at once with
/// the VI held by another thread, as the progress thread may hold it at
/// that moment: the VI is never dropped, so its close never runs, and
/// only the exit can still send the acknowledgement the server's send
/// waits for.
fn client_last(args: &Args) {
    let end = open(args, 2);
    end.post_recv(1, 1);
    client_connect(args, &end);
    fill(end.mem.data(0, LAST_LEN), HELLO);
    end.send_from(0, 0, LAST_LEN, HELLO);
    let deadline = Instant::now() + WAIT;
    let poll = |done: &dyn Fn() -> Option<openvia_core::descriptor::DescPtr>| loop {
        if let Some(d) = done() {
            return d;
        }
        if Instant::now() > deadline {
            fail("last: no completion".into());
        }
    };
    let sent = poll(&|| end.vi.send_done().ok());
    let (st, _, _) = end.mem.result_of(sent.0);
    if st & status::ERROR_MASK != 0 {
        fail(format!("last: send status {st:#x}"));
    }
    let got = poll(&|| end.vi.recv_done().ok());
    let (st, len, imm) = end.mem.result_of(got.0);
    if st & status::ERROR_MASK != 0 || len as usize != LAST_LEN || imm != STOP {
        fail(format!(
            "last: answer status {st:#x}, {len} bytes imm {imm:#x}"
        ));
    }
    end.check(1, LAST_LEN, STOP, "last answer");
    let held = end.vi.clone();
    std::thread::spawn(move || {
        let _held = held;
        loop {
            std::thread::park();
        }
    });
    println!("RESULT last={LAST_LEN}");
}

/// Peer-to-peer: both ends ask for each other (`disc`, `peer`,
/// `peer_disc`), then each sends the other one message, checked.
fn peer(args: &Args) {
    const LEN: usize = 3000;
    const KEY: u32 = 0x7065;
    let end = open(args, 2);
    let me = Address {
        host: end.nic.query().address.to_vec(),
        discriminator: args.str("disc").as_bytes().to_vec(),
    };
    let them = Address {
        host: mapped(args.str("peer")),
        discriminator: args.str("peer_disc").as_bytes().to_vec(),
    };
    end.post_recv(1, 1);
    openvia_core::peer_request(&end.vi, &me, &them, Some(WAIT))
        .unwrap_or_else(|e| fail(format!("peer_request: {e}")));
    openvia_core::peer_wait(&end.vi).unwrap_or_else(|e| fail(format!("peer_wait: {e}")));
    fill(end.mem.data(0, LEN), KEY);
    end.send_from(0, 0, LEN, KEY);
    let (_, len, imm) = end.received(1);
    if len != LEN || imm != KEY {
        fail(format!("peer message: {len} bytes imm {imm:#x}"));
    }
    end.check(1, LEN, KEY, "peer message");
    // The other end holds our message once it checked it, so our send
    // ends done even if it closes at once: its close carries the
    // acknowledgement.
    end.sent(0);
    println!("RESULT peer_bytes={LEN}");
}

/// Connects, posts a receive and waits: the test kills the server. The
/// receive must come back with an error (`BROKE`, timed by the test), and
/// a send posted after that must not complete with success.
fn client_idle(args: &Args) {
    let end = open(args, 1);
    client_connect(args, &end);
    end.post_recv(0, 0);
    println!("CONNECTED");
    let got = end
        .vi
        .recv_wait(Some(WAIT))
        .unwrap_or_else(|e| fail(format!("recv_wait: {e}")));
    let (st, _, _) = end.mem.result_of(got.0);
    if st & status::ERROR_MASK == 0 {
        fail(format!("receive completed cleanly: {st:#x}"));
    }
    println!("BROKE");
    end.mem
        .set_desc(1, 0, &[(end.mem.addr(0), end.mem.handle, 100)], 0);
    let succeeded = match end.vi.post_send(end.mem.desc(1), end.mem.handle) {
        Err(_) => false,
        Ok(()) => {
            let got = end
                .vi
                .send_wait(Some(Duration::from_secs(5)))
                .unwrap_or_else(|e| fail(format!("send_wait: {e}")));
            end.mem.result_of(got.0).0 & status::ERROR_MASK == 0
        }
    };
    println!(
        "RESULT send_succeeded={} error_state={}",
        u32::from(succeeded),
        u32::from(end.vi.state() == ViState::Error)
    );
}

/// The VI broke: every outstanding descriptor must come back with an error
/// status, the VI must be in the error state.
fn report_break(end: &End, done: u64, last_ok: Instant, outstanding: u64) {
    let broke_ms = last_ok.elapsed().as_millis();
    let mut flushed = 0u64;
    while flushed < outstanding {
        let got = end
            .vi
            .send_wait(Some(Duration::from_secs(5)))
            .unwrap_or_else(|e| fail(format!("flush send_wait: {e}")));
        let (st, _, _) = end.mem.result_of(got.0);
        if st & status::ERROR_MASK == 0 {
            fail(format!(
                "descriptor after the break completed cleanly: {st:#x}"
            ));
        }
        flushed += 1;
    }
    let got = end
        .vi
        .recv_wait(Some(Duration::from_secs(5)))
        .unwrap_or_else(|e| fail(format!("flush recv_wait: {e}")));
    let (st, _, _) = end.mem.result_of(got.0);
    let recv_flushed = u32::from(st & status::DESC_FLUSHED_ERROR != 0);
    let error_state = u32::from(end.vi.state() == ViState::Error);
    println!(
        "RESULT completed={done} broke_after_ms={broke_ms} flushed_sends={flushed} \
         recv_flushed={recv_flushed} error_state={error_state}"
    );
}

fn main() {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag on this process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if let Some(parent) = std::env::var(openvia_netns_tests::harness::PARENT_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    {
        // SAFETY: signal 0 only probes for the process.
        if unsafe { libc::kill(parent, 0) } != 0 {
            exit(3);
        }
    }
    let args = Args::parse();
    match (args.str("role"), args.str("mode")) {
        ("server", _) => server(&args),
        ("peer", _) => peer(&args),
        ("client", "sizes") => client_sizes(&args),
        ("client", "stream") => client_stream(&args),
        ("client", "idle") => client_idle(&args),
        ("client", "gather") => client_gather(&args),
        ("client", "last") => client_last(&args),
        // Only opens the NIC: which device served is the RESULT below.
        ("client", "open") => drop(open(&args, 1)),
        (r, m) => fail(format!("bad role={r} mode={m}")),
    }
    // Which device served, and what it dropped from strangers.
    let st = openvia_core::udp_stats();
    println!(
        "RESULT device={} unknown_peer={} wrong_conn_id={} malformed={} \
         packet_links={} xdp_links={}",
        DEVICE.get().map_or("none", |d| d.as_str()),
        st.unknown_peer_frames,
        st.wrong_conn_id,
        st.malformed,
        st.ether_packet_links,
        st.ether_xdp_links
    );
}

/// The short name of the device the NIC opened (udp, ether).
static DEVICE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
