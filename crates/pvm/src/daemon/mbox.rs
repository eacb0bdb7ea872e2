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
