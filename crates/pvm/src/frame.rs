//! The task ↔ pvmd wire: length-prefixed frames on a Unix stream socket.
//! Three kinds only: a PVM message, a request (an opcode with int, string
//! and byte arguments) and its reply. Keeping requests generic keeps the
//! daemon's dispatch in one table instead of one struct per call.

use std::io::{self, Read, Write};

/// Request opcodes.
pub mod op {
    /// Enroll: ints [tid hint or 0, pid], strs [program name].
    pub const HELLO: u32 = 1;
    pub const SPAWN: u32 = 2;
    pub const CONFIG: u32 = 3;
    pub const TASKS: u32 = 4;
    pub const KILL: u32 = 5;
    pub const NOTIFY: u32 = 6;
    pub const EXIT: u32 = 7;
    pub const HALT: u32 = 8;
    pub const PUTINFO: u32 = 9;
    pub const RECVINFO: u32 = 10;
    pub const DELINFO: u32 = 11;
    pub const PSTAT: u32 = 12;
    pub const SENDSIG: u32 = 13;
    pub const MSTAT: u32 = 14;
    pub const ADDHOSTS: u32 = 15;
    pub const DELHOSTS: u32 = 16;
    /// Mailbox listing: strs [glob pattern]; reply strs [class]*, ints
    /// per class [n, (index, owner, flags)*n].
    pub const MBOXINFO: u32 = 17;
    /// Mailbox clean-up (the console's reset): strs [class or ""], ints
    /// [index or -1, keep-all-owned (0: orphans only, 1: all), kept tid*].
    pub const RESETINFO: u32 = 18;
    /// pvm_reg_rm: the asking task becomes the resource manager.
    pub const REG_RM: u32 = 19;
    /// A task's own link to the pvmd of host ints[0] (`daemon/task_links.rs`):
    /// that pvmd waits for the task's connect and answers bytes
    /// [discriminator length, discriminator, its network address].
    pub const LINK_OPEN: u32 = 20;
    /// Answered by the pvmd of host ints[0] once it has taken in every
    /// frame the asking task routed to it before: from then on the task's
    /// messages to that host may go over its own link, in order.
    pub const LINK_MARK: u32 = 21;
    /// Between pvmds only: the master's host table (ints [num, speed]*,
    /// strs [name, arch, network address in hex]*).
    pub const D_HOSTS: u32 = 100;
    /// Between pvmds only: the whole sibling list of a spawn across hosts.
    pub const D_SIBLINGS: u32 = 101;
    /// Between pvmds only: the master halts a slave.
    pub const D_HALT: u32 = 102;
    /// Between slaves, through the master: a mesh link is up, and this
    /// marks the end of what went the relayed way (`daemon/mesh.rs`).
    pub const D_MESH_MARK: u32 = 103;
    /// The answer: everything relayed before the mark has arrived.
    pub const D_MESH_ACK: u32 = 104;
}

/// First byte of a message frame (the link reads it to place bodies).
pub const KIND_MSG: u8 = 1;
const KIND_REQ: u8 = 2;
const KIND_REPLY: u8 = 3;

/// Largest frame accepted; bigger means a corrupt or hostile peer.
pub const MAX_FRAME: usize = 1 << 30;

/// A PVM message in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub src: i32,
    pub dst: i32,
    pub tag: i32,
    pub ctx: i32,
    pub enc: i32,
    pub body: Vec<u8>,
}

/// Arguments of a request or reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    pub ints: Vec<i32>,
    pub strs: Vec<String>,
    pub bytes: Vec<u8>,
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Msg(Msg),
    Req { seq: u32, op: u32, args: Args },
    Reply { seq: u32, code: i32, args: Args },
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_args(out: &mut Vec<u8>, a: &Args) {
    put_u32(out, a.ints.len() as u32);
    for i in &a.ints {
        out.extend_from_slice(&i.to_le_bytes());
    }
    put_u32(out, a.strs.len() as u32);
    for s in &a.strs {
        put_u32(out, s.len() as u32);
        out.extend_from_slice(s.as_bytes());
    }
    put_u32(out, a.bytes.len() as u32);
    out.extend_from_slice(&a.bytes);
}

