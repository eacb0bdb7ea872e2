/*
 * bad_input.c - libvipl must refuse bad arguments cleanly, never crash.
 *
 * Needs the library at run time but no peer: everything happens on one NIC
 * of the device named by argv[1] (default $VIA_DEVICE, else "/dev/via_lo").
 * Prints "ok   <check>" or "FAIL <check>: ..." per check and exits 1 if any
 * check failed.
 *
 * Expectations (the contract the implementation must match):
 *
 * Opening
 *  E1  VipOpenNic("/dev/via_no_such_device", &nic)      != VIP_SUCCESS
 *  E2  VipOpenNic(dev, NULL)                             VIP_INVALID_PARAMETER
 *  E3  VipOpenNic(NULL, &nic) and VipOpenNic("", &nic)   VIP_SUCCESS (the
 *      shared-memory device, an openvia convention); closed again at once.
 *
 * NULL handles: every function given a NULL NIC, VI, CQ or connection
 * handle returns VIP_INVALID_PARAMETER (E4).
 *
 * NULL pointers where the function must read or write through them
 * (attributes, out-handles, descriptor pointers, addresses, names) return
 * VIP_INVALID_PARAMETER (E5). VipQueryVi needs all four out-pointers.
 * VipCreateVi with NULL send/receive CQ is valid (no CQ).
 *
 * Stale handles: a handle used after it was destroyed or closed returns
 * VIP_INVALID_PARAMETER; it must not touch freed memory (ASan run) (E6):
 *  VI after VipDestroyVi: VipQueryVi, VipPostRecv, VipDestroyVi again;
 *  CQ after VipDestroyCQ: VipCQDone, VipDestroyCQ again;
 *  ptag after VipDestroyPtag: VipDestroyPtag again -> VIP_INVALID_PARAMETER,
 *      VipCreateVi / VipRegisterMem with it -> VIP_INVALID_PTAG or
 *      VIP_INVALID_PARAMETER;
 *  NIC after VipCloseNic: VipQueryNic, VipCloseNic again.
 *
 * Protection and memory (E7)
 *  VipRegisterMem with a ptag of another NIC   VIP_INVALID_PTAG or VIP_INVALID_PARAMETER
 *  VipCreateVi with a ptag of another NIC      VIP_INVALID_PTAG or VIP_INVALID_PARAMETER
 *  VipRegisterMem with length 0 or address NULL             VIP_INVALID_PARAMETER
 *  VipDeregisterMem with an unknown handle                  VIP_INVALID_PARAMETER
 *  VipDeregisterMem with a known handle, wrong address      VIP_INVALID_PARAMETER
 *  VipQueryMem after deregistering                          VIP_INVALID_PARAMETER
 *  VipDestroyPtag while memory or a VI still uses it        != VIP_SUCCESS
 *
 * Descriptors, checked at post time on an idle VI (parameter checks come
 * before state checks; posting receives on an idle VI is legal VIA) (E8)
 *  VipPostRecv / VipPostSend of a descriptor not 64-byte aligned   VIP_INVALID_PARAMETER
 *  VipPostRecv / VipPostSend with a memory handle whose region does not
 *      contain the descriptor                                        VIP_INVALID_PARAMETER
 *  VipPostRecv with an unknown memory handle                       VIP_INVALID_PARAMETER
 *
 * VI and CQ creation (E9)
 *  VipCreateVi with ReliabilityLevel 0 or 0x8                VIP_INVALID_RELIABILITY_LEVEL
 *  VipCreateVi with MaxTransferSize > NIC MaxTransferSize    VIP_INVALID_MTU
 *  VipCreateCQ with 0 entries                                 VIP_INVALID_PARAMETER
 *  VipDestroyCQ while a VI uses it                            != VIP_SUCCESS
 *
 * Empty queues and timeouts (E10)
 *  VipRecvDone / VipSendDone on an empty queue     VIP_NOT_DONE
 *  VipRecvWait(vi, 10 ms) with nothing to receive  VIP_TIMEOUT
 *  VipCQDone on an empty CQ                        VIP_NOT_DONE
 *  VipCQWait(cq, 10 ms) on an empty CQ             VIP_TIMEOUT
 *  VipConnectWait(nic, addr, 50 ms, ...) without a client           VIP_TIMEOUT
 *  VipConnectRequest(vi, ..., 200 ms) to a discriminator nobody waits on
 *      VIP_TIMEOUT, VIP_NO_MATCH or VIP_REJECT
 *  VipConnectWait with a discriminator longer than MaxDiscriminatorLen
 *                                                  VIP_INVALID_PARAMETER
 *
 * Name service and management (E11)
 *  VipNSGetHostByName(nic, "no-such-host.invalid", ...)   VIP_ERROR_NAMESERVICE
 *  VipQuerySystemManagementInfo(nic, 99, buf)              VIP_INVALID_PARAMETER
 *
 * Memory in use (E13): a receive posted on an idle VI, its descriptor in
 * region C, its buffer in region D
 *  VipDeregisterMem of C or of D while it is posted       VIP_INVALID_STATE
 *  after VipDestroyVi (the receive is abandoned)           VIP_SUCCESS for both
 *
 * Sanity (E12): VipQueryNic reports NicAddressLen > 0, a LocalNicAddress,
 * MaxDiscriminatorLen > 0, MaxSegmentsPerDesc >= 2, MaxTransferSize > 0,
 * a non-empty ReliabilityLevelSupport, and a NUL-terminated Name.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vipl.h"

static int failures;
static int checks;

static void report(int ok, const char *what, VIP_RETURN got, const char *expected)
{
    checks++;
    if (ok) {
        printf("ok   %s\n", what);
    } else {
        failures++;
        printf("FAIL %s: returned %d, expected %s\n", what, (int)got, expected);
    }
    fflush(stdout);
}

/* Evaluates the call once, then compares against one or two codes. */
#define EXPECT_RET(call, want)                                                                  \
    do {                                                                                        \
        VIP_RETURN r_ = (call);                                                                 \
        report(r_ == (want), #call, r_, #want);                                                 \
    } while (0)
#define EXPECT_EITHER(call, want1, want2)                                                       \
    do {                                                                                        \
        VIP_RETURN r_ = (call);                                                                 \
        report(r_ == (want1) || r_ == (want2), #call, r_, #want1 " or " #want2);                \
    } while (0)
#define EXPECT_FAILS(call)                                                                      \
    do {                                                                                        \
        VIP_RETURN r_ = (call);                                                                 \
        report(r_ != VIP_SUCCESS, #call, r_, "anything but VIP_SUCCESS");                       \
    } while (0)
#define EXPECT_TRUE(cond)                                                                       \
    do {                                                                                        \
        checks++;                                                                               \
        if (cond) {                                                                             \
            printf("ok   %s\n", #cond);                                                         \
        } else {                                                                                \
            failures++;                                                                         \
            printf("FAIL %s\n", #cond);                                                         \
        }                                                                                       \
    } while (0)

/* Setup steps that must succeed for the remaining checks to mean anything. */
static void must(VIP_RETURN ret, const char *what)
{
    if (ret != VIP_SUCCESS) {
        printf("FAIL setup: %s returned %d\n", what, (int)ret);
        exit(1);
    }
}
#define MUST(call) must((call), #call)

#define EXPECT_NULL_PARAM(call) EXPECT_RET(call, VIP_INVALID_PARAMETER)

static VIP_VI_ATTRIBUTES vi_attrs(VIP_PROTECTION_HANDLE ptag, VIP_RELIABILITY_LEVEL level,
                                  VIP_ULONG mtu)
{
    VIP_VI_ATTRIBUTES a;

    memset(&a, 0, sizeof(a));
    a.ReliabilityLevel = level;
    a.MaxTransferSize = mtu;
    a.Ptag = ptag;
    return a;
}

static VIP_NET_ADDRESS *make_address(const VIP_NIC_ATTRIBUTES *na, const char *disc,
                                     size_t disc_len)
{
    VIP_NET_ADDRESS *addr = calloc(1, sizeof(*addr) + na->NicAddressLen + disc_len);

    if (addr == NULL)
        exit(1);
    addr->HostAddressLen = na->NicAddressLen;
    addr->DiscriminatorLen = (VIP_UINT16)disc_len;
    memcpy(addr->HostAddress, na->LocalNicAddress, na->NicAddressLen);
    for (size_t i = 0; i < disc_len; i++)
        addr->HostAddress[na->NicAddressLen + i] = (VIP_UINT8)disc[i % strlen(disc)];
    return addr;
}

static void check_open(const char *dev)
{
    VIP_NIC_HANDLE nic = NULL;

    EXPECT_FAILS(VipOpenNic("/dev/via_no_such_device", &nic));
    EXPECT_NULL_PARAM(VipOpenNic(dev, NULL));
    EXPECT_RET(VipOpenNic(NULL, &nic), VIP_SUCCESS);
    if (nic != NULL)
        EXPECT_RET(VipCloseNic(nic), VIP_SUCCESS);
    nic = NULL;
    EXPECT_RET(VipOpenNic("", &nic), VIP_SUCCESS);
    if (nic != NULL)
        EXPECT_RET(VipCloseNic(nic), VIP_SUCCESS);
}

static void check_null_handles(void)
{
    VIP_NIC_ATTRIBUTES na;
    VIP_VI_ATTRIBUTES va;
    VIP_MEM_ATTRIBUTES ma;
    VIP_VI_STATE state;
    VIP_BOOLEAN b1, b2;
    VIP_DESCRIPTOR *desc;
    VIP_VI_HANDLE vi;
    VIP_CQ_HANDLE cq;
    VIP_CONN_HANDLE conn;
    VIP_PROTECTION_HANDLE ptag;
    VIP_MEM_HANDLE mh;
    VIP_NET_ADDRESS addr[4];
    VIP_ULONG len = sizeof(na.Name);
    char buf[64], name[] = "localhost";

    memset(&va, 0, sizeof(va));
    memset(&ma, 0, sizeof(ma));
    memset(addr, 0, sizeof(addr));
    EXPECT_NULL_PARAM(VipCloseNic(NULL));
    EXPECT_NULL_PARAM(VipQueryNic(NULL, &na));
    EXPECT_NULL_PARAM(VipRegisterMem(NULL, buf, sizeof(buf), &ma, &mh));
    EXPECT_NULL_PARAM(VipDeregisterMem(NULL, buf, 1));
    EXPECT_NULL_PARAM(VipQueryMem(NULL, buf, 1, &ma));
    EXPECT_NULL_PARAM(VipSetMemAttributes(NULL, buf, 1, &ma));
    EXPECT_NULL_PARAM(VipErrorCallback(NULL, NULL, NULL));
    EXPECT_NULL_PARAM(VipQuerySystemManagementInfo(NULL, VIP_SMI_AUTODISCOVERY, buf));
    EXPECT_NULL_PARAM(VipCreatePtag(NULL, &ptag));
    EXPECT_NULL_PARAM(VipDestroyPtag(NULL, NULL));
    EXPECT_NULL_PARAM(VipCreateVi(NULL, &va, NULL, NULL, &vi));
    EXPECT_NULL_PARAM(VipDestroyVi(NULL));
    EXPECT_NULL_PARAM(VipQueryVi(NULL, &state, &va, &b1, &b2));
    EXPECT_NULL_PARAM(VipSetViAttributes(NULL, &va));
    EXPECT_NULL_PARAM(VipPostSend(NULL, NULL, 0));
    EXPECT_NULL_PARAM(VipSendDone(NULL, &desc));
    EXPECT_NULL_PARAM(VipSendWait(NULL, 0, &desc));
    EXPECT_NULL_PARAM(VipSendNotify(NULL, NULL, NULL));
    EXPECT_NULL_PARAM(VipPostRecv(NULL, NULL, 0));
    EXPECT_NULL_PARAM(VipRecvDone(NULL, &desc));
    EXPECT_NULL_PARAM(VipRecvWait(NULL, 0, &desc));
    EXPECT_NULL_PARAM(VipRecvNotify(NULL, NULL, NULL));
    EXPECT_NULL_PARAM(VipCreateCQ(NULL, 4, &cq));
    EXPECT_NULL_PARAM(VipDestroyCQ(NULL));
    EXPECT_NULL_PARAM(VipResizeCQ(NULL, 8));
    EXPECT_NULL_PARAM(VipCQDone(NULL, &vi, &b1));
    EXPECT_NULL_PARAM(VipCQWait(NULL, 0, &vi, &b1));
    EXPECT_NULL_PARAM(VipCQNotify(NULL, NULL, NULL));
    EXPECT_NULL_PARAM(VipConnectWait(NULL, addr, 0, addr, &va, &conn));
    EXPECT_NULL_PARAM(VipConnectAccept(NULL, NULL));
    EXPECT_NULL_PARAM(VipConnectReject(NULL));
    EXPECT_NULL_PARAM(VipConnectRequest(NULL, addr, addr, 0, &va));
    EXPECT_NULL_PARAM(VipDisconnect(NULL));
    EXPECT_NULL_PARAM(VipConnectPeerRequest(NULL, addr, addr, 0));
    EXPECT_NULL_PARAM(VipConnectPeerDone(NULL, &va));
    EXPECT_NULL_PARAM(VipConnectPeerWait(NULL, &va));
    EXPECT_NULL_PARAM(VipNSInit(NULL, NULL));
    EXPECT_NULL_PARAM(VipNSGetHostByName(NULL, name, addr, 0));
    EXPECT_NULL_PARAM(VipNSGetHostByAddr(NULL, addr, buf, &len));
    EXPECT_NULL_PARAM(VipNSShutdown(NULL));
}

/* The NIC under test and the objects the later checks post against. */
struct fixture {
    VIP_NIC_HANDLE nic;
    VIP_NIC_ATTRIBUTES na;
    VIP_PROTECTION_HANDLE ptag;
    VIP_RELIABILITY_LEVEL level;
    unsigned char *region_a; /* descriptors and buffers */
    unsigned char *region_b; /* a second region, for mismatched handles */
    VIP_MEM_HANDLE mh_a, mh_b;
    VIP_VI_HANDLE vi;
    VIP_CQ_HANDLE cq;
};

#define REGION_SIZE 8192

static unsigned char *alloc_region(void)
{
    void *mem = NULL;

    if (posix_memalign(&mem, 4096, REGION_SIZE) != 0)
        exit(1);
    memset(mem, 0, REGION_SIZE);
    return mem;
}

static void setup(struct fixture *f, const char *dev)
{
    VIP_MEM_ATTRIBUTES ma;
    VIP_VI_ATTRIBUTES va;

    MUST(VipOpenNic(dev, &f->nic));
    MUST(VipQueryNic(f->nic, &f->na));
    /* E12 */
    EXPECT_TRUE(f->na.NicAddressLen > 0 && f->na.LocalNicAddress != NULL);
    EXPECT_TRUE(f->na.MaxDiscriminatorLen > 0);
    EXPECT_TRUE(f->na.MaxSegmentsPerDesc >= 2);
    EXPECT_TRUE(f->na.MaxTransferSize > 0);
    EXPECT_TRUE((f->na.ReliabilityLevelSupport &
                 (VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY |
                  VIP_SERVICE_RELIABLE_RECEPTION)) != 0);
    EXPECT_TRUE(memchr(f->na.Name, '\0', sizeof(f->na.Name)) != NULL);
    if (f->na.NicAddressLen == 0 || f->na.LocalNicAddress == NULL)
        exit(1);

    f->level = (f->na.ReliabilityLevelSupport & VIP_SERVICE_RELIABLE_DELIVERY)
                   ? VIP_SERVICE_RELIABLE_DELIVERY
                   : VIP_SERVICE_UNRELIABLE;
    MUST(VipCreatePtag(f->nic, &f->ptag));
    f->region_a = alloc_region();
    f->region_b = alloc_region();
    memset(&ma, 0, sizeof(ma));
    ma.Ptag = f->ptag;
    MUST(VipRegisterMem(f->nic, f->region_a, REGION_SIZE, &ma, &f->mh_a));
    MUST(VipRegisterMem(f->nic, f->region_b, REGION_SIZE, &ma, &f->mh_b));
    va = vi_attrs(f->ptag, f->level, 1024);
    MUST(VipCreateVi(f->nic, &va, NULL, NULL, &f->vi));
    MUST(VipCreateCQ(f->nic, 4, &f->cq));
}

static void teardown(struct fixture *f)
{
    EXPECT_RET(VipDestroyCQ(f->cq), VIP_SUCCESS);
    EXPECT_RET(VipDestroyVi(f->vi), VIP_SUCCESS);
    EXPECT_RET(VipDeregisterMem(f->nic, f->region_b, f->mh_b), VIP_SUCCESS);
    EXPECT_RET(VipDeregisterMem(f->nic, f->region_a, f->mh_a), VIP_SUCCESS);
    EXPECT_RET(VipDestroyPtag(f->nic, f->ptag), VIP_SUCCESS);
    EXPECT_RET(VipCloseNic(f->nic), VIP_SUCCESS);
    free(f->region_a);
    free(f->region_b);
}

/* E5 */
static void check_null_pointers(struct fixture *f)
{
    VIP_VI_ATTRIBUTES va = vi_attrs(f->ptag, f->level, 1024);
    VIP_MEM_ATTRIBUTES ma;
    VIP_MEM_HANDLE mh;
    VIP_VI_STATE state;
    VIP_BOOLEAN b1, b2;
    VIP_VI_HANDLE vi;
    VIP_CONN_HANDLE conn;
    VIP_NET_ADDRESS *local = make_address(&f->na, "bad_input_null", 14);
    VIP_NET_ADDRESS *remote = make_address(&f->na, "x", f->na.MaxDiscriminatorLen);
    char name[] = "localhost";
    char host[64];
    VIP_ULONG len = sizeof(host);

    memset(&ma, 0, sizeof(ma));
    ma.Ptag = f->ptag;
    EXPECT_NULL_PARAM(VipQueryNic(f->nic, NULL));
    EXPECT_NULL_PARAM(VipCreatePtag(f->nic, NULL));
    EXPECT_NULL_PARAM(VipRegisterMem(f->nic, f->region_a, REGION_SIZE, NULL, &mh));
    EXPECT_NULL_PARAM(VipRegisterMem(f->nic, f->region_a, REGION_SIZE, &ma, NULL));
    EXPECT_NULL_PARAM(VipQueryMem(f->nic, f->region_a, f->mh_a, NULL));
    EXPECT_NULL_PARAM(VipSetMemAttributes(f->nic, f->region_a, f->mh_a, NULL));
    EXPECT_NULL_PARAM(VipCreateVi(f->nic, NULL, NULL, NULL, &vi));
    EXPECT_NULL_PARAM(VipCreateVi(f->nic, &va, NULL, NULL, NULL));
    EXPECT_NULL_PARAM(VipQueryVi(f->vi, NULL, &va, &b1, &b2));
    EXPECT_NULL_PARAM(VipQueryVi(f->vi, &state, NULL, &b1, &b2));
    EXPECT_NULL_PARAM(VipQueryVi(f->vi, &state, &va, NULL, &b2));
    EXPECT_NULL_PARAM(VipQueryVi(f->vi, &state, &va, &b1, NULL));
    EXPECT_NULL_PARAM(VipSetViAttributes(f->vi, NULL));
    EXPECT_NULL_PARAM(VipPostSend(f->vi, NULL, f->mh_a));
    EXPECT_NULL_PARAM(VipPostRecv(f->vi, NULL, f->mh_a));
    EXPECT_NULL_PARAM(VipSendDone(f->vi, NULL));
    EXPECT_NULL_PARAM(VipSendWait(f->vi, 0, NULL));
    EXPECT_NULL_PARAM(VipRecvDone(f->vi, NULL));
    EXPECT_NULL_PARAM(VipRecvWait(f->vi, 0, NULL));
    EXPECT_NULL_PARAM(VipCreateCQ(f->nic, 4, NULL));
    EXPECT_NULL_PARAM(VipCQDone(f->cq, NULL, &b1));
    EXPECT_NULL_PARAM(VipCQDone(f->cq, &vi, NULL));
    EXPECT_NULL_PARAM(VipCQWait(f->cq, 0, NULL, &b1));
    EXPECT_NULL_PARAM(VipCQWait(f->cq, 0, &vi, NULL));
    EXPECT_NULL_PARAM(VipConnectWait(f->nic, NULL, 0, remote, &va, &conn));
    EXPECT_NULL_PARAM(VipConnectWait(f->nic, local, 0, remote, &va, NULL));
    EXPECT_NULL_PARAM(VipConnectRequest(f->vi, NULL, remote, 0, &va));
    EXPECT_NULL_PARAM(VipConnectRequest(f->vi, local, NULL, 0, &va));
    EXPECT_NULL_PARAM(VipNSGetHostByName(f->nic, NULL, remote, 0));
    EXPECT_NULL_PARAM(VipNSGetHostByName(f->nic, name, NULL, 0));
    EXPECT_NULL_PARAM(VipNSGetHostByAddr(f->nic, NULL, host, &len));
    EXPECT_NULL_PARAM(VipQuerySystemManagementInfo(f->nic, VIP_SMI_AUTODISCOVERY, NULL));
    free(local);
    free(remote);
}

/* E6 and the foreign-NIC half of E7 */
static void check_stale_and_foreign(struct fixture *f, const char *dev)
{
    VIP_VI_ATTRIBUTES va = vi_attrs(f->ptag, f->level, 1024);
    VIP_MEM_ATTRIBUTES ma;
    VIP_NIC_ATTRIBUTES na;
    VIP_VI_STATE state;
    VIP_BOOLEAN b1, b2;
    VIP_VI_HANDLE vi, vi_other;
    VIP_CQ_HANDLE cq;
    VIP_PROTECTION_HANDLE ptag, ptag_other;
    VIP_NIC_HANDLE nic_other;
    VIP_MEM_HANDLE mh;

    MUST(VipCreateVi(f->nic, &va, NULL, NULL, &vi));
    MUST(VipDestroyVi(vi));
    EXPECT_NULL_PARAM(VipQueryVi(vi, &state, &va, &b1, &b2));
    EXPECT_NULL_PARAM(VipPostRecv(vi, (VIP_DESCRIPTOR *)f->region_a, f->mh_a));
    EXPECT_NULL_PARAM(VipDestroyVi(vi));

    MUST(VipCreateCQ(f->nic, 4, &cq));
    MUST(VipDestroyCQ(cq));
    EXPECT_NULL_PARAM(VipCQDone(cq, &vi, &b1));
    EXPECT_NULL_PARAM(VipDestroyCQ(cq));

    MUST(VipCreatePtag(f->nic, &ptag));
    MUST(VipDestroyPtag(f->nic, ptag));
    EXPECT_NULL_PARAM(VipDestroyPtag(f->nic, ptag));
    va.Ptag = ptag;
    EXPECT_EITHER(VipCreateVi(f->nic, &va, NULL, NULL, &vi), VIP_INVALID_PTAG,
                  VIP_INVALID_PARAMETER);
    memset(&ma, 0, sizeof(ma));
    ma.Ptag = ptag;
    EXPECT_EITHER(VipRegisterMem(f->nic, f->region_b, REGION_SIZE, &ma, &mh), VIP_INVALID_PTAG,
                  VIP_INVALID_PARAMETER);

    /* A second NIC: its ptag means nothing to the first. */
    MUST(VipOpenNic(dev, &nic_other));
    MUST(VipCreatePtag(nic_other, &ptag_other));
    ma.Ptag = ptag_other;
    EXPECT_EITHER(VipRegisterMem(f->nic, f->region_b, REGION_SIZE, &ma, &mh), VIP_INVALID_PTAG,
                  VIP_INVALID_PARAMETER);
    va.Ptag = ptag_other;
    EXPECT_EITHER(VipCreateVi(f->nic, &va, NULL, NULL, &vi_other), VIP_INVALID_PTAG,
                  VIP_INVALID_PARAMETER);
    EXPECT_RET(VipDestroyPtag(nic_other, ptag_other), VIP_SUCCESS);
    EXPECT_RET(VipCloseNic(nic_other), VIP_SUCCESS);
    EXPECT_NULL_PARAM(VipQueryNic(nic_other, &na));
    EXPECT_NULL_PARAM(VipCloseNic(nic_other));
}

/* The rest of E7 */
static void check_memory(struct fixture *f)
{
    VIP_MEM_ATTRIBUTES ma;
    VIP_MEM_HANDLE mh;
    unsigned char *region_c = alloc_region();

    memset(&ma, 0, sizeof(ma));
    ma.Ptag = f->ptag;
    EXPECT_NULL_PARAM(VipRegisterMem(f->nic, region_c, 0, &ma, &mh));
    EXPECT_NULL_PARAM(VipRegisterMem(f->nic, NULL, REGION_SIZE, &ma, &mh));
    EXPECT_NULL_PARAM(VipDeregisterMem(f->nic, f->region_a, 0xdeadbeefu));
    EXPECT_NULL_PARAM(VipDeregisterMem(f->nic, f->region_a + 64, f->mh_a));
    MUST(VipRegisterMem(f->nic, region_c, REGION_SIZE, &ma, &mh));
    EXPECT_RET(VipQueryMem(f->nic, region_c, mh, &ma), VIP_SUCCESS);
    EXPECT_TRUE(ma.Ptag == f->ptag);
    EXPECT_RET(VipDeregisterMem(f->nic, region_c, mh), VIP_SUCCESS);
    EXPECT_NULL_PARAM(VipQueryMem(f->nic, region_c, mh, &ma));
    EXPECT_FAILS(VipDestroyPtag(f->nic, f->ptag));
    free(region_c);
}

/* E13: the memory of a posted descriptor stays registered. */
static void check_memory_in_use(struct fixture *f)
{
    VIP_VI_ATTRIBUTES va = vi_attrs(f->ptag, f->level, 1024);
    VIP_MEM_ATTRIBUTES ma;
    VIP_MEM_HANDLE mh_c, mh_d;
    VIP_VI_HANDLE vi;
    unsigned char *region_c = alloc_region();
    unsigned char *region_d = alloc_region();
    VIP_DESCRIPTOR *desc = (VIP_DESCRIPTOR *)region_c;

    memset(&ma, 0, sizeof(ma));
    ma.Ptag = f->ptag;
    MUST(VipRegisterMem(f->nic, region_c, REGION_SIZE, &ma, &mh_c));
    MUST(VipRegisterMem(f->nic, region_d, REGION_SIZE, &ma, &mh_d));
    MUST(VipCreateVi(f->nic, &va, NULL, NULL, &vi));
    memset(desc, 0, sizeof(*desc));
    desc->CS.SegCount = 1;
    desc->DS[0].Local.Data.Address = region_d;
    desc->DS[0].Local.Handle = mh_d;
    desc->DS[0].Local.Length = 64;
    MUST(VipPostRecv(vi, desc, mh_c));
    EXPECT_RET(VipDeregisterMem(f->nic, region_c, mh_c), VIP_INVALID_STATE);
    EXPECT_RET(VipDeregisterMem(f->nic, region_d, mh_d), VIP_INVALID_STATE);
    EXPECT_RET(VipDestroyVi(vi), VIP_SUCCESS);
    EXPECT_RET(VipDeregisterMem(f->nic, region_c, mh_c), VIP_SUCCESS);
    EXPECT_RET(VipDeregisterMem(f->nic, region_d, mh_d), VIP_SUCCESS);
    free(region_c);
    free(region_d);
}

/* E8: a zeroed descriptor with one empty data segment in region A. */
static VIP_DESCRIPTOR *prepare_desc(struct fixture *f, size_t offset)
{
    VIP_DESCRIPTOR *desc = (VIP_DESCRIPTOR *)(f->region_a + offset);

    memset(desc, 0, sizeof(*desc));
    desc->CS.SegCount = 1;
    desc->DS[0].Local.Data.Address = f->region_a + 4096;
    desc->DS[0].Local.Handle = f->mh_a;
    desc->DS[0].Local.Length = 64;
    desc->CS.Length = 64;
    return desc;
}

static void check_descriptors(struct fixture *f)
{
    VIP_DESCRIPTOR *aligned = prepare_desc(f, 0);
    VIP_DESCRIPTOR *unaligned = prepare_desc(f, 128 + 8);

    EXPECT_NULL_PARAM(VipPostRecv(f->vi, unaligned, f->mh_a));
    EXPECT_NULL_PARAM(VipPostSend(f->vi, unaligned, f->mh_a));
    EXPECT_NULL_PARAM(VipPostRecv(f->vi, aligned, f->mh_b));
    EXPECT_NULL_PARAM(VipPostSend(f->vi, aligned, f->mh_b));
    EXPECT_NULL_PARAM(VipPostRecv(f->vi, aligned, 0xdeadbeefu));
}

/* E9 */
static void check_creation(struct fixture *f)
{
    VIP_VI_ATTRIBUTES va;
    VIP_VI_HANDLE vi;
    VIP_CQ_HANDLE cq;

    va = vi_attrs(f->ptag, 0, 1024);
    EXPECT_RET(VipCreateVi(f->nic, &va, NULL, NULL, &vi), VIP_INVALID_RELIABILITY_LEVEL);
    va = vi_attrs(f->ptag, 0x8, 1024);
    EXPECT_RET(VipCreateVi(f->nic, &va, NULL, NULL, &vi), VIP_INVALID_RELIABILITY_LEVEL);
    if (f->na.MaxTransferSize < VIP_INFINITE) {
        va = vi_attrs(f->ptag, f->level, f->na.MaxTransferSize + 1);
        EXPECT_RET(VipCreateVi(f->nic, &va, NULL, NULL, &vi), VIP_INVALID_MTU);
    }
    EXPECT_NULL_PARAM(VipCreateCQ(f->nic, 0, &cq));

    va = vi_attrs(f->ptag, f->level, 1024);
    MUST(VipCreateVi(f->nic, &va, NULL, f->cq, &vi));
    EXPECT_FAILS(VipDestroyCQ(f->cq));
    EXPECT_RET(VipDestroyVi(vi), VIP_SUCCESS);
}

/* E10 and E11 */
static void check_empty_and_timeouts(struct fixture *f)
{
    VIP_VI_ATTRIBUTES va = vi_attrs(f->ptag, f->level, 1024);
    VIP_DESCRIPTOR *desc;
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN is_recv;
    VIP_CONN_HANDLE conn;
    VIP_NET_ADDRESS *local = make_address(&f->na, "bad_input_wait", 14);
    VIP_NET_ADDRESS *nobody = make_address(&f->na, "bad_input_nobody", 16);
    VIP_NET_ADDRESS *too_long = make_address(&f->na, "x", (size_t)f->na.MaxDiscriminatorLen + 1);
    VIP_NET_ADDRESS *out = make_address(&f->na, "x", f->na.MaxDiscriminatorLen);
    char unknown[] = "no-such-host.invalid";
    char info[256];
    VIP_RETURN ret;

    /* Also proves that the refused posts of E8 queued nothing. */
    EXPECT_RET(VipRecvDone(f->vi, &desc), VIP_NOT_DONE);
    EXPECT_RET(VipSendDone(f->vi, &desc), VIP_NOT_DONE);
    EXPECT_RET(VipRecvWait(f->vi, 10, &desc), VIP_TIMEOUT);
    EXPECT_RET(VipCQDone(f->cq, &vi, &is_recv), VIP_NOT_DONE);
    EXPECT_RET(VipCQWait(f->cq, 10, &vi, &is_recv), VIP_TIMEOUT);
    EXPECT_RET(VipConnectWait(f->nic, local, 50, out, &va, &conn), VIP_TIMEOUT);
    EXPECT_NULL_PARAM(VipConnectWait(f->nic, too_long, 50, out, &va, &conn));

    MUST(VipCreateVi(f->nic, &va, NULL, NULL, &vi));
    ret = VipConnectRequest(vi, local, nobody, 200, &va);
    report(ret == VIP_TIMEOUT || ret == VIP_NO_MATCH || ret == VIP_REJECT,
           "VipConnectRequest(vi, local, nobody, 200, &va)", ret,
           "VIP_TIMEOUT, VIP_NO_MATCH or VIP_REJECT");
    EXPECT_RET(VipDestroyVi(vi), VIP_SUCCESS);

    EXPECT_RET(VipNSGetHostByName(f->nic, unknown, out, 0), VIP_ERROR_NAMESERVICE);
    EXPECT_NULL_PARAM(VipQuerySystemManagementInfo(f->nic, 99, info));
    free(local);
    free(nobody);
    free(too_long);
    free(out);
}

int main(int argc, char **argv)
{
    const char *env = getenv("VIA_DEVICE");
    const char *dev = argc > 1 ? argv[1] : (env != NULL && env[0] != '\0') ? env : "/dev/via_lo";
    struct fixture f;

    memset(&f, 0, sizeof(f));
    check_open(dev);
    check_null_handles();
    setup(&f, dev);
    check_null_pointers(&f);
    check_stale_and_foreign(&f, dev);
    check_memory(&f);
    check_memory_in_use(&f);
    check_descriptors(&f);
    check_creation(&f);
    check_empty_and_timeouts(&f);
    teardown(&f);

    printf("bad_input: %d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
