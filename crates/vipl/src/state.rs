//! What the C shell keeps beside the core: the handle tables, the per-NIC
//! bits the C interface needs (the address bytes `LocalNicAddress` points
//! at, the ptag handles by id), and the conversions between C and core
//! values. No VIA logic lives here.

use std::collections::HashMap;
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use openvia_core::cq::CompletionQueue;
use openvia_core::mem::PtagId;
use openvia_core::nic::{Nic, NIC_ADDRESS_LEN};
use openvia_core::vi::{Vi, ViAttributes};
use openvia_core::ConnRequest;
use openvia_core::{Address, ViaError};

use crate::handles::{HandleTable, Kind};
use crate::types::*;

/// An open NIC as the C side sees it. Page-aligned, as the core's NIC
/// state is, so a fork() child's call reaches the fork check even when the
/// program registered a buffer beside it.
#[repr(align(4096))]
pub struct NicEntry {
    pub nic: Nic,
    /// What `LocalNicAddress` points at; lives as long as the handle.
    pub address: Box<[u8; NIC_ADDRESS_LEN]>,
    /// Ptag id → its C handle, so VipQueryVi can give the handle back.
    pub ptags: Mutex<HashMap<u32, usize>>,
}

pub struct PtagEntry {
    pub nic_handle: usize,
    pub id: PtagId,
}

pub struct ConnEntry {
    pub nic_handle: usize,
    pub request: Mutex<Option<ConnRequest>>,
}

pub struct Tables {
    pub nics: HandleTable<NicEntry>,
    pub vis: HandleTable<Vi>,
    pub cqs: HandleTable<CompletionQueue>,
    pub ptags: HandleTable<PtagEntry>,
    pub conns: HandleTable<ConnEntry>,
}

pub fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| Tables {
        nics: HandleTable::new(Kind::Nic),
        vis: HandleTable::new(Kind::Vi),
        cqs: HandleTable::new(Kind::Cq),
        ptags: HandleTable::new(Kind::Ptag),
        conns: HandleTable::new(Kind::Conn),
    })
}

/// Runs an entry point, turning a panic into an error return: no panic
/// ever unwinds into C.
pub fn guard(f: impl FnOnce() -> VIP_RETURN) -> VIP_RETURN {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(VIP_ERROR_RESOURCE)
}

pub fn code(e: &ViaError) -> VIP_RETURN {
    match e {
        ViaError::InvalidParameter(_) => VIP_INVALID_PARAMETER,
        ViaError::Resource(_) => VIP_ERROR_RESOURCE,
        ViaError::Timeout => VIP_TIMEOUT,
        ViaError::Rejected => VIP_REJECT,
        ViaError::InvalidReliability => VIP_INVALID_RELIABILITY_LEVEL,
        ViaError::InvalidMtu => VIP_INVALID_MTU,
        ViaError::InvalidPtag => VIP_INVALID_PTAG,
        ViaError::InvalidRdmaRead => VIP_INVALID_RDMAREAD,
        ViaError::Descriptor(_) => VIP_DESCRIPTOR_ERROR,
        ViaError::InvalidState(_) => VIP_INVALID_STATE,
        ViaError::NameService(_) => VIP_ERROR_NAMESERVICE,
        ViaError::NoMatch => VIP_NO_MATCH,
        ViaError::NotDone => VIP_NOT_DONE,
    }
}

pub fn ret(r: Result<(), ViaError>) -> VIP_RETURN {
    match r {
        Ok(()) => VIP_SUCCESS,
        Err(e) => code(&e),
    }
}

/// `VIP_INFINITE` is forever; anything else is milliseconds.
pub fn timeout(ms: VIP_ULONG) -> Option<Duration> {
    (ms != VIP_INFINITE).then(|| Duration::from_millis(ms))
}

/// Reads a caller's VIP_NET_ADDRESS.
///
/// # Safety
/// `a` must be null or point at a VIP_NET_ADDRESS followed by its
/// HostAddressLen + DiscriminatorLen bytes.
pub unsafe fn read_address(a: *const VIP_NET_ADDRESS) -> Result<Address, ViaError> {
    if a.is_null() {
        return Err(ViaError::InvalidParameter("address"));
    }
    // SAFETY: the caller vouches for the header and the bytes after it.
    unsafe {
        let hl = (*a).HostAddressLen as usize;
        let dl = (*a).DiscriminatorLen as usize;
        if hl > NIC_ADDRESS_LEN || dl > openvia_core::nic::MAX_DISCRIMINATOR_LEN {
            return Err(ViaError::InvalidParameter("address lengths"));
        }
        let bytes =
            std::slice::from_raw_parts(std::ptr::addr_of!((*a).HostAddress).cast::<u8>(), hl + dl);
        Ok(Address {
            host: bytes[..hl].to_vec(),
            discriminator: bytes[hl..].to_vec(),
        })
    }
}

