//! The receiving half of a RUM channel: what the link holds is read in
//! one batch (or one datagram while they come alone), opened under the
//! connection's key when it has one, and handed to the protocol, which
//! offers in-order data to the VI's receives as it arrives when a
//! [`Placement`] is lent (`super::direct`); GRO is turned on and off by
//! how datagrams arrive.

use std::sync::atomic::Ordering;

use openvia_proto::{Connection, SegmentPlacer, Time};

use super::{now, RumChannel, LONE_FOR_PLAIN};
use crate::devices::rum::direct::Arrivals;
use crate::devices::rum::link::DatagramLink;
use crate::devices::rum::packet_auth::{Opened, PacketAuth};
use crate::devices::rum::rx::RX_BATCH;
use crate::devices::rum::stats::STATS;
use crate::vi::placement::Placement;

/// Datagrams without data after which a lone read stops reading on.
const LONE_READ_ON: u8 = 4;

impl<L: DatagramLink> RumChannel<L> {
    /// Reads what the socket holds; the clock is read only once a datagram
    /// came (an idle poll needs no time). Data that arrives in order goes
    /// straight into `place`'s receives (when lent, and placement on
    /// arrival is on). Returns the time the datagrams were handled at, if
    /// any came.
    pub(super) fn receive(&mut self, place: Option<&mut Placement<'_>>) -> Option<Time> {
        let place = match place {
            Some(place) if self.place_on_arrival && self.reliable => place,
            _ => return self.receive_into(&mut None),
        };
        // Out of `self` for the call: `port_unreachable` below borrows all
        // of it.
        let mut direct = std::mem::take(&mut self.direct);
        let at = self.receive_into(&mut Some(Arrivals {
            direct: &mut direct,
            place,
        }));
        self.direct = direct;
        at
    }

    fn receive_into(&mut self, arrivals: &mut Option<Arrivals<'_, '_, '_>>) -> Option<Time> {
        let mut at = None;
        let mut gone_reported = false;
        let mut read_on = 0u8;
        loop {
            let want = self.rx_want;
            let data_before = self.conn.counters().data_segments_received;
            let n = match self.link.recv_batch(&mut self.rx, want) {
                Ok(0) => {
                    if let Some(u) = self.unreachable.as_mut() {
                        u.drained = true;
                    }
                    0
                }
                Ok(n) => n,
                Err(e) => {
                    if self.link.peer_gone(&e) {
                        self.port_unreachable(crate::sys::now_ns());
                        // The kernel reports the error ahead of what is
                        // queued: what the peer sent before its port
                        // closed (its final acknowledgement, its
                        // disconnect) is still to be read, and must
                        // complete our sends before the failure flushes
                        // the rest.
                        if !gone_reported {
                            gone_reported = true;
                            continue;
                        }
                    }
                    0
                }
            };
            let answers = self.unreachable.is_some_and(|u| u.drained);
            let mut accepted = false;
            if n > 0 && at.is_none() {
                at = Some(now());
            }
            let now = at.unwrap_or(Time::ZERO);
            // Datagrams, not buffers: one GRO buffer holds a whole burst.
            let datagrams: usize = (0..n)
                .filter(|&k| !self.rx.truncated[k])
                .map(|k| self.rx.datagrams(k).count())
                .sum();
            // Ask for one datagram while they come alone (a ping-pong's
            // reply: an empty poll comes between two of them); for a batch
            // once they come in numbers (two single reads back to back).
            self.rx_want = match (n, want) {
                (0, _) => 1,
                (1, 1) if self.rx_streak || datagrams > 1 => RX_BATCH,
                (1, _) => 1,
                _ => RX_BATCH,
            };
            // Before the datagrams are handled: the sooner GRO goes off
            // after a lone one, the narrower the window for a glued burst.
            self.track_gro(datagrams, want);
            self.rx_streak = n > 0;
            for k in 0..n {
                if self.rx.truncated[k] {
                    STATS.truncated.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let (rx, conn, auth) = (&self.rx, &mut self.conn, self.auth.as_ref());
                // Faults act as the network would: before authentication.
                let mut deliver = |dg: &[u8]| {
                    let placer = arrivals.as_mut().map(|a| a as &mut dyn SegmentPlacer);
                    if open_and_handle(auth, conn, now, dg, placer) {
                        accepted = true;
                    }
                };
                match self.faults.as_mut() {
                    None => rx.datagrams(k).for_each(&mut deliver),
                    Some(f) => rx.datagrams(k).for_each(|dg| f.receive(dg, &mut deliver)),
                }
            }
            if let Some(f) = self.faults.as_mut() {
                let (conn, auth) = (&mut self.conn, self.auth.as_ref());
                f.end_batch(&mut |dg| {
                    let placer = arrivals.as_mut().map(|a| a as &mut dyn SegmentPlacer);
                    if open_and_handle(auth, conn, now, dg, placer) {
                        accepted = true;
                    }
                });
            }
            if accepted && answers {
                self.unreachable = None;
            }
            if n < want {
                break;
            }
            if want == 1 {
                // A lone datagram without data (an acknowledgement, a probe)
                // is often the first of two sent back to back: the peer's
                // acknowledgement, held for a reply that did not come in
                // time, goes out just before its next message. Read on for
                // that message, one datagram at a time, rather than leave it
                // queued behind a call that found nothing to deliver.
                if self.conn.counters().data_segments_received == data_before
                    && read_on < LONE_READ_ON
                {
                    read_on += 1;
                    self.rx_want = 1;
                    self.rx_streak = false;
                    continue;
                }
                break;
            }
        }
        if at.is_some() {
            self.heard = true;
            self.echo = None;
        }
        at
    }

    /// GRO (one receive per GSO burst) while datagrams come in numbers; off
    /// once they have come alone [`LONE_FOR_PLAIN`] times in a row, for the
    /// plain recv (`DatagramLink::gro_off_if_quiet`). It goes off right after a
    /// lone datagram, before anything is sent back: in a ping-pong nothing
    /// else is then on its way. Never on flow-control-only, where a burst
    /// glued just before the switch, read as one datagram and dropped,
    /// would end the connection (it has no retransmission).
    fn track_gro(&mut self, datagrams: usize, want: usize) {
        if self.rx_want == RX_BATCH {
            self.lone_arrivals = 0;
            self.link.set_gro(true);
        } else if datagrams == 1 && want == 1 && !self.rx_streak && !self.lossless {
            self.lone_arrivals = self.lone_arrivals.saturating_add(1);
            if self.lone_arrivals == LONE_FOR_PLAIN && !self.link.gro_off_if_quiet() {
                // Something is queued already: try again after the next
                // run of lone datagrams.
                self.lone_arrivals = 0;
            }
        }
    }
}

fn open_and_handle(
    auth: Option<&PacketAuth>,
    conn: &mut Connection,
    now: Time,
    dg: &[u8],
    placer: Option<&mut dyn SegmentPlacer>,
) -> bool {
    match auth.map(|a| a.open(dg)) {
        None => {
            conn.handle_datagram_placing(now, dg, placer);
            false
        }
        Some(Opened::Packet(p)) => {
            conn.handle_datagram_placing(now, p, placer);
            true
        }
        Some(Opened::Handshake) => {
            conn.handle_datagram(now, dg);
            false
        }
        Some(Opened::Forged) => {
            STATS.auth_failures.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}
