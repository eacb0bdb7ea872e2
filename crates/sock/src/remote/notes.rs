//! A listener's notes of connectors from other hosts, in a shared
//! anonymous mapping (forked acceptors share it), behind a spin lock held
//! for a few loads and stores.
//!
//! A connector's TCP connect returns before anyone accepts it, so a
//! server that accepts late has as many connections noted and undecided
//! as its listen queue holds. The table is sized from that queue, and a
//! note still waiting for its acceptor is never taken for another
//! connection: an evicted note made its connection go to the kernel
//! (a server that began accepting 2 s late kept 255 of 960 connections).
//! Notes are found by hashing the connection's key into a window of
//! slots, so no call scans the whole table.

use std::sync::atomic::{AtomicU32, Ordering};

use openvia_core::sys::mapping::SharedMapping;

pub(super) const FREE: u32 = 0;
pub(super) const PROBED: u32 = 1;
pub(super) const NOTED_COMMIT: u32 = 2;
pub(super) const DECIDED: u32 = 3;

/// Notes older than this may be reused, whatever their state.
const NOTE_LIFE_MS: u64 = 30_000;
/// Slots a key may lie in, from its hash on.
const WINDOW: usize = 64;
/// Fewest and most slots of a table (a power of two).
/// (A small listen queue does not bound the notes: connectors it has no
/// room for wait in the kernel's SYN retries, noted and undecided.)
const MIN_SLOTS: usize = 1024;
const MAX_SLOTS: usize = 16_384;

/// One connection's note.
#[repr(C)]
pub(super) struct Note {
    pub state: u32,
    pub lport: u16,
    pub cport: u16,
    pub ip: [u8; 16],
    /// The connector's number for this connection (its probe's token):
    /// a resent probe keeps the note, a new connection on the same ports
    /// starts a new one.
    pub nonce: u64,
    pub stamp_ms: u64,
    /// When the agent last looked who holds the connection (`holder`).
    pub checked_ms: u64,
    pub answer: [u8; super::MSG_LEN],
}

#[repr(C)]
struct Header {
    lock: AtomicU32,
}

/// The table: a header, then its notes, in a shared mapping of a memfd
/// (the project's `SharedMapping`; its descriptor closed at once, the
/// mapping alone keeps the memory and a fork shares it).
pub(super) struct Notes {
    map: SharedMapping,
    slots: usize,
}

/// Where the notes begin, past the header.
const NOTES_AT: usize = 64;
const _: () = assert!(std::mem::size_of::<Header>() <= NOTES_AT);

pub(super) struct Locked<'a> {
    notes: &'a mut [Note],
    lock: &'a AtomicU32,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.lock.store(0, Ordering::Release);
    }
}

/// Where a key's window begins: FNV-1a over the key, the same in every
/// process (forked acceptors look up what the agent noted).
fn home(ip: &[u8; 16], cport: u16, lport: u16, slots: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in ip
        .iter()
        .chain(&cport.to_le_bytes())
        .chain(&lport.to_le_bytes())
    {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h ^ (h >> 29)) as usize & (slots - 1)
}

/// Slots for a listen queue of `backlog`: room for every connection the
/// kernel may hold unaccepted, twice over, so windows stay sparse; at
/// least `MIN_SLOTS` (112 KiB).
pub(super) fn slots_for(backlog: i32) -> usize {
    let queue = usize::try_from(backlog).unwrap_or(0).max(1);
    (queue * 2).next_power_of_two().clamp(MIN_SLOTS, MAX_SLOTS)
}

impl Locked<'_> {
    fn window(&self, ip: &[u8; 16], cport: u16, lport: u16) -> impl Iterator<Item = usize> {
        let slots = self.notes.len();
        let start = home(ip, cport, lport, slots);
        (0..WINDOW.min(slots)).map(move |k| (start + k) & (slots - 1))
    }

    fn position(&self, ip: &[u8; 16], cport: u16, lport: u16) -> Option<usize> {
        self.window(ip, cport, lport).find(|&i| {
            let n = &self.notes[i];
            n.state != FREE && n.ip == *ip && n.cport == cport && n.lport == lport
        })
    }

    pub fn find(&mut self, ip: &[u8; 16], cport: u16, lport: u16) -> Option<&mut Note> {
        let i = self.position(ip, cport, lport)?;
        Some(&mut self.notes[i])
    }

    /// A note for the key: its own; else a free or stale one; else the
    /// oldest decided one (its answer has gone out). None when every
    /// slot of the key's window holds a connection still undecided: the
    /// caller says "busy" rather than lose one of them. A note taken for
    /// the key anew comes back FREE, stamped now.
    pub fn claim(&mut self, ip: &[u8; 16], cport: u16, lport: u16) -> Option<&mut Note> {
        let now = super::now_ms();
        let i = self.position(ip, cport, lport).or_else(|| {
            let fresh = self.window(ip, cport, lport).find(|&i| {
                let n = &self.notes[i];
                n.state == FREE || now.saturating_sub(n.stamp_ms) > NOTE_LIFE_MS
            });
            fresh
                .or_else(|| {
                    self.window(ip, cport, lport)
                        .filter(|&i| self.notes[i].state == DECIDED)
                        .min_by_key(|&i| self.notes[i].stamp_ms)
                })
                .inspect(|&i| {
                    let n = &mut self.notes[i];
                    n.state = FREE;
                    n.ip = *ip;
                    n.cport = cport;
                    n.lport = lport;
                    n.nonce = 0;
                    n.stamp_ms = now;
                    n.checked_ms = 0;
                })
        })?;
        Some(&mut self.notes[i])
    }
}