/// Writes an address into a caller's VIP_NET_ADDRESS.
///
/// # Safety
/// `a` must point at room for the header plus host and discriminator bytes
/// (VIPL programs allocate NicAddressLen + MaxDiscriminatorLen).
pub unsafe fn write_address(a: *mut VIP_NET_ADDRESS, addr: &Address) {
    if a.is_null() {
        return;
    }
    // SAFETY: the caller vouches for the room, as above.
    unsafe {
        (*a).HostAddressLen = addr.host.len() as u16;
        (*a).DiscriminatorLen = addr.discriminator.len() as u16;
        let p = std::ptr::addr_of_mut!((*a).HostAddress).cast::<u8>();
        std::ptr::copy_nonoverlapping(addr.host.as_ptr(), p, addr.host.len());
        std::ptr::copy_nonoverlapping(
            addr.discriminator.as_ptr(),
            p.add(addr.host.len()),
            addr.discriminator.len(),
        );
    }
}

fn as_bool(b: VIP_BOOLEAN) -> bool {
    b != VIP_FALSE
}

pub fn from_bool(b: bool) -> VIP_BOOLEAN {
    if b {
        VIP_TRUE
    } else {
        VIP_FALSE
    }
}

/// Resolves a ptag handle of NIC `nic_handle`.
pub fn ptag_of(nic_handle: *mut c_void, h: VIP_PROTECTION_HANDLE) -> Result<PtagId, ViaError> {
    let p = tables().ptags.get(h).ok_or(ViaError::InvalidPtag)?;
    if p.nic_handle != nic_handle as usize {
        return Err(ViaError::InvalidPtag);
    }
    Ok(p.id)
}

/// Converts C VI attributes for the core.
///
/// # Safety
/// `a` must point at a readable VIP_VI_ATTRIBUTES.
pub unsafe fn vi_attrs_in(
    nic_handle: *mut c_void,
    a: *const VIP_VI_ATTRIBUTES,
) -> Result<ViAttributes, ViaError> {
    if a.is_null() {
        return Err(ViaError::InvalidParameter("attributes"));
    }
    // SAFETY: readable per the caller.
    let a = unsafe { &*a };
    Ok(ViAttributes {
        reliability: a.ReliabilityLevel,
        max_transfer: a.MaxTransferSize,
        ptag: ptag_of(nic_handle, a.Ptag)?,
        rdma_write: as_bool(a.EnableRdmaWrite),
        rdma_read: as_bool(a.EnableRdmaRead),
    })
}

/// Fills C VI attributes from the wire form a peer sent (no ptag, no QoS).
///
/// # Safety
/// `out` must be null or point at a writable VIP_VI_ATTRIBUTES.
pub unsafe fn remote_attrs_out(out: *mut VIP_VI_ATTRIBUTES, a: &openvia_core::ViAttrs) {
    if out.is_null() {
        return;
    }
    // SAFETY: writable per the caller.
    unsafe {
        *out = VIP_VI_ATTRIBUTES {
            ReliabilityLevel: a.reliability,
            MaxTransferSize: a.max_transfer,
            QoS: std::ptr::null_mut(),
            Ptag: std::ptr::null_mut(),
            EnableRdmaWrite: from_bool(a.rdma_write),
            EnableRdmaRead: from_bool(a.rdma_read),
        };
    }
}

/// The NIC handle a VI belongs to, and the NIC entry.
pub fn nic_of_vi(vi: &Vi) -> *mut c_void {
    vi.nic_token() as usize as *mut c_void
}

/// A C `void *` context that handlers receive back unchanged.
#[derive(Clone, Copy)]
pub struct Ctx(pub *mut c_void);
// SAFETY: the context is the program's own value; we only hand it back to
// the program's handler, as VIPL specifies.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

/// Keeps Arc<NicEntry> reachable from a handle value.
pub fn nic(h: VIP_NIC_HANDLE) -> Option<crate::handles::Guard<'static, NicEntry>> {
    tables().nics.get(h)
}

pub type NicRef = Arc<NicEntry>;
