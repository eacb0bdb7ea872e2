//! The transport interface every measured path implements, and the registry.
//!
//! A [`Transport`] is a factory: it knows its name, whether it can run here,
//! and how to make the two ends of a connection ([`Transport::listen`] on the
//! server, [`Transport::connect`] on the client). An [`Endpoint`] moves whole
//! messages: `send` one, `recv` one. That is all the latency driver needs.
//!
//! Bandwidth needs more freedom: a VIA provider posts a window of descriptors
//! at once and reaps completions later, which a send-then-send loop cannot
//! express. So [`Endpoint::stream_send`] / [`Endpoint::stream_recv`] move a
//! whole [`StreamPlan`] (count messages, acknowledged per window); their
//! default bodies build the OSU-style window protocol on `send`/`recv`, and a
//! transport may override them. Timing, statistics and pattern checking stay
//! in the drivers, outside every transport, so all are measured the same way:
//! an override only calls the `fill` hook before a message leaves and the
//! `check` hook on the bytes that arrived.
//!
//! Adding a transport: write `transports/<name>.rs` implementing `Transport`,
//! then add `mod <name>;` and one `Box::new(...)` line in [`registry`].

pub mod kernel_tcp;
pub mod kernel_udp;
pub mod net;
pub mod shm;
mod socket_io;
mod via_endpoint;
mod via_latency;

use crate::error::{BenchError, Result};
use std::time::Duration;

/// The openvia device under an endpoint, as the client opened it, so a
/// result says what it measured (one JSON object, `device`, in a record).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceNote {
    /// The name the NIC reports (`/dev/via_lo`, `/dev/via_veth0`).
    pub name: String,
    /// The device (`shm`, `udp`, `ether`).
    pub kind: &'static str,
    /// The VI's reliability level (`ur`, `rd`, `rr`).
    pub reliability: &'static str,
    /// The interface a network device sends on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// The way onto the wire (`packet`, `xdp`; the Ethernet device).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The link MTU a network device segments for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<usize>,
    /// The segment policy as its setting spells it, and the payload
    /// bytes per segment it gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_bytes: Option<usize>,
    /// The shared-memory device: which path each size took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shm_paths: Option<ShmPaths>,
}

/// The shared-memory device's choice of path by size (its settings, as
/// this process read them) and what this end's copies did so far.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ShmPaths {
    /// Up to this size a message travels inside one ring record.
    pub inline_max: usize,
    /// From this size on, one CMA copy shared by both processes; between
    /// the two, chunks through the ring.
    pub cma_min: usize,
    /// Least piece of a shared CMA copy (0: the receiver copies alone).
    pub cma_piece: usize,
    /// A ring message slower than this sends the next ones by CMA.
    pub ring_slow_gbps: u64,
    /// Pieces this process pulled (receiving) and pushed (sending), and
    /// messages it sent by CMA because the ring ran slow.
    pub pieces_pulled: u64,
    pub pieces_pushed: u64,
    pub diverted_msgs: u64,
}

/// How an endpoint waits for the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitMode {
    /// Busy-poll: non-blocking calls in a loop, never sleep in the kernel.
    Spin,
    /// Blocking calls: the thread sleeps until data arrives.
    Block,
}

impl WaitMode {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitMode::Spin => "spin",
            WaitMode::Block => "block",
        }
    }
}

/// Settings both ends agree on before the connection exists.
#[derive(Clone, Debug)]
pub struct EndpointOptions {
    pub mode: WaitMode,
    /// Largest message the session will carry; transports size buffers,
    /// rings or registered regions from it.
    pub max_message: usize,
    /// Most messages one window keeps outstanding (bandwidth `--window`).
    pub max_window: u32,
    /// How long an unreliable transport waits before it declares data lost.
    /// Reliable transports may ignore it: a dead peer shows up as EOF.
    pub timeout: Duration,
}

/// Where the server listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindScope {
    /// This host only (the client spawned the server itself).
    Loopback,
    /// Every interface (`viabench serve` for runs across hosts).
    Any,
}

