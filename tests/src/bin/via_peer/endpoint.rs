//! What every role starts from: its options, an open NIC with a recorded
//! error handler, VIs with the test's attributes, and the two ways to get
//! connected (listen, say READY, accept — or connect).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use openvia_core::cq::CompletionQueue;
use openvia_core::descriptor::{status, DescPtr, Descriptor};
use openvia_core::mem::PtagId;
use openvia_core::nic::{AsyncError, ErrorCode, Nic};
use openvia_core::vi::{reliability, Vi, ViAttributes, ViState};
use openvia_core::{connect_request, connect_wait, Address, ViaError};
use openvia_tests::MAX_TRANSFER;

/// How long any single wait may take before the role calls it a hang.
pub const WAIT: Duration = Duration::from_secs(20);

/// `key=value` arguments.
pub struct Opts(HashMap<String, String>);

impl Opts {
    pub fn parse(args: impl Iterator<Item = String>) -> Opts {
        Opts(
            args.filter_map(|a| {
                let (k, v) = a.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect(),
        )
    }

    pub fn str(&self, key: &str) -> &str {
        self.0
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("missing argument {key}=..."))
    }

    pub fn str_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.0.get(key).map_or(default, String::as_str)
    }

    pub fn u64_or(&self, key: &str, default: u64) -> u64 {
        self.0.get(key).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{key}={v} is not a number"))
        })
    }

    pub fn usize_or(&self, key: &str, default: usize) -> usize {
        self.u64_or(key, default as u64) as usize
    }

    pub fn flag(&self, key: &str) -> bool {
        self.u64_or(key, 0) != 0
    }

    /// `rel=ur|rd|rr` (default rd).
    pub fn reliability(&self) -> u16 {
        match self.str_or("rel", "rd") {
            "ur" => reliability::UNRELIABLE,
            "rd" => reliability::RELIABLE_DELIVERY,
            "rr" => reliability::RELIABLE_RECEPTION,
            other => panic!("rel={other}: expected ur, rd or rr"),
        }
    }

    /// `side=server` listens, `side=client` connects.
    pub fn is_server(&self) -> bool {
        match self.str_or("side", "server") {
            "server" => true,
            "client" => false,
            other => panic!("side={other}: expected server or client"),
        }
    }
}

/// Asynchronous errors the NIC reported, by VI.
#[derive(Default)]
pub struct ErrorLog {
    seen: Mutex<Vec<(Option<u64>, ErrorCode)>>,
    changed: Condvar,
}

impl ErrorLog {
    fn record(&self, e: &AsyncError) {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((e.vi_id, e.code));
        self.changed.notify_all();
    }

