//! Records in a shared-memory ring (one ring per direction of a connected
//! VI pair).
//!
//! A ring is a byte array of power-of-two size cut into 64-byte lines. A
//! record starts on a line with its header; the producer writes header and
//! payload, then the `stamp` word (ring position + 1) with release
//! ordering; the consumer polls the stamp at its own read position, so a
//! new record is seen by reading one cache line and stale records from
//! earlier laps never match.
//!
//! The header has a 32-byte core and a 32-byte extension. Data records
//! (`First` of a Send or ReadResponse without CMA, and `Cont`) need only
//! the core, so their payload starts at byte 32: a message of up to 32
//! bytes travels in the very line the consumer polls. Other records carry
//! the extension and their payload (if any) starts at byte 64.
//!
//! | offset | size | field         | meaning                                         |
//! |--------|------|---------------|-------------------------------------------------|
//! | 0      | 8    | stamp         | position + 1 of this record (written last)      |
//! | 8      | 1    | kind          | First, Cont, Pad, Nack, ReadDone                |
//! | 9      | 1    | op            | Send, RdmaWrite, ReadRequest, ReadResponse      |
//! | 10     | 1    | flags         | IMMEDIATE, CMA, WAKE                            |
//! | 11     | 1    | reserved      |                                                 |
//! | 12     | 4    | payload_len   | bytes of payload in this record                 |
//! | 16     | 4    | total_len     | bytes of the whole message                      |
//! | 20     | 4    | immediate     | immediate data                                  |
//! | 24     | 8    | msg_seq       | message number (Nack/ReadDone: the one meant)   |
//! | 32     | 8    | remote_addr   | extension — RDMA: address at the receiver       |
//! | 40     | 4    | remote_handle | extension — RDMA: memory handle at the receiver |
//! | 44     | 4    | status        | extension — Nack/ReadDone: VIP status bits      |
//! | 48     | 4    | iov_count     | extension — CMA: (addr u64, len u64) pairs      |
//! | 52     | 12   | reserved      | extension                                       |
//!
//! All fields are native-endian: both ends are processes on one host.

use crate::cursor::WireError;

/// Size of a record header, and the ring's unit of allocation.
pub const LINE: usize = 64;
/// Size of the header core (all a data record needs).
pub const CORE: usize = 32;
/// Largest payload a single record may carry (a ring must be larger).
pub const MAX_RECORD_PAYLOAD: usize = 1 << 20;
/// Most CMA ranges one record may name.
pub const MAX_IOVS: usize = 1024;

/// Size of one CMA range entry in a payload.
pub const IOV_ENTRY: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    /// Starts a message; may carry its first (or only) data chunk.
    First = 1,
    /// A further data chunk of the message in progress.
    Cont = 2,
    /// Filler up to the end of the ring; the next record starts at offset 0.
    Pad = 3,
    /// The receiver refused message `msg_seq` with `status` error bits.
    Nack = 4,
    /// The target finished an RDMA read `msg_seq` by writing directly (CMA).
    ReadDone = 5,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Send = 0,
    RdmaWrite = 1,
    ReadRequest = 2,
    ReadResponse = 3,
}

/// Flag: the message carries immediate data.
pub const FLAG_IMMEDIATE: u8 = 0x1;
/// Flag: the payload is a list of ranges in the sender's memory to copy by CMA.
pub const FLAG_CMA: u8 = 0x2;
/// Flag: the producer waits on this record being consumed (its completion
/// or ring space depends on it), so the consumer must wake it afterwards.
/// Records without it spare the consumer a fence and a look at the
/// producer's doorbell.
pub const FLAG_WAKE: u8 = 0x4;

/// A record header without its stamp (the ring owns the stamp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: RecordKind,
    pub op: Op,
    pub flags: u8,
    pub payload_len: u32,
    pub total_len: u64,
    pub msg_seq: u64,
    pub remote_addr: u64,
    pub remote_handle: u32,
    pub immediate: u32,
    pub status: u32,
    pub iov_count: u32,
}

impl RecordHeader {
    pub const fn new(kind: RecordKind, op: Op) -> Self {
        Self {
            kind,
            op,
            flags: 0,
            payload_len: 0,
            total_len: 0,
            msg_seq: 0,
            remote_addr: 0,
            remote_handle: 0,
            immediate: 0,
            status: 0,
            iov_count: 0,
        }
    }

