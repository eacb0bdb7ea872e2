/*
 * vipl.h - the Virtual Interface Provider Library (VIPL 1.0) interface of
 * openvia.
 *
 * A VI program opens a NIC, creates a protection tag, registers the memory
 * that holds its descriptors and buffers, creates Virtual Interfaces (VIs)
 * and connects them to VIs of a peer.  Data moves by posting 64-byte aligned
 * descriptors to a VI's send or receive queue and collecting them once the
 * provider has marked them done; completion queues (CQs) tell which VI has
 * something to collect.
 *
 * Names, field order and numeric values follow the VIPL 1.0 contract, so
 * programs written for earlier VIA providers compile unchanged.  The layout
 * numbers for Linux LP64 are checked in tests/c/layout_test.c and mirrored
 * in crates/vipl/src/types.rs.
 *
 * Device names (openvia):
 *   "/dev/via_lo", NULL or ""  open the shared-memory device, which connects
 *                              processes on this host;
 *   "/dev/via_<ifname>"        open the network device on that interface,
 *                              e.g. "/dev/via_eth0".
 * There are no other openvia extensions to the VIPL 1.0 interface yet.
 */
#ifndef OPENVIA_VIPL_H
#define OPENVIA_VIPL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Scalar types
 * ------------------------------------------------------------------------ */

typedef void *VIP_PVOID;
typedef int VIP_BOOLEAN;
typedef char VIP_CHAR;
typedef unsigned char VIP_UCHAR;
typedef unsigned short VIP_USHORT;
typedef unsigned long VIP_ULONG;
typedef uint8_t VIP_UINT8;
typedef uint16_t VIP_UINT16;
typedef uint32_t VIP_UINT32;
typedef uint64_t VIP_UINT64;

/* Quality of service: reserved by VIPL 1.0, its contents are undefined. */
typedef void *VIP_QOS;

#define VIP_TRUE 1
#define VIP_FALSE 0

/*
 * A timeout meaning "wait forever".  VIPL 1.0 left its value to the
 * platform; on Linux it is all ones of VIP_ULONG (as M-VIA chose), so any
 * finite timeout in milliseconds is smaller than it.
 */
#define VIP_INFINITE ((VIP_ULONG)~0UL)

/* A pointer carried in 64 bits on every platform (it travels in descriptors). */
typedef union {
    VIP_UINT64 AddressBits;
    VIP_PVOID Address;
} VIP_PVOID64;

/* ------------------------------------------------------------------------
 * Handles
 * ------------------------------------------------------------------------ */

typedef void *VIP_NIC_HANDLE;
typedef void *VIP_VI_HANDLE;
typedef void *VIP_PROTECTION_HANDLE;
typedef void *VIP_CONN_HANDLE;
typedef void *VIP_CQ_HANDLE;

/* A memory handle is a plain number because it travels in descriptors. */
typedef VIP_UINT32 VIP_MEM_HANDLE;

/* ------------------------------------------------------------------------
 * Return codes
 * ------------------------------------------------------------------------ */

typedef enum {
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
    VIP_NO_MATCH = 14
} VIP_RETURN;

/* ------------------------------------------------------------------------
 * Reliability levels (bit values, so a NIC can report a set of them)
 * ------------------------------------------------------------------------ */

typedef VIP_UINT16 VIP_RELIABILITY_LEVEL;

#define VIP_SERVICE_UNRELIABLE 0x01
#define VIP_SERVICE_RELIABLE_DELIVERY 0x02
#define VIP_SERVICE_RELIABLE_RECEPTION 0x04

/* ------------------------------------------------------------------------
 * Network addresses
 * ------------------------------------------------------------------------ */

/*
 * HostAddressLen bytes of host address followed directly by
 * DiscriminatorLen bytes of discriminator.  Allocate
 * sizeof(VIP_NET_ADDRESS) + host length + discriminator length.
 */
typedef struct {
    VIP_UINT16 HostAddressLen;
    VIP_UINT16 DiscriminatorLen;
    VIP_UINT8 HostAddress[1];
} VIP_NET_ADDRESS;

/* ------------------------------------------------------------------------
 * Attributes
 * ------------------------------------------------------------------------ */

