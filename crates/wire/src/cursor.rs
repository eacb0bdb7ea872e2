//! A bounds-checked little-endian reader and a growable writer, shared by
//! the message formats that are not fixed-layout.

use thiserror::Error;

/// Why bytes from a peer were refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WireError {
    #[error("truncated: needed {needed} bytes, {available} left")]
    Truncated { needed: usize, available: usize },
    #[error("bad magic or version")]
    BadMagic,
    #[error("unknown {what} {value}")]
    Unknown { what: &'static str, value: u64 },
    #[error("field {what} out of range: {value}")]
    OutOfRange { what: &'static str, value: u64 },
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Reads fields front to back, refusing to run past the end.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let available = self.buf.len() - self.pos;
        if n > available {
            return Err(WireError::Truncated {
                needed: n,
                available,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.bytes(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A byte string preceded by its u16 length, at most `max` long.
    pub fn short_bytes(&mut self, what: &'static str, max: usize) -> Result<&'a [u8], WireError> {
        let n = self.u16()? as usize;
        if n > max {
            return Err(WireError::OutOfRange {
                what,
                value: n as u64,
            });
        }
        self.bytes(n)
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<(), WireError> {
        match self.buf.len() - self.pos {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

/// Appends little-endian fields.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A byte string preceded by its u16 length (callers keep it short).
    pub fn short_bytes(&mut self, b: &[u8]) -> &mut Self {
        let n = b.len().min(u16::MAX as usize);
        self.u16(n as u16);
        self.buf.extend_from_slice(&b[..n]);
        self
    }
}
