//! Many connections in one process (two NICs over the shared-memory
//! device): what each costs in memory once it has been busy, and the VI
//! limit as a setting. Its own test binary, so the settings below are the
//! process's from the start.

mod scenarios;

use std::sync::{Arc, Once};
use std::time::Duration;

use openvia_core::descriptor::Descriptor;
use openvia_core::nic::Nic;
use openvia_core::vi::{reliability, Vi};
use openvia_core::{connect_request, connect_wait, connect_wait_end, Address, ViaError};
use scenarios::{attrs, set_desc, Arena};

/// Small rings (so a few thousand messages wrap them) and a VI limit.
const RING_BYTES: usize = 256 * 1024;
const MAX_VI: usize = 100;

fn settings() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Before any NIC exists in this process (every test calls this
        // first, and the settings are read once, at the first NIC).
        std::env::set_var("OPENVIA_RING_BYTES", RING_BYTES.to_string());
        std::env::set_var("OPENVIA_MAX_VI", MAX_VI.to_string());
    });
}

/// Shared memory this process has resident (KiB), every mapping counted.
fn rss_shmem_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("RssShmem:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("RssShmem in /proc/self/status")
}

fn connect_pairs(na: &Nic, nb: &Nic, n: usize, disc: &str) -> Vec<(Arc<Vi>, Arc<Vi>)> {
    let (pa, pb) = (na.create_ptag().unwrap(), nb.create_ptag().unwrap());
    let host = na.query().address.to_vec();
    let server = Address {
        host: host.clone(),
        discriminator: disc.as_bytes().to_vec(),
    };
    let client = Address {
        host,
        discriminator: format!("{disc}-c").into_bytes(),
    };
    let a: Vec<_> = (0..n)
        .map(|_| {
            na.create_vi(attrs(pa, reliability::RELIABLE_DELIVERY), None, None)
                .unwrap()
        })
        .collect();
    let b: Vec<_> = (0..n)
        .map(|_| {
            nb.create_vi(attrs(pb, reliability::RELIABLE_DELIVERY), None, None)
                .unwrap()
        })
        .collect();
    let (nbs, b2, s2) = (nb.shared().clone(), b.clone(), server.clone());
    let t = std::thread::spawn(move || {
        for vi in &b2 {
            let req = connect_wait(&nbs, &s2, Some(Duration::from_secs(20))).unwrap();
            req.accept(vi).unwrap();
        }
    });
    for vi in &a {
        connect_request(vi, &client, &server, Some(Duration::from_secs(20))).unwrap();
    }
    t.join().unwrap();
    a.into_iter().zip(b).collect()
}

#[test]
fn busy_connections_keep_only_what_is_in_flight() {
    settings();
    const PAIRS: usize = 48;
    let (na, nb) = (Nic::open(None).unwrap(), Nic::open(None).unwrap());
    na.set_spin_ns(u64::MAX);
    nb.set_spin_ns(u64::MAX);
    let before = rss_shmem_kib();
    let pairs = connect_pairs(&na, &nb, PAIRS, &format!("mc-mem-{}", std::process::id()));
    let (pa, pb) = (pairs[0].0.attributes().ptag, pairs[0].1.attributes().ptag);
    let (ma, mb) = (Arena::new(&na, pa, 4096), Arena::new(&nb, pb, 4096));
    let desc = |m: &Arena, i: usize| -> *mut Descriptor {
        let d = m.desc(i);
        set_desc(d, 0, &[(m.data(2048) as u64, m.handle, 8)], 0);
        d
    };
    // Enough 8-byte round trips on every pair that each ring (64-byte
    // records) goes round at least twice.
    let rounds = 2 * RING_BYTES / 64 + 100;
    for (a, b) in &pairs {
        for _ in 0..rounds {
            b.post_recv(desc(&mb, 0), mb.handle).unwrap();
            a.post_recv(desc(&ma, 1), ma.handle).unwrap();
            a.post_send(desc(&ma, 0), ma.handle).unwrap();
            b.recv_wait(None).unwrap();
            b.post_send(desc(&mb, 1), mb.handle).unwrap();
            a.recv_wait(None).unwrap();
            a.send_wait(None).unwrap();
            b.send_wait(None).unwrap();
        }
    }
    let per_pair = (rss_shmem_kib() - before) / PAIRS as u64;
    // Both ends of every pair are in this process, so each pair's region
    // is counted twice. Before, every ring that had wrapped was resident
    // whole: 2 × 2 × 256 KiB.
    assert!(
        per_pair < 256,
        "{per_pair} KiB of shared memory resident per connection after its rings wrapped"
    );
    drop(pairs);
}

#[test]
fn the_vi_limit_is_a_setting_and_its_error_names_it() {
    settings();
    let nic = Nic::open(None).unwrap();
    assert_eq!(nic.query().max_vi, MAX_VI as u64);
    let ptag = nic.create_ptag().unwrap();
    let vis: Vec<_> = (0..MAX_VI)
        .map(|_| {
            nic.create_vi(attrs(ptag, reliability::RELIABLE_DELIVERY), None, None)
                .unwrap()
        })
        .collect();
    match nic.create_vi(attrs(ptag, reliability::RELIABLE_DELIVERY), None, None) {
        Err(ViaError::Resource(what)) => assert!(what.contains("OPENVIA_MAX_VI"), "{what}"),
        other => panic!("VI {} of {MAX_VI}: {:?}", MAX_VI + 1, other.map(|v| v.id())),
    }
    // Destroying one makes room again.
    nic.destroy_vi(&vis[0]).unwrap();
    nic.create_vi(attrs(ptag, reliability::RELIABLE_DELIVERY), None, None)
        .unwrap();
}

/// A discriminator waited on for one connection (viarun waits on a fresh
/// one per connection) keeps its listener, a socket, only until
/// `connect_wait_end`: then the name is free again, here for another NIC.
/// Before, every such wait left its socket open until the NIC closed.
#[test]
fn an_ended_wait_leaves_no_listener_behind() {
    settings();
    let (na, nb) = (Nic::open(None).unwrap(), Nic::open(None).unwrap());
    let local = Address {
        host: na.query().address.to_vec(),
        discriminator: b"wait-ended".to_vec(),
    };
    let short = Some(Duration::from_millis(5));
    assert!(matches!(
        connect_wait(na.shared(), &local, short),
        Err(ViaError::Timeout)
    ));
    assert!(
        matches!(
            connect_wait(nb.shared(), &local, short),
            Err(ViaError::InvalidState(_))
        ),
        "the first NIC still listens (a later wait of its own may follow)"
    );
    connect_wait_end(na.shared(), &local);
    assert!(matches!(
        connect_wait(nb.shared(), &local, short),
        Err(ViaError::Timeout)
    ));
    connect_wait_end(nb.shared(), &local);
}
