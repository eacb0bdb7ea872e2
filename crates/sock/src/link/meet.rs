//! The VI handshake of a connection both ends agreed on: each end names
//! its VI after the connection's token and its role, the acceptor waits
//! and the connector asks, while the kernel socket shows whether the
//! peer is still coming (its hello) or gone.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openvia_core::nic::Nic;
use openvia_core::vi::Vi;
use openvia_core::{Address, ConnRequest, ViaError};

use super::{HandshakeEnd, BARE, HELLO, SLICE};
use crate::control::{Side, SWITCH_BYTE};
use crate::kernel;

fn disc(role_char: char, token: u64) -> Vec<u8> {
    format!("viarun-{role_char}-{token:016x}").into_bytes()
}

/// When an end says hello on the kernel socket.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hello {
    /// Both ends said it before `meet`, first thing (one host: the
    /// shared-memory device's connector retries within microseconds).
    Sent,
    /// The connector said it first thing; the acceptor says it once it
    /// listens, and the connector asks only after it came (between
    /// hosts: a request that reaches no listener yet is sent again by
    /// the network device only after milliseconds, and an acceptor
    /// opening its NIC, a forked child's first use, takes about one).
    WhenListening,
}

/// An acceptor's listener for the connection, up and announced by its
/// hello (`Hello::WhenListening`), with the peer's request if one came
/// already. It stays up until `meet` ends, or `stop` if the acceptor
/// gives up before.
pub(crate) struct Listening {
    early: Option<ConnRequest>,
}

fn local_address(nic: &Nic, side: Side, token: u64) -> Address {
    let mine = match side {
        Side::Connector => 'c',
        Side::Acceptor => 'a',
    };
    Address {
        host: nic.query().address.to_vec(),
        discriminator: disc(mine, token),
    }
}

impl Listening {
    /// Puts the acceptor's listener up (a wait with no time does) and
    /// then says hello on the kernel socket. Done before the link's
    /// memory and VI are made (`NetLink::handshake`), so the connector's
    /// request is on its way while they are.
    pub(crate) fn announce(fd: RawFd, nic: &Nic, token: u64) -> Result<Listening, HandshakeEnd> {
        // The connector's side exec'd a program without the library
        // (`BARE`): no hello of ours may follow.
        if kernel::take_if_within(fd, |b| b == BARE, Duration::ZERO).is_some() {
            return Err(HandshakeEnd::PeerWentBare);
        }
        let local = local_address(nic, Side::Acceptor, token);
        let early = match openvia_core::connect_wait(nic.shared(), &local, Some(Duration::ZERO)) {
            Ok(req) => Some(req),
            Err(ViaError::Timeout) => None,
            Err(_) => return Err(HandshakeEnd::Broken),
        };
        let listening = Listening { early };
        if kernel::send_byte(fd, HELLO).is_err() {
            listening.stop(nic, token);
            return Err(HandshakeEnd::Broken);
        }
        Ok(listening)
    }

    /// Takes the listener down without meeting (the acceptor failed).
    pub(crate) fn stop(self, nic: &Nic, token: u64) {
        openvia_core::connect_wait_end(nic.shared(), &local_address(nic, Side::Acceptor, token));
    }
}