    /// Whether this record needs the header extension (else its payload
    /// starts right after the 32-byte core).
    pub fn extended(&self) -> bool {
        match self.kind {
            RecordKind::Cont => false,
            RecordKind::First => {
                self.flags & FLAG_CMA != 0 || !matches!(self.op, Op::Send | Op::ReadResponse)
            }
            RecordKind::Pad | RecordKind::Nack | RecordKind::ReadDone => true,
        }
    }

    /// Where the payload starts within the record.
    pub fn payload_offset(&self) -> usize {
        if self.extended() {
            LINE
        } else {
            CORE
        }
    }

    /// Bytes the whole record takes in the ring (header + padded payload).
    pub fn record_len(&self) -> usize {
        (self.payload_offset() + self.payload_len as usize).div_ceil(LINE) * LINE
    }

    /// Writes the header after the stamp into `line` (bytes 8..32, and
    /// 32..64 when [`extended`](Self::extended); the rest is payload).
    pub fn emit(&self, line: &mut [u8; LINE]) {
        line[8] = self.kind as u8;
        line[9] = self.op as u8;
        line[10] = self.flags;
        line[11] = 0;
        line[12..16].copy_from_slice(&self.payload_len.to_ne_bytes());
        line[16..20].copy_from_slice(&(self.total_len as u32).to_ne_bytes());
        line[20..24].copy_from_slice(&self.immediate.to_ne_bytes());
        line[24..32].copy_from_slice(&self.msg_seq.to_ne_bytes());
        if self.extended() {
            line[32..40].copy_from_slice(&self.remote_addr.to_ne_bytes());
            line[40..44].copy_from_slice(&self.remote_handle.to_ne_bytes());
            line[44..48].copy_from_slice(&self.status.to_ne_bytes());
            line[48..52].copy_from_slice(&self.iov_count.to_ne_bytes());
            line[52..64].fill(0);
        }
    }

