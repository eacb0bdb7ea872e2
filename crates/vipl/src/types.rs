//! The C types of `include/vipl.h`, mirrored for Rust.
//!
//! Every struct, union, enum and constant of the VIPL 1.0 header appears here
//! under its C name, so the C-ABI shells read like the specification they
//! implement. The layout of each type is pinned by compile-time asserts with
//! the Linux LP64 numbers written out; `tests/c/layout_test.c` asserts the same
//! numbers from the C side, so a drift in either file breaks a build.
//!
//! The four enums are returned or written by the provider only, never read
//! from a C caller, so `#[repr(C)]` Rust enums are sound for them (a C
//! program cannot hand us an out-of-range discriminant through these types).
#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_int, c_uchar, c_ulong, c_ushort, c_void};
use core::mem::{align_of, offset_of, size_of};

// ---------------------------------------------------------------------------
// Scalars
// ---------------------------------------------------------------------------

pub type VIP_PVOID = *mut c_void;
pub type VIP_BOOLEAN = c_int;
pub type VIP_CHAR = c_char;
pub type VIP_UCHAR = c_uchar;
pub type VIP_USHORT = c_ushort;
pub type VIP_ULONG = c_ulong;
pub type VIP_UINT8 = u8;
pub type VIP_UINT16 = u16;
pub type VIP_UINT32 = u32;
pub type VIP_UINT64 = u64;
/// Reserved by VIPL 1.0; its contents are undefined.
pub type VIP_QOS = *mut c_void;

pub const VIP_TRUE: VIP_BOOLEAN = 1;
pub const VIP_FALSE: VIP_BOOLEAN = 0;

/// "Wait forever": all ones of `VIP_ULONG`, as M-VIA chose on Linux.
pub const VIP_INFINITE: VIP_ULONG = !0;

/// A pointer carried in 64 bits on every platform.
#[repr(C)]
#[derive(Clone, Copy)]
pub union VIP_PVOID64 {
    pub AddressBits: VIP_UINT64,
    pub Address: VIP_PVOID,
}

// ---------------------------------------------------------------------------
// Handles
// ---------------------------------------------------------------------------

pub type VIP_NIC_HANDLE = *mut c_void;
pub type VIP_VI_HANDLE = *mut c_void;
pub type VIP_PROTECTION_HANDLE = *mut c_void;
pub type VIP_CONN_HANDLE = *mut c_void;
pub type VIP_CQ_HANDLE = *mut c_void;
/// A plain number because it travels inside descriptors.
pub type VIP_MEM_HANDLE = VIP_UINT32;

// ---------------------------------------------------------------------------
// Return codes
// ---------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VIP_RETURN {
    VIP_SUCCESS = 0,
    VIP_NOT_DONE = 1,
    VIP_INVALID_PARAMETER = 2,
    VIP_ERROR_RESOURCE = 3,
    VIP_TIMEOUT = 4,
    VIP_REJECT = 5,
    VIP_INVALID_RELIABILITY_LEVEL = 6,
    VIP_INVALID_MTU = 7,
    VIP_INVALID_QOS = 8,
    VIP_INVALID_PTAG = 9,
    VIP_INVALID_RDMAREAD = 10,
    VIP_DESCRIPTOR_ERROR = 11,
    VIP_INVALID_STATE = 12,
    VIP_ERROR_NAMESERVICE = 13,
    VIP_NO_MATCH = 14,
}
pub use VIP_RETURN::*;

// ---------------------------------------------------------------------------
// Reliability levels (bit values)
// ---------------------------------------------------------------------------

pub type VIP_RELIABILITY_LEVEL = VIP_UINT16;

pub const VIP_SERVICE_UNRELIABLE: VIP_RELIABILITY_LEVEL = 0x01;
pub const VIP_SERVICE_RELIABLE_DELIVERY: VIP_RELIABILITY_LEVEL = 0x02;
pub const VIP_SERVICE_RELIABLE_RECEPTION: VIP_RELIABILITY_LEVEL = 0x04;

// ---------------------------------------------------------------------------
// Network address
// ---------------------------------------------------------------------------