impl Frame {
    /// Serialises the frame, length prefix included.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        put_u32(&mut out, 0);
        match self {
            Frame::Msg(m) => {
                out.push(KIND_MSG);
                for v in [m.src, m.dst, m.tag, m.ctx, m.enc] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                put_u32(&mut out, m.body.len() as u32);
                out.extend_from_slice(&m.body);
            }
            Frame::Req { seq, op, args } => {
                out.push(KIND_REQ);
                put_u32(&mut out, *seq);
                put_u32(&mut out, *op);
                put_args(&mut out, args);
            }
            Frame::Reply { seq, code, args } => {
                out.push(KIND_REPLY);
                put_u32(&mut out, *seq);
                out.extend_from_slice(&code.to_le_bytes());
                put_args(&mut out, args);
            }
        }
        let len = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&len.to_le_bytes());
        out
    }

    /// Parses one frame body (without its length prefix).
    pub fn decode(buf: &[u8]) -> io::Result<Frame> {
        let mut r = Cursor { buf, pos: 0 };
        let kind = r.u8()?;
        match kind {
            KIND_MSG => {
                let (src, dst, tag, ctx, enc) = (r.i32()?, r.i32()?, r.i32()?, r.i32()?, r.i32()?);
                let body = r.blob()?.to_vec();
                Ok(Frame::Msg(Msg {
                    src,
                    dst,
                    tag,
                    ctx,
                    enc,
                    body,
                }))
            }
            KIND_REQ => {
                let seq = r.u32()?;
                let op = r.u32()?;
                Ok(Frame::Req {
                    seq,
                    op,
                    args: r.args()?,
                })
            }
            KIND_REPLY => {
                let seq = r.u32()?;
                let code = r.i32()?;
                Ok(Frame::Reply {
                    seq,
                    code,
                    args: r.args()?,
                })
            }
            k => Err(bad(&format!("unknown frame kind {k}"))),
        }
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.buf.len() - self.pos < n {
            return Err(bad("short frame"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i32(&mut self) -> io::Result<i32> {
        Ok(self.u32()? as i32)
    }
    fn blob(&mut self) -> io::Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn args(&mut self) -> io::Result<Args> {
        let mut a = Args::default();
        let n = self.u32()? as usize;
        for _ in 0..n.min(self.buf.len()) {
            a.ints.push(self.i32()?);
        }
        let n = self.u32()? as usize;
        for _ in 0..n.min(self.buf.len()) {
            let s = self.blob()?;
            a.strs.push(String::from_utf8_lossy(s).into_owned());
        }
        a.bytes = self.blob()?.to_vec();
        Ok(a)
    }
}

/// Blocking read of one frame; `Ok(None)` at a clean end of stream.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Frame>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(bad("frame too large"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Frame::decode(&body).map(Some)
}

/// Blocking write of one frame.
pub fn write_frame(w: &mut impl Write, f: &Frame) -> io::Result<()> {
    w.write_all(&f.encode())
}

/// Accumulates bytes from a non-blocking socket and yields whole frames.
#[derive(Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// Appends freshly read bytes.
    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete frame, if one is buffered.
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > MAX_FRAME {
            return Err(bad("frame too large"));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let f = Frame::decode(&self.buf[4..4 + len]);
        self.buf.drain(..4 + len);
        f.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let frames = [
            Frame::Msg(Msg {
                src: 1,
                dst: 2,
                tag: 3,
                ctx: 4,
                enc: 0,
                body: vec![1, 2, 3],
            }),
            Frame::Req {
                seq: 7,
                op: op::SPAWN,
                args: Args {
                    ints: vec![1, -2],
                    strs: vec!["a".into()],
                    bytes: vec![9],
                },
            },
            Frame::Reply {
                seq: 7,
                code: -31,
                args: Args::default(),
            },
        ];
        let mut rd = FrameReader::default();
        for f in &frames {
            rd.feed(&f.encode());
        }
        for f in &frames {
            assert_eq!(rd.next_frame().unwrap().as_ref(), Some(f));
        }
        assert_eq!(rd.next_frame().unwrap(), None);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Frame::decode(&[9, 9, 9]).is_err());
        assert!(Frame::decode(&[KIND_MSG, 1]).is_err());
        let mut body = vec![KIND_REQ];
        body.extend_from_slice(&[0; 8]);
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Frame::decode(&body).is_err());
    }
}
