//! Connection entry points: client/server and peer-to-peer.

use std::sync::{Arc, Mutex};

use openvia_core::nic::MAX_DISCRIMINATOR_LEN;
use openvia_core::{connect_request, connect_wait, peer_done, peer_request, peer_wait};

use crate::state::*;
use crate::types::*;

/// # Safety
/// `LocalAddr` readable; `RemoteAddr` has room for an address;
/// `RemoteViAttributes` and `ConnHandle` writable.
#[no_mangle]
pub unsafe extern "C" fn VipConnectWait(
    NicHandle: VIP_NIC_HANDLE,
    LocalAddr: *mut VIP_NET_ADDRESS,
    Timeout: VIP_ULONG,
    RemoteAddr: *mut VIP_NET_ADDRESS,
    RemoteViAttributes: *mut VIP_VI_ATTRIBUTES,
    ConnHandle: *mut VIP_CONN_HANDLE,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if ConnHandle.is_null() || LocalAddr.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        // SAFETY: readable per the contract.
        let local = match unsafe { read_address(LocalAddr) } {
            Ok(a) if a.discriminator.len() <= MAX_DISCRIMINATOR_LEN => a,
            Ok(_) => return VIP_INVALID_PARAMETER,
            Err(err) => return code(&err),
        };
        let req = match connect_wait(e.nic.shared(), &local, timeout(Timeout)) {
            Ok(r) => r,
            Err(err) => return code(&err),
        };
        // SAFETY: room and writability per the contract.
        unsafe {
            write_address(RemoteAddr, req.remote_address());
            remote_attrs_out(RemoteViAttributes, &req.remote_attrs());
        }
        let entry = Arc::new(ConnEntry {
            nic_handle: NicHandle as usize,
            request: Mutex::new(Some(req)),
        });
        let Some(h) = tables().conns.insert(entry) else {
            return VIP_ERROR_RESOURCE;
        };
        // SAFETY: checked non-null.
        unsafe { *ConnHandle = h };
        VIP_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn VipConnectAccept(
    ConnHandle: VIP_CONN_HANDLE,
    ViHandle: VIP_VI_HANDLE,
) -> VIP_RETURN {
    guard(|| {
        let Some(v) = tables().vis.get(ViHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        let Some(c) = tables().conns.get(ConnHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if c.nic_handle != nic_of_vi(&v) as usize {
            return VIP_INVALID_PARAMETER;
        }
        // A VI that cannot take the connection leaves the request open, so
        // the program may accept it on another VI or reject it.
        if v.state() != openvia_core::vi::ViState::Idle {
            return VIP_INVALID_STATE;
        }
        let Some(req) = c.request.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return VIP_INVALID_PARAMETER;
        };
        drop(c);
        tables().conns.remove(ConnHandle);
        ret(req.accept(&v))
    })
}

#[no_mangle]
pub extern "C" fn VipConnectReject(ConnHandle: VIP_CONN_HANDLE) -> VIP_RETURN {
    guard(|| {
        let Some(c) = tables().conns.remove(ConnHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        let req = c.request.lock().unwrap_or_else(|p| p.into_inner()).take();
        match req {
            Some(r) => ret(r.reject()),
            None => VIP_INVALID_PARAMETER,
        }
    })
}

/// # Safety
/// Addresses readable; `RemoteViAttributes` null or writable.
#[no_mangle]
pub unsafe extern "C" fn VipConnectRequest(
    ViHandle: VIP_VI_HANDLE,
    LocalAddr: *mut VIP_NET_ADDRESS,
    RemoteAddr: *mut VIP_NET_ADDRESS,
    Timeout: VIP_ULONG,
    RemoteViAttributes: *mut VIP_VI_ATTRIBUTES,
) -> VIP_RETURN {
    guard(|| {
        let Some(v) = tables().vis.get(ViHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        // SAFETY: readable per the contract.
        let (local, remote) = match unsafe { (read_address(LocalAddr), read_address(RemoteAddr)) } {
            (Ok(l), Ok(r)) => (l, r),
            _ => return VIP_INVALID_PARAMETER,
        };
        match connect_request(&v, &local, &remote, timeout(Timeout)) {
            Ok(a) => {
                // SAFETY: null or writable per the contract.
                unsafe { remote_attrs_out(RemoteViAttributes, &a) };
                VIP_SUCCESS
            }
            Err(err) => code(&err),
        }
    })
}

#[no_mangle]
pub extern "C" fn VipDisconnect(ViHandle: VIP_VI_HANDLE) -> VIP_RETURN {
    guard(|| match tables().vis.get(ViHandle) {
        Some(v) => ret(v.disconnect()),
        None => VIP_INVALID_PARAMETER,
    })
}

/// # Safety
/// Addresses readable.
#[no_mangle]
pub unsafe extern "C" fn VipConnectPeerRequest(
    ViHandle: VIP_VI_HANDLE,
    LocalAddr: *mut VIP_NET_ADDRESS,
    RemoteAddr: *mut VIP_NET_ADDRESS,
    Timeout: VIP_ULONG,
) -> VIP_RETURN {
    guard(|| {
        let Some(v) = tables().vis.get(ViHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        // SAFETY: readable per the contract.
        let (local, remote) = match unsafe { (read_address(LocalAddr), read_address(RemoteAddr)) } {
            (Ok(l), Ok(r)) => (l, r),
            _ => return VIP_INVALID_PARAMETER,
        };
        ret(peer_request(&v, &local, &remote, timeout(Timeout)))
    })
}

/// Runs a peer-connection step on the VI and hands its outcome to C.
fn peer_step(
    vi: VIP_VI_HANDLE,
    out: *mut VIP_VI_ATTRIBUTES,
    step: fn(&std::sync::Arc<openvia_core::vi::Vi>) -> openvia_core::Result<openvia_core::ViAttrs>,
) -> VIP_RETURN {
    guard(|| {
        let Some(v) = tables().vis.get(vi) else {
            return VIP_INVALID_PARAMETER;
        };
        match step(&v) {
            Ok(a) => {
                // SAFETY: null or writable per the callers' contract.
                unsafe { remote_attrs_out(out, &a) };
                VIP_SUCCESS
            }
            Err(err) => code(&err),
        }
    })
}

/// # Safety
/// `RemoteViAttributes` null or writable.
#[no_mangle]
pub unsafe extern "C" fn VipConnectPeerDone(
    ViHandle: VIP_VI_HANDLE,
    RemoteViAttributes: *mut VIP_VI_ATTRIBUTES,
) -> VIP_RETURN {
    peer_step(ViHandle, RemoteViAttributes, peer_done)
}

/// # Safety
/// `RemoteViAttributes` null or writable.
#[no_mangle]
pub unsafe extern "C" fn VipConnectPeerWait(
    ViHandle: VIP_VI_HANDLE,
    RemoteViAttributes: *mut VIP_VI_ATTRIBUTES,
) -> VIP_RETURN {
    peer_step(ViHandle, RemoteViAttributes, peer_wait)
}
