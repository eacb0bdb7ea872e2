//! The link between two ends of this process over loopback: what a
//! writer and reader send on the network device.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

use super::*;
use crate::carried::Carried;

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