impl Notes {
    /// A zeroed table (every note FREE, lock open) of `slots` notes, a
    /// power of two from [`slots_for`].
    pub fn new(slots: usize) -> Option<Notes> {
        assert!(slots.is_power_of_two(), "windows wrap by mask");
        let len = NOTES_AT + slots * std::mem::size_of::<Note>();
        let mut map = SharedMapping::create("viarun-notes", len).ok()?;
        map.close_fd();
        Some(Notes { map, slots })
    }

    fn header(&self) -> &Header {
        // SAFETY: the header heads our mapping, page-aligned, and its
        // fields are used atomically.
        unsafe { &*self.map.as_ptr().cast::<Header>() }
    }

    pub fn lock(&self) -> Locked<'_> {
        let lock = &self.header().lock;
        while lock
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: the notes follow the header inside our mapping (its
        // length covers `slots` of them from NOTES_AT, 64-byte aligned;
        // all-zero bytes are a valid Note), and the lock is ours: no other
        // thread or process touches them until `Locked` drops it.
        let notes = unsafe {
            std::slice::from_raw_parts_mut(
                self.map.as_ptr().add(NOTES_AT).cast::<Note>(),
                self.slots,
            )
        };
        Locked { notes, lock }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> ([u8; 16], u16, u16) {
        let mut ip = [0u8; 16];
        ip[12..].copy_from_slice(&(i / 50_000).to_be_bytes());
        (ip, 10_000 + (i % 50_000) as u16, 5201)
    }

    /// More connections noted and undecided than the old fixed table held
    /// (256), as a server that accepts late has: every one keeps its note
    /// until its acceptor decides.
    #[test]
    fn undecided_notes_outlive_a_late_acceptor() {
        let notes = Notes::new(slots_for(960)).expect("mapping");
        for i in 0..960 {
            let (ip, c, l) = key(i);
            let mut t = notes.lock();
            let n = t.claim(&ip, c, l).expect("room for the listen queue");
            n.state = NOTED_COMMIT;
        }
        let mut t = notes.lock();
        for i in 0..960 {
            let (ip, c, l) = key(i);
            let n = t.find(&ip, c, l).expect("still noted");
            assert_eq!(n.state, NOTED_COMMIT);
            n.state = DECIDED;
        }
    }

    /// A window full of undecided notes refuses a newcomer rather than
    /// evict one; decided notes make room, oldest first.
    #[test]
    fn only_decided_notes_are_evicted() {
        let notes = Notes::new(slots_for(1)).expect("mapping");
        let mut keys = Vec::new();
        let mut i = 0u32;
        // Fill one window: keys whose home is slot 0 or just before it
        // land in slots 0..WINDOW.
        while keys.len() < WINDOW {
            let (ip, c, l) = key(i);
            if home(&ip, c, l, MIN_SLOTS) == 0 {
                keys.push((ip, c, l));
            }
            i += 1;
        }
        {
            let mut t = notes.lock();
            for (ip, c, l) in &keys {
                t.claim(ip, *c, *l).expect("room").state = NOTED_COMMIT;
            }
        }
        let mut j = i;
        let newcomer = loop {
            let (ip, c, l) = key(j);
            if home(&ip, c, l, MIN_SLOTS) == 0 {
                break (ip, c, l);
            }
            j += 1;
        };
        let mut t = notes.lock();
        assert!(
            t.claim(&newcomer.0, newcomer.1, newcomer.2).is_none(),
            "busy"
        );
        for (ip, c, l) in &keys {
            assert!(t.find(ip, *c, *l).is_some(), "kept");
        }
        let (ip, c, l) = keys[5];
        let n = t.find(&ip, c, l).expect("noted");
        n.state = DECIDED;
        let n = t
            .claim(&newcomer.0, newcomer.1, newcomer.2)
            .expect("a decided note made room");
        assert_eq!(n.state, FREE);
        assert!(t.find(&ip, c, l).is_none(), "the decided one gave way");
    }

    #[test]
    fn table_sizes_follow_the_listen_queue() {
        assert_eq!(slots_for(5), MIN_SLOTS);
        assert_eq!(slots_for(-1), MIN_SLOTS);
        assert_eq!(slots_for(960), 2048);
        assert_eq!(slots_for(4096), 8192);
        assert_eq!(slots_for(i32::MAX), MAX_SLOTS);
    }
}
