//! The control protocol that runs over every endpoint before each test.
//!
//! One connection carries several tests (one per size). The client sends a
//! fixed-size [`Request`] naming the test and its parameters; the server
//! answers [`Reply::Ready`] (or refuses, e.g. a size above its limit), runs
//! its half, and for bandwidth ends with a [`ReceiverReport`] (what arrived,
//! what was lost, how many bytes failed verification). `Bye` ends the
//! connection. Control messages are [`CONTROL_LEN`] bytes so stream
//! transports, which frame by size, need no length prefix.

use crate::error::{BenchError, Result};
use crate::transports::{Endpoint, StreamReceipt};

pub const CONTROL_LEN: usize = 64;
const MAGIC: u32 = 0x5649_4142; // "VIAB"
const VERSION: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `rounds` round trips of `size` bytes (warm-up included).
    Latency {
        size: u64,
        rounds: u64,
    },
    /// A warm-up stream then a measured stream, `window` messages per ack.
    Bandwidth {
        size: u64,
        warmup: u64,
        count: u64,
        window: u32,
        verify: bool,
    },
    Bye,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    Ready,
    /// The server cannot run the test; the code says why.
    Refused(RefusalCode),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RefusalCode {
    SizeTooLarge = 1,
    WindowTooLarge = 2,
}

/// The bandwidth receiver's account of the measured stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiverReport {
    pub receipt: StreamReceipt,
    /// Corrupted message parts over warm-up and measured streams.
    pub mismatches: u64,
    /// (message index, byte offset) of the first corrupted byte.
    pub first_mismatch: Option<(u64, u64)>,
}

struct Writer([u8; CONTROL_LEN], usize);

impl Writer {
    fn new(kind: u8) -> Self {
        let mut w = Writer([0; CONTROL_LEN], 0);
        w.put(&MAGIC.to_le_bytes());
        w.put(&[VERSION, kind]);
        w
    }
    fn put(&mut self, b: &[u8]) {
        self.0[self.1..self.1 + b.len()].copy_from_slice(b);
        self.1 += b.len();
    }
    fn u64(mut self, v: u64) -> Self {
        self.put(&v.to_le_bytes());
        self
    }
}

struct Reader<'a>(&'a [u8; CONTROL_LEN], usize);

impl Reader<'_> {
    fn u64(&mut self) -> u64 {
        let v = u64::from_le_bytes(self.0[self.1..self.1 + 8].try_into().expect("8 bytes"));
        self.1 += 8;
        v
    }
}

/// Checks magic and version, returns the kind byte and a reader after it.
fn open(b: &[u8; CONTROL_LEN]) -> Result<(u8, Reader<'_>)> {
    let magic = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
    if magic != MAGIC || b[4] != VERSION {
        return Err(BenchError::Protocol(format!(
            "not a viabench v{VERSION} control message (magic {magic:#x}, version {})",
            b[4]
        )));
    }
    Ok((b[5], Reader(b, 6)))
}

impl Request {
    pub fn encode(&self) -> [u8; CONTROL_LEN] {
        match *self {
            Request::Latency { size, rounds } => Writer::new(1).u64(size).u64(rounds).0,
            Request::Bandwidth {
                size,
                warmup,
                count,
                window,
                verify,
            } => {
                Writer::new(2)
                    .u64(size)
                    .u64(warmup)
                    .u64(count)
                    .u64(u64::from(window))
                    .u64(u64::from(verify))
                    .0
            }
            Request::Bye => Writer::new(3).0,
        }
    }

    pub fn decode(b: &[u8; CONTROL_LEN]) -> Result<Request> {
        let (kind, mut r) = open(b)?;
        Ok(match kind {
            1 => Request::Latency {
                size: r.u64(),
                rounds: r.u64(),
            },
            2 => Request::Bandwidth {
                size: r.u64(),
                warmup: r.u64(),
                count: r.u64(),
                window: u32::try_from(r.u64())
                    .map_err(|_| BenchError::Protocol("window out of range".into()))?,
                verify: r.u64() != 0,
            },
            3 => Request::Bye,
            k => return Err(BenchError::Protocol(format!("unknown request kind {k}"))),
        })
    }
}