#[derive(Clone, Debug)]
pub struct ListenOptions {
    pub endpoint: EndpointOptions,
    pub scope: BindScope,
    /// 0 = let the kernel pick a free port.
    pub port: u16,
}

/// A way of moving messages between two processes.
pub trait Transport {
    /// The name used on the command line and in reports (`kernel-tcp`...).
    fn name(&self) -> &'static str;

    /// `Ok(())` when this transport can run on this host, else why not.
    fn available(&self) -> std::result::Result<(), String>;

    /// The wait mode used when the user gives no `--mode`.
    fn default_mode(&self) -> WaitMode;

    /// Whether `--peer` (another host) makes sense for this transport.
    fn supports_remote(&self) -> bool {
        true
    }

    /// Whether two processes of this host can meet over it (without
    /// `--peer`, viabench starts its server here).
    fn reaches_this_host(&self) -> bool {
        true
    }

    /// A note on how a message of `size` bytes travels, when that differs
    /// from "one message" (e.g. UDP splitting it into datagrams).
    fn framing_note(&self, _size: usize) -> Option<String> {
        None
    }

    /// Server side: start listening; the listener's address is what the
    /// client passes to `connect`.
    fn listen(&self, opts: &ListenOptions) -> Result<Box<dyn Listener>>;

    /// Client side: connect to `address` (as printed by a listener, or
    /// `HOST[:PORT]` from `--peer`).
    fn connect(&self, address: &str, opts: &EndpointOptions) -> Result<Box<dyn Endpoint>>;
}

/// The server's waiting end.
pub trait Listener {
    /// What the client must pass to [`Transport::connect`] (sent to a locally
    /// spawned client through the readiness pipe).
    fn address(&self) -> String;

    /// Waits for the next client.
    fn accept(&mut self) -> Result<Box<dyn Endpoint>>;
}

/// One `count`-message burst of a bandwidth run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamPlan {
    /// Bytes per message.
    pub size: usize,
    /// Messages to move.
    pub count: u64,
    /// Messages outstanding before the sender waits for an acknowledgement.
    pub window: u32,
    /// Index of the first message (message indices run across warm-up and
    /// measured bursts, so a pattern never repeats).
    pub first_index: u64,
}

impl StreamPlan {
    /// Number of windows, the last one possibly partial.
    pub fn windows(&self) -> u64 {
        self.count.div_ceil(u64::from(self.window.max(1)))
    }

    /// Messages in window `w` (0-based).
    pub fn window_len(&self, w: u64) -> u64 {
        let window = u64::from(self.window.max(1));
        (self.count - w * window).min(window)
    }
}

/// Called with (message index, message buffer) before each message is sent.
pub type FillHook<'a> = &'a mut dyn FnMut(u64, &mut [u8]);
/// Called with (message index, byte offset in the message, bytes) for
/// everything received; a transport that delivers fragments may call it once
/// per fragment.
pub type CheckHook<'a> = &'a mut dyn FnMut(u64, usize, &[u8]);

/// What the receiving end of a stream saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamReceipt {
    /// Messages that arrived complete.
    pub messages: u64,
    /// Payload bytes that arrived (including those of incomplete messages).
    pub bytes: u64,
    /// Messages missing or incomplete (always 0 on reliable transports).
    pub lost_messages: u64,
}

/// The acknowledgement a receiver returns for each window: the window number.
pub const WINDOW_ACK_LEN: usize = 8;

/// The plain round trip: `send`, then `recv` (the default of
/// [`Endpoint::round_trip`], also for endpoints that override it only in
/// some modes).
pub(crate) fn send_then_recv<E: Endpoint + ?Sized>(
    ep: &mut E,
    ping: &[u8],
    pong: &mut [u8],
) -> Result<usize> {
    ep.send(ping)?;
    ep.recv(pong)
}

