//! openvia's shared-memory device, measured through the core's VIA API
//! (the endpoint itself is `via_endpoint`). `spin` polls forever; `block`
//! sleeps on the doorbell at once (spin budget 0).

use std::time::Duration;

use openvia_core::nic::Nic;
use openvia_core::vi::reliability;
use openvia_core::{connect_request, Address};

use super::via_endpoint::{accept_on, open_vi, via, ViaEndpoint};
use super::{Endpoint, EndpointOptions, ListenOptions, Listener, Transport, WaitMode};
use crate::error::Result;

const DEVICE: &str = "/dev/via_lo";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Shm {
    name: &'static str,
    mode: WaitMode,
}

impl Shm {
    /// `shm` polls; `shm-block` sleeps on the doorbell at once.
    pub fn new(name: &'static str, mode: WaitMode) -> Self {
        Shm { name, mode }
    }
}

fn setup(
    opts: &EndpointOptions,
) -> Result<(
    Nic,
    openvia_core::mem::PtagId,
    std::sync::Arc<openvia_core::vi::Vi>,
)> {
    let nic = Nic::open(Some(DEVICE)).map_err(|e| via(&format!("open {DEVICE}"), e))?;
    open_vi(nic, reliability::RELIABLE_DELIVERY, None, opts)
}

impl Transport for Shm {
    fn name(&self) -> &'static str {
        self.name
    }

    fn available(&self) -> std::result::Result<(), String> {
        Nic::open(Some("/dev/via_lo"))
            .and_then(|n| n.close())
            .map_err(|e| format!("openvia shared-memory device: {e}"))
    }

    fn default_mode(&self) -> WaitMode {
        self.mode
    }

    fn supports_remote(&self) -> bool {
        false
    }

    fn listen(&self, opts: &ListenOptions) -> Result<Box<dyn Listener>> {
        let disc = format!(
            "viabench-{}-{:x}",
            std::process::id(),
            openvia_core::sys::random_u64()
        );
        Ok(Box::new(ShmListener {
            disc,
            opts: opts.endpoint.clone(),
        }))
    }

    fn connect(&self, address: &str, opts: &EndpointOptions) -> Result<Box<dyn Endpoint>> {
        let (nic, ptag, vi) = setup(opts)?;
        let host = nic.query().address.to_vec();
        let remote = Address {
            host: host.clone(),
            discriminator: address.as_bytes().to_vec(),
        };
        let local = Address {
            host,
            discriminator: format!("{address}-client").into_bytes(),
        };
        connect_request(&vi, &local, &remote, Some(CONNECT_TIMEOUT))
            .map_err(|e| via("connect", e))?;
        Ok(Box::new(ViaEndpoint::new(nic, ptag, vi, opts)?))
    }
}

struct ShmListener {
    disc: String,
    opts: EndpointOptions,
}

impl Listener for ShmListener {
    fn address(&self) -> String {
        self.disc.clone()
    }

    fn accept(&mut self) -> Result<Box<dyn Endpoint>> {
        let (nic, ptag, vi) = setup(&self.opts)?;
        accept_on(nic, ptag, vi, &self.disc, &self.opts)
    }
}
