//! The link between two ends of this process over loopback: what a
//! writer and reader send on the network device.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

use super::*;
use crate::carried::Carried;
use crate::inherit::Inherit;

/// Held by the tests that count the device's datagrams (process-wide
/// counters), so that one's traffic is not counted by the other.
static COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A link's two ends in this process, the kernel's TCP stream stood
/// for by a socket pair.
fn link_pair() -> ((NetLink, UnixStream), (NetLink, UnixStream)) {
    crate::link::loopback_network_for_tests();
    let (nic, _) = process_nic(Medium::Network).unwrap();
    let host = nic.query().address.to_vec();
    let (stream_a, stream_c) = UnixStream::pair().unwrap();
    let token = 0x11ab_0000_0000_0001 ^ u64::from(std::process::id());
    let acceptor = std::thread::spawn(move || {
        let link = NetLink::handshake(stream_a.as_raw_fd(), Side::Acceptor, token, None, None);
        (link.ok().expect("the acceptor's end"), stream_a)
    });
    let link = NetLink::handshake(
        stream_c.as_raw_fd(),
        Side::Connector,
        token,
        Some(&host),
        None,
    );
    let connector = (link.ok().expect("the connector's end"), stream_c);
    (acceptor.join().unwrap(), connector)
}

/// As `link_pair`, each end with the exec record the library makes for a
/// connection between hosts (the page and memory go in it).
#[allow(clippy::type_complexity)]
fn link_pair_with_records() -> (
    (NetLink, UnixStream, Arc<Inherit>),
    (NetLink, UnixStream, Arc<Inherit>),
) {
    crate::link::loopback_network_for_tests();
    let (nic, _) = process_nic(Medium::Network).unwrap();
    let host = nic.query().address.to_vec();
    let (stream_a, stream_c) = UnixStream::pair().unwrap();
    let token = 0x22cd_0000_0000_0001 ^ u64::from(std::process::id());
    let record = |fd: RawFd, side: Side| {
        let what = crate::inherit::Offered::AgreedNet {
            side,
            token,
            host: &[],
        };
        Inherit::offer(fd, what).expect("a record")
    };
    let rec_a = record(stream_a.as_raw_fd(), Side::Acceptor);
    let rec_c = record(stream_c.as_raw_fd(), Side::Connector);
    let held_a = rec_a.clone();
    let acceptor = std::thread::spawn(move || {
        let fd = stream_a.as_raw_fd();
        let link = NetLink::handshake(fd, Side::Acceptor, token, None, Some(held_a));
        (link.ok().expect("the acceptor's end"), stream_a)
    });
    let fd = stream_c.as_raw_fd();
    let link = NetLink::handshake(fd, Side::Connector, token, Some(&host), Some(rec_c.clone()));
    let connector = (link.ok().expect("the connector's end"), stream_c, rec_c);
    let (link_a, stream_a) = acceptor.join().unwrap();
    ((link_a, stream_a, rec_a), connector)
}

/// The memfds of a pair's records (their inodes, in order).
fn record_memfds(records: [&Arc<Inherit>; 2]) -> Vec<u64> {
    let mut inodes: Vec<u64> = records
        .iter()
        .map(|r| kernel::inode(r.net_page().expect("a page in the record").0).expect("an inode"))
        .collect();
    inodes.sort_unstable();
    inodes
}

/// Writes `out` at one end and reads it whole at the other.
fn carry(from: (&NetLink, &UnixStream), to: (&NetLink, &UnixStream), out: &[u8]) {
    assert_eq!(
        from.0.write(from.1.as_raw_fd(), &[out], false, true),
        Ok(out.len())
    );
    let mut back = vec![0u8; out.len()];
    read_as_event_loop(to.0, to.1.as_raw_fd(), &mut back);
    assert_eq!(back, out);
}

/// A finished connection's record memfd, with its hand-over page and
/// registered memory, serves the next connection of the process (no
/// memfd, mapping or registration made, nothing unmapped), and the new
/// link reads only its own messages.
#[test]
fn a_finished_links_memory_serves_the_next_link() {
    let _pool = crate::inherit::POOL_TESTS
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let ((a, sa, ra), (c, sc, rc)) = link_pair_with_records();
    carry((&c, &sc), (&a, &sa), b"the first connection's request");
    carry((&a, &sa), (&c, &sc), b"and its answer");
    let first = record_memfds([&ra, &rc]);
    // As a close does: the link, then the record's last holder.
    drop((a, c));
    drop((ra, rc, sa, sc));
    let ((a, sa, ra), (c, sc, rc)) = link_pair_with_records();
    assert_eq!(record_memfds([&ra, &rc]), first, "the first pair's memfds");
    carry((&c, &sc), (&a, &sa), b"second");
    carry((&a, &sa), (&c, &sc), b"2nd answer");
    drop((a, c, ra, rc, sa, sc));
}

