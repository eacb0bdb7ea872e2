//! The resolution exchange: how the Ethernet device finds the MAC of a
//! peer it knows only by VIA host address, without the kernel's ARP. A
//! request is broadcast to the agent id (0) of every host on the link:
//! "who has `target`; I am `sender` at `sender_mac`"; the host owning
//! `target` answers to the asker with the same layout, `target` being the
//! asker's address and `sender` its own (so each side learns the other).
//!
//! | offset | size | field                                   |
//! |-------:|-----:|-----------------------------------------|
//! |      0 |    2 | destination id, 0                       |
//! |      2 |    1 | kind: 3 request, 4 reply                |
//! |      3 |    1 | reserved, 0                             |
//! |      4 |   16 | target VIA host address                 |
//! |     20 |   16 | sender VIA host address                 |
//! |     36 |    6 | sender MAC                              |
//! |     42 |    2 | reserved, 0                             |

use super::error::EtherError;
use super::{AGENT_ID, KIND_RESOLVE_REPLY, KIND_RESOLVE_REQUEST};

/// A VIA host address (VIP_NET_ADDRESS's 16 bytes).
pub type HostAddr = [u8; 16];

/// Bytes of a resolution frame payload.
pub const RESOLVE_LEN: usize = 44;

/// A resolution request or reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolveRepr {
    /// True for the answer, false for the broadcast question.
    pub reply: bool,
    pub target: HostAddr,
    pub sender: HostAddr,
    pub sender_mac: [u8; 6],
}

impl ResolveRepr {
    /// Checks and decodes a resolution frame payload (padding after the
    /// 44 bytes is ignored).
    pub fn parse(f: &[u8]) -> Result<Self, EtherError> {
        if f.len() < RESOLVE_LEN {
            return Err(EtherError::Truncated {
                len: f.len(),
                need: RESOLVE_LEN,
            });
        }
        let reply = match f[2] {
            KIND_RESOLVE_REQUEST => false,
            KIND_RESOLVE_REPLY => true,
            k => return Err(EtherError::BadKind(k)),
        };
        if u16::from_be_bytes([f[0], f[1]]) != AGENT_ID {
            return Err(EtherError::BadField("resolution destination id"));
        }
        if f[3] != 0 || f[42] != 0 || f[43] != 0 {
            return Err(EtherError::BadField("resolution reserved"));
        }
        let mut r = ResolveRepr {
            reply,
            target: [0; 16],
            sender: [0; 16],
            sender_mac: [0; 6],
        };
        r.target.copy_from_slice(&f[4..20]);
        r.sender.copy_from_slice(&f[20..36]);
        r.sender_mac.copy_from_slice(&f[36..42]);
        Ok(r)
    }

    /// The frame payload.
    pub fn emit(&self) -> [u8; RESOLVE_LEN] {
        let mut f = [0u8; RESOLVE_LEN];
        f[0..2].copy_from_slice(&AGENT_ID.to_be_bytes());
        f[2] = if self.reply {
            KIND_RESOLVE_REPLY
        } else {
            KIND_RESOLVE_REQUEST
        };
        f[4..20].copy_from_slice(&self.target);
        f[20..36].copy_from_slice(&self.sender);
        f[36..42].copy_from_slice(&self.sender_mac);
        f
    }

    /// The reply a host owning `self.target` at `mac` sends to this request.
    pub fn answer(&self, mac: [u8; 6]) -> ResolveRepr {
        ResolveRepr {
            reply: true,
            target: self.sender,
            sender: self.target,
            sender_mac: mac,
        }
    }
}
