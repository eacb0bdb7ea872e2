//! Kernel UDP: datagrams with no reliability, measured as they are.
//!
//! Every datagram starts with a 24-byte header (kind, fragment offset,
//! message length, sequence or message index), gathered/scattered by the
//! kernel so the payload is never copied in user space. A message larger than
//! [`FRAGMENT_PAYLOAD`] is split into several datagrams of at most 65507
//! bytes (the IPv4 UDP limit); [`Transport::framing_note`] says how many.
//!
//! UDP has no connection, so `connect` does a small handshake: the client
//! sends HELLO to the listener's port, the server answers HELLO_ACK from a
//! fresh socket dedicated to that client (as TFTP does), and both sides
//! `connect()` their sockets to each other.
//!
//! Loss is never waited out forever: `recv` gives up after the endpoint's
//! timeout (a lost datagram fails a latency run), and the bandwidth stream
//! override counts what arrived, acknowledges a window once its last fragment
//! arrives or the line has been silent for [`WINDOW_SILENCE`], and reports
//! the missing messages instead of hanging.

use super::socket_io::{grow_buffer, recv_datagram, send_datagram};
use super::{
    split_host_port, BindScope, CheckHook, Endpoint, EndpointOptions, FillHook, ListenOptions,
    Listener, StreamPlan, StreamReceipt, Transport, WaitMode,
};
use crate::error::{BenchError, Result};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Port a standalone `viabench serve` uses unless told otherwise.
pub const DEFAULT_PORT: u16 = 18515;
/// Largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65507;
const HEADER_LEN: usize = 24;
/// Message bytes carried per datagram.
pub const FRAGMENT_PAYLOAD: usize = MAX_DATAGRAM - HEADER_LEN;
const _: () = assert!(HEADER_LEN + FRAGMENT_PAYLOAD <= MAX_DATAGRAM);
/// A window is acknowledged after this long without a datagram.
const WINDOW_SILENCE: Duration = Duration::from_millis(250);
/// How long a blocking receive sleeps before re-checking its deadline.
const BLOCKING_SLICE: Duration = Duration::from_millis(20);
const HANDSHAKE_RETRY: Duration = Duration::from_millis(200);
/// Largest socket buffer requested (the kernel doubles it for bookkeeping).
const MAX_SOCKET_BUFFER: usize = 128 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// A message of the generic send/recv path; `seq` counts messages.
    Msg = 1,
    /// A bandwidth-stream message; `seq` is the message index.
    Stream = 2,
    /// A window acknowledgement; `seq` is the window number.
    Ack = 3,
    Hello = 4,
    HelloAck = 5,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    kind: Kind,
    offset: u32,
    total: u32,
    seq: u64,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.kind as u8;
        b[4..8].copy_from_slice(&self.offset.to_le_bytes());
        b[8..12].copy_from_slice(&self.total.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    /// `None` for anything that is not one of our datagrams.
    fn decode(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_LEN {
            return None;
        }
        let kind = match b[0] {
            1 => Kind::Msg,
            2 => Kind::Stream,
            3 => Kind::Ack,
            4 => Kind::Hello,
            5 => Kind::HelloAck,
            _ => return None,
        };
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Some(Header {
            kind,
            offset: u32_at(4),
            total: u32_at(8),
            seq: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
        })
    }
}

/// Datagrams needed for one message of `size` bytes.
pub fn datagrams_per_message(size: usize) -> usize {
    size.div_ceil(FRAGMENT_PAYLOAD).max(1)
}

pub struct KernelUdp {
    name: &'static str,
    mode: WaitMode,
}

impl KernelUdp {
    pub fn new(name: &'static str, mode: WaitMode) -> Self {
        KernelUdp { name, mode }
    }
}

