//! A task's message buffers: the send buffer being packed, received
//! messages being unpacked, and the ids PVM hands out for them.

use std::collections::HashMap;

use crate::codec::{self, Elem, ENC_INPLACE};
use crate::error::{PvmError, PvmResult};
use crate::pool::{Body, PoolHandle};

/// One buffer. Packed bytes live in `data` (pool pages when it can); PvmDataInPlace items are kept
/// as references into the caller's memory and read at send time.
#[derive(Debug, Default)]
pub struct MsgBuf {
    pub enc: i32,
    pub data: Body,
    pub pos: usize,
    pub src: i32,
    pub tag: i32,
    pub ctx: i32,
    /// (offset in `data`, address, length) of in-place items.
    pub refs: Vec<(usize, usize, usize)>,
}

impl MsgBuf {
    pub fn new(enc: i32) -> MsgBuf {
        MsgBuf::with_home(enc, None)
    }

    /// A buffer packing into the pool of `home`.
    pub fn with_home(enc: i32, home: Option<PoolHandle>) -> MsgBuf {
        MsgBuf {
            enc,
            data: Body::new(home),
            src: -1,
            tag: -1,
            ..MsgBuf::default()
        }
    }

    /// The bytes to send, with in-place items read now.
    pub fn body(&self) -> Vec<u8> {
        if self.refs.is_empty() {
            return self.data.to_vec();
        }
        let mut out = Vec::with_capacity(self.len());
        let mut at = 0;
        for &(off, addr, len) in &self.refs {
            out.extend_from_slice(&self.data[at..off]);
            // SAFETY: PvmDataInPlace's contract: the caller keeps the array
            // alive and unchanged-in-size until the message is sent.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(addr as *const u8, len) });
            at = off;
        }
        out.extend_from_slice(&self.data[at..]);
        out
    }

    /// Message length in bytes.
    pub fn len(&self) -> usize {
        self.data.len() + self.refs.iter().map(|r| r.2).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Packs `n` items from `src` (a byte span of the caller's array).
    pub fn pack(&mut self, elem: Elem, src: &[u8], n: usize, stride: usize) {
        if self.enc == ENC_INPLACE && stride == 1 {
            self.refs
                .push((self.data.len(), src.as_ptr() as usize, n * elem.size()));
        } else {
            codec::pack(self.enc, elem, src, n, stride, &mut self.data);
        }
    }

    pub fn unpack(&mut self, elem: Elem, dst: &mut [u8], n: usize, stride: usize) -> PvmResult<()> {
        codec::unpack(self.enc, elem, &self.data, &mut self.pos, n, stride, dst)
    }
}

/// Buffer ids → buffers.
#[derive(Default)]
pub struct BufTable {
    bufs: HashMap<i32, MsgBuf>,
    next: i32,
}

impl BufTable {
    pub fn insert(&mut self, b: MsgBuf) -> i32 {
        loop {
            self.next = if self.next >= i32::MAX - 1 {
                1
            } else {
                self.next + 1
            };
            if !self.bufs.contains_key(&self.next) {
                break;
            }
        }
        self.bufs.insert(self.next, b);
        self.next
    }

    pub fn get(&mut self, id: i32) -> PvmResult<&mut MsgBuf> {
        if id <= 0 {
            return Err(if id == 0 {
                PvmError::NoBuf
            } else {
                PvmError::BadParam
            });
        }
        self.bufs.get_mut(&id).ok_or(PvmError::NoSuchBuf)
    }

    pub fn remove(&mut self, id: i32) -> PvmResult<MsgBuf> {
        if id <= 0 {
            return Err(PvmError::BadParam);
        }
        self.bufs.remove(&id).ok_or(PvmError::NoSuchBuf)
    }

    pub fn contains(&self, id: i32) -> bool {
        self.bufs.contains_key(&id)
    }
}
