//! A resource manager (pvm_reg_rm, PVM's `srm.pvm`): a task that takes
//! over spawning and adding/deleting hosts. While one is registered, the
//! pvmd hands it those requests of other tasks as PVM's SM_ messages (XDR,
//! from the asking task, so the manager answers that task directly) and
//! tells the asker to wait for the answer; it runs the manager's own
//! SM_EXEC (start one task here) and SM_ADD (add hosts) requests, and
//! sends it SM_TASKX when a task exits. When the manager itself exits,
//! the pvmd serves those requests itself again.

use super::spawn::SpawnRequest;
use super::Daemon;
use crate::codec;
use crate::error::PvmError;
use crate::frame::{op, Args, Msg};
use crate::tid;

/// PVM's SM_ message tags (pvmsdpro.h).
pub mod sm {
    const FIRST: i32 = 0x8004_0001_u32 as i32;
    pub const SPAWN: i32 = FIRST;
    pub const EXEC: i32 = FIRST + 1;
    pub const EXECACK: i32 = FIRST + 2;
    pub const ADDHOST: i32 = FIRST + 5;
    pub const DELHOST: i32 = FIRST + 6;
    pub const ADD: i32 = FIRST + 7;
    pub const ADDACK: i32 = FIRST + 8;
    pub const TASKX: i32 = FIRST + 10;
}

/// Reply code of a request handed to the resource manager: ints [its
/// tid, the SM_ tag its answer will carry]. Not a PVM error code.
pub const FORWARDED: i32 = -1000;

/// XDR, PVM's default encoding: what the manager unpacks.
const XDR: i32 = 0;

/// Builds an XDR message body.
#[derive(Default)]
struct Packer(Vec<u8>);

impl Packer {
    fn int(&mut self, v: i32) -> &mut Self {
        codec::pack_i32(XDR, v, &mut self.0);
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        codec::pack_str(XDR, s.as_bytes(), &mut self.0);
        self
    }
}

/// Reads an XDR message body; every read is bounds-checked.
struct Unpacker<'m> {
    body: &'m [u8],
    pos: usize,
}

impl<'m> Unpacker<'m> {
    fn new(body: &'m [u8]) -> Self {
        Unpacker { body, pos: 0 }
    }
    fn int(&mut self) -> Option<i32> {
        codec::unpack_i32(XDR, self.body, &mut self.pos).ok()
    }
    /// A string, without the NUL PVM packs with it.
    fn str(&mut self) -> Option<String> {
        let b = codec::unpack_str(XDR, self.body, &mut self.pos).ok()?;
        let b = b.split(|&c| c == 0).next().unwrap_or_default();
        Some(String::from_utf8_lossy(b).into_owned())
    }
    fn strs(&mut self, n: i32) -> Option<Vec<String>> {
        (0..n.max(0)).map(|_| self.str()).collect()
    }
}

impl Daemon {
    /// pvm_reg_rm by task `me`: refused while another manager lives.
    pub(super) fn reg_rm(&mut self, me: i32) -> i32 {
        match self.rm {
            Some(t) if t != me && self.tasks.contains_key(&t) => PvmError::Exists.code(),
            _ => {
                self.rm = Some(me);
                self.logln(&format!("t{me:x} is the resource manager"));
                0
            }
        }
    }

    /// Hands a request of task `me` to the resource manager, if one is
    /// registered and `me` is not it; returns the reply for `me` then.
    pub(super) fn forward_to_rm(&mut self, me: i32, opcode: u32, a: &Args) -> Option<Args> {
        let rm = self
            .rm
            .filter(|&rm| rm != me && self.tasks.contains_key(&rm))?;
        let mut p = Packer::default();
        let tag = match opcode {
            op::SPAWN => {
                // strs [file, where, argv.., env..], ints [flags, count,
                // argc, out tid, out code, out ctx]: SM_SPAWN's layout.
                let argc = a.ints.get(2).copied().unwrap_or(0).max(0) as usize;
                let s = |i: usize| a.strs.get(i).map_or("", String::as_str);
                let i = |k: usize| a.ints.get(k).copied().unwrap_or(0);
                p.str(s(0)).int(i(0)).str(s(1)).int(i(1)).int(argc as i32);
                for arg in a.strs.iter().skip(2).take(argc) {
                    p.str(arg);
                }
                p.int(i(3)).int(i(5)).int(i(4)).int(0).int(0).int(0);
                let env: Vec<&String> = a.strs.iter().skip(2 + argc).collect();
                p.int(env.len() as i32);
                for kv in env {
                    p.str(kv);
                }
                sm::SPAWN
            }
            op::ADDHOSTS | op::DELHOSTS => {
                p.int(a.strs.len() as i32);
                for h in &a.strs {
                    p.str(h);
                }
                if opcode == op::ADDHOSTS {
                    sm::ADDHOST
                } else {
                    sm::DELHOST
                }
            }
            _ => return None,
        };
        let what = match tag {
            sm::SPAWN => "spawn",
            sm::ADDHOST => "add-host",
            _ => "delete-host",
        };
        self.logln(&format!(
            "{what} request of t{me:x} handed to the resource manager t{rm:x}"
        ));
        self.route(Msg {
            src: me,
            dst: rm,
            tag,
            ctx: 0,
            enc: XDR,
            body: p.0,
        });
        Some(Args {
            ints: vec![rm, tag],
            ..Args::default()
        })
    }

