//! The members of one epoll set that name connections, found by
//! descriptor: an event loop changes a member's events around every
//! write (EPOLL_CTL_MOD), and with hundreds of clients a walk through
//! all of them for each change cost more than the request itself.

use std::collections::HashMap;
use std::os::fd::RawFd;

use super::Member;

#[derive(Default)]
pub(super) struct Members {
    list: Vec<Member>,
    /// Where each member's descriptor is in `list`.
    at: HashMap<RawFd, usize>,
}

impl Members {
    pub(super) fn new(list: Vec<Member>) -> Members {
        let mut m = Members {
            list,
            at: HashMap::new(),
        };
        m.index();
        m
    }

    fn index(&mut self) {
        self.at.clear();
        self.at
            .extend(self.list.iter().enumerate().map(|(i, m)| (m.fd, i)));
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Member> {
        self.list.iter()
    }

    pub(super) fn get_mut(&mut self, fd: RawFd) -> Option<&mut Member> {
        let i = *self.at.get(&fd)?;
        self.list.get_mut(i)
    }

    /// Adds `m`, replacing the member of the same descriptor, which is
    /// returned for the caller to drop once it holds no lock (`take_out`).
    pub(super) fn put(&mut self, m: Member) -> Option<Member> {
        match self.at.get(&m.fd) {
            Some(&i) => Some(std::mem::replace(&mut self.list[i], m)),
            None => {
                self.at.insert(m.fd, self.list.len());
                self.list.push(m);
                None
            }
        }
    }

    /// Takes the member of `fd` out, if there is one.
    pub(super) fn take(&mut self, fd: RawFd) -> Option<Member> {
        let i = self.at.remove(&fd)?;
        let m = self.list.swap_remove(i);
        if let Some(moved) = self.list.get(i) {
            self.at.insert(moved.fd, i);
        }
        Some(m)
    }

    /// Takes the members `gone` says out, for the caller to drop once it
    /// holds no lock: the last reference to a link ends it, and that
    /// closes descriptors through the hooks, which take the sets' locks.
    pub(super) fn take_out(&mut self, gone: impl Fn(&Member) -> bool) -> Vec<Member> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.list.len() {
            if gone(&self.list[i]) {
                out.push(self.list.swap_remove(i));
            } else {
                i += 1;
            }
        }
        if !out.is_empty() {
            self.index();
        }
        out
    }

    /// Keeps the members `keep` says (which may change them in place).
    pub(super) fn retain_mut(&mut self, keep: impl FnMut(&mut Member) -> bool) {
        let before = self.list.len();
        self.list.retain_mut(keep);
        if self.list.len() != before {
            self.index();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epoll::tests::member;

    fn fds(m: &Members) -> Vec<RawFd> {
        let mut v: Vec<RawFd> = m.iter().map(|x| x.fd).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn take_out_moves_the_matching_members_and_keeps_the_rest() {
        let mut m = Members::new((0..6).map(member).collect());
        let out = m.take_out(|x| x.fd % 2 == 0);
        let mut taken: Vec<RawFd> = out.iter().map(|x| x.fd).collect();
        taken.sort_unstable();
        assert_eq!(fds(&m), [1, 3, 5]);
        assert_eq!(taken, [0, 2, 4]);
        for fd in [1, 3, 5] {
            assert_eq!(m.get_mut(fd).map(|x| x.fd), Some(fd), "found after");
        }
        assert!(m.get_mut(2).is_none());
    }

    /// Whatever order members come and go in, each is found under its
    /// own descriptor and none twice.
    #[test]
    fn every_member_is_found_by_its_descriptor_after_any_changes() {
        let mut m = Members::default();
        let mut want = std::collections::BTreeSet::new();
        let mut x = 12345u32;
        for _ in 0..2000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let fd = (x >> 16) as RawFd % 40;
            match (x >> 8) % 4 {
                0 | 1 => {
                    let mut n = member(fd);
                    n.data = u64::from(x);
                    let old = m.put(n);
                    assert_eq!(old.is_some(), !want.insert(fd));
                    assert_eq!(m.get_mut(fd).map(|y| y.data), Some(u64::from(x)));
                }
                2 => assert_eq!(m.take(fd).map(|y| y.fd), want.take(&fd)),
                _ => {
                    m.retain_mut(|y| y.fd != fd);
                    want.remove(&fd);
                }
            }
            assert_eq!(fds(&m), want.iter().copied().collect::<Vec<_>>());
            for &fd in &want {
                assert_eq!(m.get_mut(fd).map(|y| y.fd), Some(fd));
            }
        }
    }
}
