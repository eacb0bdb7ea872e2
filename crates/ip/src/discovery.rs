//! Neighbours without configuration on one link, as IPoIB resolves
//! addresses with ARP over its broadcast group: a packet for an overlay
//! address no peer is known to hold makes the instance ask the whole
//! underlay link, by UDP broadcast on the link (port 7251,
//! `VIAIP_DISCOVERY_PORT`), who holds it; the instance holding it answers
//! the asker directly, and the answer's source address is the underlay
//! host. The asker's own overlay address travels in the question, so the
//! answering instance learns the asker at the same time (its replies need
//! no question of their own).
//!
//! Messages are one line of text, checked word by word:
//! `viaip1 who MODE TARGET ASKER` and `viaip1 have MODE TARGET`. Only
//! instances of the same mode answer each other; only addresses inside the
//! interface's subnet are learnt.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant};

/// The port every instance listens on.
pub fn port() -> u16 {
    std::env::var("VIAIP_DISCOVERY_PORT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7251)
}

/// How long an unanswered question is not repeated.
const ASK_EVERY: Duration = Duration::from_millis(200);

/// A parsed discovery message.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    Who {
        mode: &'a str,
        target: Ipv4Addr,
        asker: Ipv4Addr,
    },
    Have {
        mode: &'a str,
        target: Ipv4Addr,
    },
}

impl<'a> Message<'a> {
    /// None for anything that is not exactly one of the two forms.
    pub fn parse(bytes: &'a [u8]) -> Option<Message<'a>> {
        let text = std::str::from_utf8(bytes).ok()?;
        let w: Vec<&str> = text.split_whitespace().collect();
        match w.as_slice() {
            ["viaip1", "who", mode, target, asker] => Some(Message::Who {
                mode,
                target: target.parse().ok()?,
                asker: asker.parse().ok()?,
            }),
            ["viaip1", "have", mode, target] => Some(Message::Have {
                mode,
                target: target.parse().ok()?,
            }),
            _ => None,
        }
    }

    pub fn emit(&self) -> String {
        match self {
            Message::Who {
                mode,
                target,
                asker,
            } => format!("viaip1 who {mode} {target} {asker}\n"),
            Message::Have { mode, target } => format!("viaip1 have {mode} {target}\n"),
        }
    }
}

/// The discovery socket of one interface, bound to its underlay link.
pub struct Discovery {
    sock: UdpSocket,
    asked: HashMap<Ipv4Addr, Instant>,
}

fn setopt(fd: i32, level: i32, name: i32, val: &[u8]) -> io::Result<()> {
    // SAFETY: a live buffer of the given length.
    let rc = unsafe { libc::setsockopt(fd, level, name, val.as_ptr().cast(), val.len() as u32) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Discovery {
    /// Binds 0.0.0.0:port on `link` only, able to broadcast.
    pub fn bind(link: &str) -> io::Result<Discovery> {
        // SAFETY: plain socket call, checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned from here on by the UdpSocket.
        let sock = unsafe { UdpSocket::from_raw_fd(fd) };
        let one = 1i32.to_ne_bytes();
        setopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, &one)?;
        setopt(fd, libc::SOL_SOCKET, libc::SO_BROADCAST, &one)?;
        let name = CString::new(link).map_err(|_| io::ErrorKind::InvalidInput)?;
        setopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            name.as_bytes_with_nul(),
        )?;
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port().to_be(),
            sin_addr: libc::in_addr { s_addr: 0 },
            sin_zero: [0; 8],
        };
        // SAFETY: binding to a live sockaddr_in of the right length.
        let rc = unsafe {
            libc::bind(
                fd,
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Discovery {
            sock,
            asked: HashMap::new(),
        })
    }

    /// A second handle for the answering thread.
    pub fn try_clone(&self) -> io::Result<Discovery> {
        Ok(Discovery {
            sock: self.sock.try_clone()?,
            asked: HashMap::new(),
        })
    }

    /// Asks the link who holds `target`, unless asked moments ago.
    pub fn ask(&mut self, mode: &str, target: Ipv4Addr, asker: Ipv4Addr) {
        let now = Instant::now();
        if self
            .asked
            .get(&target)
            .is_some_and(|&t| now.duration_since(t) < ASK_EVERY)
        {
            return;
        }
        self.asked.insert(target, now);
        let m = Message::Who {
            mode,
            target,
            asker,
        };
        let _ = self
            .sock
            .send_to(m.emit().as_bytes(), (Ipv4Addr::BROADCAST, port()));
    }

    /// Answers questions for `me` and reports what it learns, as (overlay,
    /// underlay) pairs, to `learn`, until the socket fails.
    pub fn serve(
        &self,
        mode: &str,
        me: Ipv4Addr,
        in_subnet: &dyn Fn(Ipv4Addr) -> bool,
        learn: &dyn Fn(Ipv4Addr, IpAddr),
        garbage: &dyn Fn(),
    ) -> io::Error {
        let mut buf = [0u8; 256];
        loop {
            let (n, from) = match self.sock.recv_from(&mut buf) {
                Ok(v) => v,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return e,
            };
            match Message::parse(&buf[..n]) {
                Some(Message::Who {
                    mode: m,
                    target,
                    asker,
                }) if m == mode => {
                    if target == me && asker != me {
                        if in_subnet(asker) {
                            learn(asker, from.ip());
                        }
                        let have = Message::Have { mode, target };
                        let _ = self.sock.send_to(have.emit().as_bytes(), from);
                    }
                }
                Some(Message::Have { mode: m, target }) if m == mode => {
                    if target != me && in_subnet(target) {
                        learn(target, from.ip());
                    }
                }
                Some(_) => {}
                None => garbage(),
            }
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        let who = Message::Who {
            mode: "connected",
            target: Ipv4Addr::new(10, 0, 0, 2),
            asker: Ipv4Addr::new(10, 0, 0, 1),
        };
        assert_eq!(Message::parse(who.emit().as_bytes()), Some(who));
        let have = Message::Have {
            mode: "datagram",
            target: Ipv4Addr::new(10, 0, 0, 2),
        };
        assert_eq!(Message::parse(have.emit().as_bytes()), Some(have));
        for bad in [
            &b""[..],
            b"viaip1 who connected 10.0.0.2",
            b"viaip1 who connected 10.0.0.2 10.0.0.x",
            b"viaip1 have connected 10.0.0.2 extra",
            b"viaip2 have connected 10.0.0.2",
            b"\xff\xfe",
        ] {
            assert_eq!(Message::parse(bad), None, "{bad:?}");
        }
    }
}
