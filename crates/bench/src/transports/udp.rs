//! openvia's network device (UDP, the RUM protocol), measured through the
//! core's VIA API exactly as the shared-memory device is (`shm.rs`, whose
//! endpoint this mirrors: registration cache, windows of posted sends,
//! several posted receives). Latency round trips post the receive for the
//! echo first (`via_latency`), which the unreliable level needs: there a
//! message that finds no receive posted is dropped.
//!
//! Addresses are `HOST[:N]`: the server waits on discriminator
//! `viabench-N` (N = `serve --port`, default 0) on its NIC's address; the
//! client resolves HOST with `VipNSGetHostByName` rules. Settings, as
//! environment variables read by the core (see docs/udp.md):
//! `OPENVIA_BENCH_DEVICE` (default `/dev/via_udp`, e.g. `/dev/via_veth0`),
//! `OPENVIA_BENCH_RELIABILITY` (`ur`, `rd` default, `rr`),
//! `OPENVIA_UDP_SEGMENT` (`fixed`, `page`, `largest`, bytes),
//! `OPENVIA_UDP_MTU`, `OPENVIA_UDP_FLOW` (`hetero`, `homo`),
//! `OPENVIA_UDP_LOSSLESS=1` (flow-control-only), `OPENVIA_UDP_WINDOW`.

use std::sync::Arc;
use std::time::Duration;

use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi};
use openvia_core::{connect_request, Address};

use super::via_endpoint::{accept_endpoint, open_vi, via, ViaEndpoint};
use super::{Endpoint, EndpointOptions, ListenOptions, Listener, Transport, WaitMode};
use crate::error::Result;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Udp;

impl Udp {
    pub fn new() -> Self {
        Udp
    }
}

fn device() -> String {
    std::env::var("OPENVIA_BENCH_DEVICE").unwrap_or_else(|_| "/dev/via_udp".to_string())
}

fn bench_reliability() -> u16 {
    match std::env::var("OPENVIA_BENCH_RELIABILITY").as_deref() {
        Ok("ur") | Ok("unreliable") => reliability::UNRELIABLE,
        Ok("rr") | Ok("reception") => reliability::RELIABLE_RECEPTION,
        _ => reliability::RELIABLE_DELIVERY,
    }
}

fn setup(opts: &EndpointOptions) -> Result<(Nic, PtagId, Arc<Vi>)> {
    let max = (opts.max_message as u64).clamp(4096, openvia_core::devices::udp::UDP_MAX_TRANSFER);
    open_vi(&device(), bench_reliability(), Some(max), opts)
}

impl Transport for Udp {
    fn name(&self) -> &'static str {
        "udp"
    }

    fn available(&self) -> std::result::Result<(), String> {
        Nic::open(Some(&device()))
            .and_then(|n| n.close())
            .map_err(|e| format!("openvia network device {}: {e}", device()))
    }

    fn default_mode(&self) -> WaitMode {
        WaitMode::Spin
    }

    fn listen(&self, opts: &ListenOptions) -> Result<Box<dyn Listener>> {
        let n = if opts.scope == super::BindScope::Loopback && opts.port == 0 {
            // A local server spawned per run: a discriminator of its own.
            std::process::id() as u16
        } else {
            opts.port
        };
        let nic = Nic::open(Some(&device())).map_err(|e| via("open", e))?;
        let ip = openvia_core::ns::address_ip(&nic.query().address).ok_or_else(|| {
            via(
                "own address",
                openvia_core::ViaError::NameService("unknown host address".into()),
            )
        })?;
        let _ = nic.close();
        Ok(Box::new(UdpListener {
            disc: format!("viabench-{n}"),
            announce: if ip.contains(':') {
                format!("[{ip}]:{n}")
            } else {
                format!("{ip}:{n}")
            },
            opts: opts.endpoint.clone(),
        }))
    }

    fn connect(&self, address: &str, opts: &EndpointOptions) -> Result<Box<dyn Endpoint>> {
        let (host, n) = super::split_host_port(address, 18515)?;
        let (nic, ptag, vi) = setup(opts)?;
        let mine = nic.query().address;
        let host = openvia_core::ns::get_host_by_name(&nic, &host)
            .map_err(|e| via("resolve", e))?
            .to_vec();
        let remote = Address {
            host,
            discriminator: format!("viabench-{n}").into_bytes(),
        };
        let local = Address {
            host: mine.to_vec(),
            discriminator: format!("viabench-client-{}", std::process::id()).into_bytes(),
        };
        connect_request(&vi, &local, &remote, Some(CONNECT_TIMEOUT))
            .map_err(|e| via("connect", e))?;
        let mut ep = ViaEndpoint::new(nic, ptag, vi, opts)?;
        ep.prepost = true;
        Ok(Box::new(ep))
    }
}

struct UdpListener {
    disc: String,
    announce: String,
    opts: EndpointOptions,
}

impl Listener for UdpListener {
    fn address(&self) -> String {
        self.announce.clone()
    }

    fn accept(&mut self) -> Result<Box<dyn Endpoint>> {
        let (nic, ptag, vi) = setup(&self.opts)?;
        let mut ep = accept_endpoint(nic, ptag, vi, &self.disc, &self.opts)?;
        ep.prepost = true;
        Ok(Box::new(ep))
    }
}
