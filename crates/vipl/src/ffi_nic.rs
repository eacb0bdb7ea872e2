//! NIC, protection tag, memory, name service and management entry points.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use openvia_core::nic::{AsyncError, ErrorCode, Nic, ResourceCode, NIC_ADDRESS_LEN};
use openvia_core::ns;

use crate::state::*;
use crate::types::*;

fn copy_name(dst: &mut [VIP_CHAR; 64], name: &str) {
    dst.fill(0);
    for (d, b) in dst.iter_mut().zip(name.bytes().take(63)) {
        *d = b as VIP_CHAR;
    }
}

/// # Safety
/// `DeviceName` is null or a NUL-terminated string; `NicHandle` writable.
#[no_mangle]
pub unsafe extern "C" fn VipOpenNic(
    DeviceName: *const VIP_CHAR,
    NicHandle: *mut VIP_NIC_HANDLE,
) -> VIP_RETURN {
    guard(|| {
        if NicHandle.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        let name = if DeviceName.is_null() {
            None
        } else {
            // SAFETY: NUL-terminated per the contract.
            match unsafe { CStr::from_ptr(DeviceName) }.to_str() {
                Ok(s) => Some(s),
                Err(_) => return VIP_INVALID_PARAMETER,
            }
        };
        let nic = match Nic::open(name) {
            Ok(n) => n,
            Err(e) => return code(&e),
        };
        let address = Box::new(nic.query().address);
        let entry = Arc::new(NicEntry {
            nic: nic.clone(),
            address,
            ptags: Mutex::new(HashMap::new()),
        });
        let Some(h) = tables().nics.insert(entry) else {
            let _ = nic.close();
            return VIP_ERROR_RESOURCE;
        };
        nic.shared()
            .token
            .store(h as usize as u64, Ordering::Relaxed);
        // SAFETY: checked non-null above.
        unsafe { *NicHandle = h };
        VIP_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn VipCloseNic(NicHandle: VIP_NIC_HANDLE) -> VIP_RETURN {
    guard(|| {
        let t = tables();
        let Some(entry) = t.nics.remove(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        // Handles of objects of this NIC become stale with it.
        for (h, vi) in t.vis.live() {
            if vi.nic_token() == NicHandle as usize as u64 {
                let _ = vi.disconnect();
                t.vis.remove(h);
            }
        }
        for (h, p) in t.ptags.live() {
            if p.nic_handle == NicHandle as usize {
                t.ptags.remove(h);
            }
        }
        for (h, c) in t.conns.live() {
            if c.nic_handle == NicHandle as usize {
                t.conns.remove(h);
            }
        }
        for (h, cq) in t.cqs.live() {
            if entry.nic.owns_cq_id(cq.id()) {
                t.cqs.remove(h);
            }
        }
        ret(entry.nic.close())
    })
}

/// # Safety
/// `NicAttributes` writable.
#[no_mangle]
pub unsafe extern "C" fn VipQueryNic(
    NicHandle: VIP_NIC_HANDLE,
    NicAttributes: *mut VIP_NIC_ATTRIBUTES,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if NicAttributes.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        let q = e.nic.query();
        let mut a = VIP_NIC_ATTRIBUTES {
            Name: [0; 64],
            HardwareVersion: q.hardware_version,
            ProviderVersion: q.provider_version,
            NicAddressLen: NIC_ADDRESS_LEN as u16,
            LocalNicAddress: e.address.as_ptr(),
            ThreadSafe: from_bool(q.thread_safe),
            MaxDiscriminatorLen: q.max_discriminator_len,
            MaxRegisterBytes: q.max_register_bytes,
            MaxRegisterRegions: q.max_register_regions,
            MaxRegisterBlockBytes: q.max_register_block_bytes,
            MaxVI: q.max_vi,
            MaxDescriptorsPerQueue: q.max_descriptors_per_queue,
            MaxSegmentsPerDesc: q.max_segments_per_desc,
            MaxCQ: q.max_cq,
            MaxCQEntries: q.max_cq_entries,
            MaxTransferSize: q.max_transfer_size,
            NativeMTU: q.native_mtu,
            MaxPtags: q.max_ptags,
            ReliabilityLevelSupport: q.reliability_support,
            RDMAReadSupport: q.rdma_read_support,
        };
        copy_name(&mut a.Name, &q.name);
        // SAFETY: checked non-null; writable per the contract.
        unsafe { *NicAttributes = a };
        VIP_SUCCESS
    })
}

/// # Safety
/// `ProtectionTag` writable.
#[no_mangle]
pub unsafe extern "C" fn VipCreatePtag(
    NicHandle: VIP_NIC_HANDLE,
    ProtectionTag: *mut VIP_PROTECTION_HANDLE,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if ProtectionTag.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        let id = match e.nic.create_ptag() {
            Ok(id) => id,
            Err(err) => return code(&err),
        };
        let Some(h) = tables().ptags.insert(Arc::new(PtagEntry {
            nic_handle: NicHandle as usize,
            id,
        })) else {
            let _ = e.nic.destroy_ptag(id);
            return VIP_ERROR_RESOURCE;
        };
        e.ptags
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.0, h as usize);
        // SAFETY: checked non-null.
        unsafe { *ProtectionTag = h };
        VIP_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn VipDestroyPtag(
    NicHandle: VIP_NIC_HANDLE,
    ProtectionTag: VIP_PROTECTION_HANDLE,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        let Some(p) = tables().ptags.get(ProtectionTag) else {
            return VIP_INVALID_PARAMETER;
        };
        if p.nic_handle != NicHandle as usize {
            return VIP_INVALID_PTAG;
        }
        let id = p.id;
        drop(p);
        if let Err(err) = e.nic.destroy_ptag(id) {
            return code(&err);
        }
        tables().ptags.remove(ProtectionTag);
        e.ptags
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id.0);
        VIP_SUCCESS
    })
}