impl Reply {
    pub fn encode(&self) -> [u8; CONTROL_LEN] {
        match *self {
            Reply::Ready => Writer::new(10).0,
            Reply::Refused(code) => Writer::new(11).u64(code as u64).0,
        }
    }

    pub fn decode(b: &[u8; CONTROL_LEN]) -> Result<Reply> {
        let (kind, mut r) = open(b)?;
        match (kind, r.u64()) {
            (10, _) => Ok(Reply::Ready),
            (11, 1) => Ok(Reply::Refused(RefusalCode::SizeTooLarge)),
            (11, 2) => Ok(Reply::Refused(RefusalCode::WindowTooLarge)),
            (k, c) => Err(BenchError::Protocol(format!("unknown reply {k}/{c}"))),
        }
    }
}

impl ReceiverReport {
    pub fn encode(&self) -> [u8; CONTROL_LEN] {
        let (has, idx, off) = match self.first_mismatch {
            Some((i, o)) => (1, i, o),
            None => (0, 0, 0),
        };
        Writer::new(20)
            .u64(self.receipt.messages)
            .u64(self.receipt.bytes)
            .u64(self.receipt.lost_messages)
            .u64(self.mismatches)
            .u64(has)
            .u64(idx)
            .u64(off)
            .0
    }

    pub fn decode(b: &[u8; CONTROL_LEN]) -> Result<ReceiverReport> {
        let (kind, mut r) = open(b)?;
        if kind != 20 {
            return Err(BenchError::Protocol(format!(
                "expected a receiver report, got kind {kind}"
            )));
        }
        let receipt = StreamReceipt {
            messages: r.u64(),
            bytes: r.u64(),
            lost_messages: r.u64(),
        };
        let mismatches = r.u64();
        let has = r.u64();
        let (idx, off) = (r.u64(), r.u64());
        Ok(ReceiverReport {
            receipt,
            mismatches,
            first_mismatch: (has != 0).then_some((idx, off)),
        })
    }
}

/// Sends a control message.
pub fn send_control(ep: &mut dyn Endpoint, msg: &[u8; CONTROL_LEN]) -> Result<()> {
    ep.send(msg)
}

/// Receives a control message.
pub fn recv_control(ep: &mut dyn Endpoint) -> Result<[u8; CONTROL_LEN]> {
    let mut b = [0u8; CONTROL_LEN];
    let n = ep.recv(&mut b)?;
    if n != CONTROL_LEN {
        return Err(BenchError::Protocol(format!(
            "control message of {n} bytes, expected {CONTROL_LEN}"
        )));
    }
    Ok(b)
}

/// Client side: asks the server to run `req` and waits for its answer.
pub fn start_test(ep: &mut dyn Endpoint, req: &Request) -> Result<()> {
    send_control(ep, &req.encode())?;
    match Reply::decode(&recv_control(ep)?)? {
        Reply::Ready => Ok(()),
        Reply::Refused(code) => Err(BenchError::Server(format!(
            "refused the test: {}",
            match code {
                RefusalCode::SizeTooLarge => "message size above its --max-size",
                RefusalCode::WindowTooLarge => "window above its --max-window",
            }
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for req in [
            Request::Latency {
                size: 8,
                rounds: 1200,
            },
            Request::Bandwidth {
                size: 1 << 20,
                warmup: 64,
                count: 1024,
                window: 64,
                verify: true,
            },
            Request::Bye,
        ] {
            assert_eq!(Request::decode(&req.encode()).unwrap(), req);
        }
        for rep in [Reply::Ready, Reply::Refused(RefusalCode::SizeTooLarge)] {
            assert_eq!(Reply::decode(&rep.encode()).unwrap(), rep);
        }
    }

    #[test]
    fn report_round_trips_and_garbage_is_rejected() {
        let rep = ReceiverReport {
            receipt: StreamReceipt {
                messages: 10,
                bytes: 655360,
                lost_messages: 2,
            },
            mismatches: 1,
            first_mismatch: Some((5, 77)),
        };
        assert_eq!(ReceiverReport::decode(&rep.encode()).unwrap(), rep);
        assert!(Request::decode(&[0u8; CONTROL_LEN]).is_err());
        assert!(ReceiverReport::decode(&Reply::Ready.encode()).is_err());
    }
}
