//! Kernel TCP: the reference every other transport is compared against.
//!
//! Messages are framed by size alone (both ends know it), Nagle is off
//! (TCP_NODELAY) so a small message leaves at once. `kernel-tcp` blocks in
//! the kernel, `kernel-tcp-spin` polls with `MSG_DONTWAIT`; the bandwidth
//! window protocol is the generic one from [`super::Endpoint`].

use super::socket_io::{recv_exact, send_all};
use super::{
    split_host_port, BindScope, Endpoint, EndpointOptions, ListenOptions, Listener, Transport,
    WaitMode,
};
use crate::error::{BenchError, Result};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;

/// Port a standalone `viabench serve` uses unless told otherwise.
pub const DEFAULT_PORT: u16 = 18515;

pub struct KernelTcp {
    name: &'static str,
    mode: WaitMode,
}

impl KernelTcp {
    pub fn new(name: &'static str, mode: WaitMode) -> Self {
        KernelTcp { name, mode }
    }
}

impl Transport for KernelTcp {
    fn name(&self) -> &'static str {
        self.name
    }

    fn available(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn default_mode(&self) -> WaitMode {
        self.mode
    }

    fn listen(&self, opts: &ListenOptions) -> Result<Box<dyn Listener>> {
        let ip = match opts.scope {
            BindScope::Loopback => Ipv4Addr::LOCALHOST,
            BindScope::Any => Ipv4Addr::UNSPECIFIED,
        };
        let listener = TcpListener::bind((ip, opts.port))
            .map_err(|e| BenchError::io(format!("tcp bind {ip}:{}", opts.port), e))?;
        let local = listener
            .local_addr()
            .map_err(|e| BenchError::io("tcp local_addr", e))?;
        Ok(Box::new(TcpServer {
            listener,
            local,
            mode: opts.endpoint.mode,
        }))
    }

    fn connect(&self, address: &str, opts: &EndpointOptions) -> Result<Box<dyn Endpoint>> {
        let (host, port) = split_host_port(address, DEFAULT_PORT)?;
        let addrs: Vec<SocketAddr> = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| BenchError::io(format!("resolve {host}"), e))?
            .collect();
        let stream = TcpStream::connect(&addrs[..])
            .map_err(|e| BenchError::io(format!("tcp connect {address}"), e))?;
        TcpEndpoint::boxed(stream, opts.mode)
    }
}

struct TcpServer {
    listener: TcpListener,
    local: SocketAddr,
    mode: WaitMode,
}

impl Listener for TcpServer {
    fn address(&self) -> String {
        self.local.to_string()
    }

    fn accept(&mut self) -> Result<Box<dyn Endpoint>> {
        let (stream, _) = self
            .listener
            .accept()
            .map_err(|e| BenchError::io("tcp accept", e))?;
        TcpEndpoint::boxed(stream, self.mode)
    }
}

struct TcpEndpoint {
    stream: TcpStream,
    mode: WaitMode,
}

impl TcpEndpoint {
    fn boxed(stream: TcpStream, mode: WaitMode) -> Result<Box<dyn Endpoint>> {
        stream
            .set_nodelay(true)
            .map_err(|e| BenchError::io("TCP_NODELAY", e))?;
        Ok(Box::new(TcpEndpoint { stream, mode }))
    }
}

impl Endpoint for TcpEndpoint {
    fn send(&mut self, msg: &[u8]) -> Result<()> {
        send_all(self.stream.as_raw_fd(), msg, self.mode)
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize> {
        recv_exact(self.stream.as_raw_fd(), buf, self.mode)?;
        Ok(buf.len())
    }
}