typedef struct {
    VIP_CHAR Name[64];
    VIP_ULONG HardwareVersion;
    VIP_ULONG ProviderVersion;
    VIP_UINT16 NicAddressLen;
    const VIP_UINT8 *LocalNicAddress;
    VIP_BOOLEAN ThreadSafe;
    VIP_UINT16 MaxDiscriminatorLen;
    VIP_ULONG MaxRegisterBytes;
    VIP_ULONG MaxRegisterRegions;
    VIP_ULONG MaxRegisterBlockBytes;
    VIP_ULONG MaxVI;
    VIP_ULONG MaxDescriptorsPerQueue;
    VIP_ULONG MaxSegmentsPerDesc;
    VIP_ULONG MaxCQ;
    VIP_ULONG MaxCQEntries;
    VIP_ULONG MaxTransferSize;
    VIP_ULONG NativeMTU;
    VIP_ULONG MaxPtags;
    VIP_RELIABILITY_LEVEL ReliabilityLevelSupport;
    VIP_RELIABILITY_LEVEL RDMAReadSupport;
} VIP_NIC_ATTRIBUTES;

typedef struct {
    VIP_RELIABILITY_LEVEL ReliabilityLevel;
    VIP_ULONG MaxTransferSize;
    VIP_QOS QoS;
    VIP_PROTECTION_HANDLE Ptag;
    VIP_BOOLEAN EnableRdmaWrite;
    VIP_BOOLEAN EnableRdmaRead;
} VIP_VI_ATTRIBUTES;

typedef struct {
    VIP_PROTECTION_HANDLE Ptag;
    VIP_BOOLEAN EnableRdmaWrite;
    VIP_BOOLEAN EnableRdmaRead;
} VIP_MEM_ATTRIBUTES;

typedef enum {
    VIP_STATE_IDLE = 0,
    VIP_STATE_CONNECTED = 1,
    VIP_STATE_CONNECT_PENDING = 2,
    VIP_STATE_ERROR = 3
} VIP_VI_STATE;

/* ------------------------------------------------------------------------
 * Descriptors
 * ------------------------------------------------------------------------ */

/* Descriptors must start on this boundary inside registered memory. */
#define VIP_DESCRIPTOR_ALIGNMENT 64

typedef struct {
    VIP_PVOID64 Next;
    VIP_MEM_HANDLE NextHandle;
    VIP_UINT16 SegCount;
    VIP_UINT16 Control;
    VIP_UINT32 Reserved;
    VIP_UINT32 ImmediateData;
    VIP_UINT32 Length;
    VIP_UINT32 Status;
} VIP_CONTROL_SEGMENT;

/* The remote buffer of an RDMA operation. */
typedef struct {
    VIP_PVOID64 Data;
    VIP_MEM_HANDLE Handle;
    VIP_UINT32 Reserved;
} VIP_ADDRESS_SEGMENT;

/* A local buffer. */
typedef struct {
    VIP_PVOID64 Data;
    VIP_MEM_HANDLE Handle;
    VIP_UINT32 Length;
} VIP_DATA_SEGMENT;

typedef union {
    VIP_ADDRESS_SEGMENT Remote;
    VIP_DATA_SEGMENT Local;
} VIP_DESCRIPTOR_SEGMENT;

/*
 * CS.SegCount segments follow the control segment; a program that needs
 * more than two allocates the extra room after the descriptor.  For RDMA,
 * DS[0] is the address segment and the local data segments follow it.
 */
typedef struct {
    VIP_CONTROL_SEGMENT CS;
    VIP_DESCRIPTOR_SEGMENT DS[2];
} VIP_DESCRIPTOR;

/* Control field bits, set by the program. */
#define VIP_CONTROL_OP_SENDRECV 0x0
#define VIP_CONTROL_OP_RDMAWRITE 0x1
#define VIP_CONTROL_OP_RDMAREAD 0x2
#define VIP_CONTROL_OP_RESERVED 0x3
#define VIP_CONTROL_OP_MASK 0x3
#define VIP_CONTROL_IMMEDIATE 0x4
#define VIP_CONTROL_QFENCE 0x8
#define VIP_CONTROL_RESERVED 0xFFF0

/* Status field bits, written by the provider. */
#define VIP_STATUS_DONE 0x1
#define VIP_STATUS_FORMAT_ERROR 0x2
#define VIP_STATUS_PROTECTION_ERROR 0x4
#define VIP_STATUS_LENGTH_ERROR 0x8
#define VIP_STATUS_PARTIAL_ERROR 0x10
#define VIP_STATUS_DESC_FLUSHED_ERROR 0x20
#define VIP_STATUS_TRANSPORT_ERROR 0x40
#define VIP_STATUS_RDMA_PROT_ERROR 0x80
#define VIP_STATUS_REMOTE_DESC_ERROR 0x100
#define VIP_STATUS_ERROR_MASK 0x1FE

#define VIP_STATUS_OP_SEND 0x0
#define VIP_STATUS_OP_RECEIVE 0x10000
#define VIP_STATUS_OP_RDMA_WRITE 0x20000
#define VIP_STATUS_OP_REMOTE_RDMA_WRITE 0x30000
#define VIP_STATUS_OP_RDMA_READ 0x40000
#define VIP_STATUS_OP_MASK 0x70000
#define VIP_STATUS_IMMEDIATE 0x80000
#define VIP_STATUS_RESERVED 0xFFF0FE00