    /// The first error reported for `vi`, waiting up to `timeout` for one
    /// (the handler runs on whichever thread noticed the error).
    pub fn first_for(&self, vi: u64, timeout: Duration) -> Option<ErrorCode> {
        let until = Instant::now() + timeout;
        let mut g = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(&(_, c)) = g.iter().find(|(v, _)| *v == Some(vi)) {
                return Some(c);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            g = self
                .changed
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// An open NIC, one protection tag, and the error log.
pub struct Endpoint {
    pub nic: Nic,
    pub ptag: PtagId,
    pub errors: Arc<ErrorLog>,
}

impl Endpoint {
    pub fn open() -> Endpoint {
        let ep = Endpoint::open_without_handler();
        let log = ep.errors.clone();
        ep.nic
            .set_error_handler(Some(Arc::new(move |e: &AsyncError| log.record(e))))
            .expect("install error handler");
        ep
    }

    /// As a program that installs no error callback (the provider's
    /// default handling applies; `errors` stays empty).
    pub fn open_without_handler() -> Endpoint {
        let nic = Nic::open(None).expect("open /dev/via_lo");
        let ptag = nic.create_ptag().expect("create ptag");
        let errors = Arc::new(ErrorLog::default());
        Endpoint { nic, ptag, errors }
    }

    pub fn address(&self, disc: &str) -> Address {
        Address {
            host: self.nic.query().address.to_vec(),
            discriminator: disc.as_bytes().to_vec(),
        }
    }

    /// The attributes every role uses (RDMA read where the level allows it).
    pub fn attrs(&self, rel: u16) -> ViAttributes {
        ViAttributes {
            reliability: rel,
            max_transfer: MAX_TRANSFER,
            ptag: self.ptag,
            rdma_write: true,
            rdma_read: rel != reliability::UNRELIABLE,
        }
    }

    pub fn vi(&self, rel: u16) -> Arc<Vi> {
        self.vi_with_cqs(rel, None, None)
    }

    pub fn vi_with_cqs(
        &self,
        rel: u16,
        send_cq: Option<Arc<CompletionQueue>>,
        recv_cq: Option<Arc<CompletionQueue>>,
    ) -> Arc<Vi> {
        self.nic
            .create_vi(self.attrs(rel), send_cq, recv_cq)
            .expect("create VI")
    }

    /// Binds the discriminator so clients can queue up: a zero-timeout
    /// ConnectWait creates the listening socket and times out at once.
    pub fn listen(&self, disc: &str) -> Result<(), ViaError> {
        match connect_wait(self.nic.shared(), &self.address(disc), Some(Duration::ZERO)) {
            Err(ViaError::Timeout) => Ok(()),
            Err(e) => Err(e),
            Ok(_) => panic!("a connection request before anyone was told we listen"),
        }
    }

    /// Listens, says READY, and accepts one connection onto `vi`.
    pub fn serve_one(&self, disc: &str, vi: &Arc<Vi>) {
        self.listen(disc).expect("listen");
        println!("READY");
        self.accept(disc, vi);
    }

    /// Accepts the next connection request for `disc` onto `vi`.
    pub fn accept(&self, disc: &str, vi: &Arc<Vi>) {
        let req =
            connect_wait(self.nic.shared(), &self.address(disc), Some(WAIT)).expect("connect wait");
        req.accept(vi).expect("accept");
        // A peer that dies at once (the crash tests kill it after a few
        // messages) may already have broken the VI by the time we look.
        let st = vi.state();
        assert!(
            matches!(st, ViState::Connected | ViState::Error),
            "state after accept: {st:?}"
        );
    }

    /// Connects `vi` to the server at `disc`.
    pub fn connect(&self, vi: &Arc<Vi>, disc: &str) {
        let local = self.address(&format!("{disc}.c{}", std::process::id()));
        connect_request(vi, &local, &self.address(disc), Some(WAIT)).expect("connect request");
        assert_eq!(vi.state(), ViState::Connected);
    }

    /// Gets `vi` connected as `opts` says (side=server|client, disc=...).
    pub fn establish(&self, opts: &Opts, vi: &Arc<Vi>) {
        let disc = opts.str("disc");
        if opts.is_server() {
            self.serve_one(disc, vi);
        } else {
            self.connect(vi, disc);
        }
    }
}

/// The name of an error, as RESULT lines spell it.
pub fn err_name(e: &ViaError) -> &'static str {
    match e {
        ViaError::InvalidParameter(_) => "InvalidParameter",
        ViaError::Resource(_) => "Resource",
        ViaError::Timeout => "Timeout",
        ViaError::Rejected => "Rejected",
        ViaError::InvalidReliability => "InvalidReliability",
        ViaError::InvalidMtu => "InvalidMtu",
        ViaError::InvalidPtag => "InvalidPtag",
        ViaError::InvalidRdmaRead => "InvalidRdmaRead",
        ViaError::Descriptor(_) => "Descriptor",
        ViaError::InvalidState(_) => "InvalidState",
        ViaError::NameService(_) => "NameService",
        ViaError::NoMatch => "NoMatch",
        ViaError::NotDone => "NotDone",
    }
}

/// Waits for the next completed send and checks it is `expect`.
pub fn send_done(vi: &Vi, expect: *mut Descriptor) -> u32 {
    let d = vi
        .send_wait(Some(WAIT))
        .unwrap_or_else(|e| panic!("send wait: {e}"));
    assert_eq!(d.0, expect, "send completions out of order");
    openvia_tests::arena::completion(DescPtr(expect)).0
}

/// Waits for the next completed receive and checks it is `expect`;
/// returns (status, length, immediate).
pub fn recv_done(vi: &Vi, expect: *mut Descriptor) -> (u32, u32, u32) {
    let d = vi
        .recv_wait(Some(WAIT))
        .unwrap_or_else(|e| panic!("recv wait: {e}"));
    assert_eq!(d.0, expect, "receive completions out of order");
    openvia_tests::arena::completion(DescPtr(expect))
}

/// Fails unless the status word says done without error.
pub fn assert_clean(st: u32, what: &str) {
    assert_ne!(st & status::DONE, 0, "{what}: not done ({st:#x})");
    assert_eq!(st & status::ERROR_MASK, 0, "{what}: error status {st:#x}");
}

/// After our last message: posts a receive in `slot` and waits for the
/// peer's disconnect to flush it, so neither side leaves while the other
/// still needs it. Only for a VI with no other receive posted.
pub fn await_peer_close(vi: &Vi, arena: &openvia_tests::arena::Arena, slot: usize) {
    let d = arena.desc(slot);
    arena.set_desc(slot, 0, &[], 0);
    vi.post_recv(d, arena.handle)
        .expect("post the closing receive");
    expect_flushed(vi, d);
}

/// Waits for the receive `d` (the oldest posted) to come back flushed: the
/// peer hung up.
pub fn expect_flushed(vi: &Vi, d: *mut Descriptor) {
    let (st, _, _) = recv_done(vi, d);
    assert_ne!(
        st & status::DESC_FLUSHED_ERROR,
        0,
        "expected the peer's disconnect to flush the receive, status {st:#x}"
    );
}
