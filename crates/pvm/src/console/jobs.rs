//! Jobs: tasks started by `spawn ->` (or `->file`, `->>file`, `-@`) whose
//! output the pvmd sends to the console as messages tagged with the job's
//! code. Lines are printed as they arrive, `[job:tid] line` (bare lines
//! with PvmShowTids off), then `[job:tid] EOF` per task and `[job]
//! finished` when the last task of the job has ended, as stock does.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;

use crate::codec::{self, Elem};
use crate::task::{Task, Wait};
use crate::PvmResult;

/// Output codes of jobs start here (far from any tag a user picks).
const FIRST_CODE: i32 = 0x7ff0_0000;

struct Job {
    number: i32,
    /// Where its lines go (None: the console).
    file: Option<File>,
    /// Tasks whose output has not ended, with their unfinished line.
    open: BTreeMap<i32, Vec<u8>>,
}

/// The console's jobs.
#[derive(Default)]
pub struct Jobs {
    jobs: Vec<Job>,
    last: i32,
}

impl Jobs {
    /// A new job; (its number, the output code its tasks must use).
    pub fn start(&mut self, file: Option<File>) -> (i32, i32) {
        self.last += 1;
        self.jobs.push(Job {
            number: self.last,
            file,
            open: BTreeMap::new(),
        });
        (self.last, FIRST_CODE + self.last)
    }

    /// The tasks spawn started for job `number`; a job with none is gone.
    pub fn started(&mut self, number: i32, tids: &[i32]) {
        let Some(k) = self.jobs.iter().position(|j| j.number == number) else {
            return;
        };
        if tids.is_empty() {
            self.jobs.remove(k);
            return;
        }
        for &t in tids {
            self.jobs[k].open.insert(t, Vec::new());
        }
    }

    /// Prints every output message that has arrived, without waiting.
    pub fn drain(&mut self, t: &mut Task, show_tids: bool) -> PvmResult<()> {
        let mut k = 0;
        while k < self.jobs.len() {
            let code = FIRST_CODE + self.jobs[k].number;
            loop {
                let id = t.recv(-1, code, Wait::Never)?;
                if id <= 0 {
                    break;
                }
                let b = t.bufs.get(id)?;
                let (enc, body) = (b.enc, b.data.to_vec());
                self.jobs[k].output(enc, &body, show_tids);
            }
            if self.jobs[k].open.is_empty() {
                println!("[{}] finished", self.jobs[k].number);
                self.jobs.remove(k);
            } else {
                k += 1;
            }
        }
        Ok(())
    }

    /// `jobs [-l]`: the job numbers and their tasks; `task_line` gives a
    /// task's `ps` line for the long listing.
    pub fn list(&self, long: bool, mut task_line: impl FnMut(i32) -> Option<String>) {
        for j in &self.jobs {
            print!(" {}:{}", j.number, if long { "\n" } else { "" });
            for &tid in j.open.keys() {
                match (long, task_line(tid)) {
                    (true, Some(line)) => println!("{line}"),
                    (true, None) => println!(" t{tid:x}"),
                    (false, _) => print!(" t{tid:x}"),
                }
            }
            if !long {
                println!();
            }
        }
    }
}

impl Job {
    /// One output message: (tid, length, bytes); length 0 ends the task's
    /// output.
    fn output(&mut self, enc: i32, body: &[u8], show_tids: bool) {
        let mut pos = 0;
        let (Ok(tid), Ok(len)) = (
            codec::unpack_i32(enc, body, &mut pos),
            codec::unpack_i32(enc, body, &mut pos),
        ) else {
            return;
        };
        let number = self.number;
        if !self.open.contains_key(&tid) {
            self.emit(
                &format!("Bogus message, job {number} has no task t{tid:x}"),
                None,
            );
            return;
        }
        if len > 0 {
            let mut data = vec![0u8; len as usize];
            if codec::unpack(enc, Elem::Byte, body, &mut pos, len as usize, 1, &mut data).is_err() {
                return;
            }
            let partial = self.open.get_mut(&tid).expect("checked above");
            partial.extend_from_slice(&data);
            let mut lines = Vec::new();
            while let Some(i) = partial.iter().position(|&c| c == b'\n') {
                let line: Vec<u8> = partial.drain(..=i).collect();
                lines.push(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
            }
            for l in lines {
                self.emit(&l, show_tids.then_some(tid));
            }
            return;
        }
        let rest = self.open.remove(&tid).unwrap_or_default();
        if !rest.is_empty() {
            self.emit(&String::from_utf8_lossy(&rest), show_tids.then_some(tid));
        }
        if show_tids {
            self.emit("EOF", Some(tid));
        }
    }

    fn emit(&mut self, line: &str, tid: Option<i32>) {
        let text = match tid {
            Some(t) => format!("[{}:t{t:x}] {line}\n", self.number),
            None => format!("{line}\n"),
        };
        match &mut self.file {
            Some(f) => {
                let _ = f.write_all(text.as_bytes());
            }
            None => print!("{text}"),
        }
    }
}
