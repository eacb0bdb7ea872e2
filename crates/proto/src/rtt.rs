//! Round-trip estimation and the retransmission timeout, after RFC 6298:
//! a smoothed RTT and its variance give RTO = SRTT + 4·RTTVAR, clamped to
//! the configured bounds and doubled on each expiry (exponential backoff)
//! until a fresh sample arrives. Samples come only from segments sent once
//! (Karn's rule), so a retransmission never poisons the estimate.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// Smallest sample seen.
    min_rtt: Option<Duration>,
    min_rto: Duration,
    max_rto: Duration,
    initial_rto: Duration,
    backoff: u32,
    /// The timeout for the state above: asked for on every segment sent,
    /// changed only by a sample or an expiry.
    rto: Duration,
}

impl RttEstimator {
    pub fn new(initial_rto: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        let mut r = Self {
            srtt: None,
            rttvar: Duration::ZERO,
            min_rtt: None,
            min_rto,
            max_rto,
            initial_rto,
            backoff: 0,
            rto: initial_rto,
        };
        r.update_rto();
        r
    }

    pub fn on_sample(&mut self, rtt: Duration) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
        self.backoff = 0;
        self.update_rto();
    }

    /// Smoothed RTT, or the initial RTO before any sample.
    pub fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(self.initial_rto)
    }

    /// Smallest round trip seen, or the initial RTO before any sample
    /// (so that, before there is one, no retransmission counts as
    /// delivered too soon).
    pub fn min_rtt(&self) -> Duration {
        self.min_rtt.unwrap_or(self.initial_rto)
    }

    pub fn rto(&self) -> Duration {
        self.rto
    }

    fn update_rto(&mut self) {
        let base = match self.srtt {
            None => self.initial_rto,
            Some(srtt) => srtt + (self.rttvar * 4).max(Duration::from_micros(100)),
        };
        let base = base.clamp(self.min_rto, self.max_rto);
        self.rto = base
            .saturating_mul(1 << self.backoff.min(16))
            .min(self.max_rto);
    }

    pub fn on_timeout(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
        self.update_rto();
    }

    /// Progress without a usable sample still ends the backoff.
    pub fn reset_backoff(&mut self) {
        if self.backoff != 0 {
            self.backoff = 0;
            self.update_rto();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_clamps() {
        let ms = Duration::from_millis;
        let mut r = RttEstimator::new(ms(20), ms(1), ms(100));
        assert_eq!(r.rto(), ms(20));
        r.on_sample(ms(4));
        assert_eq!(r.rto(), ms(4) + ms(8));
        r.on_timeout();
        assert_eq!(r.rto(), ms(24));
        for _ in 0..10 {
            r.on_timeout();
        }
        assert_eq!(r.rto(), ms(100));
        r.on_sample(ms(4));
        assert!(r.rto() < ms(20));
        // Progress without a sample ends the backoff too.
        let base = r.rto();
        r.on_timeout();
        assert_eq!(r.rto(), base * 2);
        r.reset_backoff();
        assert_eq!(r.rto(), base);
    }
}