/// # Safety
/// `MemAttributes` readable, `MemHandle` writable.
#[no_mangle]
pub unsafe extern "C" fn VipRegisterMem(
    NicHandle: VIP_NIC_HANDLE,
    VirtualAddress: VIP_PVOID,
    Length: VIP_ULONG,
    MemAttributes: *mut VIP_MEM_ATTRIBUTES,
    MemHandle: *mut VIP_MEM_HANDLE,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if MemAttributes.is_null() || MemHandle.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        // SAFETY: readable per the contract.
        let a = unsafe { &*MemAttributes };
        let ptag = match ptag_of(NicHandle, a.Ptag) {
            Ok(p) => p,
            Err(err) => return code(&err),
        };
        match e.nic.register_mem(
            VirtualAddress as u64,
            Length,
            ptag,
            a.EnableRdmaWrite != 0,
            a.EnableRdmaRead != 0,
        ) {
            Ok(h) => {
                // SAFETY: checked non-null.
                unsafe { *MemHandle = h };
                VIP_SUCCESS
            }
            Err(err) => code(&err),
        }
    })
}

#[no_mangle]
pub extern "C" fn VipDeregisterMem(
    NicHandle: VIP_NIC_HANDLE,
    VirtualAddress: VIP_PVOID,
    MemHandle: VIP_MEM_HANDLE,
) -> VIP_RETURN {
    guard(|| match nic(NicHandle) {
        Some(e) => ret(e.nic.deregister_mem(VirtualAddress as u64, MemHandle)),
        None => VIP_INVALID_PARAMETER,
    })
}

/// # Safety
/// `MemAttributes` writable.
#[no_mangle]
pub unsafe extern "C" fn VipQueryMem(
    NicHandle: VIP_NIC_HANDLE,
    VirtualAddress: VIP_PVOID,
    MemHandle: VIP_MEM_HANDLE,
    MemAttributes: *mut VIP_MEM_ATTRIBUTES,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if MemAttributes.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        match e.nic.query_mem(VirtualAddress as u64, MemHandle) {
            Ok((ptag, w, r)) => {
                let ph = e
                    .ptags
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&ptag.0)
                    .copied()
                    .unwrap_or(0);
                // SAFETY: checked non-null.
                unsafe {
                    *MemAttributes = VIP_MEM_ATTRIBUTES {
                        Ptag: ph as *mut _,
                        EnableRdmaWrite: from_bool(w),
                        EnableRdmaRead: from_bool(r),
                    }
                };
                VIP_SUCCESS
            }
            Err(err) => code(&err),
        }
    })
}