/// Connects `vi` to the peer's VI of the connection named by `token`, the
/// connector at the acceptor's `peer_host` (None: this host), while the
/// kernel socket shows the peer coming (its hello) or gone; then takes the
/// peer's hello, which heads our kernel stream. Our own hello is sent
/// (`Hello::Sent`), or by the acceptor once it listens
/// (`Hello::WhenListening`: `listening` if it announced itself already,
/// else here).
#[allow(clippy::too_many_arguments)]
pub(crate) fn meet(
    fd: RawFd,
    nic: &Nic,
    vi: &Arc<Vi>,
    side: Side,
    token: u64,
    peer_host: Option<&[u8]>,
    switched: &dyn Fn() -> bool,
    hello: Hello,
    listening: Option<Listening>,
    listening_word: Option<&AtomicU32>,
) -> Result<(), HandshakeEnd> {
    let theirs = match side {
        Side::Connector => 'a',
        Side::Acceptor => 'c',
    };
    let local = local_address(nic, side, token);
    let remote = Address {
        host: peer_host.map_or_else(|| local.host.clone(), <[u8]>::to_vec),
        discriminator: disc(theirs, token),
    };
    let mut early = None;
    let ready = match (hello, side) {
        (Hello::Sent, _) => Ok(()),
        (Hello::WhenListening, Side::Acceptor) => match listening {
            Some(l) => {
                early = l.early;
                Ok(())
            }
            None => Listening::announce(fd, nic, token).map(|l| early = l.early),
        },
        (Hello::WhenListening, Side::Connector) => peer_hello_came(fd, switched),
    };
    // One host: the acceptor puts its listener up and says so on the
    // page; the connector sleeps until it did, instead of asking (each a
    // socket, a connect refused and a pause) until the acceptor comes to
    // its first use, which ten connectors asking at once on two CPUs
    // delayed for all of them.
    let ready = match (ready, listening_word, side) {
        (Ok(()), Some(word), Side::Acceptor) => {
            match openvia_core::connect_wait(nic.shared(), &local, Some(Duration::ZERO)) {
                Ok(req) => early = Some(req),
                Err(ViaError::Timeout) => {}
                Err(_) => return Err(HandshakeEnd::Broken),
            }
            word.store(crate::control::LISTENING_FRESH, Ordering::Release);
            openvia_core::sys::futex::wake_all(word);
            Ok(())
        }
        (Ok(()), Some(word), Side::Connector) => acceptor_listens(fd, word, switched),
        (r, _, _) => r,
    };
    let met = ready.and_then(|()| loop {
        let r = match side {
            Side::Connector => {
                openvia_core::connect_request(vi, &local, &remote, Some(SLICE)).map(|_| ())
            }
            Side::Acceptor => match early.take() {
                Some(req) => req.accept(vi),
                None => openvia_core::connect_wait(nic.shared(), &local, Some(SLICE))
                    .and_then(|req| req.accept(vi)),
            },
        };
        match r {
            Ok(()) => break Ok(()),
            Err(ViaError::Timeout) if switched() => break Err(HandshakeEnd::Switched),
            Err(ViaError::Timeout) => match kernel::peek_state(fd) {
                // The peer's hello is there: it is on its way.
                kernel::Peek::Byte(HELLO) => {
                    if kernel::peer_hung_up(fd) {
                        break Err(HandshakeEnd::Broken);
                    }
                }
                // The peer's side exec'd a program without the library
                // and took our hello (between hosts): it never comes.
                kernel::Peek::Byte(BARE) => {
                    break match kernel::take_if_within(fd, |b| b == BARE, Duration::ZERO) {
                        Some(_) => Err(HandshakeEnd::PeerWentBare),
                        None => Err(HandshakeEnd::Broken),
                    };
                }
                kernel::Peek::Empty => {}
                kernel::Peek::Eof => break Err(HandshakeEnd::PeerNeverCame),
                _ => break Err(HandshakeEnd::Broken),
            },
            Err(_) => break Err(HandshakeEnd::Broken),
        }
    });
    if matches!(side, Side::Acceptor) {
        // The discriminator is this connection's alone: no wait on it
        // follows, and the device would keep its listener (a socket)
        // until the process ends.
        openvia_core::connect_wait_end(nic.shared(), &local);
    }
    met?;
    take_peer_hello(fd, switched)
}

/// Takes the peer's hello, which heads our kernel stream once its end
/// met ours (waits for it).
pub(super) fn take_peer_hello(fd: RawFd, switched: &dyn Fn() -> bool) -> Result<(), HandshakeEnd> {
    // A sibling that switched the connection meanwhile (above) put its
    // switch byte where the peer's hello was awaited: left for the
    // switched reader, which drops what comes before it and itself.
    loop {
        match kernel::peek_state(fd) {
            kernel::Peek::Byte(SWITCH_BYTE) if switched() => return Err(HandshakeEnd::Switched),
            kernel::Peek::Empty if switched() => return Err(HandshakeEnd::Switched),
            kernel::Peek::Empty => kernel::wait_readable(fd),
            _ => break,
        }
    }
    match kernel::take_byte(fd) {
        Ok(HELLO) => Ok(()),
        _ => Err(HandshakeEnd::Broken),
    }
}

/// One host: waits until the acceptor's listener is up (`word`), or the
/// connection is switched or the peer gone.
fn acceptor_listens(
    fd: RawFd,
    word: &AtomicU32,
    switched: &dyn Fn() -> bool,
) -> Result<(), HandshakeEnd> {
    await_word(fd, word, |w| w != 0, switched).map(|_| ())
}

/// One host: waits until the peer's end sets `word` to a value `done`
/// takes (the value), or the connection is switched or the peer gone.
pub(super) fn await_word(
    fd: RawFd,
    word: &AtomicU32,
    done: impl Fn(u32) -> bool,
    switched: &dyn Fn() -> bool,
) -> Result<u32, HandshakeEnd> {
    // Looked at, yielding, for a moment first: with a CPU free the
    // peer is usually there within tens of microseconds, sooner than
    // a futex wake-up comes (which cost a connection ~35 µs here).
    let look_until = std::time::Instant::now() + LISTEN_LOOK_FIRST;
    while std::time::Instant::now() < look_until {
        let w = word.load(Ordering::Acquire);
        if done(w) {
            return Ok(w);
        }
        std::thread::yield_now();
    }
    loop {
        let w = word.load(Ordering::Acquire);
        if done(w) {
            return Ok(w);
        }
        if switched() {
            return Err(HandshakeEnd::Switched);
        }
        match kernel::peek_state(fd) {
            kernel::Peek::Eof => return Err(HandshakeEnd::PeerNeverCame),
            kernel::Peek::Error(_) => return Err(HandshakeEnd::Broken),
            _ => {}
        }
        // Looked at again now and then: a switch or a peer's end wakes
        // nobody here.
        openvia_core::sys::futex::wait(word, w, Some(LISTEN_LOOK));
    }
}