/* ------------------------------------------------------------------------
 * Asynchronous errors
 * ------------------------------------------------------------------------ */

typedef enum {
    VIP_RESOURCE_NIC = 0,
    VIP_RESOURCE_VI = 1,
    VIP_RESOURCE_CQ = 2,
    VIP_RESOURCE_DESCRIPTOR = 3
} VIP_RESOURCE_CODE;

typedef enum {
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
    VIP_ERROR_CATASTROPHIC = 10
} VIP_ERROR_CODE;

typedef struct {
    VIP_NIC_HANDLE NicHandle;
    VIP_VI_HANDLE ViHandle;
    VIP_CQ_HANDLE CQHandle;
    VIP_DESCRIPTOR *DescriptorPtr;
    VIP_ULONG OpCode;
    VIP_RESOURCE_CODE ResourceCode;
    VIP_ERROR_CODE ErrorCode;
} VIP_ERROR_DESCRIPTOR;

/* ------------------------------------------------------------------------
 * Handlers
 * ------------------------------------------------------------------------ */

/* Called for a completed send or receive descriptor (VipSendNotify, VipRecvNotify). */
typedef void (*VIP_VI_NOTIFY_HANDLER)(VIP_PVOID Context, VIP_NIC_HANDLE NicHandle,
                                      VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *Descriptor);

/* Called when a CQ gets an entry: which VI, and whether its receive queue. */
typedef void (*VIP_CQ_NOTIFY_HANDLER)(VIP_PVOID Context, VIP_NIC_HANDLE NicHandle,
                                      VIP_VI_HANDLE ViHandle, VIP_BOOLEAN RecvQueue);

/* Called for an asynchronous error (VipErrorCallback). */
typedef void (*VIP_ERROR_HANDLER)(VIP_PVOID Context, VIP_ERROR_DESCRIPTOR *ErrorDesc);

/* ------------------------------------------------------------------------
 * System management
 * ------------------------------------------------------------------------ */

#define VIP_SMI_AUTODISCOVERY 1

typedef struct {
    VIP_ULONG NumberOfHops;
    VIP_NET_ADDRESS **ADAddrArray;
    VIP_ULONG NumAdAddrs;
} VIP_AUTODISCOVERY_LIST;

/* ------------------------------------------------------------------------
 * Functions
 * ------------------------------------------------------------------------ */

/* NIC */
VIP_RETURN VipOpenNic(const VIP_CHAR *DeviceName, VIP_NIC_HANDLE *NicHandle);
VIP_RETURN VipCloseNic(VIP_NIC_HANDLE NicHandle);
VIP_RETURN VipQueryNic(VIP_NIC_HANDLE NicHandle, VIP_NIC_ATTRIBUTES *NicAttributes);

/* Memory */
VIP_RETURN VipRegisterMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress, VIP_ULONG Length,
                          VIP_MEM_ATTRIBUTES *MemAttributes, VIP_MEM_HANDLE *MemoryHandle);
/* VIP_INVALID_STATE while a posted, not yet completed descriptor names the
 * region or lies in it; after VIP_SUCCESS the provider never touches the
 * region again (openvia: docs/memory.md). */
VIP_RETURN VipDeregisterMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress,
                            VIP_MEM_HANDLE MemoryHandle);
VIP_RETURN VipQueryMem(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress,
                       VIP_MEM_HANDLE MemoryHandle, VIP_MEM_ATTRIBUTES *MemAttributes);
VIP_RETURN VipSetMemAttributes(VIP_NIC_HANDLE NicHandle, VIP_PVOID VirtualAddress,
                               VIP_MEM_HANDLE MemoryHandle, VIP_MEM_ATTRIBUTES *MemAttributes);

/* Errors and management */
VIP_RETURN VipErrorCallback(VIP_NIC_HANDLE NicHandle, VIP_PVOID Context,
                            VIP_ERROR_HANDLER Handler);
VIP_RETURN VipQuerySystemManagementInfo(VIP_NIC_HANDLE NicHandle, VIP_ULONG InfoType,
                                        VIP_PVOID SysManInfo);

/* Protection */
VIP_RETURN VipCreatePtag(VIP_NIC_HANDLE NicHandle, VIP_PROTECTION_HANDLE *ProtectionTag);
VIP_RETURN VipDestroyPtag(VIP_NIC_HANDLE NicHandle, VIP_PROTECTION_HANDLE ProtectionTag);