    /// Parses a header line copied out of the ring. `max_payload` is the
    /// most a record can hold in this ring.
    pub fn parse(line: &[u8; LINE], max_payload: usize) -> Result<Self, WireError> {
        let u32_at =
            |o: usize| u32::from_ne_bytes([line[o], line[o + 1], line[o + 2], line[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&line[o..o + 8]);
            u64::from_ne_bytes(a)
        };
        let kind = match line[8] {
            1 => RecordKind::First,
            2 => RecordKind::Cont,
            3 => RecordKind::Pad,
            4 => RecordKind::Nack,
            5 => RecordKind::ReadDone,
            v => {
                return Err(WireError::Unknown {
                    what: "record kind",
                    value: v as u64,
                })
            }
        };
        let op = match line[9] {
            0 => Op::Send,
            1 => Op::RdmaWrite,
            2 => Op::ReadRequest,
            3 => Op::ReadResponse,
            v => {
                return Err(WireError::Unknown {
                    what: "op",
                    value: v as u64,
                })
            }
        };
        let flags = line[10];
        if flags & !(FLAG_IMMEDIATE | FLAG_CMA | FLAG_WAKE) != 0 {
            return Err(WireError::Unknown {
                what: "flags",
                value: flags as u64,
            });
        }
        let payload_len = u32_at(12);
        if payload_len as usize > max_payload.min(MAX_RECORD_PAYLOAD) {
            return Err(WireError::OutOfRange {
                what: "payload_len",
                value: payload_len as u64,
            });
        }
        let mut h = Self {
            kind,
            op,
            flags,
            payload_len,
            total_len: u32_at(16) as u64,
            immediate: u32_at(20),
            msg_seq: u64_at(24),
            remote_addr: 0,
            remote_handle: 0,
            status: 0,
            iov_count: 0,
        };
        if h.extended() {
            h.remote_addr = u64_at(32);
            h.remote_handle = u32_at(40);
            h.status = u32_at(44);
            h.iov_count = u32_at(48);
        }
        let iov_count = h.iov_count;
        if flags & FLAG_CMA != 0 {
            if iov_count as usize > MAX_IOVS
                || iov_count as usize * IOV_ENTRY != payload_len as usize
            {
                return Err(WireError::OutOfRange {
                    what: "iov_count",
                    value: iov_count as u64,
                });
            }
        } else if iov_count != 0 {
            return Err(WireError::OutOfRange {
                what: "iov_count",
                value: iov_count as u64,
            });
        }
        if h.kind == RecordKind::First
            && h.flags & FLAG_CMA == 0
            && h.payload_len as u64 > h.total_len
        {
            return Err(WireError::OutOfRange {
                what: "payload_len",
                value: payload_len as u64,
            });
        }
        Ok(h)
    }
}

/// Most bytes a record with `payload` bytes can take in the ring (with the
/// header extension).
pub const fn record_len(payload: usize) -> usize {
    (LINE + payload).div_ceil(LINE) * LINE
}

/// Decodes a CMA payload into (address, length) pairs, refusing lengths
/// whose sum overflows.
pub fn parse_iovs(payload: &[u8]) -> Result<Vec<(u64, u64)>, WireError> {
    if !payload.len().is_multiple_of(IOV_ENTRY) || payload.len() / IOV_ENTRY > MAX_IOVS {
        return Err(WireError::OutOfRange {
            what: "iov payload",
            value: payload.len() as u64,
        });
    }
    let mut out = Vec::with_capacity(payload.len() / IOV_ENTRY);
    let mut total = 0u64;
    for e in payload.chunks_exact(IOV_ENTRY) {
        let mut a = [0u8; 8];
        a.copy_from_slice(&e[..8]);
        let addr = u64::from_ne_bytes(a);
        a.copy_from_slice(&e[8..]);
        let len = u64::from_ne_bytes(a);
        total = total.checked_add(len).ok_or(WireError::OutOfRange {
            what: "iov length",
            value: len,
        })?;
        addr.checked_add(len).ok_or(WireError::OutOfRange {
            what: "iov address",
            value: addr,
        })?;
        out.push((addr, len));
    }
    Ok(out)
}

/// Encodes (address, length) pairs as a CMA payload.
pub fn emit_iovs(iovs: &[(u64, u64)], out: &mut Vec<u8>) {
    for (a, l) in iovs {
        out.extend_from_slice(&a.to_ne_bytes());
        out.extend_from_slice(&l.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RecordHeader {
        RecordHeader {
            kind: RecordKind::First,
            op: Op::RdmaWrite,
            flags: FLAG_IMMEDIATE,
            payload_len: 100,
            total_len: 1000,
            msg_seq: 7,
            remote_addr: 0xdead_beef,
            remote_handle: 42,
            immediate: 0x1234,
            status: 0,
            iov_count: 0,
        }
    }

    #[test]
    fn roundtrip() {
        let h = sample();
        let mut line = [0u8; LINE];
        h.emit(&mut line);
        assert_eq!(RecordHeader::parse(&line, 4096).unwrap(), h);
        assert_eq!(h.record_len(), 64 + 128);
    }

    #[test]
    fn rejects_bad_fields() {
        let mut line = [0u8; LINE];
        sample().emit(&mut line);
        let mut bad = line;
        bad[8] = 9;
        assert!(RecordHeader::parse(&bad, 4096).is_err());
        let mut bad = line;
        bad[10] = 0x80;
        assert!(RecordHeader::parse(&bad, 4096).is_err());
        assert!(
            RecordHeader::parse(&line, 64).is_err(),
            "payload larger than ring allows"
        );
        let mut h = sample();
        h.flags = FLAG_CMA;
        h.iov_count = 3;
        h.payload_len = 40;
        h.emit(&mut line);
        assert!(
            RecordHeader::parse(&line, 4096).is_err(),
            "iov count mismatch"
        );
    }

    #[test]
    fn random_lines_never_panic() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..200_000 {
            let mut line = [0u8; LINE];
            for b in line.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            // Bias towards valid kinds/ops so deeper checks run too.
            line[8] = (line[8] % 6) + 1;
            line[9] %= 5;
            let _ = RecordHeader::parse(&line, 1 << 16);
        }
    }

    #[test]
    fn iovs_checked() {
        let mut p = Vec::new();
        emit_iovs(&[(10, 20), (100, 5)], &mut p);
        assert_eq!(parse_iovs(&p).unwrap(), vec![(10, 20), (100, 5)]);
        assert!(parse_iovs(&p[..20]).is_err());
        let mut p = Vec::new();
        emit_iovs(&[(u64::MAX - 1, 20)], &mut p);
        assert!(parse_iovs(&p).is_err());
    }
}
