/*
 * layout_test.c - pins the Linux LP64 layout and the numeric values of
 * vipl.h at compile time.
 *
 * crates/vipl/src/types.rs asserts the same numbers on the Rust side, so
 * the C header and the Rust mirror cannot drift apart without one of the
 * two builds failing.  The program itself only reports success: every
 * check here happens in the compiler.
 */
#include <stdio.h>

#include "vipl.h"

#define SIZE(type, n) _Static_assert(sizeof(type) == (n), "sizeof " #type)
#define OFF(type, field, n) \
    _Static_assert(offsetof(type, field) == (n), "offsetof " #type "." #field)
#define VAL(name, n) _Static_assert((name) == (n), "value of " #name)

/* Scalars */
SIZE(VIP_PVOID, 8);
SIZE(VIP_BOOLEAN, 4);
SIZE(VIP_CHAR, 1);
SIZE(VIP_UCHAR, 1);
SIZE(VIP_USHORT, 2);
SIZE(VIP_ULONG, 8);
SIZE(VIP_UINT8, 1);
SIZE(VIP_UINT16, 2);
SIZE(VIP_UINT32, 4);
SIZE(VIP_UINT64, 8);
SIZE(VIP_QOS, 8);
SIZE(VIP_MEM_HANDLE, 4);
SIZE(VIP_NIC_HANDLE, 8);
SIZE(VIP_VI_HANDLE, 8);
SIZE(VIP_PROTECTION_HANDLE, 8);
SIZE(VIP_CONN_HANDLE, 8);
SIZE(VIP_CQ_HANDLE, 8);
SIZE(VIP_RELIABILITY_LEVEL, 2);
SIZE(VIP_RETURN, 4);
SIZE(VIP_VI_STATE, 4);
SIZE(VIP_RESOURCE_CODE, 4);
SIZE(VIP_ERROR_CODE, 4);
SIZE(VIP_VI_NOTIFY_HANDLER, 8);
SIZE(VIP_CQ_NOTIFY_HANDLER, 8);
SIZE(VIP_ERROR_HANDLER, 8);
VAL(VIP_TRUE, 1);
VAL(VIP_FALSE, 0);
VAL(VIP_INFINITE, 0xFFFFFFFFFFFFFFFFUL);

SIZE(VIP_PVOID64, 8);
_Static_assert(_Alignof(VIP_PVOID64) == 8, "alignment of VIP_PVOID64");

/* Network address */
SIZE(VIP_NET_ADDRESS, 6);
_Static_assert(_Alignof(VIP_NET_ADDRESS) == 2, "alignment of VIP_NET_ADDRESS");
OFF(VIP_NET_ADDRESS, HostAddressLen, 0);
OFF(VIP_NET_ADDRESS, DiscriminatorLen, 2);
OFF(VIP_NET_ADDRESS, HostAddress, 4);

/* Attributes */
SIZE(VIP_NIC_ATTRIBUTES, 200);
OFF(VIP_NIC_ATTRIBUTES, Name, 0);
OFF(VIP_NIC_ATTRIBUTES, HardwareVersion, 64);
OFF(VIP_NIC_ATTRIBUTES, ProviderVersion, 72);
OFF(VIP_NIC_ATTRIBUTES, NicAddressLen, 80);
OFF(VIP_NIC_ATTRIBUTES, LocalNicAddress, 88);
OFF(VIP_NIC_ATTRIBUTES, ThreadSafe, 96);
OFF(VIP_NIC_ATTRIBUTES, MaxDiscriminatorLen, 100);
OFF(VIP_NIC_ATTRIBUTES, MaxRegisterBytes, 104);
OFF(VIP_NIC_ATTRIBUTES, MaxRegisterRegions, 112);
OFF(VIP_NIC_ATTRIBUTES, MaxRegisterBlockBytes, 120);
OFF(VIP_NIC_ATTRIBUTES, MaxVI, 128);
OFF(VIP_NIC_ATTRIBUTES, MaxDescriptorsPerQueue, 136);
OFF(VIP_NIC_ATTRIBUTES, MaxSegmentsPerDesc, 144);
OFF(VIP_NIC_ATTRIBUTES, MaxCQ, 152);
OFF(VIP_NIC_ATTRIBUTES, MaxCQEntries, 160);
OFF(VIP_NIC_ATTRIBUTES, MaxTransferSize, 168);
OFF(VIP_NIC_ATTRIBUTES, NativeMTU, 176);
OFF(VIP_NIC_ATTRIBUTES, MaxPtags, 184);
OFF(VIP_NIC_ATTRIBUTES, ReliabilityLevelSupport, 192);
OFF(VIP_NIC_ATTRIBUTES, RDMAReadSupport, 194);

SIZE(VIP_VI_ATTRIBUTES, 40);
OFF(VIP_VI_ATTRIBUTES, ReliabilityLevel, 0);
OFF(VIP_VI_ATTRIBUTES, MaxTransferSize, 8);
OFF(VIP_VI_ATTRIBUTES, QoS, 16);
OFF(VIP_VI_ATTRIBUTES, Ptag, 24);
OFF(VIP_VI_ATTRIBUTES, EnableRdmaWrite, 32);
OFF(VIP_VI_ATTRIBUTES, EnableRdmaRead, 36);

SIZE(VIP_MEM_ATTRIBUTES, 16);
OFF(VIP_MEM_ATTRIBUTES, Ptag, 0);
OFF(VIP_MEM_ATTRIBUTES, EnableRdmaWrite, 8);
OFF(VIP_MEM_ATTRIBUTES, EnableRdmaRead, 12);

/* Descriptors */
VAL(VIP_DESCRIPTOR_ALIGNMENT, 64);

SIZE(VIP_CONTROL_SEGMENT, 32);
OFF(VIP_CONTROL_SEGMENT, Next, 0);
OFF(VIP_CONTROL_SEGMENT, NextHandle, 8);
OFF(VIP_CONTROL_SEGMENT, SegCount, 12);
OFF(VIP_CONTROL_SEGMENT, Control, 14);
OFF(VIP_CONTROL_SEGMENT, Reserved, 16);
OFF(VIP_CONTROL_SEGMENT, ImmediateData, 20);
OFF(VIP_CONTROL_SEGMENT, Length, 24);
OFF(VIP_CONTROL_SEGMENT, Status, 28);

SIZE(VIP_ADDRESS_SEGMENT, 16);
OFF(VIP_ADDRESS_SEGMENT, Data, 0);
OFF(VIP_ADDRESS_SEGMENT, Handle, 8);
OFF(VIP_ADDRESS_SEGMENT, Reserved, 12);

SIZE(VIP_DATA_SEGMENT, 16);
OFF(VIP_DATA_SEGMENT, Data, 0);
OFF(VIP_DATA_SEGMENT, Handle, 8);
OFF(VIP_DATA_SEGMENT, Length, 12);

SIZE(VIP_DESCRIPTOR_SEGMENT, 16);
SIZE(VIP_DESCRIPTOR, 64);
_Static_assert(_Alignof(VIP_DESCRIPTOR) == 8, "alignment of VIP_DESCRIPTOR");
OFF(VIP_DESCRIPTOR, CS, 0);
OFF(VIP_DESCRIPTOR, DS, 32);
OFF(VIP_DESCRIPTOR, DS[1], 48);

/* Asynchronous errors */
SIZE(VIP_ERROR_DESCRIPTOR, 48);
OFF(VIP_ERROR_DESCRIPTOR, NicHandle, 0);
OFF(VIP_ERROR_DESCRIPTOR, ViHandle, 8);
OFF(VIP_ERROR_DESCRIPTOR, CQHandle, 16);
OFF(VIP_ERROR_DESCRIPTOR, DescriptorPtr, 24);
OFF(VIP_ERROR_DESCRIPTOR, OpCode, 32);
OFF(VIP_ERROR_DESCRIPTOR, ResourceCode, 40);
OFF(VIP_ERROR_DESCRIPTOR, ErrorCode, 44);

/* System management */
VAL(VIP_SMI_AUTODISCOVERY, 1);
SIZE(VIP_AUTODISCOVERY_LIST, 24);
OFF(VIP_AUTODISCOVERY_LIST, NumberOfHops, 0);
OFF(VIP_AUTODISCOVERY_LIST, ADAddrArray, 8);
OFF(VIP_AUTODISCOVERY_LIST, NumAdAddrs, 16);

/* Return codes, in specification order from 0 */
VAL(VIP_SUCCESS, 0);
VAL(VIP_NOT_DONE, 1);
VAL(VIP_INVALID_PARAMETER, 2);
VAL(VIP_ERROR_RESOURCE, 3);
VAL(VIP_TIMEOUT, 4);
VAL(VIP_REJECT, 5);
VAL(VIP_INVALID_RELIABILITY_LEVEL, 6);
VAL(VIP_INVALID_MTU, 7);
VAL(VIP_INVALID_QOS, 8);
VAL(VIP_INVALID_PTAG, 9);
VAL(VIP_INVALID_RDMAREAD, 10);
VAL(VIP_DESCRIPTOR_ERROR, 11);
VAL(VIP_INVALID_STATE, 12);
VAL(VIP_ERROR_NAMESERVICE, 13);
VAL(VIP_NO_MATCH, 14);

/* Reliability levels */
VAL(VIP_SERVICE_UNRELIABLE, 0x01);
VAL(VIP_SERVICE_RELIABLE_DELIVERY, 0x02);
VAL(VIP_SERVICE_RELIABLE_RECEPTION, 0x04);

/* VI states */
VAL(VIP_STATE_IDLE, 0);
VAL(VIP_STATE_CONNECTED, 1);
VAL(VIP_STATE_CONNECT_PENDING, 2);
VAL(VIP_STATE_ERROR, 3);

/* Control bits */
VAL(VIP_CONTROL_OP_SENDRECV, 0x0);
VAL(VIP_CONTROL_OP_RDMAWRITE, 0x1);
VAL(VIP_CONTROL_OP_RDMAREAD, 0x2);
VAL(VIP_CONTROL_OP_RESERVED, 0x3);
VAL(VIP_CONTROL_OP_MASK, 0x3);
VAL(VIP_CONTROL_IMMEDIATE, 0x4);
VAL(VIP_CONTROL_QFENCE, 0x8);
VAL(VIP_CONTROL_RESERVED, 0xFFF0);

/* Status bits */
VAL(VIP_STATUS_DONE, 0x1);
VAL(VIP_STATUS_FORMAT_ERROR, 0x2);
VAL(VIP_STATUS_PROTECTION_ERROR, 0x4);
VAL(VIP_STATUS_LENGTH_ERROR, 0x8);
VAL(VIP_STATUS_PARTIAL_ERROR, 0x10);
VAL(VIP_STATUS_DESC_FLUSHED_ERROR, 0x20);
VAL(VIP_STATUS_TRANSPORT_ERROR, 0x40);
VAL(VIP_STATUS_RDMA_PROT_ERROR, 0x80);
VAL(VIP_STATUS_REMOTE_DESC_ERROR, 0x100);
VAL(VIP_STATUS_ERROR_MASK, 0x1FE);
VAL(VIP_STATUS_OP_SEND, 0x0);
VAL(VIP_STATUS_OP_RECEIVE, 0x10000);
VAL(VIP_STATUS_OP_RDMA_WRITE, 0x20000);
VAL(VIP_STATUS_OP_REMOTE_RDMA_WRITE, 0x30000);
VAL(VIP_STATUS_OP_RDMA_READ, 0x40000);
VAL(VIP_STATUS_OP_MASK, 0x70000);
VAL(VIP_STATUS_IMMEDIATE, 0x80000);
VAL(VIP_STATUS_RESERVED, 0xFFF0FE00u);

/* The error bits are exactly the mask, and no defined bit is reserved. */
VAL(VIP_STATUS_FORMAT_ERROR | VIP_STATUS_PROTECTION_ERROR | VIP_STATUS_LENGTH_ERROR |
        VIP_STATUS_PARTIAL_ERROR | VIP_STATUS_DESC_FLUSHED_ERROR | VIP_STATUS_TRANSPORT_ERROR |
        VIP_STATUS_RDMA_PROT_ERROR | VIP_STATUS_REMOTE_DESC_ERROR,
    VIP_STATUS_ERROR_MASK);
VAL((VIP_STATUS_DONE | VIP_STATUS_ERROR_MASK | VIP_STATUS_OP_MASK | VIP_STATUS_IMMEDIATE) &
        VIP_STATUS_RESERVED,
    0);
VAL((VIP_CONTROL_OP_MASK | VIP_CONTROL_IMMEDIATE | VIP_CONTROL_QFENCE) & VIP_CONTROL_RESERVED, 0);

/* Resource and error codes */
VAL(VIP_RESOURCE_NIC, 0);
VAL(VIP_RESOURCE_VI, 1);
VAL(VIP_RESOURCE_CQ, 2);
VAL(VIP_RESOURCE_DESCRIPTOR, 3);
VAL(VIP_ERROR_POST_DESC, 0);
VAL(VIP_ERROR_CONN_LOST, 1);
VAL(VIP_ERROR_RECVQ_EMPTY, 2);
VAL(VIP_ERROR_VI_OVERRUN, 3);
VAL(VIP_ERROR_RDMAW_PROT, 4);
VAL(VIP_ERROR_RDMAW_DATA, 5);
VAL(VIP_ERROR_RDMAW_ABORT, 6);
VAL(VIP_ERROR_RDMAR_PROT, 7);
VAL(VIP_ERROR_COMP_PROT, 8);
VAL(VIP_ERROR_RDMA_TRANSPORT, 9);
VAL(VIP_ERROR_CATASTROPHIC, 10);

/*
 * Every prototype must have the type written here; a mismatch between a
 * declaration in vipl.h and this list is a compile error (incompatible
 * pointer initialisation under -Werror).
 */
typedef VIP_RETURN (*open_nic_fn)(const VIP_CHAR *, VIP_NIC_HANDLE *);
typedef VIP_RETURN (*nic_fn)(VIP_NIC_HANDLE);
typedef VIP_RETURN (*query_nic_fn)(VIP_NIC_HANDLE, VIP_NIC_ATTRIBUTES *);
typedef VIP_RETURN (*register_mem_fn)(VIP_NIC_HANDLE, VIP_PVOID, VIP_ULONG, VIP_MEM_ATTRIBUTES *,
                                      VIP_MEM_HANDLE *);
typedef VIP_RETURN (*deregister_mem_fn)(VIP_NIC_HANDLE, VIP_PVOID, VIP_MEM_HANDLE);
typedef VIP_RETURN (*mem_attrs_fn)(VIP_NIC_HANDLE, VIP_PVOID, VIP_MEM_HANDLE,
                                   VIP_MEM_ATTRIBUTES *);
typedef VIP_RETURN (*error_callback_fn)(VIP_NIC_HANDLE, VIP_PVOID, VIP_ERROR_HANDLER);
typedef VIP_RETURN (*smi_fn)(VIP_NIC_HANDLE, VIP_ULONG, VIP_PVOID);
typedef VIP_RETURN (*create_ptag_fn)(VIP_NIC_HANDLE, VIP_PROTECTION_HANDLE *);
typedef VIP_RETURN (*destroy_ptag_fn)(VIP_NIC_HANDLE, VIP_PROTECTION_HANDLE);
typedef VIP_RETURN (*create_vi_fn)(VIP_NIC_HANDLE, VIP_VI_ATTRIBUTES *, VIP_CQ_HANDLE,
                                   VIP_CQ_HANDLE, VIP_VI_HANDLE *);
typedef VIP_RETURN (*vi_fn)(VIP_VI_HANDLE);
typedef VIP_RETURN (*query_vi_fn)(VIP_VI_HANDLE, VIP_VI_STATE *, VIP_VI_ATTRIBUTES *,
                                  VIP_BOOLEAN *, VIP_BOOLEAN *);
typedef VIP_RETURN (*vi_attrs_fn)(VIP_VI_HANDLE, VIP_VI_ATTRIBUTES *);
typedef VIP_RETURN (*post_fn)(VIP_VI_HANDLE, VIP_DESCRIPTOR *, VIP_MEM_HANDLE);
typedef VIP_RETURN (*done_fn)(VIP_VI_HANDLE, VIP_DESCRIPTOR **);
typedef VIP_RETURN (*wait_fn)(VIP_VI_HANDLE, VIP_ULONG, VIP_DESCRIPTOR **);
typedef VIP_RETURN (*notify_fn)(VIP_VI_HANDLE, VIP_PVOID, VIP_VI_NOTIFY_HANDLER);
typedef VIP_RETURN (*create_cq_fn)(VIP_NIC_HANDLE, VIP_ULONG, VIP_CQ_HANDLE *);
typedef VIP_RETURN (*cq_fn)(VIP_CQ_HANDLE);
typedef VIP_RETURN (*resize_cq_fn)(VIP_CQ_HANDLE, VIP_ULONG);
typedef VIP_RETURN (*cq_done_fn)(VIP_CQ_HANDLE, VIP_VI_HANDLE *, VIP_BOOLEAN *);
typedef VIP_RETURN (*cq_wait_fn)(VIP_CQ_HANDLE, VIP_ULONG, VIP_VI_HANDLE *, VIP_BOOLEAN *);
typedef VIP_RETURN (*cq_notify_fn)(VIP_CQ_HANDLE, VIP_PVOID, VIP_CQ_NOTIFY_HANDLER);
typedef VIP_RETURN (*connect_wait_fn)(VIP_NIC_HANDLE, VIP_NET_ADDRESS *, VIP_ULONG,
                                      VIP_NET_ADDRESS *, VIP_VI_ATTRIBUTES *, VIP_CONN_HANDLE *);
typedef VIP_RETURN (*connect_accept_fn)(VIP_CONN_HANDLE, VIP_VI_HANDLE);
typedef VIP_RETURN (*connect_reject_fn)(VIP_CONN_HANDLE);
typedef VIP_RETURN (*connect_request_fn)(VIP_VI_HANDLE, VIP_NET_ADDRESS *, VIP_NET_ADDRESS *,
                                         VIP_ULONG, VIP_VI_ATTRIBUTES *);
typedef VIP_RETURN (*peer_request_fn)(VIP_VI_HANDLE, VIP_NET_ADDRESS *, VIP_NET_ADDRESS *,
                                      VIP_ULONG);
typedef VIP_RETURN (*ns_init_fn)(VIP_NIC_HANDLE, VIP_PVOID);
typedef VIP_RETURN (*ns_by_name_fn)(VIP_NIC_HANDLE, VIP_CHAR *, VIP_NET_ADDRESS *, VIP_ULONG);
typedef VIP_RETURN (*ns_by_addr_fn)(VIP_NIC_HANDLE, VIP_NET_ADDRESS *, VIP_CHAR *, VIP_ULONG *);

/* Compared as types only, so this program needs no library to link. */
#define PROTO(type, fn) \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), type), "prototype of " #fn)

PROTO(open_nic_fn, VipOpenNic);
PROTO(nic_fn, VipCloseNic);
PROTO(query_nic_fn, VipQueryNic);
PROTO(register_mem_fn, VipRegisterMem);
PROTO(deregister_mem_fn, VipDeregisterMem);
PROTO(mem_attrs_fn, VipQueryMem);
PROTO(mem_attrs_fn, VipSetMemAttributes);
PROTO(error_callback_fn, VipErrorCallback);
PROTO(smi_fn, VipQuerySystemManagementInfo);
PROTO(create_ptag_fn, VipCreatePtag);
PROTO(destroy_ptag_fn, VipDestroyPtag);
PROTO(create_vi_fn, VipCreateVi);
PROTO(vi_fn, VipDestroyVi);
PROTO(query_vi_fn, VipQueryVi);
PROTO(vi_attrs_fn, VipSetViAttributes);
PROTO(post_fn, VipPostSend);
PROTO(done_fn, VipSendDone);
PROTO(wait_fn, VipSendWait);
PROTO(notify_fn, VipSendNotify);
PROTO(post_fn, VipPostRecv);
PROTO(done_fn, VipRecvDone);
PROTO(wait_fn, VipRecvWait);
PROTO(notify_fn, VipRecvNotify);
PROTO(create_cq_fn, VipCreateCQ);
PROTO(cq_fn, VipDestroyCQ);
PROTO(resize_cq_fn, VipResizeCQ);
PROTO(cq_done_fn, VipCQDone);
PROTO(cq_wait_fn, VipCQWait);
PROTO(cq_notify_fn, VipCQNotify);
PROTO(connect_wait_fn, VipConnectWait);
PROTO(connect_accept_fn, VipConnectAccept);
PROTO(connect_reject_fn, VipConnectReject);
PROTO(connect_request_fn, VipConnectRequest);
PROTO(vi_fn, VipDisconnect);
PROTO(peer_request_fn, VipConnectPeerRequest);
PROTO(vi_attrs_fn, VipConnectPeerDone);
PROTO(vi_attrs_fn, VipConnectPeerWait);
PROTO(ns_init_fn, VipNSInit);
PROTO(ns_by_name_fn, VipNSGetHostByName);
PROTO(ns_by_addr_fn, VipNSGetHostByAddr);
PROTO(nic_fn, VipNSShutdown);

int main(void)
{
    printf("layout: vipl.h matches the LP64 contract\n");
    return 0;
}
