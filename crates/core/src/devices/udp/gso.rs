//! The UDP device's sends: the datagrams of a [`TxBatch`] gathered with
//! iovecs, runs of equal-sized datagrams as one GSO send (`UDP_SEGMENT`),
//! all of them in one sendmmsg.

use std::io;
use std::mem::{size_of, zeroed};

use super::socket::{UdpSock, SOL_UDP, UDP_SEGMENT};
use crate::devices::rum::tx::{TxBatch, TxDatagram};

/// Most datagrams the kernel accepts in one GSO send.
const GSO_MAX_SEGMENTS: usize = 64;
/// Largest GSO super-datagram (the UDP length field).
const GSO_MAX_BYTES: usize = 65000;

/// Sends the datagrams of `tx` on `sock` (connected) in as few calls as it
/// can. Returns how many went out; the rest stay queued when the socket
/// buffer is full.
pub fn send_batch(sock: &UdpSock, tx: &TxBatch) -> io::Result<usize> {
    let n = tx.len();
    if n == 0 {
        return Ok(0);
    }
    if n == 1 {
        if let Some(d) = tx.datagrams().next().filter(|d| d.outside.is_none()) {
            return sock.send_one(d.in_arena);
        }
    }
    // iovecs of every group, then per group (first iovec, iovec count,
    // datagram count, GSO size or 0).
    let mut iovs: Vec<libc::iovec> = Vec::with_capacity(3 * n);
    let mut groups: Vec<(usize, usize, usize, u16)> = Vec::with_capacity(n);
    let mut items = tx.datagrams().peekable();
    while let Some(mut item) = items.next() {
        let seg = item.len();
        let mut bytes = 0;
        let mut count = 0;
        let iov_first = iovs.len();
        loop {
            push_iov(
                &mut iovs,
                iov_first,
                item.head.as_ptr() as u64,
                item.head.len(),
            );
            if let Some(o) = item.outside {
                push_iov(&mut iovs, iov_first, o.addr, o.len);
            }
            // The trailer follows the headers in the arena.
            push_iov(
                &mut iovs,
                iov_first,
                item.trailer.as_ptr() as u64,
                item.trailer.len(),
            );
            bytes += item.len();
            count += 1;
            // Only the last datagram of a run may be shorter.
            let open = sock.gso && count < GSO_MAX_SEGMENTS && item.len() == seg;
            let next = open
                .then(|| {
                    items.next_if(|d: &TxDatagram<'_>| {
                        d.len() <= seg && bytes + d.len() <= GSO_MAX_BYTES
                    })
                })
                .flatten();
            match next {
                Some(d) => item = d,
                None => break,
            }
        }
        let gso = if count > 1 { seg as u16 } else { 0 };
        groups.push((iov_first, iovs.len() - iov_first, count, gso));
    }
    let cmsg_space = {
        // SAFETY: CMSG_SPACE is a pure computation.
        unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) as usize }
    };
    let stride = cmsg_space.div_ceil(8);
    let mut cbufs = vec![0u64; groups.len() * stride];
    // SAFETY: all-zero is a valid mmsghdr.
    let mut msgs: Vec<libc::mmsghdr> = (0..groups.len()).map(|_| unsafe { zeroed() }).collect();
    for (k, &(iov_first, iov_count, _, gso)) in groups.iter().enumerate() {
        let m = &mut msgs[k].msg_hdr;
        m.msg_iov = iovs[iov_first..].as_mut_ptr();
        m.msg_iovlen = iov_count;
        if gso != 0 {
            let cb = cbufs[k * stride..].as_mut_ptr() as *mut u8;
            m.msg_control = cb.cast();
            m.msg_controllen = cmsg_space;
            // SAFETY: the control buffer is cmsg_space bytes, room for one
            // header and a u16, as CMSG_SPACE computed.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(m);
                (*c).cmsg_level = SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, gso);
            }
        }
    }
    let mut done_groups = 0;
    while done_groups < msgs.len() {
        // SAFETY: every mmsghdr points at live iovecs and control buffers
        // that outlive the call; the iovecs name the arena and payloads
        // the protocol keeps in place for the length of this flush.
        let r = unsafe {
            libc::sendmmsg(
                sock.raw_fd(),
                msgs[done_groups..].as_mut_ptr(),
                (msgs.len() - done_groups) as u32,
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => break,
                // ECONNREFUSED (the peer's port is closed, `socket::refused`)
                // among others: the caller decides.
                _ => return Err(e),
            }
        }
        done_groups += r as usize;
    }
    Ok(groups[..done_groups].iter().map(|g| g.2).sum())
}

