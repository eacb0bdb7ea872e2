//! Connection-setup messages exchanged on the local Unix socket between two
//! processes that want a connected VI pair (the shared-memory device).
//!
//! Each message is one sequenced packet: `magic u32 | version u8 | type u8`
//! followed by the fields of its type, little-endian, with byte strings
//! prefixed by a u16 length. File descriptors (the shared regions and the
//! progress thread's eventfd) travel beside the bytes as SCM_RIGHTS.

use crate::cursor::{Reader, WireError, Writer};

pub const MAGIC: u32 = 0x4149_564f; // "OVIA"
pub const VERSION: u8 = 1;
/// Longest host address (an IPv6 address).
pub const MAX_HOST_LEN: usize = 16;
/// Longest discriminator.
pub const MAX_DISCRIMINATOR_LEN: usize = 64;

/// A VIA network address: host bytes and a discriminator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Address {
    pub host: Vec<u8>,
    pub discriminator: Vec<u8>,
}

/// The attributes of a VI that its peer must know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViAttrs {
    pub reliability: u16,
    pub max_transfer: u64,
    pub rdma_write: bool,
    pub rdma_read: bool,
}

/// How the connection was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    ClientServer = 0,
    Peer = 1,
}

/// What a client (or the connecting side of a peer pair) sends first.
/// Descriptors attached: its NIC region memfd, its progress eventfd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub mode: Mode,
    pub attrs: ViAttrs,
    pub local: Address,
    pub remote: Address,
    pub nic_region_len: u32,
    pub probe_addr: u64,
    pub probe_value: u64,
}

/// The server's acceptance. Descriptors attached: the connection memfd,
/// its NIC region memfd, its progress eventfd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accept {
    pub attrs: ViAttrs,
    pub conn_region_len: u64,
    pub ring_bytes: u32,
    pub nic_region_len: u32,
    pub probe_addr: u64,
    pub probe_value: u64,
    /// The server could copy from/to the client's memory (CMA probe passed).
    pub peer_cma: bool,
}

/// Why a connection was refused or ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Rejected = 1,
    ReliabilityMismatch = 2,
    Disconnected = 3,
    Broken = 4,
    BadRequest = 5,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Request(Request),
    Accept(Accept),
    Reject(Reason),
    Disconnect(Reason),
    /// The client's confirmation after an Accept; `peer_cma`: the client
    /// could copy from/to the server's memory.
    Ready {
        peer_cma: bool,
    },
}

const T_REQUEST: u8 = 1;
const T_ACCEPT: u8 = 2;
const T_REJECT: u8 = 3;
const T_DISCONNECT: u8 = 4;
const T_READY: u8 = 5;

fn put_attrs(w: &mut Writer, a: &ViAttrs) {
    w.u16(a.reliability)
        .u64(a.max_transfer)
        .u8(a.rdma_write as u8)
        .u8(a.rdma_read as u8);
}

fn get_attrs(r: &mut Reader) -> Result<ViAttrs, WireError> {
    let reliability = r.u16()?;
    if reliability == 0 || reliability & !0x7 != 0 || reliability.count_ones() != 1 {
        return Err(WireError::OutOfRange {
            what: "reliability",
            value: reliability as u64,
        });
    }
    let max_transfer = r.u64()?;
    let rdma_write = get_bool(r)?;
    let rdma_read = get_bool(r)?;
    Ok(ViAttrs {
        reliability,
        max_transfer,
        rdma_write,
        rdma_read,
    })
}

fn get_bool(r: &mut Reader) -> Result<bool, WireError> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(WireError::OutOfRange {
            what: "bool",
            value: v as u64,
        }),
    }
}

fn put_addr(w: &mut Writer, a: &Address) {
    w.short_bytes(&a.host).short_bytes(&a.discriminator);
}

fn get_addr(r: &mut Reader) -> Result<Address, WireError> {
    let host = r.short_bytes("host address", MAX_HOST_LEN)?.to_vec();
    let discriminator = r
        .short_bytes("discriminator", MAX_DISCRIMINATOR_LEN)?
        .to_vec();
    Ok(Address {
        host,
        discriminator,
    })
}

fn get_reason(r: &mut Reader) -> Result<Reason, WireError> {
    Ok(match r.u8()? {
        1 => Reason::Rejected,
        2 => Reason::ReliabilityMismatch,
        3 => Reason::Disconnected,
        4 => Reason::Broken,
        5 => Reason::BadRequest,
        v => {
            return Err(WireError::Unknown {
                what: "reason",
                value: v as u64,
            })
        }
    })
}

