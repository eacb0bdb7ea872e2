//! VIs kept between the short connections of two processes. A server that
//! answers one request per connection, and its client, paid for a new VI
//! and its handshake with every request: the device's exchange over a
//! Unix socket, a connection region, mappings at both ends — about 0.3 ms
//! of a 0.75 ms connection on the 2-vCPU box. Now a link whose VI is still
//! whole when it ends keeps it, in a small pool of this process's, named
//! by its pair (the token of the connection it was made for, the same at
//! both ends) and the peer process's pid; the next connection between the
//! same two processes takes it up again instead of making one:
//!
//! - the end that comes first to its first use offers, on the control
//!   page, a kept VI whose peer is the other end's process (as the
//!   rendezvous named it: `Control::reuse_offer`), or says it has none;
//! - the second takes the offer up only if it kept its end of the same
//!   pair, and says which (`Control::reuse_word`). The first follows: the
//!   second alone decides, so the two never disagree. Declined, both make
//!   a new VI and meet as before.
//!
//! Each message carries its connection's generation as immediate data:
//! the VI's number of uses, counted alike at both ends (every reuse is
//! agreed by both, and an end that offered and cannot tell whether its
//! offer was taken ends the VI, at both ends). A message of the VI's
//! last connection still on its way — the peer's writer may have posted
//! it after this end let the connection go — is dropped and its receive
//! posted again, never read as the new connection's (`reader`). The
//! send slots and the count of sends in flight go with the VI; a receive
//! is posted again as its completion is taken, so the peer's sends in
//! flight (at most its 64 slots) hold at most 64 of the 128 posted, and a
//! message that finds none posted waits in the device's ring. A kept VI
//! that broke (its peer died) is released when the pool is next looked
//! at.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use openvia_core::nic::Nic;
use openvia_core::vi::{Vi, ViState};

use super::meet::await_word;
use super::tx::Tx;
use super::{HandshakeEnd, Link, Rx, RECV_SLOTS, SEND_SLOTS};
use crate::control::{peer_of, Control, Side};
use crate::region::Region;

/// A VI kept for this process's next connection to `peer`.
pub(super) struct Kept {
    /// The process that kept it (a forked child finds its parent's
    /// entries, which are not its to use or release).
    owner: u32,
    peer: u32,
    pair: u64,
    /// The generation of its last connection.
    uses: u32,
    nic: Nic,
    vi: Arc<Vi>,
    region: Region,
    /// The send slots free, and how many sends are still in flight.
    free: Vec<usize>,
    in_flight: usize,
}

impl Kept {
    /// A VI just made for the connection `pair` (its first use, then,
    /// is generation 0).
    pub(super) fn fresh(pair: u64, nic: Nic, vi: Arc<Vi>, region: Region) -> Kept {
        Kept {
            owner: crate::process::id(),
            peer: 0,
            pair,
            uses: u32::MAX,
            nic,
            vi,
            region,
            free: (0..SEND_SLOTS).collect(),
            in_flight: 0,
        }
    }

    fn whole(&self) -> bool {
        self.vi.state() == ViState::Connected
    }

    /// Ends the VI at both ends and gives its memory back (or keeps that
    /// for the next link: `Region::release`).
    fn release(self) {
        if self.owner == crate::process::id() {
            self.region.release(&self.nic, &self.vi);
        } else {
            // A parent's: its memory is not in this process (MADV_DONTFORK)
            // and its VI is not ours to end.
            std::mem::forget(self);
        }
    }
}

impl Link {
    /// A link on a VI: a new one (`create`) or one kept from an earlier
    /// connection to the same peer process, whose receives are posted
    /// already; this connection is its next generation.
    pub(super) fn from_kept(side: Side, control: Arc<Control>, kept: Kept) -> Link {
        Link {
            nic: kept.nic,
            vi: kept.vi,
            region: kept.region,
            owner_pid: crate::process::id(),
            side,
            control,
            pair: kept.pair,
            generation: kept.uses.wrapping_add(1),
            tx: Mutex::new(Tx {
                free: kept.free,
                in_flight: kept.in_flight,
                sent: 0,
                head: 0,
                tail: 0,
                ends: VecDeque::with_capacity(SEND_SLOTS),
            }),
            rx: Mutex::new(Rx {
                current: None,
                later: VecDeque::with_capacity(RECV_SLOTS),
                consumed: 0,
                bell_in_socket: false,
                spin: Default::default(),
            }),
            record: None,
            forks: crate::process::forks(),
            shared: AtomicBool::new(false),
            nonblocking: AtomicBool::new(false),
            writes_closed: AtomicBool::new(false),
            standing: AtomicBool::new(false),
        }
    }
}

/// When a link of this process ends: its VI is kept for the next
/// connection to the same peer process while it is whole (its sends in
/// flight counted with it), else ended at both ends.
pub(super) fn keep_or_end(link: &mut Link) {
    let peer = link.control.user_pid(peer_of(link.side));
    let keepable = peer != 0
        && peer != link.owner_pid
        && link.pair != 0
        && link.vi.state() == ViState::Connected;
    if !keepable {
        link.region.release(&link.nic, &link.vi);
        return;
    }
    let tx = link.tx.get_mut().unwrap_or_else(|e| e.into_inner());
    keep(Kept {
        owner: link.owner_pid,
        peer,
        pair: link.pair,
        uses: link.generation,
        nic: link.nic.clone(),
        vi: link.vi.clone(),
        region: link.region.take(),
        free: std::mem::take(&mut tx.free),
        in_flight: tx.in_flight,
    });
}