/* Virtual Interfaces */
VIP_RETURN VipCreateVi(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES *ViAttributes,
                       VIP_CQ_HANDLE SendCQHandle, VIP_CQ_HANDLE RecvCQHandle,
                       VIP_VI_HANDLE *ViHandle);
VIP_RETURN VipDestroyVi(VIP_VI_HANDLE ViHandle);
VIP_RETURN VipQueryVi(VIP_VI_HANDLE ViHandle, VIP_VI_STATE *State,
                      VIP_VI_ATTRIBUTES *ViAttributes, VIP_BOOLEAN *SendQueueEmpty,
                      VIP_BOOLEAN *RecvQueueEmpty);
VIP_RETURN VipSetViAttributes(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES *ViAttributes);

/* Data transfer */
VIP_RETURN VipPostSend(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *DescriptorPtr,
                       VIP_MEM_HANDLE MemoryHandle);
VIP_RETURN VipSendDone(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR **DescriptorPtr);
VIP_RETURN VipSendWait(VIP_VI_HANDLE ViHandle, VIP_ULONG Timeout, VIP_DESCRIPTOR **DescriptorPtr);
VIP_RETURN VipSendNotify(VIP_VI_HANDLE ViHandle, VIP_PVOID Context, VIP_VI_NOTIFY_HANDLER Handler);
VIP_RETURN VipPostRecv(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *DescriptorPtr,
                       VIP_MEM_HANDLE MemoryHandle);
VIP_RETURN VipRecvDone(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR **DescriptorPtr);
VIP_RETURN VipRecvWait(VIP_VI_HANDLE ViHandle, VIP_ULONG Timeout, VIP_DESCRIPTOR **DescriptorPtr);
VIP_RETURN VipRecvNotify(VIP_VI_HANDLE ViHandle, VIP_PVOID Context, VIP_VI_NOTIFY_HANDLER Handler);

/* Completion queues */
VIP_RETURN VipCreateCQ(VIP_NIC_HANDLE NicHandle, VIP_ULONG EntryCount, VIP_CQ_HANDLE *CQHandle);
VIP_RETURN VipDestroyCQ(VIP_CQ_HANDLE CQHandle);
VIP_RETURN VipResizeCQ(VIP_CQ_HANDLE CQHandle, VIP_ULONG EntryCount);
VIP_RETURN VipCQDone(VIP_CQ_HANDLE CQHandle, VIP_VI_HANDLE *ViHandle, VIP_BOOLEAN *RecvQueue);
VIP_RETURN VipCQWait(VIP_CQ_HANDLE CQHandle, VIP_ULONG Timeout, VIP_VI_HANDLE *ViHandle,
                     VIP_BOOLEAN *RecvQueue);
VIP_RETURN VipCQNotify(VIP_CQ_HANDLE CQHandle, VIP_PVOID Context, VIP_CQ_NOTIFY_HANDLER Handler);

/* Client/server connections */
VIP_RETURN VipConnectWait(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr, VIP_ULONG Timeout,
                          VIP_NET_ADDRESS *RemoteAddr, VIP_VI_ATTRIBUTES *RemoteViAttributes,
                          VIP_CONN_HANDLE *ConnHandle);
VIP_RETURN VipConnectAccept(VIP_CONN_HANDLE ConnHandle, VIP_VI_HANDLE ViHandle);
VIP_RETURN VipConnectReject(VIP_CONN_HANDLE ConnHandle);
VIP_RETURN VipConnectRequest(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS *LocalAddr,
                             VIP_NET_ADDRESS *RemoteAddr, VIP_ULONG Timeout,
                             VIP_VI_ATTRIBUTES *RemoteViAttributes);
VIP_RETURN VipDisconnect(VIP_VI_HANDLE ViHandle);

/* Peer-to-peer connections */
VIP_RETURN VipConnectPeerRequest(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS *LocalAddr,
                                 VIP_NET_ADDRESS *RemoteAddr, VIP_ULONG Timeout);
VIP_RETURN VipConnectPeerDone(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES *RemoteViAttributes);
VIP_RETURN VipConnectPeerWait(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES *RemoteViAttributes);

/* Name service */
VIP_RETURN VipNSInit(VIP_NIC_HANDLE NicHandle, VIP_PVOID NSInitInfo);
VIP_RETURN VipNSGetHostByName(VIP_NIC_HANDLE NicHandle, VIP_CHAR *Name, VIP_NET_ADDRESS *Address,
                              VIP_ULONG NameIndex);
VIP_RETURN VipNSGetHostByAddr(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *Address, VIP_CHAR *Name,
                              VIP_ULONG *NameLen);
VIP_RETURN VipNSShutdown(VIP_NIC_HANDLE NicHandle);

#ifdef __cplusplus
}
#endif

#endif /* OPENVIA_VIPL_H */