impl Message {
    pub fn emit(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(MAGIC).u8(VERSION);
        match self {
            Message::Request(q) => {
                w.u8(T_REQUEST).u8(q.mode as u8);
                put_attrs(&mut w, &q.attrs);
                put_addr(&mut w, &q.local);
                put_addr(&mut w, &q.remote);
                w.u32(q.nic_region_len).u64(q.probe_addr).u64(q.probe_value);
            }
            Message::Accept(a) => {
                w.u8(T_ACCEPT);
                put_attrs(&mut w, &a.attrs);
                w.u64(a.conn_region_len)
                    .u32(a.ring_bytes)
                    .u32(a.nic_region_len)
                    .u64(a.probe_addr)
                    .u64(a.probe_value)
                    .u8(a.peer_cma as u8);
            }
            Message::Reject(r) => {
                w.u8(T_REJECT).u8(*r as u8);
            }
            Message::Disconnect(r) => {
                w.u8(T_DISCONNECT).u8(*r as u8);
            }
            Message::Ready { peer_cma } => {
                w.u8(T_READY).u8(*peer_cma as u8);
            }
        }
        w.buf
    }

    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf);
        if r.u32()? != MAGIC || r.u8()? != VERSION {
            return Err(WireError::BadMagic);
        }
        let msg = match r.u8()? {
            T_REQUEST => {
                let mode = match r.u8()? {
                    0 => Mode::ClientServer,
                    1 => Mode::Peer,
                    v => {
                        return Err(WireError::Unknown {
                            what: "mode",
                            value: v as u64,
                        })
                    }
                };
                Message::Request(Request {
                    mode,
                    attrs: get_attrs(&mut r)?,
                    local: get_addr(&mut r)?,
                    remote: get_addr(&mut r)?,
                    nic_region_len: r.u32()?,
                    probe_addr: r.u64()?,
                    probe_value: r.u64()?,
                })
            }
            T_ACCEPT => Message::Accept(Accept {
                attrs: get_attrs(&mut r)?,
                conn_region_len: r.u64()?,
                ring_bytes: r.u32()?,
                nic_region_len: r.u32()?,
                probe_addr: r.u64()?,
                probe_value: r.u64()?,
                peer_cma: get_bool(&mut r)?,
            }),
            T_REJECT => Message::Reject(get_reason(&mut r)?),
            T_DISCONNECT => Message::Disconnect(get_reason(&mut r)?),
            T_READY => Message::Ready {
                peer_cma: get_bool(&mut r)?,
            },
            v => {
                return Err(WireError::Unknown {
                    what: "message type",
                    value: v as u64,
                })
            }
        };
        r.finish()?;
        Ok(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Message> {
        let attrs = ViAttrs {
            reliability: 2,
            max_transfer: 1 << 20,
            rdma_write: true,
            rdma_read: false,
        };
        vec![
            Message::Request(Request {
                mode: Mode::Peer,
                attrs,
                local: Address {
                    host: vec![127, 0, 0, 1],
                    discriminator: b"abc".to_vec(),
                },
                remote: Address {
                    host: vec![1; 16],
                    discriminator: vec![],
                },
                nic_region_len: 4096,
                probe_addr: 0x7fff_0000,
                probe_value: 99,
            }),
            Message::Accept(Accept {
                attrs,
                conn_region_len: 1 << 20,
                ring_bytes: 1 << 18,
                nic_region_len: 4096,
                probe_addr: 5,
                probe_value: 6,
                peer_cma: true,
            }),
            Message::Ready { peer_cma: false },
            Message::Reject(Reason::ReliabilityMismatch),
            Message::Disconnect(Reason::Broken),
        ]
    }

    #[test]
    fn roundtrip_and_truncation() {
        for m in samples() {
            let b = m.emit();
            assert_eq!(Message::parse(&b).unwrap(), m);
            for cut in 0..b.len() {
                assert!(Message::parse(&b[..cut]).is_err(), "truncated at {cut}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(Message::parse(&longer).is_err(), "trailing byte");
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x: u64 = 12345;
        let base: Vec<Vec<u8>> = samples().iter().map(|m| m.emit()).collect();
        for i in 0..100_000 {
            let mut b = base[i % base.len()].clone();
            for _ in 0..3 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x as usize) % b.len();
                b[at] = (x >> 32) as u8;
            }
            let _ = Message::parse(&b);
        }
    }
}
