//! Every size class, both directions: the client sends each message
//! gathered from three misaligned pieces; the server scatters it into three
//! other pieces, checks it against the pattern and the checksum in the
//! immediate data, and echoes the very bytes it received; the client checks
//! the echo. Zero-length pieces appear for the smallest sizes.

use openvia_core::descriptor::{control, status, DescPtr};
use openvia_tests::arena::{self, spread, uneven_split, Arena};
use openvia_tests::pattern::{checksum32, first_mismatch, message_seed, pattern};
use openvia_tests::SIZE_CLASSES;

use crate::endpoint::{assert_clean, await_peer_close, recv_done, send_done, Endpoint, Opts};

/// Room around one message's pieces: gaps and misalignment.
const PAD: usize = 64 * 1024;
/// Spare capacity of every receive beyond the expected length.
const SLACK: usize = 100;
const STREAM: u64 = 0x51_2e5;

fn largest() -> usize {
    SIZE_CLASSES.iter().copied().max().unwrap_or(0)
}

/// Receive pieces for message `k` of `n` bytes, in buffer set `area`.
fn recv_pieces(area: usize, k: usize, n: usize) -> Vec<(usize, usize)> {
    let mut lens = uneven_split(n, 3, k + 1);
    if let Some(last) = lens.last_mut() {
        *last += SLACK;
    }
    spread(area * (largest() + PAD), &lens, 7 - k % 7, 4099)
}

fn expect_received(st: u32, len: u32, n: usize, what: &str) {
    assert_clean(st, what);
    assert_eq!(
        st & status::OP_MASK,
        status::OP_RECEIVE,
        "{what}: op {st:#x}"
    );
    assert_eq!(len as usize, n, "{what}: length");
}

/// Echo server: receive, verify, send the received bytes back.
pub fn server(opts: &Opts) {
    let ep = Endpoint::open();
    let vi = ep.vi(opts.reliability());
    // Two receive buffer sets: the next receive is posted before the echo
    // of the current one leaves.
    let mem = Arena::new(&ep.nic, ep.ptag, 4, 2 * (largest() + PAD), false, false);
    let post = |k: usize| {
        let pieces = recv_pieces(k % 2, k, SIZE_CLASSES[k]);
        mem.set_desc(k % 2, 0, &mem.segs(&pieces), 0);
        vi.post_recv(mem.desc(k % 2), mem.handle)
            .expect("post recv");
    };
    post(0);
    ep.establish(opts, &vi);
    for (k, &n) in SIZE_CLASSES.iter().enumerate() {
        let what = format!("server: message {k} ({n} bytes)");
        let (st, len, imm) = recv_done(&vi, mem.desc(k % 2));
        expect_received(st, len, n, &what);
        let pieces = recv_pieces(k % 2, k, n);
        // SAFETY: the receive completed; nothing is posted on these bytes.
        let data = unsafe { mem.read_pieces(&pieces, n) };
        if st & status::IMMEDIATE != 0 {
            assert_eq!(imm, checksum32(&data), "{what}: checksum");
        }
        assert_eq!(
            first_mismatch(&data, message_seed(STREAM, k as u64)),
            None,
            "{what}: data"
        );
        if k + 1 < SIZE_CLASSES.len() {
            post(k + 1);
        }
        // Echo from the receive pieces, cut to what they hold.
        let mut left = n;
        let echo: Vec<(usize, usize)> = pieces
            .iter()
            .map(|&(off, cap)| {
                let take = cap.min(left);
                left -= take;
                (off, take)
            })
            .collect();
        mem.set_desc(2, control::IMMEDIATE, &mem.segs(&echo), checksum32(&data));
        vi.post_send(mem.desc(2), mem.handle).expect("post echo");
        assert_clean(send_done(&vi, mem.desc(2)), &what);
    }
    println!("RESULT echoed={}", SIZE_CLASSES.len());
    await_peer_close(&vi, &mem, 3);
}

/// Sends every size class and checks each echo.
pub fn client(opts: &Opts) {
    let ep = Endpoint::open();
    let vi = ep.vi(opts.reliability());
    // Set 0: outgoing pieces; set 1: where echoes land.
    let mem = Arena::new(&ep.nic, ep.ptag, 2, 2 * (largest() + PAD), false, false);
    ep.establish(opts, &vi);
    let mut bytes = 0;
    for (k, &n) in SIZE_CLASSES.iter().enumerate() {
        let what = format!("client: message {k} ({n} bytes)");
        let payload = pattern(n, message_seed(STREAM, k as u64));
        let back = recv_pieces(1, k + 3, n);
        mem.set_desc(1, 0, &mem.segs(&back), 0);
        vi.post_recv(mem.desc(1), mem.handle).expect("post recv");

        let out = spread(0, &uneven_split(n, 3, k), 1 + k % 7, 4097);
        // SAFETY: the send slot and its pieces are not posted.
        unsafe { mem.write_pieces(&out, &payload) };
        // Odd messages carry the checksum; even ones carry no immediate.
        let ctl = if k % 2 == 1 { control::IMMEDIATE } else { 0 };
        mem.set_desc(0, ctl, &mem.segs(&out), checksum32(&payload));
        vi.post_send(mem.desc(0), mem.handle).expect("post send");
        let st = send_done(&vi, mem.desc(0));
        assert_clean(st, &what);
        assert_eq!(st & status::OP_MASK, status::OP_SEND);
        assert_eq!(
            arena::completion(DescPtr(mem.desc(0))).1 as usize,
            n,
            "{what}: send length"
        );

        let (st, len, imm) = recv_done(&vi, mem.desc(1));
        expect_received(st, len, n, &what);
        assert_ne!(st & status::IMMEDIATE, 0, "{what}: echo without immediate");
        // SAFETY: the receive completed.
        let echo = unsafe { mem.read_pieces(&back, n) };
        assert_eq!(imm, checksum32(&payload), "{what}: echo checksum");
        assert!(
            echo == payload,
            "{what}: echo differs at {:?}",
            first_mismatch(&echo, message_seed(STREAM, k as u64))
        );
        bytes += n;
    }
    println!("RESULT messages={} bytes={bytes}", SIZE_CLASSES.len());
    vi.disconnect().expect("disconnect");
}
