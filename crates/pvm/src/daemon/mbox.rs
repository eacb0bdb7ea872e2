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

/// Whether a class name matches pvm_getmboxinfo's pattern the way PVM
/// 3.4.6's pvmd matches it (built without GNU regex, as Debian's is):
/// some part of the name matches, where `*` stands for any run of
/// characters and `\*` for a `*`. So `lmbi` matches `t40002lmbi0`, and
/// `*` or an empty pattern matches every name.
pub fn matches_pattern(pattern: &str, name: &str) -> bool {
    /// The pattern (after any leading `*`s) somewhere in `n`.
    fn anywhere(n: &[char], p: &[char]) -> bool {
        let p = &p[p.iter().take_while(|&&c| c == '*').count()..];
        p.is_empty() || (0..n.len()).any(|i| here(&n[i..], p))
    }
    /// The pattern at the start of `n` (what follows it does not matter).
    fn here(n: &[char], p: &[char]) -> bool {
        match p {
            [] => true,
            ['*', rest @ ..] => anywhere(n, rest),
            ['\\', '*', rest @ ..] => n.first() == Some(&'*') && here(&n[1..], rest),
            [c, rest @ ..] => n.first() == Some(c) && here(&n[1..], rest),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    anywhere(&n, &p)
}

/// The index PvmMboxDirectIndex(i) puts into putinfo's flags.
fn direct_index(flags: i32) -> usize {
    const SHIFT: u32 = 10;
    ((flags as u32 >> SHIFT) & ((1 << (31 - SHIFT)) - 1)) as usize
}

/// All classes of one pvmd.
#[derive(Default)]
pub struct Mailbox {
    classes: HashMap<String, Vec<Option<Entry>>>,
    /// When each class was made: listings give classes in that order, as
    /// PVM's list does.
    born: HashMap<String, u64>,
    births: u64,
}

impl Mailbox {
    /// Stores an entry at its direct index (0 without one), as PVM 3.4.6
    /// does: a multi-instance entry goes to the first free index from
    /// there on; otherwise an entry in the way is replaced if it is the
    /// inserter's own or overwritable, else the insert is denied.
    pub fn put(&mut self, name: &str, e: Entry) -> Result<i32, PvmError> {
        if !self.classes.contains_key(name) {
            self.births += 1;
            self.born.insert(name.to_string(), self.births);
        }
        let slots = self.classes.entry(name.to_string()).or_default();
        let mut idx = direct_index(e.flags);
        if e.flags & MULTI_INSTANCE != 0 {
            while matches!(slots.get(idx), Some(Some(_))) {
                idx += 1;
            }
        } else if let Some(Some(old)) = slots.get(idx) {
            if old.owner != e.owner && old.flags & OVERWRITABLE == 0 {
                self.prune();
                return Err(PvmError::Denied);
            }
        }
        if slots.len() <= idx {
            slots.resize(idx + 1, None);
        }
        slots[idx] = Some(e);
        Ok(idx as i32)
    }

    /// Forgets classes left without entries (PVM frees them; one made
    /// again is listed as new).
    fn prune(&mut self) {
        self.classes.retain(|_, v| v.iter().any(Option::is_some));
        let classes = &self.classes;
        self.born.retain(|name, _| classes.contains_key(name));
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
            let e = slots[idx].take().expect("checked above");
            self.prune();
            Ok(e)
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
                self.prune();
                Ok(())
            }
            Some(_) => Err(PvmError::Denied),
            None => Err(PvmError::NotFound),
        }
    }

    /// The classes whose names match `pattern` (see [`matches_pattern`]),
    /// oldest first, with their entries.
    pub fn list(&self, pattern: &str) -> Vec<(String, Vec<Listed>)> {
        let mut out: Vec<(String, Vec<Listed>)> = self
            .classes
            .iter()
            .filter(|(name, _)| matches_pattern(pattern, name))
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
        out.sort_by_key(|(name, _)| self.born.get(name).copied().unwrap_or(0));
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
        self.prune();
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
        self.prune();
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
        // PVM's patterns match anywhere in the name.
        let names: Vec<String> = m.list("a*").into_iter().map(|c| c.0).collect();
        assert_eq!(names, ["alpha", "beta"]);
        assert_eq!(m.list("lp").len(), 1);
        assert_eq!(m.list("et")[0].1[0].owner, 0);
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

    #[test]
    fn patterns_match_anywhere_as_in_pvm() {
        assert!(matches_pattern("lmbi", "t40002lmbi0"));
        assert!(matches_pattern("ra*ts", "xxra123tsyy"));
        assert!(!matches_pattern("ra*ts", "rat"));
        assert!(matches_pattern("*", "anything"));
        assert!(matches_pattern("", "anything"));
        assert!(matches_pattern("a\\*b", "xa*b"));
        assert!(!matches_pattern("a\\*b", "axb"));
        assert!(!matches_pattern("?", "a"));
    }

    #[test]
    fn classes_are_listed_oldest_first_and_a_remade_one_is_new() {
        let mut m = Mailbox::default();
        for name in ["zeta", "alpha", "mid"] {
            m.put(name, entry(1, 0)).unwrap();
        }
        m.delete("zeta", 0, 1).unwrap();
        m.put("zeta", entry(1, 0)).unwrap();
        let names: Vec<String> = m.list("*").into_iter().map(|c| c.0).collect();
        assert_eq!(names, ["alpha", "mid", "zeta"]);
    }

    #[test]
    fn inserts_follow_pvm_3_4_6() {
        let mut m = Mailbox::default();
        // Multi-instance never replaces, even the inserter's own entry.
        assert_eq!(m.put("c", entry(1, MULTI_INSTANCE)), Ok(0));
        assert_eq!(m.put("c", entry(1, MULTI_INSTANCE)), Ok(1));
        // A plain insert replaces the inserter's own entry at index 0.
        assert_eq!(m.put("d", entry(1, 0)), Ok(0));
        assert_eq!(m.put("d", entry(1, PERSISTENT)), Ok(0));
        assert_eq!(m.list("d")[0].1[0].flags, PERSISTENT);
        // PvmMboxDirectIndex(5).
        assert_eq!(m.put("e", entry(2, 5 << 10)), Ok(5));
        assert_eq!(m.put("e", entry(3, 5 << 10)), Err(PvmError::Denied));
        assert_eq!(m.put("e", entry(3, (5 << 10) | MULTI_INSTANCE)), Ok(6));
    }
}
