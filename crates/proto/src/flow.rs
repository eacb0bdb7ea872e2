//! Receiver-driven flow control as in RUM (seed 002). The receiver reports
//! `consumed`, the sequence number below which it has handed every segment
//! to the application and freed its buffer. The sender may have at most
//! `window` segments past `consumed`:
//!
//! - Hetero: `window` is the receiver's advertised window, carried in every
//!   packet: available = awnd − (txed − acked).
//! - Homo: `window` is the receiver's total buffer, known from the
//!   handshake: available = total − (txed − acked); packets carry no window.
//!
//! The sender never exceeds it, so a receiver that stops consuming holds
//! the sender instead of losing data.

use openvia_wire::rum::FlowMode;

#[derive(Debug, Clone)]
pub struct CreditWindow {
    mode: FlowMode,
    /// Homo: the known total; Hetero: the latest advertised window.
    window: u64,
    /// Highest `consumed` reported by the receiver.
    consumed: u64,
}

impl CreditWindow {
    pub fn new(mode: FlowMode, initial_window: u32) -> Self {
        Self {
            mode,
            window: initial_window as u64,
            consumed: 0,
        }
    }

    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Takes a report from the receiver. Reports older than the newest
    /// `consumed` are ignored, so a reordered packet cannot reopen a window.
    pub fn on_report(&mut self, consumed: u64, advertised: u32) {
        if consumed < self.consumed {
            return;
        }
        self.consumed = consumed;
        if self.mode == FlowMode::Hetero {
            self.window = advertised as u64;
        }
    }

    /// Segments the sender may still transmit, with `next_seq` the next
    /// sequence number it would use (so `next_seq − consumed` are "txed − acked").
    pub fn available(&self, next_seq: u64) -> u64 {
        let outstanding = next_seq.saturating_sub(self.consumed);
        self.window.saturating_sub(outstanding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hetero_and_homo() {
        let mut h = CreditWindow::new(FlowMode::Hetero, 8);
        assert_eq!(h.available(5), 3);
        h.on_report(5, 2);
        assert_eq!(h.available(5), 2);
        h.on_report(4, 100); // stale
        assert_eq!(h.available(5), 2);
        h.on_report(5, 0);
        assert_eq!(h.available(5), 0);

        let mut m = CreditWindow::new(FlowMode::Homo, 8);
        m.on_report(3, 0); // the advertised field is ignored in Homo
        assert_eq!(m.available(10), 1);
        assert_eq!(m.available(20), 0);
    }
}
