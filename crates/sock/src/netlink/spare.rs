//! The memory of a finished connection between hosts, kept for this
//! process's next one.
//!
//! Every connection between hosts made its hand-over page and registered
//! memory inside its exec record's memfd (`Inherit::net_page`) and gave
//! them back as it ended: the memfd grown to 5 MiB, two mappings, a
//! registration, faults on the few pages a connection touches, then two
//! unmappings (each a TLB shootdown on the CPUs of the process's other
//! threads) and the memfd's pages freed — ~100 µs at each end of a short
//! connection on the 2-vCPU box, on the path of a server that answers one
//! request per connection and of its client. Now a link whose record no
//! other process can hold (this process has not forked, spawned or
//! exec'd since it made it) ends its VI and leaves the page and memory
//! in the record (`Inherit::keep_spare`); as the record goes, its memfd
//! goes to a small pool of this process's (`inherit::pool`) instead of
//! being closed, and the next connection's record is that memfd, with the
//! page and memory ready (`Inherit::take_spare`). Nothing of the old
//! connection is reachable: its VI is destroyed before the memory is
//! kept (the device never touches it again), the page's header is made
//! new, and the record is rewritten whole before anyone can see it.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use openvia_core::mem::PtagId;
use openvia_core::nic::Nic;
use openvia_core::vi::Vi;
use openvia_core::ViaError;

use super::page::{self, Page};
use super::NetLink;
use crate::region::Region;

/// A hand-over page and registered memory with no VI, in a record's memfd.
pub struct Spare {
    page: ManuallyDrop<Page>,
    region: Region,
    nic: ManuallyDrop<Nic>,
    ptag: PtagId,
    /// The process whose memory it is: a child forked since holds a copy
    /// of the record (and of this) without the registered memory, which
    /// is not copied (MADV_DONTFORK).
    owner: u32,
}

impl Spare {
    fn new(page: Page, region: Region, nic: Nic, ptag: PtagId) -> Spare {
        Spare {
            page: ManuallyDrop::new(page),
            region,
            nic: ManuallyDrop::new(nic),
            ptag,
            owner: crate::process::id(),
        }
    }

    /// Whether this process made it.
    fn ours(&self) -> bool {
        self.owner == crate::process::id()
    }

    /// Whether it is this process's, registered with `nic` under `ptag`.
    pub(super) fn fits(&self, nic: &Nic, ptag: PtagId) -> bool {
        self.ours() && std::sync::Arc::ptr_eq(self.nic.shared(), nic.shared()) && self.ptag == ptag
    }

    /// The page and the memory, now the caller's.
    fn into_parts(self) -> (Page, Region) {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: each field is taken once out of a value never dropped.
        unsafe {
            ManuallyDrop::drop(&mut me.nic);
            (ManuallyDrop::take(&mut me.page), std::ptr::read(&me.region))
        }
    }
}

impl Drop for Spare {
    /// Gives the memory back (deregistered, unmapped) in the process that
    /// made it. A forked child's copy lets go of its copy of the page's
    /// mapping only: the registered memory was not copied and its
    /// registration is the parent's. A vfork child, which runs in its
    /// parent's memory, touches nothing.
    fn drop(&mut self) {
        if crate::process::borrowing_parent_memory() {
            return;
        }
        if self.ours() {
            self.region.give_back(&self.nic);
        }
        // SAFETY: dropped once, here, and never used again.
        unsafe {
            ManuallyDrop::drop(&mut self.page);
            ManuallyDrop::drop(&mut self.nic);
        }
    }
}

/// The page (made new) and memory of `spare`, with a new VI of
/// `reliability` on them; the memory is given back if no VI can be made.
pub(super) fn take_up(
    spare: Spare,
    nic: &Nic,
    ptag: PtagId,
    reliability: u16,
) -> Result<(Page, Region, Arc<Vi>), ViaError> {
    let (page, region) = spare.into_parts();
    page.renew();
    match region.new_vi(nic, ptag, reliability) {
        Ok(vi) => Ok((page, region, vi)),
        Err(e) => {
            region.give_back(nic);
            Err(e)
        }
    }
}

impl NetLink {
    /// Ends the VI and leaves the page and memory in the record for the
    /// next connection (`spare`) where nothing else may reach them: the
    /// record is this process's alone, the page was never handed over and
    /// nothing else holds it. False: nothing done.
    pub(super) fn keep_memory(&mut self) -> bool {
        let Some(record) = self.record.as_ref() else {
            return false;
        };
        let page_alone = self
            .page
            .as_ref()
            .is_some_and(|p| Arc::strong_count(p) == 1 && p.state() == page::LIVE);
        if self.shared
            || record.may_be_shared()
            || record.net_page().is_none()
            || self.handed.get().is_some()
            || !page_alone
        {
            return false;
        }
        if !self.region.end_vi(&self.nic, &self.vi) {
            // The VI could not be destroyed: the memory goes as
            // `Region::release` lets it go (the deregistration refuses
            // memory a VI still names).
            self.region.give_back(&self.nic);
            return true;
        }
        let Some(page) = self.page.take().and_then(|p| Arc::try_unwrap(p).ok()) else {
            self.region.give_back(&self.nic);
            return true;
        };
        let region = self.region.take();
        record.keep_spare(Spare::new(page, region, self.nic.clone(), self.ptag));
        true
    }
}