/// Appends an iovec, extending the previous one when the bytes follow on
/// (consecutive datagrams with no payload outside the arena) and it
/// belongs to the same message (index `floor` on).
fn push_iov(iovs: &mut Vec<libc::iovec>, floor: usize, addr: u64, len: usize) {
    if len == 0 {
        return;
    }
    if let Some(last) = iovs[floor..].last_mut() {
        if last.iov_base as u64 + last.iov_len as u64 == addr {
            last.iov_len += len;
            return;
        }
    }
    iovs.push(libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::rum::tx::Outside;

    /// A sender with GSO connected to a receiver without GRO, on loopback.
    fn gso_pair() -> (UdpSock, UdpSock) {
        let lo = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let mut rx = UdpSock::bind(lo, false).unwrap();
        rx.enable_offloads(false, false);
        let mut txs = UdpSock::bind(lo, false).unwrap();
        txs.enable_offloads(true, false);
        txs.connect(rx.local_addr().unwrap()).unwrap();
        (txs, rx)
    }

    /// Each of `want` arrives whole and alone, in order.
    fn expect_datagrams(rx: &UdpSock, want: &[Vec<u8>]) {
        let mut buf = vec![0u8; 4096];
        for (k, w) in want.iter().enumerate() {
            assert!(
                rx.wait_readable(std::time::Duration::from_secs(5)),
                "datagram {k} missing"
            );
            let (n, _) = rx.recv_from(&mut buf).unwrap().unwrap();
            assert_eq!(&buf[..n], &w[..], "datagram {k}");
        }
    }

    /// Datagrams of several sizes, some with their payload outside the
    /// arena, in runs that make several GSO groups: each arrives whole and
    /// alone, in order, on a real socket.
    #[test]
    fn mixed_batches_arrive_datagram_by_datagram() {
        let (txs, rx) = gso_pair();
        let payload: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 251) as u8).collect();
        // (head bytes, outside payload bytes): a run of 1000-byte
        // datagrams, a short one ending it, small inline ones, another run.
        let mut shape = vec![(40usize, 960usize); 70];
        shape.push((40, 100));
        shape.extend([(200, 0), (200, 0), (64, 0)]);
        shape.extend(vec![(1000, 0); 5]);
        shape.extend(vec![(30, 1470); 3]);
        let mut batch = TxBatch::default();
        let mut want = Vec::new();
        let mut at = 0;
        for (k, &(head, out)) in shape.iter().enumerate() {
            let t = batch.tail(2048);
            for (j, b) in t[..head].iter_mut().enumerate() {
                *b = (k + j) as u8;
            }
            let mut d = t[..head].to_vec();
            let outside = (out > 0).then(|| Outside {
                addr: payload[at..].as_ptr() as u64,
                len: out,
            });
            d.extend_from_slice(&payload[at..at + out]);
            at += out;
            batch.commit_split(head, outside);
            want.push(d);
        }
        assert_eq!(send_batch(&txs, &batch).unwrap(), shape.len());
        expect_datagrams(&rx, &want);
    }

    /// Trailers go after the payload named outside the arena, on the wire
    /// and when a kept datagram takes its payload in.
    #[test]
    fn trailers_follow_the_payload() {
        let (txs, rx) = gso_pair();
        let payload: Vec<u8> = (0..4000u32).map(|i| (i * 13 % 251) as u8).collect();
        let build = || {
            let mut batch = TxBatch::default();
            let mut want = Vec::new();
            for k in 0..6usize {
                let t = batch.tail(128);
                t[..40].fill(k as u8);
                t[40..64].fill(0xA0 + k as u8);
                let out = (k % 3 != 2).then(|| Outside {
                    addr: payload[k * 500..].as_ptr() as u64,
                    len: 500,
                });
                let mut d = vec![k as u8; 40];
                if out.is_some() {
                    d.extend_from_slice(&payload[k * 500..k * 500 + 500]);
                }
                d.extend_from_slice(&[0xA0 + k as u8; 24]);
                batch.commit_trailed(40, out, 24);
                want.push(d);
            }
            (batch, want)
        };
        let (batch, want) = build();
        assert_eq!(send_batch(&txs, &batch).unwrap(), want.len());
        expect_datagrams(&rx, &want);
        let (mut batch, want) = build();
        batch.consume(2);
        let kept: Vec<u8> = want[2..].concat();
        let in_arena: Vec<u8> = batch
            .datagrams()
            .flat_map(|d| d.in_arena.to_vec())
            .collect();
        assert_eq!(in_arena, kept);
        assert!(batch
            .datagrams()
            .all(|d| d.outside.is_none() && d.trailer.is_empty()));
    }

    #[test]
    fn adjacent_arena_parts_share_an_iovec() {
        let a = [0u8; 32];
        let mut iovs = Vec::new();
        push_iov(&mut iovs, 0, a.as_ptr() as u64, 8);
        push_iov(&mut iovs, 0, a.as_ptr() as u64 + 8, 8);
        push_iov(&mut iovs, 0, a.as_ptr() as u64 + 20, 4);
        assert_eq!(iovs.len(), 2);
        assert_eq!(iovs[0].iov_len, 16);
        // A new message starts its own iovec even where the bytes follow on.
        push_iov(&mut iovs, 2, a.as_ptr() as u64 + 24, 4);
        assert_eq!(iovs.len(), 3);
    }
}
