//! Latency round trips on a VIA endpoint as a VIA program writes them:
//! the receive for the echo is posted while the ping is on its way (right
//! after the send is posted, before waiting for its completion), and the
//! server posts its next receive right after its echo. A message that
//! finds no receive posted is held by the reliable levels but dropped by
//! the unreliable one, so waiting for the send's completion before posting
//! the receive loses echoes: the completion wait polls the VI, and the echo
//! may arrive meanwhile. Posting the receive before the send would be
//! safer still, but posting runs a progress call (a system call) that
//! would then delay the ping; no echo can come back sooner than a round
//! trip, and the receive is posted well within that.
//!
//! On the unreliable level a datagram can still be lost (a full socket
//! buffer, a dropping link): the client sends the ping again after
//! [`RETRY_AFTER`] without an echo, skips echoes of earlier rounds (the
//! round number is in the first 8 bytes, see `driver_latency`) and counts
//! the repeats; the server counts rounds by distinct round numbers, so a
//! repeated ping is echoed without ending the test early.

use std::time::{Duration, Instant};

use super::via_endpoint::ViaEndpoint;
use crate::error::{BenchError, Result};

/// Silence after which an unreliable round trip sends its ping again.
const RETRY_AFTER: Duration = Duration::from_millis(50);
/// Silence after which the peer counts as gone.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// The round number a ping (or its echo) carries, if long enough.
fn round_of(msg: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(msg.get(..8)?.try_into().ok()?))
}

impl ViaEndpoint {
    pub(super) fn preposted_round_trip(
        &mut self,
        round: u64,
        ping: &[u8],
        pong: &mut [u8],
    ) -> Result<usize> {
        let ping_handle = self.handle_for(ping.as_ptr() as usize, ping.len())?;
        if !self.lossy {
            let pong_handle = self.handle_for(pong.as_ptr() as usize, pong.len())?;
            self.post_send(ping.as_ptr() as usize, ping.len(), ping_handle)?;
            self.post_recv(pong.as_ptr() as usize, pong.len(), pong_handle)?;
            self.reap_send()?;
            return Ok(self.reap_recv()?.1);
        }
        // The echo lands in our own buffer: a receive still posted when an
        // error ends the run must not point into the caller's memory.
        self.ensure_buffers(1, pong.len(), false)?;
        let (addr, handle) = (self.recv_buffers[0].base, self.recv_buffers[0].handle);
        self.post_send(ping.as_ptr() as usize, ping.len(), ping_handle)?;
        self.post_recv(addr, pong.len(), handle)?;
        self.reap_send()?;
        let mut heard = Instant::now();
        loop {
            match self.reap_recv_within(RETRY_AFTER)? {
                Some((at, n)) => {
                    // SAFETY: our receive buffer, its receive completed.
                    let echo = unsafe { std::slice::from_raw_parts(at as *const u8, n) };
                    if n == ping.len() && round_of(echo).is_none_or(|r| r == round) {
                        pong[..n].copy_from_slice(echo);
                        return Ok(n);
                    }
                    // The echo of an earlier, repeated ping: wait on.
                    self.post_recv(addr, pong.len(), handle)?;
                    heard = Instant::now();
                }
                None if heard.elapsed() >= GIVE_UP_AFTER => {
                    return Err(BenchError::Timeout(format!(
                        "round trip {round}: no echo within {GIVE_UP_AFTER:?}"
                    )));
                }
                None => {
                    self.repeated += 1;
                    self.post_send(ping.as_ptr() as usize, ping.len(), ping_handle)?;
                    self.reap_send()?;
                }
            }
        }
    }

    pub(super) fn preposted_echo(&mut self, size: usize, rounds: u64) -> Result<()> {
        self.ensure_buffers(2, size.max(1), false)?;
        let bufs: Vec<(usize, u32)> = self.recv_buffers[..2]
            .iter()
            .map(|r| (r.base, r.handle))
            .collect();
        let mut last_round = None;
        let mut answered = 0;
        let mut cur = 0;
        if rounds > 0 {
            self.post_recv(bufs[cur].0, size, bufs[cur].1)?;
        }
        while answered < rounds {
            let (at, n) = self.reap_recv()?;
            // SAFETY: our receive buffer, its receive completed.
            let ping = unsafe { std::slice::from_raw_parts(at as *const u8, n) };
            let round = if self.lossy { round_of(ping) } else { None };
            if round.is_none() || round != last_round {
                answered += 1;
            }
            last_round = round;
            let next = cur ^ 1;
            self.post_send(at, n, bufs[cur].1)?;
            if answered < rounds {
                // Posted before the send's completion is awaited: the next
                // ping (or, on the unreliable level, a repeat of this one)
                // finds it.
                self.post_recv(bufs[next].0, size, bufs[next].1)?;
            }
            self.reap_send()?;
            cur = next;
        }
        Ok(())
    }
}
