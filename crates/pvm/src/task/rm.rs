//! The task side of a resource manager (see `daemon::rm`): requests the
//! pvmd hands to the manager come back as "forwarded", and the answer then
//! arrives as the manager's SM_ message to this task, decoded here into
//! the shape the pvmd's own reply has. If the manager exits before it
//! answers, the request is asked again: the pvmd serves it itself then.

use std::time::{Duration, Instant};

use super::{Queued, Task};
use crate::codec;
use crate::daemon::{sm, RM_FORWARDED};
use crate::error::{PvmError, PvmResult};
use crate::frame::{op, Args};

/// How often a wait for the manager checks that it is still there.
const ALIVE_CHECK: Duration = Duration::from_millis(200);

impl Task {
    /// pvm_reg_rm: this task becomes the resource manager.
    pub fn reg_rm(&mut self) -> PvmResult<()> {
        self.simple(op::REG_RM, vec![], vec![]).map(|_| ())
    }

    /// A request a resource manager may serve (spawn, add or delete
    /// hosts): the pvmd's reply, or the manager's answer in its shape.
    pub fn call_via_rm(&mut self, opcode: u32, args: Args) -> PvmResult<(i32, Args)> {
        loop {
            let (code, a) = self.call(opcode, args.clone())?;
            if code != RM_FORWARDED {
                return Ok((code, a));
            }
            let (rm, tag) = match a.ints[..] {
                [rm, tag, ..] => (rm, tag),
                _ => return Err(PvmError::SysErr),
            };
            if let Some(q) = self.await_rm(rm, tag)? {
                return answer(opcode, args.strs.len(), &q);
            }
        }
    }

    /// Waits for the message `tag` from the manager `rm` (in any
    /// context); None if the manager exited first.
    fn await_rm(&mut self, rm: i32, tag: i32) -> PvmResult<Option<Queued>> {
        let mut checked = Instant::now();
        loop {
            self.check_pvmd()?;
            let bell = self.home.as_ref().map(|h| h.pool.bell(h.slot));
            if let Some(i) = self.queue.iter().position(|m| m.src == rm && m.tag == tag) {
                return Ok(self.queue.remove(i));
            }
            if self.gather()? {
                continue;
            }
            if checked.elapsed() >= ALIVE_CHECK {
                if !self.task_exists(rm)? {
                    return Ok(None);
                }
                checked = Instant::now();
            }
            let until = Instant::now() + ALIVE_CHECK;
            match (self.home.clone(), bell) {
                (Some(h), Some(b)) => h.pool.wait_bell(h.slot, b, Some(until), false),
                _ => {
                    self.pump(Some(until))?;
                }
            }
        }
    }
}

/// The manager's answer to `opcode` (for `n` hosts) as the pvmd replies.
fn answer(opcode: u32, n: usize, q: &Queued) -> PvmResult<(i32, Args)> {
    let body: &[u8] = &q.body;
    let mut pos = 0;
    let mut int = || codec::unpack_i32(q.enc, body, &mut pos);
    let ints = match (opcode, q.tag) {
        (op::SPAWN, sm::SPAWN) => {
            let count = int()?;
            (0..count.clamp(0, 1 << 16))
                .map(|_| int())
                .collect::<PvmResult<Vec<i32>>>()?
        }
        (op::ADDHOSTS, sm::ADDHOST) => {
            // [count, narches, (tid, name, arch, speed, dsig)*count]
            let (count, _narch) = (int()?, int()?);
            let mut tids = Vec::new();
            for _ in 0..count.clamp(0, 1 << 16) {
                tids.push(codec::unpack_i32(q.enc, body, &mut pos)?);
                codec::unpack_str(q.enc, body, &mut pos)?;
                codec::unpack_str(q.enc, body, &mut pos)?;
                codec::unpack_i32(q.enc, body, &mut pos)?;
                codec::unpack_i32(q.enc, body, &mut pos)?;
            }
            tids
        }
        (op::DELHOSTS, sm::DELHOST) => {
            // [count or error, status..] (PVM's srm sends one status).
            let rc = int()?;
            let mut v: Vec<i32> = std::iter::from_fn(|| int().ok()).take(n).collect();
            v.resize(n, if rc < 0 { rc } else { 0 });
            v
        }
        _ => return Err(PvmError::BadMsg),
    };
    let ok = ints.iter().filter(|&&c| c >= 0).count() as i32;
    Ok((
        ok,
        Args {
            ints,
            ..Args::default()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Body;

    fn msg(tag: i32, f: impl Fn(&mut Vec<u8>)) -> Queued {
        let mut b = Vec::new();
        f(&mut b);
        Queued {
            src: 7,
            tag,
            ctx: 0,
            enc: 0,
            body: Body::from_vec(b, None),
        }
    }

    #[test]
    fn answers_decode_and_short_ones_fail() {
        let q = msg(sm::SPAWN, |b| {
            [2, 0x40003, -6]
                .iter()
                .for_each(|&v| codec::pack_i32(0, v, b))
        });
        assert_eq!(answer(op::SPAWN, 0, &q).unwrap().1.ints, [0x40003, -6]);
        let q = msg(sm::ADDHOST, |b| {
            [1, 1, 0x80000]
                .iter()
                .for_each(|&v| codec::pack_i32(0, v, b));
            codec::pack_str(0, b"hostb", b);
            codec::pack_str(0, b"LINUX64", b);
            [1000, 0x408c41]
                .iter()
                .for_each(|&v| codec::pack_i32(0, v, b));
        });
        assert_eq!(
            answer(op::ADDHOSTS, 1, &q).unwrap(),
            (
                1,
                Args {
                    ints: vec![0x80000],
                    ..Args::default()
                }
            )
        );
        let q = msg(sm::DELHOST, |b| {
            [-2].iter().for_each(|&v| codec::pack_i32(0, v, b))
        });
        assert_eq!(answer(op::DELHOSTS, 2, &q).unwrap().1.ints, [-2, -2]);
        // Says three tids, carries one.
        let q = msg(sm::SPAWN, |b| {
            [3, 0x40003].iter().for_each(|&v| codec::pack_i32(0, v, b))
        });
        assert!(answer(op::SPAWN, 0, &q).is_err());
        // The wrong answer for the request.
        let q = msg(sm::DELHOST, |b| codec::pack_i32(0, 0, b));
        assert!(answer(op::SPAWN, 0, &q).is_err());
    }
}