/// `HostAddressLen` host bytes followed directly by `DiscriminatorLen`
/// discriminator bytes; `HostAddress` is the start of a variable-length tail.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VIP_NET_ADDRESS {
    pub HostAddressLen: VIP_UINT16,
    pub DiscriminatorLen: VIP_UINT16,
    pub HostAddress: [VIP_UINT8; 1],
}

// ---------------------------------------------------------------------------
// Attributes
// ---------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VIP_NIC_ATTRIBUTES {
    pub Name: [VIP_CHAR; 64],
    pub HardwareVersion: VIP_ULONG,
    pub ProviderVersion: VIP_ULONG,
    pub NicAddressLen: VIP_UINT16,
    pub LocalNicAddress: *const VIP_UINT8,
    pub ThreadSafe: VIP_BOOLEAN,
    pub MaxDiscriminatorLen: VIP_UINT16,
    pub MaxRegisterBytes: VIP_ULONG,
    pub MaxRegisterRegions: VIP_ULONG,
    pub MaxRegisterBlockBytes: VIP_ULONG,
    pub MaxVI: VIP_ULONG,
    pub MaxDescriptorsPerQueue: VIP_ULONG,
    pub MaxSegmentsPerDesc: VIP_ULONG,
    pub MaxCQ: VIP_ULONG,
    pub MaxCQEntries: VIP_ULONG,
    pub MaxTransferSize: VIP_ULONG,
    pub NativeMTU: VIP_ULONG,
    pub MaxPtags: VIP_ULONG,
    pub ReliabilityLevelSupport: VIP_RELIABILITY_LEVEL,
    pub RDMAReadSupport: VIP_RELIABILITY_LEVEL,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VIP_VI_ATTRIBUTES {
    pub ReliabilityLevel: VIP_RELIABILITY_LEVEL,
    pub MaxTransferSize: VIP_ULONG,
    pub QoS: VIP_QOS,
    pub Ptag: VIP_PROTECTION_HANDLE,
    pub EnableRdmaWrite: VIP_BOOLEAN,
    pub EnableRdmaRead: VIP_BOOLEAN,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VIP_MEM_ATTRIBUTES {
    pub Ptag: VIP_PROTECTION_HANDLE,
    pub EnableRdmaWrite: VIP_BOOLEAN,
    pub EnableRdmaRead: VIP_BOOLEAN,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VIP_VI_STATE {
    VIP_STATE_IDLE = 0,
    VIP_STATE_CONNECTED = 1,
    VIP_STATE_CONNECT_PENDING = 2,
    VIP_STATE_ERROR = 3,
}
pub use VIP_VI_STATE::*;

// ---------------------------------------------------------------------------
// Descriptors
// ---------------------------------------------------------------------------

/// Descriptors must start on this boundary inside registered memory.
pub const VIP_DESCRIPTOR_ALIGNMENT: usize = 64;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct VIP_CONTROL_SEGMENT {
    pub Next: VIP_PVOID64,
    pub NextHandle: VIP_MEM_HANDLE,
    pub SegCount: VIP_UINT16,
    pub Control: VIP_UINT16,
    pub Reserved: VIP_UINT32,
    pub ImmediateData: VIP_UINT32,
    pub Length: VIP_UINT32,
    pub Status: VIP_UINT32,
}

/// The remote buffer of an RDMA operation.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VIP_ADDRESS_SEGMENT {
    pub Data: VIP_PVOID64,
    pub Handle: VIP_MEM_HANDLE,
    pub Reserved: VIP_UINT32,
}

/// A local buffer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VIP_DATA_SEGMENT {
    pub Data: VIP_PVOID64,
    pub Handle: VIP_MEM_HANDLE,
    pub Length: VIP_UINT32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union VIP_DESCRIPTOR_SEGMENT {
    pub Remote: VIP_ADDRESS_SEGMENT,
    pub Local: VIP_DATA_SEGMENT,
}

/// `CS.SegCount` segments follow the control segment; programs allocate room
/// for more than two after the struct. For RDMA, `DS[0]` is the address
/// segment and the local data segments follow it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VIP_DESCRIPTOR {
    pub CS: VIP_CONTROL_SEGMENT,
    pub DS: [VIP_DESCRIPTOR_SEGMENT; 2],
}

