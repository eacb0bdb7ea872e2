//! Connection set-up on its own: a client that tries once and reports
//! the outcome (and how long it took), and a server that accepts or
//! rejects one request and reports what its side saw. And a client that
//! connects several VIs and exits without disconnecting, against a server
//! with no error callback that waits until all its VIs broke.

use std::time::Instant;

use openvia_core::vi::ViState;
use openvia_core::{connect_request, connect_wait};

use openvia_tests::arena::Arena;

use crate::endpoint::{await_peer_close, err_name, Endpoint, Opts, WAIT};

pub fn connect_once(opts: &Opts) {
    let ep = Endpoint::open();
    let vi = ep.vi(opts.reliability());
    let disc = opts.str("disc");
    let timeout = std::time::Duration::from_millis(opts.u64_or("timeout_ms", 5000));
    let local = ep.address(&format!("{disc}.c{}", std::process::id()));
    let start = Instant::now();
    let r = connect_request(&vi, &local, &ep.address(disc), Some(timeout));
    let ms = start.elapsed().as_millis();
    let outcome = r.as_ref().map_or_else(err_name, |_| "Ok");
    let state = match vi.state() {
        ViState::Idle => "Idle",
        ViState::Connected => "Connected",
        ViState::ConnectPending => "ConnectPending",
        ViState::Error => "Error",
    };
    println!("RESULT outcome={outcome} ms={ms} state={state}");
    if r.is_ok() {
        vi.disconnect().expect("disconnect");
    }
}

pub fn accept_once(opts: &Opts) {
    let ep = Endpoint::open();
    let vi = ep.vi(opts.reliability());
    let disc = opts.str("disc");
    if let Err(e) = ep.listen(disc) {
        println!("RESULT listen={}", err_name(&e));
        return;
    }
    println!("READY");
    let req = connect_wait(ep.nic.shared(), &ep.address(disc), Some(WAIT)).expect("connect wait");
    let r = match opts.str_or("action", "accept") {
        "accept" => req.accept(&vi),
        "reject" => req.reject(),
        other => panic!("action={other}"),
    };
    let outcome = r.as_ref().map_or_else(err_name, |_| "Ok");
    println!("RESULT listen=Ok outcome={outcome}");
    if r.is_ok() && opts.str_or("action", "accept") == "accept" {
        // Stay until the client, which reports its state first, hangs up.
        let m = Arena::new(&ep.nic, ep.ptag, 1, 0, false, false);
        await_peer_close(&vi, &m, 0);
    }
}

/// Connects `vis` VIs to `disc`, says so, and exits without VipDisconnect.
pub fn abandon_client(opts: &Opts) {
    let ep = Endpoint::open();
    let disc = opts.str("disc");
    let vis: Vec<_> = (0..opts.usize_or("vis", 1))
        .map(|_| ep.vi(opts.reliability()))
        .collect();
    for vi in &vis {
        ep.connect(vi, disc);
    }
    println!("RESULT connected={}", vis.len());
    std::process::exit(0);
}

/// Accepts `vis` VIs with no error callback installed, then waits until
/// every one went to the error state (the client left without a word).
pub fn abandon_server(opts: &Opts) {
    let ep = Endpoint::open_without_handler();
    let disc = opts.str("disc");
    let vis: Vec<_> = (0..opts.usize_or("vis", 1))
        .map(|_| ep.vi(opts.reliability()))
        .collect();
    ep.listen(disc).expect("listen");
    println!("READY");
    for vi in &vis {
        ep.accept(disc, vi);
    }
    let until = Instant::now() + WAIT;
    while vis.iter().any(|v| v.state() != ViState::Error) {
        assert!(Instant::now() < until, "VIs still connected after {WAIT:?}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    println!("RESULT broken={}", vis.len());
}
