//! The channel against a scripted link: what the kernel reports when the
//! peer's port has closed (an ICMP port unreachable, ECONNREFUSED) comes
//! ahead of the datagrams the peer sent before it closed, and those must
//! still complete our sends before the failure flushes the rest; so must
//! a disconnect read in a call that also flushes what it owed. And an
//! acknowledgement waits for a reply only on a channel where one may come.

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod direct;

use openvia_proto::{
    Config, Connection, MessageInfo, MessageSink, OutgoingMessage, Payload, Piece,
    Placement as Placed, Time, ViaOp,
};
use openvia_wire::handshake::ViAttrs;
use openvia_wire::rum::{Body, Repr};

use super::super::link::DatagramLink;
use super::super::rx::RxBatch;
use super::super::tx::TxBatch;
use super::{now, RumChannel};
use crate::device::Channel;
use crate::mem::{MemoryRegistry, PtagId};
use crate::vi::placement::Placement;
use crate::vi::queues::{RecvQueue, SendQueue};

/// What the scripted link does: reads come from `inbound` (an errno is a
/// failed read); the next send fails with ECONNREFUSED if `refuse_send`
/// holds datagrams, which then join `inbound` (they came meanwhile).
#[derive(Default)]
struct Script {
    inbound: VecDeque<Result<Vec<u8>, i32>>,
    sent: Vec<Vec<u8>>,
    refuse_send: Option<Vec<Vec<u8>>>,
}

struct ScriptedLink(Arc<Mutex<Script>>);

impl DatagramLink for ScriptedLink {
    fn send(&mut self, datagram: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().sent.push(datagram.to_vec());
        Ok(1)
    }
    fn send_batch(&mut self, tx: &TxBatch) -> io::Result<usize> {
        let mut s = self.0.lock().unwrap();
        if let Some(arrived) = s.refuse_send.take() {
            s.inbound.extend(arrived.into_iter().map(Ok));
            return Err(io::Error::from_raw_os_error(libc::ECONNREFUSED));
        }
        for d in tx.datagrams() {
            s.sent.push([d.head, d.outside_bytes(), d.trailer].concat());
        }
        Ok(tx.len())
    }
    fn recv_batch(&mut self, rx: &mut RxBatch, _max: usize) -> io::Result<usize> {
        match self.0.lock().unwrap().inbound.pop_front() {
            None => Ok(0),
            Some(Err(errno)) => Err(io::Error::from_raw_os_error(errno)),
            Some(Ok(d)) => {
                rx.bufs[0][..d.len()].copy_from_slice(&d);
                rx.lens[0] = (d.len(), 0);
                rx.truncated[0] = false;
                Ok(1)
            }
        }
    }
    fn wait_readable(&self, _timeout: Duration) -> bool {
        false
    }
    fn raw_fd(&self) -> RawFd {
        -1
    }
    fn peer_gone(&self, e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::ECONNREFUSED)
    }
}