// Control field bits, set by the program.
pub const VIP_CONTROL_OP_SENDRECV: VIP_UINT16 = 0x0;
pub const VIP_CONTROL_OP_RDMAWRITE: VIP_UINT16 = 0x1;
pub const VIP_CONTROL_OP_RDMAREAD: VIP_UINT16 = 0x2;
pub const VIP_CONTROL_OP_RESERVED: VIP_UINT16 = 0x3;
pub const VIP_CONTROL_OP_MASK: VIP_UINT16 = 0x3;
pub const VIP_CONTROL_IMMEDIATE: VIP_UINT16 = 0x4;
pub const VIP_CONTROL_QFENCE: VIP_UINT16 = 0x8;
pub const VIP_CONTROL_RESERVED: VIP_UINT16 = 0xFFF0;

// Status field bits, written by the provider.
pub const VIP_STATUS_DONE: VIP_UINT32 = 0x1;
pub const VIP_STATUS_FORMAT_ERROR: VIP_UINT32 = 0x2;
pub const VIP_STATUS_PROTECTION_ERROR: VIP_UINT32 = 0x4;
pub const VIP_STATUS_LENGTH_ERROR: VIP_UINT32 = 0x8;
pub const VIP_STATUS_PARTIAL_ERROR: VIP_UINT32 = 0x10;
pub const VIP_STATUS_DESC_FLUSHED_ERROR: VIP_UINT32 = 0x20;
pub const VIP_STATUS_TRANSPORT_ERROR: VIP_UINT32 = 0x40;
pub const VIP_STATUS_RDMA_PROT_ERROR: VIP_UINT32 = 0x80;
pub const VIP_STATUS_REMOTE_DESC_ERROR: VIP_UINT32 = 0x100;
pub const VIP_STATUS_ERROR_MASK: VIP_UINT32 = 0x1FE;

pub const VIP_STATUS_OP_SEND: VIP_UINT32 = 0x0;
pub const VIP_STATUS_OP_RECEIVE: VIP_UINT32 = 0x10000;
pub const VIP_STATUS_OP_RDMA_WRITE: VIP_UINT32 = 0x20000;
pub const VIP_STATUS_OP_REMOTE_RDMA_WRITE: VIP_UINT32 = 0x30000;
pub const VIP_STATUS_OP_RDMA_READ: VIP_UINT32 = 0x40000;
pub const VIP_STATUS_OP_MASK: VIP_UINT32 = 0x70000;
pub const VIP_STATUS_IMMEDIATE: VIP_UINT32 = 0x80000;
pub const VIP_STATUS_RESERVED: VIP_UINT32 = 0xFFF0_FE00;

// ---------------------------------------------------------------------------
// Asynchronous errors
// ---------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VIP_RESOURCE_CODE {
    VIP_RESOURCE_NIC = 0,
    VIP_RESOURCE_VI = 1,
    VIP_RESOURCE_CQ = 2,
    VIP_RESOURCE_DESCRIPTOR = 3,
}
pub use VIP_RESOURCE_CODE::*;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VIP_ERROR_CODE {
    VIP_ERROR_POST_DESC = 0,
    VIP_ERROR_CONN_LOST = 1,
    VIP_ERROR_RECVQ_EMPTY = 2,
    VIP_ERROR_VI_OVERRUN = 3,
    VIP_ERROR_RDMAW_PROT = 4,
    VIP_ERROR_RDMAW_DATA = 5,
    VIP_ERROR_RDMAW_ABORT = 6,
    VIP_ERROR_RDMAR_PROT = 7,
    VIP_ERROR_COMP_PROT = 8,
    VIP_ERROR_RDMA_TRANSPORT = 9,
    VIP_ERROR_CATASTROPHIC = 10,
}
pub use VIP_ERROR_CODE::*;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VIP_ERROR_DESCRIPTOR {
    pub NicHandle: VIP_NIC_HANDLE,
    pub ViHandle: VIP_VI_HANDLE,
    pub CQHandle: VIP_CQ_HANDLE,
    pub DescriptorPtr: *mut VIP_DESCRIPTOR,
    pub OpCode: VIP_ULONG,
    pub ResourceCode: VIP_RESOURCE_CODE,
    pub ErrorCode: VIP_ERROR_CODE,
}