/// # Safety
/// `MemAttributes` readable.
#[no_mangle]
pub unsafe extern "C" fn VipSetMemAttributes(
    NicHandle: VIP_NIC_HANDLE,
    VirtualAddress: VIP_PVOID,
    MemHandle: VIP_MEM_HANDLE,
    MemAttributes: *mut VIP_MEM_ATTRIBUTES,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if MemAttributes.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        // SAFETY: readable per the contract.
        let a = unsafe { &*MemAttributes };
        let ptag = match ptag_of(NicHandle, a.Ptag) {
            Ok(p) => p,
            Err(err) => return code(&err),
        };
        ret(e.nic.set_mem_attributes(
            VirtualAddress as u64,
            MemHandle,
            ptag,
            a.EnableRdmaWrite != 0,
            a.EnableRdmaRead != 0,
        ))
    })
}

#[no_mangle]
pub extern "C" fn VipErrorCallback(
    NicHandle: VIP_NIC_HANDLE,
    Context: VIP_PVOID,
    Handler: VIP_ERROR_HANDLER,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        let Some(handler) = Handler else {
            return ret(e.nic.set_error_handler(None));
        };
        let ctx = Ctx(Context);
        let nic_h = NicHandle as usize;
        let h = Arc::new(move |err: &AsyncError| {
            let c = ctx;
            let mut d = VIP_ERROR_DESCRIPTOR {
                NicHandle: nic_h as *mut _,
                ViHandle: err.vi_token as usize as *mut _,
                CQHandle: err.cq_token as usize as *mut _,
                DescriptorPtr: err.desc.map_or(std::ptr::null_mut(), |d| d.0.cast()),
                OpCode: err.op_code,
                ResourceCode: resource_code(err.resource),
                ErrorCode: error_code(err.code),
            };
            // SAFETY: calling the program's handler with its own context and
            // a descriptor valid for the duration of the call.
            unsafe { handler(c.0, &mut d) };
        });
        ret(e.nic.set_error_handler(Some(h)))
    })
}

fn resource_code(r: ResourceCode) -> VIP_RESOURCE_CODE {
    match r {
        ResourceCode::Nic => VIP_RESOURCE_NIC,
        ResourceCode::Vi => VIP_RESOURCE_VI,
        ResourceCode::Cq => VIP_RESOURCE_CQ,
        ResourceCode::Descriptor => VIP_RESOURCE_DESCRIPTOR,
    }
}

fn error_code(c: ErrorCode) -> VIP_ERROR_CODE {
    match c {
        ErrorCode::PostDesc => VIP_ERROR_POST_DESC,
        ErrorCode::ConnLost => VIP_ERROR_CONN_LOST,
        ErrorCode::RecvqEmpty => VIP_ERROR_RECVQ_EMPTY,
        ErrorCode::ViOverrun => VIP_ERROR_VI_OVERRUN,
        ErrorCode::RdmawProt => VIP_ERROR_RDMAW_PROT,
        ErrorCode::RdmawData => VIP_ERROR_RDMAW_DATA,
        ErrorCode::RdmawAbort => VIP_ERROR_RDMAW_ABORT,
        ErrorCode::RdmarProt => VIP_ERROR_RDMAR_PROT,
        ErrorCode::CompProt => VIP_ERROR_COMP_PROT,
        ErrorCode::RdmaTransport => VIP_ERROR_RDMA_TRANSPORT,
        ErrorCode::Catastrophic => VIP_ERROR_CATASTROPHIC,
    }
}