impl Transport for KernelUdp {
    fn name(&self) -> &'static str {
        self.name
    }

    fn available(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn default_mode(&self) -> WaitMode {
        self.mode
    }

    fn framing_note(&self, size: usize) -> Option<String> {
        let n = datagrams_per_message(size);
        (n > 1).then(|| format!("{n} datagrams/msg"))
    }

    fn listen(&self, opts: &ListenOptions) -> Result<Box<dyn Listener>> {
        let ip = match opts.scope {
            BindScope::Loopback => Ipv4Addr::LOCALHOST,
            BindScope::Any => Ipv4Addr::UNSPECIFIED,
        };
        let socket = UdpSocket::bind((ip, opts.port))
            .map_err(|e| BenchError::io(format!("udp bind {ip}:{}", opts.port), e))?;
        let local = socket
            .local_addr()
            .map_err(|e| BenchError::io("udp local_addr", e))?;
        Ok(Box::new(UdpServer {
            socket,
            local,
            opts: opts.endpoint.clone(),
        }))
    }

    fn connect(&self, address: &str, opts: &EndpointOptions) -> Result<Box<dyn Endpoint>> {
        let (host, port) = split_host_port(address, DEFAULT_PORT)?;
        let server = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| BenchError::io(format!("resolve {host}"), e))?
            .next()
            .ok_or_else(|| BenchError::Usage(format!("{host} has no address")))?;
        let any: SocketAddr = match server {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(any).map_err(|e| BenchError::io("udp bind", e))?;
        size_buffers(&socket, opts);
        socket
            .set_read_timeout(Some(HANDSHAKE_RETRY))
            .map_err(|e| BenchError::io("SO_RCVTIMEO", e))?;
        let hello = Header {
            kind: Kind::Hello,
            offset: 0,
            total: 0,
            seq: 0,
        }
        .encode();
        let deadline = Instant::now() + opts.timeout;
        let mut reply = [0u8; HEADER_LEN];
        // Retried because the HELLO or its answer may be lost like any datagram.
        let peer = loop {
            if Instant::now() >= deadline {
                return Err(BenchError::Timeout(format!(
                    "no UDP server answered at {server}"
                )));
            }
            socket
                .send_to(&hello, server)
                .map_err(|e| BenchError::io("udp send HELLO", e))?;
            match socket.recv_from(&mut reply) {
                Ok((n, from))
                    if Header::decode(&reply[..n]).map(|h| h.kind) == Some(Kind::HelloAck) =>
                {
                    break from
                }
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(BenchError::io("udp recv HELLO_ACK", e)),
            }
        };
        UdpEndpoint::boxed(socket, peer, opts)
    }
}

struct UdpServer {
    socket: UdpSocket,
    local: SocketAddr,
    opts: EndpointOptions,
}

impl Listener for UdpServer {
    fn address(&self) -> String {
        self.local.to_string()
    }

    fn accept(&mut self) -> Result<Box<dyn Endpoint>> {
        let mut buf = [0u8; HEADER_LEN];
        let client = loop {
            let (n, from) = self
                .socket
                .recv_from(&mut buf)
                .map_err(|e| BenchError::io("udp recv HELLO", e))?;
            if Header::decode(&buf[..n]).map(|h| h.kind) == Some(Kind::Hello) {
                break from;
            }
        };
        let mut own = self.local;
        own.set_port(0);
        let socket =
            UdpSocket::bind(own).map_err(|e| BenchError::io("udp bind (per client)", e))?;
        // Before the HELLO_ACK: the client may send its first burst the
        // moment it reads it, into whatever buffer the socket has by then.
        size_buffers(&socket, &self.opts);
        let ack = Header {
            kind: Kind::HelloAck,
            offset: 0,
            total: 0,
            seq: 0,
        }
        .encode();
        socket
            .send_to(&ack, client)
            .map_err(|e| BenchError::io("udp send HELLO_ACK", e))?;
        UdpEndpoint::boxed(socket, client, &self.opts)
    }
}

/// Sizes a socket's buffers for the run's window. Done as soon as the
/// socket exists, before the handshake tells the peer it may send: a burst
/// that arrives while the default buffer (~200 KiB) is in place loses its
/// datagrams past the first few (a 1 MiB message lost its 4th of 17 when
/// the server was preempted between its HELLO_ACK and this call).
fn size_buffers(socket: &UdpSocket, opts: &EndpointOptions) {
    let in_flight = opts.max_message.saturating_mul(opts.max_window as usize);
    let buffer = in_flight.clamp(4 << 20, MAX_SOCKET_BUFFER);
    grow_buffer(socket.as_raw_fd(), true, buffer);
    grow_buffer(socket.as_raw_fd(), false, buffer);
}

struct UdpEndpoint {
    socket: UdpSocket,
    mode: WaitMode,
    timeout: Duration,
    send_seq: u64,
    recv_seq: u64,
}

impl UdpEndpoint {
    fn boxed(
        socket: UdpSocket,
        peer: SocketAddr,
        opts: &EndpointOptions,
    ) -> Result<Box<dyn Endpoint>> {
        socket
            .connect(peer)
            .map_err(|e| BenchError::io(format!("udp connect {peer}"), e))?;
        socket
            .set_read_timeout(Some(BLOCKING_SLICE))
            .map_err(|e| BenchError::io("SO_RCVTIMEO", e))?;
        Ok(Box::new(UdpEndpoint {
            socket,
            mode: opts.mode,
            timeout: opts.timeout,
            send_seq: 0,
            recv_seq: 0,
        }))
    }