// ---------------------------------------------------------------------------
// Handlers (NULL in C is `None`)
// ---------------------------------------------------------------------------

/// A completed send or receive descriptor (`VipSendNotify`, `VipRecvNotify`).
pub type VIP_VI_NOTIFY_HANDLER = Option<
    unsafe extern "C" fn(
        Context: VIP_PVOID,
        NicHandle: VIP_NIC_HANDLE,
        ViHandle: VIP_VI_HANDLE,
        Descriptor: *mut VIP_DESCRIPTOR,
    ),
>;

/// A CQ entry: which VI, and whether it is that VI's receive queue.
pub type VIP_CQ_NOTIFY_HANDLER = Option<
    unsafe extern "C" fn(
        Context: VIP_PVOID,
        NicHandle: VIP_NIC_HANDLE,
        ViHandle: VIP_VI_HANDLE,
        RecvQueue: VIP_BOOLEAN,
    ),
>;

/// An asynchronous error (`VipErrorCallback`).
pub type VIP_ERROR_HANDLER =
    Option<unsafe extern "C" fn(Context: VIP_PVOID, ErrorDesc: *mut VIP_ERROR_DESCRIPTOR)>;

// ---------------------------------------------------------------------------
// System management
// ---------------------------------------------------------------------------

pub const VIP_SMI_AUTODISCOVERY: VIP_ULONG = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VIP_AUTODISCOVERY_LIST {
    pub NumberOfHops: VIP_ULONG,
    pub ADAddrArray: *mut *mut VIP_NET_ADDRESS,
    pub NumAdAddrs: VIP_ULONG,
}

