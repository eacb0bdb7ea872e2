//! A peer-to-peer connection in progress, whatever the device: a device's
//! `peer_request` starts its rendezvous on a thread of its own
//! ([`start_peer`]); `VipConnectPeerDone` / `VipConnectPeerWait` read the
//! outcome ([`peer_done`], [`peer_wait`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use openvia_wire::handshake::ViAttrs;

use super::{Vi, ViState};
use crate::error::{Result, ViaError};

/// A peer-to-peer connection in progress, whatever the device: its
/// outcome once known, and a flag that stops the rendezvous (set when the
/// VI disconnects or is destroyed, i.e. when this is dropped).
/// Where a rendezvous thread leaves its outcome.
type Outcome = Arc<(Mutex<Option<Result<ViAttrs>>>, Condvar)>;

pub struct PeerConnect {
    result: Outcome,
    cancel: Arc<AtomicBool>,
}

impl Drop for PeerConnect {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
    }
}

/// Starts a peer rendezvous on its own thread: `work` connects `vi` (it
/// should give up when its flag turns true) and its outcome is kept for
/// `peer_done` / `peer_wait`.
pub fn start_peer(
    vi: &Arc<Vi>,
    work: impl FnOnce(&AtomicBool) -> Result<ViAttrs> + Send + 'static,
) -> Result<()> {
    vi.ensure_idle()?;
    vi.set_state(ViState::ConnectPending);
    let pc = PeerConnect {
        result: Arc::new((Mutex::new(None), Condvar::new())),
        cancel: Arc::new(AtomicBool::new(false)),
    };
    let (result, cancel) = (pc.result.clone(), pc.cancel.clone());
    *vi.peer.lock().unwrap_or_else(|e| e.into_inner()) = Some(pc);
    let vi2 = vi.clone();
    crate::sys::thread::spawn_quiet("openvia-peer-connect", move || {
        crate::vi::held::this_thread_is_transport();
        let r = work(&cancel);
        if r.is_err() && vi2.state() == ViState::ConnectPending {
            vi2.set_state(ViState::Idle);
        }
        // Let go of the VI before the outcome is known: a program that
        // drops its own handle right after must be the one whose drop
        // closes the connection, not this thread (which an exit stops
        // midway).
        let nic = vi2.nic.clone();
        drop(vi2);
        let (m, cv) = &*result;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        cv.notify_all();
        nic.doorbell.ring_local();
    })
    .map_err(|_| ViaError::Resource("thread"))?;
    Ok(())
}

fn pending(vi: &Vi) -> Result<Outcome> {
    vi.peer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|pc| pc.result.clone())
        .ok_or(ViaError::InvalidState("no peer connection requested"))
}

/// `VipConnectPeerDone`: Ok(remote attributes) once connected, NotDone before.
pub fn peer_done(vi: &Arc<Vi>) -> Result<ViAttrs> {
    let r = pending(vi)?
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    match r {
        None => Err(ViaError::NotDone),
        Some(r) => {
            *vi.peer.lock().unwrap_or_else(|e| e.into_inner()) = None;
            r
        }
    }
}

/// `VipConnectPeerWait`: blocks until the peer connection is made or fails.
pub fn peer_wait(vi: &Arc<Vi>) -> Result<ViAttrs> {
    let shared = pending(vi)?;
    let (m, cv) = &*shared;
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    while g.is_none() {
        g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    let r = g
        .take()
        .unwrap_or(Err(ViaError::InvalidState("peer connect")));
    drop(g);
    *vi.peer.lock().unwrap_or_else(|e| e.into_inner()) = None;
    r
}
