//! The connection agent: how a client that knows only (host,
//! discriminator) reaches the right server process on that host.
//!
//! Every process that opens a network NIC runs one agent thread holding a
//! UDP socket on the well-known port (`OPENVIA_AGENT_PORT`, 7250) with
//! `SO_REUSEPORT`, so any number of processes share the port and none of
//! them owns it: there is nothing to hand over when a process exits. The
//! kernel gives each connect request to one of them, whichever; that agent
//! forwards it, with the client's address, to the server waiting on the
//! discriminator through an abstract Unix datagram socket named after a
//! hash of the discriminator (`openvia-udp/<port>/<tag>`). Abstract names
//! belong to the network namespace and vanish with their process, so a
//! stale server cannot linger and two namespaces never mix. The server
//! answers the client directly from the VI's own socket; from then on the
//! agent plays no part.
//!
//! Handshake user data (64 bytes at most): mode (1), target tag (16),
//! the client's wall-clock time in ms (8, replay window), then the client's
//! own discriminator (up to 39 bytes; longer ones are cut).

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use openvia_wire::rum::{Body, Repr};

use super::socket::{host_bytes, UdpSock};
pub use crate::devices::rum::rendezvous::{
    tag, wall_ms, RequestData, MAX_CARRIED_DISCRIMINATOR, MODE_CLIENT_SERVER, MODE_PEER,
    REPLAY_WINDOW_MS, TAG_LEN,
};
use crate::devices::rum::stats::STATS;

/// Forwarded frame: client IP (16), port (2), datagram.
const FWD_HEADER: usize = 18;

fn listener_name(port: u16, tag: &[u8; TAG_LEN]) -> Vec<u8> {
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    format!("openvia-udp/{port}/{hex}").into_bytes()
}

/// A server's mailbox: forwarded connect requests arrive here.
pub struct Listener {
    sock: UnixDatagram,
}

impl Listener {
    /// Claims `tag` on this host (this network namespace); fails if
    /// another process already waits on it.
    pub fn bind(port: u16, tag: &[u8; TAG_LEN]) -> io::Result<Listener> {
        let addr = UnixAddr::from_abstract_name(listener_name(port, tag))?;
        let sock = UnixDatagram::bind_addr(&addr)?;
        Ok(Listener { sock })
    }

    /// Next forwarded request: (client address, datagram).
    pub fn recv(&self, timeout: Duration) -> io::Result<Option<(SocketAddr, Vec<u8>)>> {
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let mut buf = vec![0u8; 2048];
        let n = match self.sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        if n < FWD_HEADER {
            return Ok(None);
        }
        let ip: [u8; 16] = buf[..16].try_into().unwrap_or_default();
        let v6 = Ipv6Addr::from(ip);
        let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
        let port = u16::from_be_bytes([buf[16], buf[17]]);
        buf.truncate(n);
        buf.drain(..FWD_HEADER);
        Ok(Some((SocketAddr::new(ip, port), buf)))
    }
}

/// Sends a request to the listener of `tag` (the agent's job).
fn forward(out: &UnixDatagram, port: u16, tag: &[u8; TAG_LEN], from: SocketAddr, dg: &[u8]) {
    let Ok(addr) = UnixAddr::from_abstract_name(listener_name(port, tag)) else {
        return;
    };
    let mut frame = Vec::with_capacity(FWD_HEADER + dg.len());
    frame.extend_from_slice(&host_bytes(from.ip()));
    frame.extend_from_slice(&from.port().to_be_bytes());
    frame.extend_from_slice(dg);
    match out.send_to_addr(&frame, &addr) {
        Ok(_) => {
            STATS.agent_forwarded.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            // Nobody waits on that discriminator (yet): the client retries.
            STATS.agent_no_listener.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn agent_loop(sock: UdpSock, port: u16) {
    crate::vi::held::this_thread_is_transport();
    let Ok(out) = UnixDatagram::unbound() else {
        return;
    };
    let mut buf = vec![0u8; 2048];
    loop {
        if !sock.wait_readable(Duration::from_secs(3600)) {
            continue;
        }
        while let Ok(Some((n, from))) = sock.recv_from(&mut buf) {
            let dg = &buf[..n];
            let target = match Repr::parse(dg) {
                Ok(Repr {
                    header,
                    body: Body::ConnectRequest(h),
                }) if header.conn_id == 0 => RequestData::parse(h.user_data).map(|d| d.tag),
                _ => None,
            };
            match target {
                Some(tag) => forward(&out, port, &tag, from, dg),
                None => {
                    STATS.agent_garbage.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Starts this process's agent on `port` (once; it lives as long as the
/// process). IPv6 dual-stack where the kernel has it, else IPv4.
pub fn ensure_agent(port: u16) -> io::Result<()> {
    static STARTED: OnceLock<Mutex<Vec<u16>>> = OnceLock::new();
    let mut started = STARTED
        .get_or_init(|| Mutex::new(Vec::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if started.contains(&port) {
        return Ok(());
    }
    let sock = UdpSock::bind(
        SocketAddr::new(IpAddr::from(Ipv6Addr::UNSPECIFIED), port),
        true,
    )
    .or_else(|_| UdpSock::bind(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), port), true))?;
    crate::sys::thread::spawn_quiet("openvia-agent", move || agent_loop(sock, port))?;
    started.push(port);
    Ok(())
}