/// VIs kept at most per process: a server that closed many connections
/// at once ends the oldest.
const KEEP_MAX: usize = 32;

static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// Before fork (`forkheld`): the kept VIs are the parent's, not the
/// child's to end (and their memory is not there).
pub(crate) fn hold_across_fork() {
    crate::forkheld::hold(&KEPT, |kept| std::mem::forget(std::mem::take(kept)));
}

/// Takes the newest kept VI that `pick` chooses (the likeliest to be
/// kept at the peer's end too), after moving out every entry that is not
/// this process's or no longer whole (released outside the lock).
fn take(pick: impl Fn(&Kept) -> bool) -> Option<Kept> {
    let mut gone = Vec::new();
    let found = {
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        sweep(&mut kept, &mut gone);
        kept.iter().rposition(pick).map(|i| kept.remove(i))
    };
    for k in gone {
        k.release();
    }
    found
}

fn sweep(kept: &mut Vec<Kept>, gone: &mut Vec<Kept>) {
    let me = crate::process::id();
    let mut i = 0;
    while i < kept.len() {
        if kept[i].owner != me || !kept[i].whole() {
            gone.push(kept.remove(i));
        } else {
            i += 1;
        }
    }
}

/// Keeps `k` for a later connection to its peer.
pub(super) fn keep(k: Kept) {
    let mut gone = Vec::new();
    {
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        sweep(&mut kept, &mut gone);
        kept.push(k);
        if kept.len() > KEEP_MAX {
            gone.push(kept.remove(0));
        }
    }
    for k in gone {
        k.release();
    }
}

/// Where the two ends stand on taking a kept VI up (`Control::reuse_word`).
const UNDECIDED: u32 = 0;
/// The connector (or the acceptor) came first and offers its kept VI.
const OFFERED_BY_CONNECTOR: u32 = 1;
const OFFERED_BY_ACCEPTOR: u32 = 2;
/// The first end had nothing to offer: a new VI.
const NOTHING: u32 = 3;
/// The second end took the offer up, or declined it (a new VI).
const TAKEN: u32 = 4;
const DECLINED: u32 = 5;

fn offered_by(side: Side) -> u32 {
    match side {
        Side::Connector => OFFERED_BY_CONNECTOR,
        Side::Acceptor => OFFERED_BY_ACCEPTOR,
    }
}

/// At first use, after our hello: a kept VI both ends agreed to take up
/// again for this connection, or None (a new VI is made and met as
/// before). The end that comes first offers one it kept for the other's
/// process (or says it has none); the second takes it up if it kept its
/// end of the same pair, and the first follows.
pub(super) fn meet_again(
    fd: std::os::fd::RawFd,
    side: Side,
    control: &Control,
    switched: &dyn Fn() -> bool,
) -> Result<Option<Kept>, HandshakeEnd> {
    let word = control.reuse_word();
    let me = crate::process::id();
    let peer_side = peer_of(side);
    if word.load(Ordering::Acquire) == UNDECIDED {
        // The peer's process as the rendezvous or its first use named it.
        let peer = control.user_pid(peer_side);
        let candidate = if peer != 0 && peer != me {
            take(|k| k.peer == peer)
        } else {
            None
        };
        match candidate {
            Some(k) => {
                control.reuse_offer(side).store(k.pair, Ordering::Release);
                let cas = word.compare_exchange(
                    UNDECIDED,
                    offered_by(side),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                if cas.is_ok() {
                    return match await_word(fd, word, |w| w == TAKEN || w == DECLINED, switched) {
                        Ok(TAKEN) => Ok(Some(k)),
                        Ok(_) => {
                            // Its end is still in use, or it is another
                            // process: kept for a later connection.
                            keep(k);
                            Ok(None)
                        }
                        Err(e) => {
                            // Whether the peer took it up is not known:
                            // ended, so that the two ends never count its
                            // uses apart.
                            k.release();
                            Err(e)
                        }
                    };
                }
                // The peer came first meanwhile.
                keep(k);
            }
            None => {
                let cas =
                    word.compare_exchange(UNDECIDED, NOTHING, Ordering::AcqRel, Ordering::Acquire);
                if cas.is_ok() {
                    return Ok(None);
                }
            }
        }
    }
    // The peer came first: it offered a VI, or had none.
    if word.load(Ordering::Acquire) != offered_by(peer_side) {
        return Ok(None);
    }
    let pair = control.reuse_offer(peer_side).load(Ordering::Acquire);
    let peer = control.user_pid(peer_side);
    let taken = take(|k| k.pair == pair && k.peer == peer);
    word.store(
        if taken.is_some() { TAKEN } else { DECLINED },
        Ordering::Release,
    );
    openvia_core::sys::futex::wake_all(word);
    Ok(taken)
}