struct TakeAll;
impl MessageSink for TakeAll {
    fn place(&mut self, _info: &MessageInfo, _pieces: &[Piece<'_>]) -> Placed {
        Placed::Placed
    }
}

/// A connected channel (reliable delivery) over a scripted link, and the
/// peer's end of the protocol, driven by hand.
fn connected() -> (RumChannel<ScriptedLink>, Connection, Arc<Mutex<Script>>) {
    connected_with(Config::default())
}

/// [`connected`] with the channel's protocol settings `config`.
fn connected_with(config: Config) -> (RumChannel<ScriptedLink>, Connection, Arc<Mutex<Script>>) {
    let t = now();
    let mut client = Connection::connect(config, 0x11, b"", t).unwrap();
    let mut buf = vec![0u8; client.max_datagram_len()];
    let n = client.poll_transmit(t, &mut buf).unwrap();
    let Body::ConnectRequest(h) = Repr::parse(&buf[..n]).unwrap().body else {
        panic!("not a connect request");
    };
    let mut server = Connection::accept(Config::default(), 0x22, &h, b"", t).unwrap();
    let n = server.poll_transmit(t, &mut buf).unwrap();
    client.handle_datagram(t, &buf[..n]);
    while server.poll_event().is_some() {}
    let script = Arc::new(Mutex::new(Script::default()));
    let ch = RumChannel::new(
        ScriptedLink(script.clone()),
        client,
        ViAttrs::default(),
        None,
        false,
        None,
    );
    (ch, server, script)
}

fn message() -> OutgoingMessage {
    OutgoingMessage {
        op: ViaOp::Send,
        immediate: None,
        mem_handle: 0,
        remote_addr: 0,
        data: Payload::Owned(vec![7; 100]),
    }
}

/// The peer takes what the channel sent and closes: its DISCONNECT,
/// carrying the acknowledgement, is returned.
fn peer_takes_and_closes(server: &mut Connection, script: &Arc<Mutex<Script>>) -> Vec<u8> {
    let t = now();
    for d in std::mem::take(&mut script.lock().unwrap().sent) {
        server.handle_datagram(t, &d);
    }
    assert!(server.poll_message(&mut TakeAll).is_some(), "delivered");
    server.close();
    let mut buf = vec![0u8; server.max_datagram_len()];
    let n = server.poll_transmit(Time::ZERO, &mut buf).unwrap();
    assert!(matches!(
        Repr::parse(&buf[..n]).unwrap().body,
        Body::Disconnect { .. }
    ));
    buf[..n].to_vec()
}

/// Runs one progress call with empty queues.
fn progress(ch: &mut RumChannel<ScriptedLink>) -> Result<bool, crate::device::ChannelFailed> {
    progress_into(ch, &mut RecvQueue::default())
}

/// Runs one progress call with the receives of `rq` posted.
fn progress_into(
    ch: &mut RumChannel<ScriptedLink>,
    rq: &mut RecvQueue,
) -> Result<bool, crate::device::ChannelFailed> {
    let registry = MemoryRegistry::new();
    let (mut sq, mut faults) = (SendQueue::default(), Vec::new());
    let mut place = Placement {
        registry: &registry,
        ptag: PtagId(1),
        rdma_write: false,
        rdma_read: false,
        rq,
        sq: &mut sq,
        recv_cq: None,
        send_cq: None,
        vi_id: 1,
        vi_token: 0,
        faults: &mut faults,
        completed_any: false,
    };
    ch.progress(&mut place)
}

/// The read reports the closed port first, the peer's disconnect (with
/// its acknowledgement of our send) is queued behind it.
#[test]
fn a_closed_port_reported_on_read_does_not_hide_the_final_acknowledgement() {
    let (mut ch, mut server, script) = connected();
    ch.send_message(message()).unwrap();
    ch.flush(now());
    let disconnect = peer_takes_and_closes(&mut server, &script);
    script.lock().unwrap().inbound = VecDeque::from([Err(libc::ECONNREFUSED), Ok(disconnect)]);
    assert_eq!(progress(&mut ch), Ok(true), "the failure waits a call");
    assert_eq!(ch.sent(), 1, "the acknowledged send completed");
    assert!(progress(&mut ch).is_err());
}

/// A send of this very call draws the error, after the read found
/// nothing; the disconnect came meanwhile.
#[test]
fn a_closed_port_reported_on_send_does_not_hide_the_final_acknowledgement() {
    let (mut ch, mut server, script) = connected();
    ch.send_message(message()).unwrap();
    ch.flush(now());
    let disconnect = peer_takes_and_closes(&mut server, &script);
    // A second send, queued: the next progress call flushes it.
    ch.send_message(message()).unwrap();
    ch.flush_owed = true;
    script.lock().unwrap().refuse_send = Some(vec![disconnect]);
    assert_eq!(progress(&mut ch), Ok(true), "the failure waits a call");
    assert_eq!(
        ch.sent(),
        1,
        "the acknowledged send completed, not the second"
    );
    assert!(progress(&mut ch).is_err());
}

/// The peer's disconnect acknowledges our send, in a call that also
/// flushes something owed (which drains the protocol's events before the
/// call would otherwise have counted its completions).
#[test]
fn a_disconnect_read_with_a_flush_owed_still_completes_what_it_acknowledges() {
    let (mut ch, mut server, script) = connected();
    ch.send_message(message()).unwrap();
    ch.flush(now());
    let disconnect = peer_takes_and_closes(&mut server, &script);
    ch.flush_owed = true;
    script.lock().unwrap().inbound = VecDeque::from([Ok(disconnect)]);
    assert_eq!(progress(&mut ch), Ok(true), "the failure waits a call");
    assert_eq!(ch.sent(), 1);
    assert!(progress(&mut ch).is_err());
}

/// A receive queue with one receive posted: `desc` over all of `data`.
fn one_receive(desc: &mut crate::descriptor::Descriptor, data: &mut [u8]) -> RecvQueue {
    use crate::descriptor::DescPtr;
    use crate::mem::HeldUses;
    use crate::ranges::Range;
    use crate::vi::queues::RecvEntry;

    let mut rq = RecvQueue::default();
    rq.entries.push_back(RecvEntry {
        desc: DescPtr(desc),
        ranges: vec![Range {
            addr: data.as_mut_ptr() as u64,
            len: data.len() as u64,
        }],
        capacity: data.len() as u64,
        error: 0,
        uses: HeldUses::default(),
    });
    rq
}

/// The peer sends a small message into a posted receive. Returns
/// whether this channel's acknowledgement left in the progress call that
/// delivered it, the channel's next timer after that call with the clock
/// before and after the call, and whether the next call (nothing new
/// arriving) sent it.
fn deliver_one(no_replies: bool) -> (bool, Option<u64>, u64, u64, bool) {
    use crate::descriptor::Descriptor;

    let (mut ch, mut server, script) = connected();
    ch.set_no_replies(no_replies);
    let t = now();
    server.send_message(message()).unwrap();
    let mut buf = vec![0u8; server.max_datagram_len()];
    while let Some(n) = server.poll_transmit(t, &mut buf) {
        script
            .lock()
            .unwrap()
            .inbound
            .push_back(Ok(buf[..n].to_vec()));
    }
    let mut desc = Box::new(Descriptor::default());
    let mut data = vec![0u8; 256];
    let mut rq = one_receive(&mut desc, &mut data);
    script.lock().unwrap().sent.clear();
    let before = now().as_nanos();
    assert_eq!(progress_into(&mut ch, &mut rq), Ok(true));
    let after = now().as_nanos();
    assert_eq!(rq.completed, 1, "delivered");
    assert_eq!(data[99], 7);
    let acked = !std::mem::take(&mut script.lock().unwrap().sent).is_empty();
    let timer = ch.timer_deadline_ns();
    let _ = progress_into(&mut ch, &mut rq);
    let acked_next = !script.lock().unwrap().sent.is_empty();
    (acked, timer, before, after, acked_next)
}

/// An acknowledgement for a delivered message is held for a reply to
/// carry (the channel's next timer due ACK_DELAY_NS after the delivery)
/// unless the channel was told that no reply is posted on it (viaip's
/// receiving VIs): then it is due at once, and leaves on the next call —
/// after the program took the message, not before.
#[test]
fn an_acknowledgement_waits_for_a_reply_only_where_one_may_come() {
    let (acked, timer, before, _, _) = deliver_one(false);
    assert!(!acked, "held for a reply");
    assert!(
        timer.is_some_and(|t| t >= before + super::ACK_DELAY_NS),
        "held acknowledgement due at {timer:?}, delivered after {before}"
    );
    let (acked, timer, _, after, acked_next) = deliver_one(true);
    assert!(!acked, "the message is taken before the acknowledgement");
    assert!(
        timer.is_some_and(|t| t <= after),
        "due at once: {timer:?}, call ended at {after}"
    );
    assert!(acked_next, "sent by the next call");
}

/// The peer's acknowledgement, held for a reply that did not come in
/// time, leaves just before its next message, and the two arrive back to
/// back while datagrams come alone (one read a call). The call that reads
/// the acknowledgement reads on and delivers the message: stopping after
/// a datagram without data left the message queued behind a call that
/// found nothing, and a reader told "readable" by the message's doorbell
/// then slept on the socket for it (viarun between hosts: six system
/// calls more for one request in four of an event-loop server's).
#[test]
fn a_lone_acknowledgement_does_not_hold_back_the_message_behind_it() {
    use crate::descriptor::Descriptor;

    let (mut ch, mut server, script) = connected();
    ch.send_message(message()).unwrap();
    ch.flush(now());
    let t = now();
    for d in std::mem::take(&mut script.lock().unwrap().sent) {
        server.handle_datagram(t, &d);
    }
    assert!(server.poll_message(&mut TakeAll).is_some(), "delivered");
    // The acknowledgement, once the peer's delay has passed; then a message.
    let late = Time::from_nanos(t.as_nanos() + 10_000_000);
    let mut buf = vec![0u8; server.max_datagram_len()];
    let n = server
        .poll_transmit(late, &mut buf)
        .expect("an acknowledgement");
    assert!(matches!(Repr::parse(&buf[..n]).unwrap().body, Body::Ack(_)));
    let mut inbound = VecDeque::from([Ok(buf[..n].to_vec())]);
    server.send_message(message()).unwrap();
    while let Some(n) = server.poll_transmit(late, &mut buf) {
        inbound.push_back(Ok(buf[..n].to_vec()));
    }
    assert_eq!(inbound.len(), 2, "the acknowledgement, then the message");
    script.lock().unwrap().inbound = inbound;
    assert_eq!(ch.rx_want, 1, "reading one datagram a call");

    let mut desc = Box::new(Descriptor::default());
    let mut data = vec![0u8; 256];
    let mut rq = one_receive(&mut desc, &mut data);
    assert_eq!(progress_into(&mut ch, &mut rq), Ok(true));
    assert_eq!(rq.completed, 1, "the message behind the acknowledgement");
    assert_eq!(data[99], 7);
    assert!(script.lock().unwrap().inbound.is_empty());
}

/// A protocol timer that is due runs on the next call, even one that
/// finds nothing to receive, once the caller asks for the clock (the
/// progress thread, which woke for that timer); a busy-polling program's
/// idle calls run timers only every so often. Driven without the ask, a
/// due keepalive kept the progress thread of every idle connection
/// looping, up to sixteen calls a timer.
#[test]
fn a_due_timer_runs_on_the_call_that_asks_for_the_clock() {
    let config = Config {
        keepalive_interval: Duration::from_millis(2),
        ..Config::default()
    };
    let (mut ch, _server, script) = connected_with(config);
    let _ = progress(&mut ch);
    script.lock().unwrap().sent.clear();
    let due = ch.timer_deadline_ns().expect("a keepalive timer");
    while now().as_nanos() < due {
        std::hint::spin_loop();
    }
    // An idle call between the clock's looks: the timer waits.
    let _ = progress(&mut ch);
    assert!(script.lock().unwrap().sent.is_empty(), "timers ran unasked");
    ch.clock_next_progress();
    let _ = progress(&mut ch);
    let sent = std::mem::take(&mut script.lock().unwrap().sent);
    assert!(
        sent.iter()
            .any(|d| matches!(Repr::parse(d).map(|r| r.body), Ok(Body::Keepalive))),
        "no keepalive in {} datagrams",
        sent.len()
    );
}