/// # Safety
/// For VIP_SMI_AUTODISCOVERY, `InfoPtr` points at a VIP_AUTODISCOVERY_LIST
/// whose ADAddrArray holds NumAdAddrs pointers to address buffers.
#[no_mangle]
pub unsafe extern "C" fn VipQuerySystemManagementInfo(
    NicHandle: VIP_NIC_HANDLE,
    InfoType: VIP_ULONG,
    InfoPtr: VIP_PVOID,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if InfoType != VIP_SMI_AUTODISCOVERY || InfoPtr.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        let list = InfoPtr as *mut VIP_AUTODISCOVERY_LIST;
        // SAFETY: layout per the contract. The shared-memory device sees
        // one host: this one, zero hops away.
        unsafe {
            (*list).NumberOfHops = 0;
            let room = (*list).NumAdAddrs;
            if room >= 1 && !(*list).ADAddrArray.is_null() && !(*(*list).ADAddrArray).is_null() {
                let me = openvia_core::Address {
                    host: e.address.to_vec(),
                    discriminator: Vec::new(),
                };
                write_address(*(*list).ADAddrArray, &me);
            }
            (*list).NumAdAddrs = 1;
        }
        VIP_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn VipNSInit(NicHandle: VIP_NIC_HANDLE, _NSInitInfo: VIP_PVOID) -> VIP_RETURN {
    guard(|| {
        if nic(NicHandle).is_some() {
            VIP_SUCCESS
        } else {
            VIP_INVALID_PARAMETER
        }
    })
}

#[no_mangle]
pub extern "C" fn VipNSShutdown(NicHandle: VIP_NIC_HANDLE) -> VIP_RETURN {
    guard(|| {
        if nic(NicHandle).is_some() {
            VIP_SUCCESS
        } else {
            VIP_INVALID_PARAMETER
        }
    })
}

/// # Safety
/// `Name` NUL-terminated; `Address` has room for NicAddressLen host bytes.
#[no_mangle]
pub unsafe extern "C" fn VipNSGetHostByName(
    NicHandle: VIP_NIC_HANDLE,
    Name: *mut VIP_CHAR,
    Address: *mut VIP_NET_ADDRESS,
    NameIndex: VIP_ULONG,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if Name.is_null() || Address.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        // SAFETY: NUL-terminated per the contract.
        let Ok(name) = unsafe { CStr::from_ptr(Name) }.to_str() else {
            return VIP_ERROR_NAMESERVICE;
        };
        if NameIndex != 0 {
            return VIP_ERROR_NAMESERVICE;
        }
        match ns::get_host_by_name(&e.nic, name) {
            Ok(host) => {
                // SAFETY: room for the host bytes per the contract; the
                // discriminator length is left for the program to set.
                unsafe {
                    (*Address).HostAddressLen = NIC_ADDRESS_LEN as u16;
                    let p = std::ptr::addr_of_mut!((*Address).HostAddress).cast::<u8>();
                    std::ptr::copy_nonoverlapping(host.as_ptr(), p, NIC_ADDRESS_LEN);
                }
                VIP_SUCCESS
            }
            Err(err) => code(&err),
        }
    })
}

/// # Safety
/// `Address` readable; `Name` has `*NameLen` bytes of room.
#[no_mangle]
pub unsafe extern "C" fn VipNSGetHostByAddr(
    NicHandle: VIP_NIC_HANDLE,
    Address: *mut VIP_NET_ADDRESS,
    Name: *mut VIP_CHAR,
    NameLen: *mut VIP_ULONG,
) -> VIP_RETURN {
    guard(|| {
        let Some(e) = nic(NicHandle) else {
            return VIP_INVALID_PARAMETER;
        };
        if Name.is_null() || NameLen.is_null() {
            return VIP_INVALID_PARAMETER;
        }
        // SAFETY: readable per the contract.
        let addr = match unsafe { read_address(Address) } {
            Ok(a) => a,
            Err(err) => return code(&err),
        };
        let host = match ns::get_host_by_addr(&e.nic, &addr.host) {
            Ok(h) => h,
            Err(err) => return code(&err),
        };
        // SAFETY: `NameLen` readable/writable, `Name` has that much room.
        unsafe {
            let room = *NameLen as usize;
            *NameLen = (host.len() + 1) as VIP_ULONG;
            if room < host.len() + 1 {
                return VIP_ERROR_RESOURCE;
            }
            std::ptr::copy_nonoverlapping(host.as_ptr(), Name.cast::<u8>(), host.len());
            *Name.add(host.len()) = 0;
        }
        VIP_SUCCESS
    })
}
