//! One task's connection as the daemon sees it: non-blocking, with an
//! input reassembly buffer and an output queue drained as the socket allows.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

use crate::frame::{Frame, FrameReader};

pub struct Conn {
    stream: UnixStream,
    reader: FrameReader,
    out: Vec<u8>,
    out_pos: usize,
    /// The enrolled task, once HELLO has been seen.
    pub tid: Option<i32>,
}

impl Conn {
    pub fn new(stream: UnixStream) -> io::Result<Conn> {
        stream.set_nonblocking(true)?;
        Ok(Conn {
            stream,
            reader: FrameReader::default(),
            out: Vec::new(),
            out_pos: 0,
            tid: None,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    pub fn wants_write(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// Queues a frame and sends what the socket takes now.
    pub fn queue(&mut self, f: &Frame) -> io::Result<()> {
        self.out.extend_from_slice(&f.encode());
        self.flush()
    }

    /// Writes queued bytes until the socket would block.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
        Ok(())
    }

    /// Reads what is available; each `None` marks end of stream.
    pub fn read_frames(&mut self) -> io::Result<Vec<Option<Frame>>> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    while let Some(f) = self.reader.next_frame()? {
                        got.push(Some(f));
                    }
                    got.push(None);
                    return Ok(got);
                }
                Ok(n) => self.reader.feed(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        while let Some(f) = self.reader.next_frame()? {
            got.push(Some(f));
        }
        Ok(got)
    }
}
