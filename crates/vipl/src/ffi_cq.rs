//! Completion-queue entry points.

use std::sync::atomic::Ordering;

use openvia_core::cq::CqEntry;
use openvia_core::ViaError;

use crate::state::*;
use crate::types::*;

/// # Safety
/// `CQHandle` writable.
#[no_mangle]
pub unsafe extern "C" fn VipCreateCQ(
    NicHandle: VIP_NIC_HANDLE,
    EntryCount: VIP_ULONG,
    CQHandle: *mut VIP_CQ_HANDLE,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if CQHandle.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        let cq = match e.nic.create_cq(EntryCount.min(usize::MAX as u64) as usize) {
            Ok(c) => c,
            Err(err) => return code(&err),
        };
        let Some(h) = tables().cqs.insert(cq.clone()) else {
            let _ = e.nic.destroy_cq(&cq);
            return VIP_ERROR_RESOURCE;
        };
        cq.token.store(h as usize as u64, Ordering::Relaxed);
        // SAFETY: checked non-null.
        unsafe { *CQHandle = h };
        VIP_SUCCESS
    })
}

/// The NIC entry that created `cq`.
fn owner(
    cq: &openvia_core::cq::CompletionQueue,
) -> Option<(VIP_NIC_HANDLE, std::sync::Arc<NicEntry>)> {
    tables()
        .nics
        .live()
        .into_iter()
        .find(|(_, e)| e.nic.owns_cq_id(cq.id()))
}

#[no_mangle]
pub extern "C" fn VipDestroyCQ(CQHandle: VIP_CQ_HANDLE) -> VIP_RETURN {
    guard(|| {
        let Some(cq) = tables().cqs.get(CQHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        let Some((_, e)) = owner(&cq) else {
            return VIP_INVALID_PARAMETER;
        };
        if let Err(err) = e.nic.destroy_cq(&cq) {
            return code(&err);
        }
        drop(cq);
        tables().cqs.remove(CQHandle);
        VIP_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn VipResizeCQ(CQHandle: VIP_CQ_HANDLE, EntryCount: VIP_ULONG) -> VIP_RETURN {
    guard(|| match tables().cqs.get(CQHandle) {
        Some(cq) => ret(cq.resize(EntryCount.min(usize::MAX as u64) as usize)),
        None => VIP_INVALID_PARAMETER,
    })
}

fn hand_out(
    r: Result<CqEntry, ViaError>,
    vi: *mut VIP_VI_HANDLE,
    recv: *mut VIP_BOOLEAN,
) -> VIP_RETURN {
    match r {
        Ok(e) => {
            // SAFETY: both checked non-null by the callers.
            unsafe {
                *vi = e.vi_token as usize as VIP_VI_HANDLE;
                *recv = from_bool(e.recv);
            }
            VIP_SUCCESS
        }
        Err(err) => code(&err),
    }
}

/// # Safety
/// `ViHandle` and `RecvQueue` writable.
#[no_mangle]
pub unsafe extern "C" fn VipCQDone(
    CQHandle: VIP_CQ_HANDLE,
    ViHandle: *mut VIP_VI_HANDLE,
    RecvQueue: *mut VIP_BOOLEAN,
) -> VIP_RETURN {
    guard(|| {
        let Some(cq) = tables().cqs.get(CQHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if ViHandle.is_null() || RecvQueue.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        let Some((_, e)) = owner(&cq) else {
            return VIP_INVALID_PARAMETER;
        };
        hand_out(e.nic.cq_done(&cq), ViHandle, RecvQueue)
    })
}

/// # Safety
/// `ViHandle` and `RecvQueue` writable.
#[no_mangle]
pub unsafe extern "C" fn VipCQWait(
    CQHandle: VIP_CQ_HANDLE,
    Timeout: VIP_ULONG,
    ViHandle: *mut VIP_VI_HANDLE,
    RecvQueue: *mut VIP_BOOLEAN,
) -> VIP_RETURN {
    guard(|| {
        let Some(cq) = tables().cqs.get(CQHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if ViHandle.is_null() || RecvQueue.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        let Some((_, e)) = owner(&cq) else {
            return VIP_INVALID_PARAMETER;
        };
        hand_out(e.nic.cq_wait(&cq, timeout(Timeout)), ViHandle, RecvQueue)
    })
}

#[no_mangle]
pub extern "C" fn VipCQNotify(
    CQHandle: VIP_CQ_HANDLE,
    Context: VIP_PVOID,
    Handler: VIP_CQ_NOTIFY_HANDLER,
) -> VIP_RETURN {
    guard(|| {
        let Some(cq) = tables().cqs.get(CQHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        let Some(handler) = Handler else {
            return VIP_INVALID_PARAMETER;
        };
        let Some((nic_h, e)) = owner(&cq) else {
            return VIP_INVALID_PARAMETER;
        };
        let ctx = Ctx(Context);
        let nic_h = nic_h as usize;
        let f = Box::new(move |entry: CqEntry| {
            let c = ctx;
            // SAFETY: the program's handler with its own context.
            unsafe {
                handler(
                    c.0,
                    nic_h as *mut _,
                    entry.vi_token as usize as *mut _,
                    from_bool(entry.recv),
                )
            };
        });
        ret(e.nic.cq_notify(&cq, f))
    })
}