/// The plain echo server (the default of [`Endpoint::echo_rounds`]):
/// `rounds` times `recv`, then an answer of the same length from a buffer
/// of its own that carries the ping's first 8 bytes (its round number)
/// back, as osu_latency and ucx_perftest answer from a send buffer they
/// never write. Sending back the buffer just received into made the
/// client's copy read a megabyte the server's core had just written:
/// where the two cores share no cache that tripled the shared-memory
/// device's 1 MiB latency (docs/shm.md), a cost the peers' tests never pay.
pub(crate) fn recv_then_send<E: Endpoint + ?Sized>(
    ep: &mut E,
    size: usize,
    rounds: u64,
) -> Result<()> {
    let mut buf = vec![0u8; size];
    let mut answer = vec![0u8; size];
    for _ in 0..rounds {
        let n = ep.recv(&mut buf)?;
        let tag = n.min(8);
        answer[..tag].copy_from_slice(&buf[..tag]);
        ep.send(&answer[..n])?;
    }
    Ok(())
}

/// A connected end that moves whole messages.
pub trait Endpoint {
    /// Sends one message (all of `msg`).
    fn send(&mut self, msg: &[u8]) -> Result<()>;

    /// Receives one whole message into `buf`, returning its length. Callers
    /// pass a buffer of exactly the expected length: stream transports frame
    /// messages by size, both ends know it.
    fn recv(&mut self, buf: &mut [u8]) -> Result<usize>;

    /// Latency client: one round trip of round number `round`, sending
    /// `ping` and receiving the echo into `pong` (returns its length). The
    /// driver writes `round` into the first 8 bytes of a ping that long,
    /// so an endpoint that can lose a datagram may send the ping again and
    /// recognise a stale echo.
    fn round_trip(&mut self, _round: u64, ping: &[u8], pong: &mut [u8]) -> Result<usize> {
        send_then_recv(self, ping, pong)
    }

    /// Latency server: echoes pings of up to `size` bytes until `rounds`
    /// distinct ones were answered.
    fn echo_rounds(&mut self, size: usize, rounds: u64) -> Result<()> {
        recv_then_send(self, size, rounds)
    }

    /// Whether a message may be lost (the unreliable VIA level): then a
    /// latency server must expect a client to repeat its last ping.
    fn loses_messages(&self) -> bool {
        false
    }

    /// The openvia device this endpoint runs on (None: not an openvia
    /// device, e.g. kernel sockets).
    fn device_note(&self) -> Option<DeviceNote> {
        None
    }

    /// Round trips so far that sent their ping again because a datagram
    /// was lost (0 for endpoints that cannot lose one).
    fn repeated_round_trips(&self) -> u64 {
        0
    }

    /// Sends `plan.count` messages of `plan.size` bytes, waiting for the
    /// receiver's acknowledgement after each window; returns once the last
    /// window is acknowledged. `buf` (len = size) is scratch the driver owns,
    /// already touched; an override may ignore it and use its own memory.
    fn stream_send(
        &mut self,
        plan: &StreamPlan,
        buf: &mut [u8],
        mut fill: Option<FillHook<'_>>,
    ) -> Result<()> {
        let mut ack = [0u8; WINDOW_ACK_LEN];
        let mut index = plan.first_index;
        for w in 0..plan.windows() {
            for _ in 0..plan.window_len(w) {
                if let Some(fill) = fill.as_mut() {
                    fill(index, buf);
                }
                self.send(buf)?;
                index += 1;
            }
            self.recv(&mut ack)?;
            let acked = u64::from_le_bytes(ack);
            if acked != w {
                return Err(BenchError::Protocol(format!(
                    "acknowledgement for window {acked}, expected {w}"
                )));
            }
        }
        Ok(())
    }