    fn send_fragments(&self, kind: Kind, seq: u64, msg: &[u8]) -> Result<()> {
        let total = u32::try_from(msg.len()).map_err(|_| {
            BenchError::Usage(format!("UDP message of {} bytes is too large", msg.len()))
        })?;
        let mut offset = 0;
        loop {
            let end = (offset + FRAGMENT_PAYLOAD).min(msg.len());
            let header = Header {
                kind,
                offset: offset as u32,
                total,
                seq,
            }
            .encode();
            send_datagram(
                self.socket.as_raw_fd(),
                &header,
                &msg[offset..end],
                self.mode,
            )?;
            offset = end;
            if offset >= msg.len() {
                return Ok(());
            }
        }
    }

    /// Next datagram of ours, or `None` at the deadline. A datagram too big
    /// for `payload` is an error only if the caller wanted it: strays from an
    /// earlier phase may be larger than what we now expect.
    fn next_datagram(
        &self,
        payload: &mut [u8],
        deadline: Instant,
        wanted: Kind,
    ) -> Result<Option<(Header, usize)>> {
        let mut head = [0u8; HEADER_LEN];
        loop {
            let got = recv_datagram(
                self.socket.as_raw_fd(),
                &mut head,
                payload,
                self.mode,
                deadline,
            )?;
            let Some((len, truncated)) = got else {
                return Ok(None);
            };
            let Some(h) = Header::decode(&head[..len.min(HEADER_LEN)]) else {
                continue;
            };
            if h.kind != wanted {
                continue;
            }
            if truncated {
                return Err(BenchError::Protocol(format!(
                    "UDP datagram larger than the {} bytes expected",
                    HEADER_LEN + payload.len()
                )));
            }
            return Ok(Some((h, len - HEADER_LEN)));
        }
    }
}