// ---------------------------------------------------------------------------
// Layout: the Linux LP64 numbers, also asserted by tests/c/layout_test.c
// ---------------------------------------------------------------------------

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
const _: () = {
    assert!(size_of::<VIP_ULONG>() == 8);
    assert!(size_of::<VIP_BOOLEAN>() == 4);
    assert!(size_of::<VIP_RETURN>() == 4);
    assert!(size_of::<VIP_VI_STATE>() == 4);
    assert!(size_of::<VIP_RESOURCE_CODE>() == 4);
    assert!(size_of::<VIP_ERROR_CODE>() == 4);

    assert!(size_of::<VIP_PVOID64>() == 8);
    assert!(align_of::<VIP_PVOID64>() == 8);

    assert!(size_of::<VIP_NET_ADDRESS>() == 6);
    assert!(align_of::<VIP_NET_ADDRESS>() == 2);
    assert!(offset_of!(VIP_NET_ADDRESS, HostAddressLen) == 0);
    assert!(offset_of!(VIP_NET_ADDRESS, DiscriminatorLen) == 2);
    assert!(offset_of!(VIP_NET_ADDRESS, HostAddress) == 4);
};

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
const _: () = {
    assert!(size_of::<VIP_NIC_ATTRIBUTES>() == 200);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, Name) == 0);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, HardwareVersion) == 64);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, ProviderVersion) == 72);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, NicAddressLen) == 80);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, LocalNicAddress) == 88);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, ThreadSafe) == 96);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxDiscriminatorLen) == 100);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxRegisterBytes) == 104);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxRegisterRegions) == 112);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxRegisterBlockBytes) == 120);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxVI) == 128);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxDescriptorsPerQueue) == 136);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxSegmentsPerDesc) == 144);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxCQ) == 152);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxCQEntries) == 160);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxTransferSize) == 168);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, NativeMTU) == 176);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, MaxPtags) == 184);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, ReliabilityLevelSupport) == 192);
    assert!(offset_of!(VIP_NIC_ATTRIBUTES, RDMAReadSupport) == 194);

    assert!(size_of::<VIP_VI_ATTRIBUTES>() == 40);
    assert!(offset_of!(VIP_VI_ATTRIBUTES, ReliabilityLevel) == 0);
    assert!(offset_of!(VIP_VI_ATTRIBUTES, MaxTransferSize) == 8);
    assert!(offset_of!(VIP_VI_ATTRIBUTES, QoS) == 16);
    assert!(offset_of!(VIP_VI_ATTRIBUTES, Ptag) == 24);
    assert!(offset_of!(VIP_VI_ATTRIBUTES, EnableRdmaWrite) == 32);
    assert!(offset_of!(VIP_VI_ATTRIBUTES, EnableRdmaRead) == 36);

    assert!(size_of::<VIP_MEM_ATTRIBUTES>() == 16);
    assert!(offset_of!(VIP_MEM_ATTRIBUTES, Ptag) == 0);
    assert!(offset_of!(VIP_MEM_ATTRIBUTES, EnableRdmaWrite) == 8);
    assert!(offset_of!(VIP_MEM_ATTRIBUTES, EnableRdmaRead) == 12);
};

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
const _: () = {
    assert!(size_of::<VIP_CONTROL_SEGMENT>() == 32);
    assert!(offset_of!(VIP_CONTROL_SEGMENT, Next) == 0);
    assert!(offset_of!(VIP_CONTROL_SEGMENT, NextHandle) == 8);
    assert!(offset_of!(VIP_CONTROL_SEGMENT, SegCount) == 12);
    assert!(offset_of!(VIP_CONTROL_SEGMENT, Control) == 14);
    assert!(offset_of!(VIP_CONTROL_SEGMENT, Reserved) == 16);
    assert!(offset_of!(VIP_CONTROL_SEGMENT, ImmediateData) == 20);
    assert!(offset_of!(VIP_CONTROL_SEGMENT, Length) == 24);
    assert!(offset_of!(VIP_CONTROL_SEGMENT, Status) == 28);

    assert!(size_of::<VIP_ADDRESS_SEGMENT>() == 16);
    assert!(offset_of!(VIP_ADDRESS_SEGMENT, Data) == 0);
    assert!(offset_of!(VIP_ADDRESS_SEGMENT, Handle) == 8);
    assert!(offset_of!(VIP_ADDRESS_SEGMENT, Reserved) == 12);

    assert!(size_of::<VIP_DATA_SEGMENT>() == 16);
    assert!(offset_of!(VIP_DATA_SEGMENT, Data) == 0);
    assert!(offset_of!(VIP_DATA_SEGMENT, Handle) == 8);
    assert!(offset_of!(VIP_DATA_SEGMENT, Length) == 12);

    assert!(size_of::<VIP_DESCRIPTOR_SEGMENT>() == 16);
    assert!(size_of::<VIP_DESCRIPTOR>() == 64);
    assert!(align_of::<VIP_DESCRIPTOR>() == 8);
    assert!(offset_of!(VIP_DESCRIPTOR, CS) == 0);
    assert!(offset_of!(VIP_DESCRIPTOR, DS) == 32);
    assert!(size_of::<VIP_DESCRIPTOR>() == VIP_DESCRIPTOR_ALIGNMENT);
};

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
const _: () = {
    assert!(size_of::<VIP_ERROR_DESCRIPTOR>() == 48);
    assert!(offset_of!(VIP_ERROR_DESCRIPTOR, NicHandle) == 0);
    assert!(offset_of!(VIP_ERROR_DESCRIPTOR, ViHandle) == 8);
    assert!(offset_of!(VIP_ERROR_DESCRIPTOR, CQHandle) == 16);
    assert!(offset_of!(VIP_ERROR_DESCRIPTOR, DescriptorPtr) == 24);
    assert!(offset_of!(VIP_ERROR_DESCRIPTOR, OpCode) == 32);
    assert!(offset_of!(VIP_ERROR_DESCRIPTOR, ResourceCode) == 40);
    assert!(offset_of!(VIP_ERROR_DESCRIPTOR, ErrorCode) == 44);

    assert!(size_of::<VIP_AUTODISCOVERY_LIST>() == 24);
    assert!(offset_of!(VIP_AUTODISCOVERY_LIST, NumberOfHops) == 0);
    assert!(offset_of!(VIP_AUTODISCOVERY_LIST, ADAddrArray) == 8);
    assert!(offset_of!(VIP_AUTODISCOVERY_LIST, NumAdAddrs) == 16);

    // A NULL handler must cost nothing extra: `Option<fn>` is one pointer.
    assert!(size_of::<VIP_VI_NOTIFY_HANDLER>() == 8);
    assert!(size_of::<VIP_CQ_NOTIFY_HANDLER>() == 8);
    assert!(size_of::<VIP_ERROR_HANDLER>() == 8);
};
