//! The message mailbox (pvm_putinfo / pvm_recvinfo): named classes of
//! stored messages. The group server advertises itself here, so gexample
//! depends on it.

use std::collections::HashMap;

use crate::error::PvmError;

const PERSISTENT: i32 = 1;
const MULTI_INSTANCE: i32 = 2;
const OVERWRITABLE: i32 = 4;
const FIRST_AVAIL: i32 = 8;
const READ_AND_DELETE: i32 = 16;
/// Blocking recvinfo.
pub const WAIT_FOR_INFO: i32 = 32;

/// One stored message.
#[derive(Debug, Clone)]
pub struct Entry {
    pub owner: i32,
    pub flags: i32,
    pub enc: i32,
    pub body: Vec<u8>,
}

/// One entry as the mailbox listing shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    pub index: i32,
    pub owner: i32,
    pub flags: i32,
}

/// Shell-style match of `name` against `pattern` (`*` any run, `?` one
/// character), as pvm_getmboxinfo's pattern.
pub fn glob(pattern: &str, name: &str) -> bool {
    fn go(p: &[char], n: &[char]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some(('*', rest)) => (0..=n.len()).any(|i| go(rest, &n[i..])),
            Some(('?', rest)) => !n.is_empty() && go(rest, &n[1..]),
            Some((c, rest)) => n.first() == Some(c) && go(rest, &n[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

/// All classes of one pvmd.
#[derive(Default)]
pub struct Mailbox {
    classes: HashMap<String, Vec<Option<Entry>>>,
}

impl Mailbox {
    /// Stores an entry; returns its index.
    pub fn put(&mut self, name: &str, e: Entry) -> Result<i32, PvmError> {
        let slots = self.classes.entry(name.to_string()).or_default();
        if e.flags & MULTI_INSTANCE != 0 {
            let idx = slots
                .iter()
                .position(|s| s.is_none())
                .unwrap_or(slots.len());
            if idx == slots.len() {
                slots.push(None);
            }
            slots[idx] = Some(e);
            return Ok(idx as i32);
        }
        match slots.first() {
            Some(Some(old)) if old.owner != e.owner && old.flags & OVERWRITABLE == 0 => {
                Err(PvmError::Denied)
            }
            _ => {
                if slots.is_empty() {
                    slots.push(None);
                }
                slots[0] = Some(e);
                Ok(0)
            }
        }
    }

    /// Looks up (and with ReadAndDelete removes) an entry; `by` asks, and
    /// may remove only its own entries or overwritable ones.
    pub fn get(&mut self, name: &str, index: i32, flags: i32, by: i32) -> Result<Entry, PvmError> {
        let slots = self.classes.get_mut(name).ok_or(PvmError::NotFound)?;
        let idx = if flags & FIRST_AVAIL != 0 {
            (index.max(0) as usize..slots.len()).find(|&i| slots[i].is_some())
        } else {
            Some(index.max(0) as usize).filter(|&i| i < slots.len() && slots[i].is_some())
        }
        .ok_or(PvmError::NotFound)?;
        if flags & READ_AND_DELETE != 0 {
            let e = slots[idx].as_ref().expect("checked above");
            if e.owner != by && e.flags & OVERWRITABLE == 0 {
                return Err(PvmError::Denied);
            }
            Ok(slots[idx].take().expect("checked above"))
        } else {
            Ok(slots[idx].clone().expect("checked above"))
        }
    }

    /// Deletes an entry: its owner may, anyone may an overwritable one.
    pub fn delete(&mut self, name: &str, index: i32, by: i32) -> Result<(), PvmError> {
        let slots = self.classes.get_mut(name).ok_or(PvmError::NotFound)?;
        let slot = slots
            .get_mut(index.max(0) as usize)
            .ok_or(PvmError::NotFound)?;
        match slot {
            Some(e) if e.owner == by || e.flags & OVERWRITABLE != 0 => {
                *slot = None;
                Ok(())
            }
            Some(_) => Err(PvmError::Denied),
            None => Err(PvmError::NotFound),
        }
    }

    /// The classes whose names match `pattern`, by name, with their
    /// entries.
    pub fn list(&self, pattern: &str) -> Vec<(String, Vec<Listed>)> {
        let mut out: Vec<(String, Vec<Listed>)> = self
            .classes
            .iter()
            .filter(|(name, _)| glob(pattern, name))
            .map(|(name, slots)| {
                let entries = slots
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| {
                        s.as_ref().map(|e| Listed {
                            index: i as i32,
                            owner: e.owner,
                            flags: e.flags,
                        })
                    })
                    .collect();
                (name.clone(), entries)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Deletes the entries (of `class`, or all; at `index`, or all when
    /// negative) whose owner `doomed` says must go; how many went.
    pub fn reset(
        &mut self,
        class: Option<&str>,
        index: i32,
        doomed: impl Fn(i32) -> bool,
    ) -> usize {
        let mut n = 0;
        for (name, slots) in self.classes.iter_mut() {
            if class.is_some_and(|c| c != name) {
                continue;
            }
            for (i, s) in slots.iter_mut().enumerate() {
                let hit = matches!(s, Some(e) if doomed(e.owner));
                if hit && (index < 0 || index as usize == i) {
                    *s = None;
                    n += 1;
                }
            }
        }
        self.classes.retain(|_, v| v.iter().any(Option::is_some));
        n
    }

    /// Drops the non-persistent entries of a task that left; persistent
    /// ones stay, owned by nobody (a later task given the same tid must
    /// not inherit them).
    pub fn owner_exited(&mut self, tid: i32) {
        for slots in self.classes.values_mut() {
            for s in slots.iter_mut() {
                match s {
                    Some(e) if e.owner == tid && e.flags & PERSISTENT == 0 => *s = None,
                    Some(e) if e.owner == tid => e.owner = 0,
                    _ => {}
                }
            }
        }
        self.classes.retain(|_, v| v.iter().any(Option::is_some));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(owner: i32, flags: i32) -> Entry {
        Entry {
            owner,
            flags,
            enc: 0,
            body: vec![owner as u8],
        }
    }

    #[test]
    fn listing_matches_globs_and_reset_spares_the_kept() {
        let mut m = Mailbox::default();
        m.put("alpha", entry(7, MULTI_INSTANCE)).unwrap();
        m.put("alpha", entry(8, MULTI_INSTANCE)).unwrap();
        m.put("beta", entry(0, PERSISTENT)).unwrap();
        let names: Vec<String> = m.list("a*").into_iter().map(|c| c.0).collect();
        assert_eq!(names, ["alpha"]);
        assert_eq!(m.list("?eta")[0].1[0].owner, 0);
        assert_eq!(m.list("*").len(), 2);
        // Orphans only: beta's entry has no owner left.
        assert_eq!(m.reset(None, -1, |o| o == 0), 1);
        assert_eq!(m.reset(Some("alpha"), -1, |o| o != 7), 1);
        assert_eq!(
            m.list("*")[0].1,
            [Listed {
                index: 0,
                owner: 7,
                flags: MULTI_INSTANCE
            }]
        );
    }

    #[test]
    fn single_instance_is_owned_and_dies_with_owner() {
        let mut m = Mailbox::default();
        assert_eq!(m.put("gs", entry(1, 0)), Ok(0));
        assert_eq!(m.put("gs", entry(2, 0)).unwrap_err(), PvmError::Denied);
        assert_eq!(m.get("gs", 0, 0, 1).unwrap().owner, 1);
        m.owner_exited(1);
        assert_eq!(m.get("gs", 0, 0, 1).unwrap_err(), PvmError::NotFound);
    }

    #[test]
    fn multi_instance_and_first_avail() {
        let mut m = Mailbox::default();
        assert_eq!(m.put("c", entry(1, MULTI_INSTANCE | PERSISTENT)), Ok(0));
        assert_eq!(m.put("c", entry(2, MULTI_INSTANCE)), Ok(1));
        m.delete("c", 0, 1).unwrap();
        assert_eq!(m.get("c", 0, FIRST_AVAIL, 1).unwrap().owner, 2);
        assert_eq!(
            m.get("c", 1, READ_AND_DELETE, 3).unwrap_err(),
            PvmError::Denied
        );
        assert_eq!(m.get("c", 1, READ_AND_DELETE, 2).unwrap().owner, 2);
        assert_eq!(m.get("c", 1, 0, 1).unwrap_err(), PvmError::NotFound);
    }

    #[test]
    fn overwritable_entries_are_anyones_and_persistent_ones_lose_their_owner() {
        let mut m = Mailbox::default();
        m.put("o", entry(1, OVERWRITABLE)).unwrap();
        assert_eq!(m.delete("o", 0, 2), Ok(()));
        m.put("p", entry(1, PERSISTENT)).unwrap();
        assert_eq!(m.delete("p", 0, 2).unwrap_err(), PvmError::Denied);
        m.owner_exited(1);
        assert_eq!(m.get("p", 0, 0, 1).unwrap().owner, 0);
        // A new task with tid 1 does not own the orphan.
        assert_eq!(m.delete("p", 0, 1).unwrap_err(), PvmError::Denied);
    }
}