    /// A message addressed to this pvmd: the resource manager's SM_EXEC
    /// and SM_ADD. Anything else is logged and dropped.
    pub(super) fn daemon_message(&mut self, m: Msg) {
        let reply = match m.tag {
            sm::EXEC => self.sm_exec(&m.body).map(|b| (sm::EXECACK, b)),
            sm::ADD => self.sm_add(&m.body).map(|b| (sm::ADDACK, b)),
            _ => None,
        };
        match reply {
            Some((tag, body)) => self.route(Msg {
                src: self.tid(),
                dst: m.src,
                tag,
                ctx: m.ctx,
                enc: XDR,
                body,
            }),
            None => self.logln(&format!(
                "message tag {:#x} from t{:x} for the pvmd: not understood, dropped",
                m.tag, m.src
            )),
        }
    }

    /// SM_EXEC: [parent, file, flags, count, argc, argv.., out tid, out
    /// ctx, out tag, trace tid, ctx, tag, nenv, env..]. Every string after
    /// nenv is taken as environment (PVM's srm sends four more than it
    /// counts). Answer: [count, tid or error per task].
    fn sm_exec(&mut self, body: &[u8]) -> Option<Vec<u8>> {
        let mut u = Unpacker::new(body);
        let (parent, file, flags, count) = (u.int()?, u.str()?, u.int()?, u.int()?);
        let argc = u.int()?;
        let argv = u.strs(argc)?;
        let (out_tid, out_ctx, out_code) = (u.int()?, u.int()?, u.int()?);
        let _trace = (u.int()?, u.int()?, u.int()?);
        let _nenv = u.int()?;
        let mut env = Vec::new();
        while let Some(kv) = u.str() {
            if let Some((k, v)) = kv.split_once('=') {
                env.push((k.to_string(), v.to_string()));
            }
        }
        let count = count.clamp(0, 1024) as usize;
        let tids = self.spawn(
            SpawnRequest {
                parent,
                file,
                argv,
                flags,
                where_: String::new(),
                count,
                env,
                out_tid,
                out_code,
                out_ctx,
            },
            false,
        );
        let mut p = Packer::default();
        p.int(tids.len() as i32);
        for t in tids {
            p.int(t);
        }
        Some(p.0)
    }

    /// SM_ADD: [count, name..]. Answer SM_ADDACK: [count, narches, then
    /// per host its pvmd tid, and for a host added its name, arch, speed
    /// and data signature].
    fn sm_add(&mut self, body: &[u8]) -> Option<Vec<u8>> {
        let mut u = Unpacker::new(body);
        let n = u.int()?;
        let names = u.strs(n)?;
        let tids = self.add_hosts(&names);
        let mut archs: Vec<&str> = self.hosts.values().map(|h| h.arch.as_str()).collect();
        archs.sort_unstable();
        archs.dedup();
        let mut p = Packer::default();
        p.int(tids.len() as i32).int(archs.len() as i32);
        for t in tids {
            p.int(t);
            if let Some(h) = (t > 0).then(|| self.hosts.get(&tid::host_num(t))).flatten() {
                p.str(&h.name).str(&h.arch).int(h.speed).int(0x0040_8c41);
            }
        }
        Some(p.0)
    }

    /// A task left: the manager hears of it (SM_TASKX: [tid, status]); if
    /// it was the manager, the pvmd serves its requests again.
    pub(super) fn rm_task_gone(&mut self, t: i32) {
        let Some(rm) = self.rm else { return };
        if t == rm {
            self.rm = None;
            self.logln(&format!(
                "resource manager t{t:x} exited: the pvmd serves spawns and hosts again"
            ));
            return;
        }
        let mut p = Packer::default();
        p.int(t).int(0);
        self.route(Msg {
            src: self.tid(),
            dst: rm,
            tag: sm::TASKX,
            ctx: 0,
            enc: XDR,
            body: p.0,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacker_reads_what_packer_wrote_and_stops_at_the_end() {
        let mut p = Packer::default();
        p.int(-7).str("srm").int(3);
        let mut u = Unpacker::new(&p.0);
        assert_eq!(
            (u.int(), u.str(), u.int()),
            (Some(-7), Some("srm".into()), Some(3))
        );
        assert_eq!(u.int(), None);
        assert_eq!(u.str(), None);
        // A count larger than what follows fails, never reads past.
        let mut u = Unpacker::new(&p.0[..4]);
        assert_eq!(u.int(), Some(-7));
        assert_eq!(u.strs(5), None);
    }
}
