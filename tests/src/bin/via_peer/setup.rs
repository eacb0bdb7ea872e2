//! Connection set-up on its own: a client that tries once and reports
//! the outcome (and how long it took), and a server that accepts or
//! rejects one request and reports what its side saw.

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