    /// The receiving half of [`Endpoint::stream_send`]: receives the plan's
    /// messages, acknowledging each full window with a small message.
    fn stream_recv(
        &mut self,
        plan: &StreamPlan,
        buf: &mut [u8],
        mut check: Option<CheckHook<'_>>,
    ) -> Result<StreamReceipt> {
        let mut receipt = StreamReceipt::default();
        let mut index = plan.first_index;
        for w in 0..plan.windows() {
            for _ in 0..plan.window_len(w) {
                let n = self.recv(buf)?;
                if let Some(check) = check.as_mut() {
                    check(index, 0, &buf[..n]);
                }
                receipt.messages += 1;
                receipt.bytes += n as u64;
                index += 1;
            }
            self.send(&w.to_le_bytes())?;
        }
        Ok(receipt)
    }
}

/// Every transport viabench knows, available here or not.
pub fn registry() -> Vec<Box<dyn Transport>> {
    vec![
        Box::new(shm::Shm::new("shm", WaitMode::Spin)),
        Box::new(shm::Shm::new("shm-block", WaitMode::Block)),
        Box::new(net::NetTransport::udp()),
        Box::new(net::NetTransport::ether(net::EtherPath::Packet)),
        Box::new(net::NetTransport::ether(net::EtherPath::Xdp)),
        Box::new(kernel_tcp::KernelTcp::new("kernel-tcp", WaitMode::Block)),
        Box::new(kernel_tcp::KernelTcp::new(
            "kernel-tcp-spin",
            WaitMode::Spin,
        )),
        Box::new(kernel_udp::KernelUdp::new("kernel-udp", WaitMode::Block)),
        Box::new(kernel_udp::KernelUdp::new(
            "kernel-udp-spin",
            WaitMode::Spin,
        )),
    ]
}

/// Looks a transport up by its command-line name.
pub fn find(name: &str) -> Result<Box<dyn Transport>> {
    let mut all = registry();
    match all.iter().position(|t| t.name() == name) {
        Some(i) => Ok(all.swap_remove(i)),
        None => {
            let names: Vec<&str> = all.iter().map(|t| t.name()).collect();
            Err(BenchError::Usage(format!(
                "unknown transport `{name}` (known: {})",
                names.join(", ")
            )))
        }
    }
}

/// Splits `HOST[:PORT]` (IPv6 as `[addr]:port`), using `default_port` when
/// none is given.
pub fn split_host_port(address: &str, default_port: u16) -> Result<(String, u16)> {
    let bad = || BenchError::Usage(format!("bad peer address `{address}` (want HOST[:PORT])"));
    if let Some(rest) = address.strip_prefix('[') {
        let (host, tail) = rest.split_once(']').ok_or_else(bad)?;
        let port = match tail.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if tail.is_empty() => default_port,
            None => return Err(bad()),
        };
        return Ok((host.to_string(), port));
    }
    match address.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => {
            Ok((host.to_string(), port.parse().map_err(|_| bad())?))
        }
        _ if address.is_empty() => Err(bad()),
        _ => Ok((address.to_string(), default_port)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_windows_cover_count() {
        let plan = StreamPlan {
            size: 8,
            count: 130,
            window: 64,
            first_index: 0,
        };
        assert_eq!(plan.windows(), 3);
        assert_eq!(plan.window_len(0), 64);
        assert_eq!(plan.window_len(2), 2);
        let total: u64 = (0..plan.windows()).map(|w| plan.window_len(w)).sum();
        assert_eq!(total, 130);
    }

    #[test]
    fn host_port_forms() {
        assert_eq!(split_host_port("h:9", 1).unwrap(), ("h".into(), 9));
        assert_eq!(split_host_port("h", 1).unwrap(), ("h".into(), 1));
        assert_eq!(split_host_port("[::1]:7", 1).unwrap(), ("::1".into(), 7));
        assert_eq!(split_host_port("::1", 5).unwrap(), ("::1".into(), 5));
        assert!(split_host_port("h:x", 1).is_err());
    }

    #[test]
    fn registry_names_unique_and_findable() {
        let names: Vec<&str> = registry().iter().map(|t| t.name()).collect();
        for n in &names {
            assert_eq!(names.iter().filter(|m| *m == n).count(), 1);
            assert_eq!(find(n).unwrap().name(), *n);
        }
        assert!(find("nope").is_err());
    }
}