impl Endpoint for UdpEndpoint {
    fn send(&mut self, msg: &[u8]) -> Result<()> {
        let seq = self.send_seq;
        self.send_seq += 1;
        self.send_fragments(Kind::Msg, seq, msg)
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize> {
        let seq = self.recv_seq;
        let deadline = Instant::now() + self.timeout;
        let mut have = 0usize;
        loop {
            // Fragments arrive in order on one path, so each is scattered
            // straight to where it belongs; anything else means loss.
            let Some((h, n)) = self.next_datagram(&mut buf[have..], deadline, Kind::Msg)? else {
                return Err(BenchError::Timeout(format!(
                    "UDP message {seq} incomplete after {:?} ({have} of {} bytes): datagram lost",
                    self.timeout,
                    buf.len()
                )));
            };
            if h.seq < seq {
                continue; // a straggler from an earlier phase
            }
            if h.seq > seq || h.offset as usize != have {
                return Err(BenchError::Timeout(format!(
                    "UDP message {seq}: datagram lost (got message {} offset {}, expected offset {have})",
                    h.seq, h.offset
                )));
            }
            if h.total as usize > buf.len() {
                return Err(BenchError::Protocol(format!(
                    "UDP message of {} bytes, expected at most {}",
                    h.total,
                    buf.len()
                )));
            }
            have += n;
            if have >= h.total as usize {
                self.recv_seq += 1;
                return Ok(h.total as usize);
            }
        }
    }

    fn stream_send(
        &mut self,
        plan: &StreamPlan,
        buf: &mut [u8],
        mut fill: Option<FillHook<'_>>,
    ) -> Result<()> {
        let mut index = plan.first_index;
        let mut ack_room = [0u8; 8];
        for w in 0..plan.windows() {
            for _ in 0..plan.window_len(w) {
                if let Some(fill) = fill.as_mut() {
                    fill(index, buf);
                }
                self.send_fragments(Kind::Stream, index, buf)?;
                index += 1;
            }
            // A lost acknowledgement only costs time: go on with the next window.
            let deadline = Instant::now() + self.timeout;
            while let Some((h, _)) = self.next_datagram(&mut ack_room, deadline, Kind::Ack)? {
                if h.seq >= w {
                    break;
                }
            }
        }
        Ok(())
    }

    fn stream_recv(
        &mut self,
        plan: &StreamPlan,
        buf: &mut [u8],
        mut check: Option<CheckHook<'_>>,
    ) -> Result<StreamReceipt> {
        let window = u64::from(plan.window.max(1));
        let end = plan.first_index + plan.count;
        let room = buf.len().min(FRAGMENT_PAYLOAD);
        let mut receipt = StreamReceipt::default();
        let mut w = 0u64;
        let mut current: Option<(u64, usize)> = None; // (message index, bytes so far)
        let windows = plan.windows();
        let ack = |this: &Self, w: u64| {
            let h = Header {
                kind: Kind::Ack,
                offset: 0,
                total: 0,
                seq: w,
            }
            .encode();
            send_datagram(this.socket.as_raw_fd(), &h, &[], this.mode)
        };
        while w < windows {
            let deadline = Instant::now() + WINDOW_SILENCE;
            let Some((h, n)) = self.next_datagram(&mut buf[..room], deadline, Kind::Stream)? else {
                // Silence: the rest of this window is lost; release the sender.
                ack(self, w)?;
                w += 1;
                continue;
            };
            if h.seq < plan.first_index || h.seq >= end {
                continue;
            }
            let index = h.seq;
            if let Some(check) = check.as_mut() {
                check(index, h.offset as usize, &buf[..n]);
            }
            receipt.bytes += n as u64;
            let so_far = match current {
                Some((i, b)) if i == index => b + n,
                Some((_, b)) => {
                    receipt.messages += u64::from(b == plan.size);
                    n
                }
                None => n,
            };
            current = Some((index, so_far));
            let msg_window = (index - plan.first_index) / window;
            if msg_window > w {
                w = msg_window; // the sender gave up waiting for our ack
            }
            let window_last =
                plan.first_index + (w * window + plan.window_len(w)).min(plan.count) - 1;
            if index == window_last && h.offset as usize + n >= plan.size {
                ack(self, w)?;
                w += 1;
            }
        }
        if let Some((_, b)) = current {
            receipt.messages += u64::from(b == plan.size);
        }
        receipt.lost_messages = plan.count - receipt.messages;
        Ok(receipt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            kind: Kind::Stream,
            offset: 65483,
            total: 1 << 20,
            seq: 0x1234_5678_9abc,
        };
        assert_eq!(Header::decode(&h.encode()), Some(h));
        assert_eq!(Header::decode(&[9u8; HEADER_LEN]), None);
        assert_eq!(Header::decode(&[1u8; 3]), None);
    }

    fn options() -> EndpointOptions {
        EndpointOptions {
            mode: WaitMode::Block,
            max_message: 1 << 20,
            max_window: 2,
            timeout: Duration::from_secs(2),
        }
    }

    /// Runs `client` on a thread connected to an endpoint that `server`
    /// gets on this one (endpoints need not be Send, so each stays put).
    fn with_pair<R>(
        client: impl FnOnce(Box<dyn Endpoint>) + Send + 'static,
        server: impl FnOnce(Box<dyn Endpoint>) -> R,
    ) -> R {
        let udp = KernelUdp::new("kernel-udp", WaitMode::Block);
        let listen = ListenOptions {
            endpoint: options(),
            scope: BindScope::Loopback,
            port: 0,
        };
        let mut listener = udp.listen(&listen).unwrap();
        let address = listener.address();
        let thread = std::thread::spawn(move || {
            let udp = KernelUdp::new("kernel-udp", WaitMode::Block);
            client(udp.connect(&address, &options()).unwrap());
        });
        let result = server(listener.accept().unwrap());
        thread.join().unwrap();
        result
    }

    #[test]
    fn large_message_is_fragmented_and_reassembled() {
        let msg: Vec<u8> = (0..(1 << 20) + 5).map(|i| (i % 251) as u8).collect();
        let expected = msg.clone();
        let got = with_pair(
            move |mut a| a.send(&msg).unwrap(),
            |mut b| {
                let mut got = vec![0u8; (1 << 20) + 5];
                assert_eq!(b.recv(&mut got).unwrap(), got.len());
                got
            },
        );
        assert_eq!(got, expected);
    }

    #[test]
    fn missing_messages_are_counted_not_waited_for() {
        // The receiver expects 5 messages, the sender sends only 4: the last
        // window never comes, and the receiver must give up and report it.
        let size = 70_000; // two datagrams each
        let mut seen = Vec::new();
        let receipt = with_pair(
            move |mut a| {
                let mut buf = vec![0u8; size];
                let plan = StreamPlan {
                    size,
                    count: 4,
                    window: 2,
                    first_index: 0,
                };
                a.stream_send(&plan, &mut buf, None).unwrap();
            },
            |mut b| {
                let mut buf = vec![0u8; size];
                let plan = StreamPlan {
                    size,
                    count: 5,
                    window: 2,
                    first_index: 0,
                };
                let mut check = |i: u64, off: usize, bytes: &[u8]| seen.push((i, off, bytes.len()));
                b.stream_recv(&plan, &mut buf, Some(&mut check)).unwrap()
            },
        );
        assert_eq!(
            receipt,
            StreamReceipt {
                messages: 4,
                bytes: 4 * size as u64,
                lost_messages: 1
            }
        );
        assert_eq!(seen.len(), 8);
        assert_eq!(seen[1], (0, FRAGMENT_PAYLOAD, size - FRAGMENT_PAYLOAD));
    }

    #[test]
    fn fragment_counts() {
        assert_eq!(datagrams_per_message(8), 1);
        assert_eq!(datagrams_per_message(FRAGMENT_PAYLOAD), 1);
        assert_eq!(datagrams_per_message(65536), 2);
        assert_eq!(datagrams_per_message(1 << 20), 17);
    }
}
