//! Deadlines: connect retry, retransmission timeout (RTO, exponential
//! backoff), tail loss probe (the last segment again after two quiet
//! round trips, so a lost tail is found without waiting for the RTO),
//! probe (a KEEPALIVE asking for an immediate ACK when the sender waits on
//! the receiver with no retransmission timer running), keepalive after
//! send idleness, and the dead-peer limit: nothing heard for
//! `dead_peer_timeout` ends the connection, so a vanished peer is noticed
//! within a bounded, configured time.

use crate::connection::{Connection, State};
use crate::events::LostReason;
use crate::time::Time;

impl Connection {
    /// The earliest time `handle_timeout` has work, if any.
    pub fn poll_timeout(&self) -> Option<Time> {
        match self.state {
            State::Closed => None,
            State::Connecting => {
                let give_up = self.handshake_started + self.config.connect_timeout;
                Some(self.handshake_deadline.map_or(give_up, |d| d.min(give_up)))
            }
            State::Connected => [
                self.rto_deadline,
                self.tlp_deadline,
                self.probe_deadline,
                self.hole_deadline,
                self.ack_deadline,
                Some(self.keepalive_deadline()),
                Some(self.last_heard + self.config.dead_peer_timeout),
            ]
            .into_iter()
            .flatten()
            .min(),
        }
    }

    /// When an idle connection's keepalive is due, for the caller's
    /// sleep: `keepalive_interval` after the last send, rounded up to a
    /// grid of an eighth of the interval, so that the idle connections of one
    /// process come due together and one wake-up serves them all (a
    /// deadline of its own per connection woke a process with a thousand
    /// idle connections a thousand times an interval). The keepalive
    /// itself goes at the first call from the exact time on. (An eighth:
    /// the keepalive is what tells a VIPL program of a dead peer, within
    /// an interval and a round trip; a quarter put that 10 ms later at
    /// the device's 50 ms.)
    pub(crate) fn keepalive_deadline(&self) -> Time {
        let exact = self.last_sent + self.config.keepalive_interval;
        let grid =
            (self.config.keepalive_interval.as_nanos() / 8).clamp(1, u64::MAX as u128) as u64;
        Time::from_nanos(exact.as_nanos().div_ceil(grid).saturating_mul(grid))
    }

    /// Runs every timer that has expired at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        match self.state {
            State::Closed => {}
            State::Connecting => self.handshake_timeout(now),
            State::Connected => self.connected_timeout(now),
        }
    }

    fn connected_timeout(&mut self, now: Time) {
        if now >= self.last_heard + self.config.dead_peer_timeout {
            self.fail(LostReason::PeerSilent);
            return;
        }
        if self.rto_deadline.is_some_and(|d| now >= d) {
            if self.send.inflight_is_empty() {
                self.rto_deadline = None;
            } else {
                self.counters.rto_expirations += 1;
                self.rto_count += 1;
                if self.rto_count > self.config.max_rto_count {
                    self.fail(LostReason::RetransmitLimit);
                    return;
                }
                self.send.on_rto();
                self.dup_acks = 0;
                self.tlp_deadline = None;
                self.rtt.on_timeout();
                self.rto_deadline = Some(now + self.rtt.rto());
            }
        }
        if self.tlp_deadline.is_some_and(|d| now >= d) {
            self.tlp_deadline = None;
            if self.send.mark_tail_lost() > 0 {
                self.counters.tail_probes += 1;
                self.tlp_count += 1;
            }
        }
        if self.probe_deadline.is_some_and(|d| now >= d) {
            if self.needs_probe() {
                self.probe_due = true;
                self.rtt.on_timeout();
                self.probe_deadline = Some(now + self.rtt.rto());
            } else {
                self.probe_deadline = None;
            }
        }
        if self.hole_deadline.is_some_and(|d| now >= d) {
            self.recv.skip_holes(None);
            self.rearm_hole(now);
        }
        if self.ack_deadline.is_some_and(|d| now >= d) {
            self.ack_due = true;
            self.ack_deadline = None;
        }
        if now >= self.last_sent + self.config.keepalive_interval {
            self.keepalive_due = true;
        }
    }
}
