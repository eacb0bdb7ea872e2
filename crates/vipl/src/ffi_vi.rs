//! VI and data-transfer entry points.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use openvia_core::descriptor::{DescPtr, Descriptor};
use openvia_core::vi::{Vi, ViState};
use openvia_core::ViaError;

use crate::state::*;
use crate::types::*;

const _: () = assert!(std::mem::size_of::<VIP_DESCRIPTOR>() == std::mem::size_of::<Descriptor>());

fn vi(h: VIP_VI_HANDLE) -> Option<crate::handles::Guard<'static, Vi>> {
    tables().vis.get(h)
}

/// # Safety
/// `ViAttributes` readable, `ViHandle` writable.
#[no_mangle]
pub unsafe extern "C" fn VipCreateVi(
    NicHandle: VIP_NIC_HANDLE,
    ViAttributes: *mut VIP_VI_ATTRIBUTES,
    SendCQHandle: VIP_CQ_HANDLE,
    RecvCQHandle: VIP_CQ_HANDLE,
    ViHandle: *mut VIP_VI_HANDLE,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if ViHandle.is_null() || ViAttributes.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        let cq_of = |h: VIP_CQ_HANDLE| -> Result<Option<Arc<_>>, ()> {
            if h.is_null() {
                return Ok(None);
            }
            tables().cqs.get(h).map(|g| Some((*g).clone())).ok_or(())
        };
        let (Ok(scq), Ok(rcq)) = (cq_of(SendCQHandle), cq_of(RecvCQHandle)) else {
            return VIP_INVALID_PARAMETER;
        };
        // SAFETY: readable per the contract.
        let attrs = match unsafe { vi_attrs_in(NicHandle, ViAttributes) } {
            Ok(a) => a,
            Err(err) => return code(&err),
        };
        let v = match e.nic.create_vi(attrs, scq, rcq) {
            Ok(v) => v,
            Err(err) => return code(&err),
        };
        let Some(h) = tables().vis.insert(v.clone()) else {
            let _ = e.nic.destroy_vi(&v);
            return VIP_ERROR_RESOURCE;
        };
        v.token.store(h as usize as u64, Ordering::Relaxed);
        // SAFETY: checked non-null.
        unsafe { *ViHandle = h };
        VIP_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn VipDestroyVi(ViHandle: VIP_VI_HANDLE) -> VIP_RETURN {
    guard(|| {
        let Some(v) = vi(ViHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        let Some(e) = nic(nic_of_vi(&v)) else {
            return VIP_INVALID_PARAMETER;
        };
        if let Err(err) = e.nic.destroy_vi(&v) {
            return code(&err);
        }
        drop(v);
        tables().vis.remove(ViHandle);
        VIP_SUCCESS
    })
}

/// # Safety
/// The four out-pointers writable.
#[no_mangle]
pub unsafe extern "C" fn VipQueryVi(
    ViHandle: VIP_VI_HANDLE,
    State: *mut VIP_VI_STATE,
    ViAttributes: *mut VIP_VI_ATTRIBUTES,
    SendQueueEmpty: *mut VIP_BOOLEAN,
    RecvQueueEmpty: *mut VIP_BOOLEAN,
) -> VIP_RETURN {
    guard(|| {
        let Some(v) = vi(ViHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if State.is_null()
            || ViAttributes.is_null()
            || SendQueueEmpty.is_null()
            || RecvQueueEmpty.is_null()
        {
            return VIP_INVALID_PARAMETER;
        }
        let (state, a, se, re) = v.query();
        let ptag = nic(nic_of_vi(&v))
            .and_then(|e| {
                e.ptags
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&a.ptag.0)
                    .copied()
            })
            .unwrap_or(0);
        // SAFETY: all checked non-null; writable per the contract.
        unsafe {
            *State = match state {
                ViState::Idle => VIP_STATE_IDLE,
                ViState::Connected => VIP_STATE_CONNECTED,
                ViState::ConnectPending => VIP_STATE_CONNECT_PENDING,
                ViState::Error => VIP_STATE_ERROR,
            };
            *ViAttributes = VIP_VI_ATTRIBUTES {
                ReliabilityLevel: a.reliability,
                MaxTransferSize: a.max_transfer,
                QoS: std::ptr::null_mut(),
                Ptag: ptag as *mut _,
                EnableRdmaWrite: from_bool(a.rdma_write),
                EnableRdmaRead: from_bool(a.rdma_read),
            };
            *SendQueueEmpty = from_bool(se);
            *RecvQueueEmpty = from_bool(re);
        }
        VIP_SUCCESS
    })
}

/// # Safety
/// `ViAttributes` readable.
#[no_mangle]
pub unsafe extern "C" fn VipSetViAttributes(
    ViHandle: VIP_VI_HANDLE,
    ViAttributes: *mut VIP_VI_ATTRIBUTES,
) -> VIP_RETURN {
    guard(|| {
        let Some(v) = vi(ViHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        // SAFETY: readable per the contract (null checked inside).
        match unsafe { vi_attrs_in(nic_of_vi(&v), ViAttributes) } {
            Ok(a) => ret(v.set_attributes(a)),
            Err(err) => code(&err),
        }
    })
}

#[no_mangle]
pub extern "C" fn VipPostSend(
    ViHandle: VIP_VI_HANDLE,
    DescriptorPtr: *mut VIP_DESCRIPTOR,
    MemoryHandle: VIP_MEM_HANDLE,
) -> VIP_RETURN {
    guard(|| match vi(ViHandle) {
        Some(v) if !DescriptorPtr.is_null() => ret(v.post_send(DescriptorPtr.cast(), MemoryHandle)),
        _ => VIP_INVALID_PARAMETER,
    })
}

#[no_mangle]
pub extern "C" fn VipPostRecv(
    ViHandle: VIP_VI_HANDLE,
    DescriptorPtr: *mut VIP_DESCRIPTOR,
    MemoryHandle: VIP_MEM_HANDLE,
) -> VIP_RETURN {
    guard(|| match vi(ViHandle) {
        Some(v) if !DescriptorPtr.is_null() => ret(v.post_recv(DescriptorPtr.cast(), MemoryHandle)),
        _ => VIP_INVALID_PARAMETER,
    })
}

fn hand_out(r: Result<DescPtr, ViaError>, out: *mut *mut VIP_DESCRIPTOR) -> VIP_RETURN {
    match r {
        Ok(d) => {
            // SAFETY: `out` was checked non-null by the caller of this helper.
            unsafe { *out = d.0.cast() };
            VIP_SUCCESS
        }
        Err(e) => code(&e),
    }
}

/// # Safety
/// `DescriptorPtr` writable.
#[no_mangle]
pub unsafe extern "C" fn VipSendDone(
    ViHandle: VIP_VI_HANDLE,
    DescriptorPtr: *mut *mut VIP_DESCRIPTOR,
) -> VIP_RETURN {
    guard(|| match vi(ViHandle) {
        Some(v) if !DescriptorPtr.is_null() => hand_out(v.send_done(), DescriptorPtr),
        _ => VIP_INVALID_PARAMETER,
    })
}

/// # Safety
/// `DescriptorPtr` writable.
#[no_mangle]
pub unsafe extern "C" fn VipRecvDone(
    ViHandle: VIP_VI_HANDLE,
    DescriptorPtr: *mut *mut VIP_DESCRIPTOR,
) -> VIP_RETURN {
    guard(|| match vi(ViHandle) {
        Some(v) if !DescriptorPtr.is_null() => hand_out(v.recv_done(), DescriptorPtr),
        _ => VIP_INVALID_PARAMETER,
    })
}

/// # Safety
/// `DescriptorPtr` writable.
#[no_mangle]
pub unsafe extern "C" fn VipSendWait(
    ViHandle: VIP_VI_HANDLE,
    Timeout: VIP_ULONG,
    DescriptorPtr: *mut *mut VIP_DESCRIPTOR,
) -> VIP_RETURN {
    guard(|| match vi(ViHandle) {
        Some(v) if !DescriptorPtr.is_null() => {
            hand_out(v.send_wait(timeout(Timeout)), DescriptorPtr)
        }
        _ => VIP_INVALID_PARAMETER,
    })
}

/// # Safety
/// `DescriptorPtr` writable.
#[no_mangle]
pub unsafe extern "C" fn VipRecvWait(
    ViHandle: VIP_VI_HANDLE,
    Timeout: VIP_ULONG,
    DescriptorPtr: *mut *mut VIP_DESCRIPTOR,
) -> VIP_RETURN {
    guard(|| match vi(ViHandle) {
        Some(v) if !DescriptorPtr.is_null() => {
            hand_out(v.recv_wait(timeout(Timeout)), DescriptorPtr)
        }
        _ => VIP_INVALID_PARAMETER,
    })
}

fn notify(
    ViHandle: VIP_VI_HANDLE,
    Context: VIP_PVOID,
    Handler: VIP_VI_NOTIFY_HANDLER,
    recv: bool,
) -> VIP_RETURN {
    guard(|| {
        let Some(v) = vi(ViHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        let Some(handler) = Handler else {
            return VIP_INVALID_PARAMETER;
        };
        let ctx = Ctx(Context);
        let nic_h = nic_of_vi(&v) as usize;
        let vi_h = ViHandle as usize;
        let f = Box::new(move |d: DescPtr| {
            let c = ctx;
            // SAFETY: the program's handler, with its own context and the
            // descriptor it posted.
            unsafe { handler(c.0, nic_h as *mut _, vi_h as *mut _, d.0.cast()) };
        });
        ret(if recv {
            v.recv_notify(f)
        } else {
            v.send_notify(f)
        })
    })
}

#[no_mangle]
pub extern "C" fn VipSendNotify(
    ViHandle: VIP_VI_HANDLE,
    Context: VIP_PVOID,
    Handler: VIP_VI_NOTIFY_HANDLER,
) -> VIP_RETURN {
    notify(ViHandle, Context, Handler, false)
}

#[no_mangle]
pub extern "C" fn VipRecvNotify(
    ViHandle: VIP_VI_HANDLE,
    Context: VIP_PVOID,
    Handler: VIP_VI_NOTIFY_HANDLER,
) -> VIP_RETURN {
    notify(ViHandle, Context, Handler, true)
}