/// How long a connector looks for the acceptor's listener, yielding,
/// before it sleeps.
const LISTEN_LOOK_FIRST: Duration = Duration::from_micros(50);

/// How often a connector waiting for the acceptor's listener looks at the
/// connection's other ends.
const LISTEN_LOOK: Duration = Duration::from_millis(10);

/// Waits until the peer's hello heads the kernel stream (left there for
/// `meet`'s end to take), or the peer is gone or switched.
fn peer_hello_came(fd: RawFd, switched: &dyn Fn() -> bool) -> Result<(), HandshakeEnd> {
    loop {
        match kernel::peek_state(fd) {
            kernel::Peek::Byte(HELLO) => return Ok(()),
            kernel::Peek::Byte(BARE) => {
                return match kernel::take_if_within(fd, |b| b == BARE, Duration::ZERO) {
                    Some(_) => Err(HandshakeEnd::PeerWentBare),
                    None => Err(HandshakeEnd::Broken),
                };
            }
            kernel::Peek::Empty if switched() => return Err(HandshakeEnd::Switched),
            kernel::Peek::Empty => kernel::wait_readable(fd),
            kernel::Peek::Eof => return Err(HandshakeEnd::PeerNeverCame),
            _ => return Err(HandshakeEnd::Broken),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    use openvia_core::nic::Nic;
    use openvia_core::vi::{reliability, ViAttributes};

    use super::*;

    /// Two network NICs of this process on loopback, with an agent port
    /// of this test process's own.
    fn network_nics() -> (Nic, Nic) {
        crate::link::loopback_network_for_tests();
        let open = || Nic::open(Some("/dev/via_udp")).expect("the network device");
        (open(), open())
    }

    fn vi_of(nic: &Nic) -> Arc<Vi> {
        let ptag = nic.create_ptag().unwrap();
        let attrs = ViAttributes {
            reliability: reliability::RELIABLE_RECEPTION,
            max_transfer: 1 << 16,
            ptag,
            rdma_write: false,
            rdma_read: false,
        };
        nic.create_vi(attrs, None, None).unwrap()
    }

    /// Between hosts the connector asks only once the acceptor listens:
    /// an acceptor that comes late (a forked child opening its NIC first)
    /// loses no connect request to an agent with no listener to give it
    /// to (each such request cost the connector the network device's
    /// resend, 2 ms and more). The two ends meet over a socket pair that
    /// stands for the kernel's TCP stream.
    #[test]
    fn a_late_acceptor_loses_no_connect_request() {
        let (nic_a, nic_c) = network_nics();
        let (vi_a, vi_c) = (vi_of(&nic_a), vi_of(&nic_c));
        let host = nic_a.query().address.to_vec();
        let (stream_a, stream_c) = UnixStream::pair().unwrap();
        let token = 0x5eed_0000_0000_0001 ^ u64::from(std::process::id());
        // The acceptor's process has its agent already (as a server that
        // answered connections before has): a request that comes before
        // the listener is then dropped there, and counted.
        let earlier = Address {
            host: host.clone(),
            discriminator: b"viarun-a-earlier".to_vec(),
        };
        let _ = openvia_core::connect_wait(nic_a.shared(), &earlier, Some(Duration::ZERO));
        openvia_core::connect_wait_end(nic_a.shared(), &earlier);
        let lost_before = openvia_core::udp_stats().agent_no_listener;
        let acceptor = std::thread::spawn(move || {
            // Comes late: the connector has said hello and is waiting.
            std::thread::sleep(Duration::from_millis(30));
            let fd = stream_a.as_raw_fd();
            let r = meet(
                fd,
                &nic_a,
                &vi_a,
                Side::Acceptor,
                token,
                None,
                &|| false,
                Hello::WhenListening,
                None,
                None,
            );
            (r, nic_a, vi_a, stream_a)
        });
        let fd = stream_c.as_raw_fd();
        kernel::send_byte(fd, HELLO).unwrap();
        let met = meet(
            fd,
            &nic_c,
            &vi_c,
            Side::Connector,
            token,
            Some(&host),
            &|| false,
            Hello::WhenListening,
            None,
            None,
        );
        let (accepted, _nic_a, _vi_a, _stream_a) = acceptor.join().unwrap();
        assert!(met.is_ok() && accepted.is_ok(), "the two ends met");
        assert_eq!(
            openvia_core::udp_stats().agent_no_listener - lost_before,
            0,
            "a connect request reached no listener"
        );
    }
}