/// An event loop's work between two of its reads and writes: longer
/// than the protocol holds an acknowledgement (then due at the next
/// look at the device).
fn work() {
    let start = Instant::now();
    while start.elapsed() < Duration::from_micros(200) {
        std::hint::spin_loop();
    }
}

/// Reads `buf` whole as an event loop does: waits for the kernel socket
/// to be readable (the doorbell), then reads without waiting. (Not on to
/// the read that finds nothing: that one drives the device, which sends
/// an acknowledgement held past its time, as it should; how soon that
/// is depends on the machine's speed.)
fn read_as_event_loop(link: &NetLink, fd: RawFd, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd of ours.
        unsafe { libc::poll(&mut p, 1, 5000) };
        match link.read(fd, &mut [&mut buf[got..]], true, false, false) {
            Ok(n) => got += n,
            Err(libc::EAGAIN) => {}
            Err(e) => panic!("read: errno {e}"),
        }
    }
}

/// A ping-pong's sends are acknowledged by the replies: the writer
/// takes them back without a look at the network, and no bare
/// acknowledgement goes ahead of its next message (before, every
/// fourth write of each end drove the device and sent one: half a
/// datagram more per round trip).
#[test]
fn a_ping_pong_sends_no_bare_acknowledgements() {
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let ((server, stream_s), (client, stream_c)) = link_pair();
    const ROUNDS: usize = 400;
    let before = openvia_core::udp_stats().datagrams_received;
    let answering = std::thread::spawn(move || {
        let mut buf = [0u8; 100];
        for _ in 0..ROUNDS {
            read_as_event_loop(&server, stream_s.as_raw_fd(), &mut buf);
            work();
            buf[0] = buf[0].wrapping_add(1);
            assert_eq!(
                server.write(stream_s.as_raw_fd(), &[&buf], false, true),
                Ok(100)
            );
        }
        (server, stream_s)
    });
    let mut back = [0u8; 100];
    for i in 0..ROUNDS {
        let out = [i as u8; 100];
        assert_eq!(
            client.write(stream_c.as_raw_fd(), &[&out], false, true),
            Ok(100)
        );
        read_as_event_loop(&client, stream_c.as_raw_fd(), &mut back);
        work();
        assert_eq!(back[0], (i as u8).wrapping_add(1), "round {i}'s answer");
        assert_eq!(&back[1..], &out[1..]);
    }
    let (server, stream_s) = answering.join().unwrap();
    // The counters of a connection are summed when it closes.
    drop((server, client, stream_s, stream_c));
    let received = openvia_core::udp_stats().datagrams_received - before;
    let data = 2 * ROUNDS as u64;
    assert!(received >= data, "{received} datagrams for {data} messages");
    assert!(
        received - data <= ROUNDS as u64 / 4,
        "{} datagrams beyond the {data} messages of {ROUNDS} round trips",
        received - data
    );
}

#[test]
fn message_numbers_compare_across_the_wrap() {
    assert!(after(2, 1));
    assert!(!after(1, 1));
    assert!(!after(1, 2));
    assert!(after(0, u32::MAX), "0 follows the last number");
}

/// An idle link sends no keepalive for a second (`IDLE_KEEPALIVE`): the
/// kernel's stream tells of the peer's death, and by the device's default
/// (one every 50 ms each way) every idle connection woke both ends'
/// progress threads twenty times a second.
#[test]
fn an_idle_link_keeps_quiet() {
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let before = openvia_core::udp_stats().datagrams_received;
    let ((server, stream_s), (client, stream_c)) = link_pair();
    // The idle time measured (no server is waited for).
    std::thread::sleep(Duration::from_millis(600));
    drop((server, client, stream_s, stream_c));
    let received = openvia_core::udp_stats().datagrams_received - before;
    // The handshake and the closes: 6 (and another test's link, set up
    // and closed meanwhile, as many); 50 ms keepalives: 24 more.
    assert!(
        received <= 16,
        "{received} datagrams on a link idle for 600 ms"
    );
}

/// The voluntary context switches of this process's thread named `name`
/// (None if there is none).
fn thread_wakes(name: &str) -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            return status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok());
        }
    }
    None
}

/// With links made and nobody asking for a hand-over, the hand-over
/// watcher sleeps: it wakes for a ring (`handover::ring`) and otherwise
/// once a second, where it looked twenty times a second before.
#[test]
fn the_hand_over_watcher_sleeps_while_nobody_asks() {
    let ((server, stream_s), (client, stream_c)) = link_pair();
    let start = thread_wakes("viarun-handover").expect("the watcher runs");
    // The idle time measured (no server is waited for).
    std::thread::sleep(Duration::from_millis(500));
    let woke = thread_wakes("viarun-handover").unwrap() - start;
    drop((server, client, stream_s, stream_c));
    // Its second's look, and a ring of another test's: at most 2 or 3;
    // twenty times a second: 10.
    assert!(woke <= 3, "the watcher woke {woke} times in 500 ms");
}
