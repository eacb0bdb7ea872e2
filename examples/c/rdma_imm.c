/*
 * rdma_imm - RDMA write with immediate data, RDMA write, RDMA read.
 *
 * The server registers a target buffer with RDMA enabled and tells the
 * client its address and memory handle in an ordinary send.  Then:
 *   1. the client RDMA-writes the whole buffer with immediate data; the
 *      write consumes a receive descriptor on the server, which completes
 *      with VIP_STATUS_OP_REMOTE_RDMA_WRITE | VIP_STATUS_IMMEDIATE, and the
 *      server checks the immediate value and the buffer, then answers
 *      CHECKED (a later write could otherwise land before it has looked);
 *   2. the client RDMA-writes the second half without immediate data and
 *      then sends WRITTEN; ordering on the VI means the server, on receiving
 *      WRITTEN, sees both halves as written;
 *   3. the server fills the buffer anew and sends READ_NOW; the client
 *      RDMA-reads it back and checks it (when the NIC supports RDMA read at
 *      the VI's reliability level, else the step is reported as skipped);
 *   4. DONE / BYE end the exchange.
 *
 *   rdma_imm -s [-D dev] [-d disc] [-m size]
 *   rdma_imm -c host [-D dev] [-d disc] [-m size]
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vipl.h"
#include "vipl_example.h"

#define USAGE "rdma_imm -s | -c HOST [-D DEVICE] [-d DISC] [-m SIZE]"
#define RECV_DESCS 2
#define WRITE_IMMEDIATE 0xC0FFEE01u
#define SEED_WRITE_ALL 11u
#define SEED_WRITE_HALF 22u
#define SEED_READ 33u

enum msg_type { MSG_INFO = 1, MSG_CHECKED, MSG_WRITTEN, MSG_READ_NOW, MSG_DONE, MSG_BYE };

struct ctrl_msg {
    uint32_t type;
    uint32_t handle;   /* MSG_INFO: memory handle of the target buffer */
    uint64_t address;  /* MSG_INFO: its address */
    uint64_t length;   /* MSG_INFO: its length */
    uint32_t rdma_read; /* MSG_INFO: whether the VIs allow RDMA read */
    uint32_t pad;
};

/* Descriptor slots: receives, then the send/RDMA descriptor. */
#define SEND_SLOT RECV_DESCS

struct endpoint {
    VIP_NIC_HANDLE nic;
    VIP_NIC_ATTRIBUTES attrs;
    VIP_PROTECTION_HANDLE ptag;
    VIP_VI_HANDLE vi;
    int rdma_read;
    VIP_DESCRIPTOR *descs;
    VIP_MEM_HANDLE descs_handle;
    struct ctrl_msg *msgs; /* one per descriptor slot */
    VIP_MEM_HANDLE msgs_handle;
    unsigned char *data; /* server: RDMA target; client: RDMA source and sink */
    VIP_MEM_HANDLE data_handle;
    size_t size;
};

static void post_recv(struct endpoint *ep, int slot)
{
    example_fill_desc(&ep->descs[slot], &ep->msgs[slot], ep->msgs_handle, sizeof(struct ctrl_msg));
    VIP_CHECK(VipPostRecv(ep->vi, &ep->descs[slot], ep->descs_handle));
}

static VIP_DESCRIPTOR *wait_recv(struct endpoint *ep, VIP_UINT32 status_op, const char *what)
{
    VIP_DESCRIPTOR *desc = NULL;
    long slot;

    VIP_CHECK(VipRecvWait(ep->vi, EXAMPLE_TIMEOUT_MS, &desc));
    slot = desc - ep->descs;
    if (slot < 0 || slot >= RECV_DESCS)
        example_die("%s: receive returned a descriptor that was never posted", what);
    example_expect_done(desc, status_op, what);
    return desc;
}

/* Receives a control message of the given type and reposts its descriptor. */
static struct ctrl_msg recv_msg(struct endpoint *ep, uint32_t type)
{
    VIP_DESCRIPTOR *desc = wait_recv(ep, VIP_STATUS_OP_RECEIVE, "control message");
    int slot = (int)(desc - ep->descs);
    struct ctrl_msg msg = ep->msgs[slot];

    if (desc->CS.Length != sizeof(msg))
        example_die("control message of %u bytes", (unsigned)desc->CS.Length);
    if (msg.type != type)
        example_die("got control message %u, expected %u", (unsigned)msg.type, (unsigned)type);
    post_recv(ep, slot);
    return msg;
}

static void post_and_wait(struct endpoint *ep, VIP_DESCRIPTOR *desc, VIP_UINT32 status_op,
                          const char *what)
{
    VIP_DESCRIPTOR *done = NULL;

    VIP_CHECK(VipPostSend(ep->vi, desc, ep->descs_handle));
    VIP_CHECK(VipSendWait(ep->vi, EXAMPLE_TIMEOUT_MS, &done));
    if (done != desc)
        example_die("%s: VipSendWait returned a different descriptor", what);
    example_expect_done(done, status_op, what);
}

static void send_msg(struct endpoint *ep, const struct ctrl_msg *msg)
{
    VIP_DESCRIPTOR *desc = &ep->descs[SEND_SLOT];

    ep->msgs[SEND_SLOT] = *msg;
    example_fill_desc(desc, &ep->msgs[SEND_SLOT], ep->msgs_handle, sizeof(*msg));
    post_and_wait(ep, desc, VIP_STATUS_OP_SEND, "send");
}

/* An RDMA descriptor: DS[0] names the remote buffer, DS[1] the local one. */
static void rdma(struct endpoint *ep, VIP_UINT16 control, const struct ctrl_msg *target,
                 size_t offset, unsigned char *local, size_t len, VIP_UINT32 immediate,
                 VIP_UINT32 status_op, const char *what)
{
    VIP_DESCRIPTOR *desc = &ep->descs[SEND_SLOT];

    memset(desc, 0, sizeof(*desc));
    desc->CS.Control = control;
    desc->CS.SegCount = 2;
    desc->CS.Length = (VIP_UINT32)len;
    desc->CS.ImmediateData = immediate;
    desc->DS[0].Remote.Data.AddressBits = target->address + offset;
    desc->DS[0].Remote.Handle = target->handle;
    desc->DS[1].Local.Data.Address = local;
    desc->DS[1].Local.Handle = ep->data_handle;
    desc->DS[1].Local.Length = (VIP_UINT32)len;
    post_and_wait(ep, desc, status_op, what);
}

static void expect_pattern(const unsigned char *buf, size_t len, unsigned seed, const char *what)
{
    size_t bad = example_check_pattern(buf, len, seed);

    if (bad != len)
        example_die("%s: byte %zu of %zu is wrong", what, bad, len);
}

static void setup(struct endpoint *ep, const struct example_opts *opts)
{
    VIP_VI_ATTRIBUTES vattrs;
    VIP_RELIABILITY_LEVEL level;

    example_open_nic(opts, &ep->nic, &ep->attrs);
    if (ep->size > ep->attrs.MaxTransferSize || ep->size < 2)
        example_die("-m must be 2..%lu", ep->attrs.MaxTransferSize);
    VIP_CHECK(VipCreatePtag(ep->nic, &ep->ptag));

    level = (ep->attrs.ReliabilityLevelSupport & VIP_SERVICE_RELIABLE_DELIVERY)
                ? VIP_SERVICE_RELIABLE_DELIVERY
                : VIP_SERVICE_UNRELIABLE;
    /* VIA forbids RDMA read on unreliable VIs; the NIC says where it has it. */
    ep->rdma_read = level != VIP_SERVICE_UNRELIABLE && (ep->attrs.RDMAReadSupport & level) != 0;

    ep->descs = example_alloc_registered(ep->nic, ep->ptag,
                                         (RECV_DESCS + 1) * sizeof(VIP_DESCRIPTOR), VIP_FALSE,
                                         VIP_FALSE, &ep->descs_handle);
    ep->msgs = example_alloc_registered(ep->nic, ep->ptag,
                                        (RECV_DESCS + 1) * sizeof(struct ctrl_msg), VIP_FALSE,
                                        VIP_FALSE, &ep->msgs_handle);
    /* Only the server's buffer is an RDMA target; the client's is local. */
    ep->data = example_alloc_registered(ep->nic, ep->ptag, ep->size, opts->server ? VIP_TRUE : VIP_FALSE,
                                        opts->server && ep->rdma_read ? VIP_TRUE : VIP_FALSE,
                                        &ep->data_handle);

    memset(&vattrs, 0, sizeof(vattrs));
    vattrs.ReliabilityLevel = level;
    vattrs.MaxTransferSize = ep->size;
    vattrs.Ptag = ep->ptag;
    vattrs.EnableRdmaWrite = VIP_TRUE;
    vattrs.EnableRdmaRead = ep->rdma_read ? VIP_TRUE : VIP_FALSE;
    VIP_CHECK(VipCreateVi(ep->nic, &vattrs, NULL, NULL, &ep->vi));
    for (int slot = 0; slot < RECV_DESCS; slot++)
        post_recv(ep, slot);
}

static void teardown(struct endpoint *ep)
{
    VIP_CHECK(VipDisconnect(ep->vi));
    example_drain_vi(ep->vi);
    VIP_CHECK(VipDestroyVi(ep->vi));
    example_free_registered(ep->nic, ep->data, ep->data_handle);
    example_free_registered(ep->nic, ep->msgs, ep->msgs_handle);
    example_free_registered(ep->nic, ep->descs, ep->descs_handle);
    VIP_CHECK(VipDestroyPtag(ep->nic, ep->ptag));
    VIP_CHECK(VipCloseNic(ep->nic));
}

static int run_server(struct endpoint *ep, const struct example_opts *opts)
{
    VIP_NET_ADDRESS *local = example_local_address(&ep->attrs, opts->discriminator);
    VIP_NET_ADDRESS *remote = example_address_buffer(&ep->attrs);
    VIP_VI_ATTRIBUTES remote_attrs;
    VIP_CONN_HANDLE conn;
    struct ctrl_msg msg;
    VIP_DESCRIPTOR *desc;
    size_t half = ep->size / 2;

    example_ready();
    VIP_CHECK(VipConnectWait(ep->nic, local, VIP_INFINITE, remote, &remote_attrs, &conn));
    VIP_CHECK(VipConnectAccept(conn, ep->vi));

    memset(&msg, 0, sizeof(msg));
    msg.type = MSG_INFO;
    msg.handle = ep->data_handle;
    msg.address = (uint64_t)(uintptr_t)ep->data;
    msg.length = ep->size;
    msg.rdma_read = (uint32_t)ep->rdma_read;
    send_msg(ep, &msg);

    /* 1. RDMA write with immediate data consumes one of our receives. */
    desc = wait_recv(ep, VIP_STATUS_OP_REMOTE_RDMA_WRITE, "remote RDMA write");
    if (!(desc->CS.Status & VIP_STATUS_IMMEDIATE))
        example_die("remote RDMA write completed without VIP_STATUS_IMMEDIATE");
    if (desc->CS.ImmediateData != WRITE_IMMEDIATE)
        example_die("immediate data 0x%x, expected 0x%x", (unsigned)desc->CS.ImmediateData,
                    WRITE_IMMEDIATE);
    expect_pattern(ep->data, ep->size, SEED_WRITE_ALL, "RDMA write with immediate");
    post_recv(ep, (int)(desc - ep->descs));
    printf("server: RDMA write with immediate 0x%x verified (%zu bytes)\n", WRITE_IMMEDIATE,
           ep->size);
    memset(&msg, 0, sizeof(msg));
    msg.type = MSG_CHECKED;
    send_msg(ep, &msg);

    /* 2. A plain RDMA write is visible once the send after it arrives. */
    recv_msg(ep, MSG_WRITTEN);
    expect_pattern(ep->data, half, SEED_WRITE_ALL, "first half after RDMA write");
    expect_pattern(ep->data + half, ep->size - half, SEED_WRITE_HALF, "second half RDMA write");
    printf("server: RDMA write at offset %zu verified\n", half);

    /* 3. New contents for the client to read. */
    example_fill_pattern(ep->data, ep->size, SEED_READ);
    memset(&msg, 0, sizeof(msg));
    msg.type = MSG_READ_NOW;
    send_msg(ep, &msg);

    /* 4. */
    recv_msg(ep, MSG_DONE);
    memset(&msg, 0, sizeof(msg));
    msg.type = MSG_BYE;
    send_msg(ep, &msg);
    printf("server: done\n");
    teardown(ep);
    free(local);
    free(remote);
    return 0;
}

static int run_client(struct endpoint *ep, const struct example_opts *opts)
{
    VIP_NET_ADDRESS *local = example_local_address(&ep->attrs, opts->discriminator);
    VIP_NET_ADDRESS *remote =
        example_remote_address(ep->nic, &ep->attrs, opts->host, opts->discriminator);
    VIP_VI_ATTRIBUTES remote_attrs;
    struct ctrl_msg target, msg;
    size_t half;

    VIP_CHECK(VipConnectRequest(ep->vi, local, remote, EXAMPLE_TIMEOUT_MS, &remote_attrs));
    target = recv_msg(ep, MSG_INFO);
    if (target.length != ep->size)
        example_die("server buffer has %llu bytes, client -m is %zu",
                    (unsigned long long)target.length, ep->size);
    if (target.rdma_read != (uint32_t)ep->rdma_read)
        example_die("server and client disagree on RDMA read support");
    half = ep->size / 2;

    /* 1. */
    example_fill_pattern(ep->data, ep->size, SEED_WRITE_ALL);
    rdma(ep, VIP_CONTROL_OP_RDMAWRITE | VIP_CONTROL_IMMEDIATE, &target, 0, ep->data, ep->size,
         WRITE_IMMEDIATE, VIP_STATUS_OP_RDMA_WRITE, "RDMA write with immediate");
    recv_msg(ep, MSG_CHECKED);

    /* 2. */
    example_fill_pattern(ep->data, ep->size - half, SEED_WRITE_HALF);
    rdma(ep, VIP_CONTROL_OP_RDMAWRITE, &target, half, ep->data, ep->size - half, 0,
         VIP_STATUS_OP_RDMA_WRITE, "RDMA write");
    memset(&msg, 0, sizeof(msg));
    msg.type = MSG_WRITTEN;
    send_msg(ep, &msg);

    /* 3. */
    recv_msg(ep, MSG_READ_NOW);
    if (ep->rdma_read) {
        memset(ep->data, 0, ep->size);
        rdma(ep, VIP_CONTROL_OP_RDMAREAD, &target, 0, ep->data, ep->size, 0,
             VIP_STATUS_OP_RDMA_READ, "RDMA read");
        expect_pattern(ep->data, ep->size, SEED_READ, "RDMA read");
        printf("client: RDMA read verified (%zu bytes)\n", ep->size);
    } else {
        printf("client: RDMA read skipped (the NIC does not offer it at this level)\n");
    }

    /* 4. */
    memset(&msg, 0, sizeof(msg));
    msg.type = MSG_DONE;
    send_msg(ep, &msg);
    recv_msg(ep, MSG_BYE);
    printf("client: RDMA write with immediate, RDMA write and read verified\n");
    teardown(ep);
    free(local);
    free(remote);
    return 0;
}

int main(int argc, char **argv)
{
    struct example_opts opts;
    struct endpoint ep;
    int opt;

    memset(&ep, 0, sizeof(ep));
    ep.size = 65536;
    example_opts_init(&opts, "rdma_imm");
    while ((opt = getopt(argc, argv, EXAMPLE_COMMON_OPTS "m:")) != -1) {
        if (example_common_opt(&opts, opt, optarg))
            continue;
        if (opt == 'm') {
            ep.size = strtoul(optarg, NULL, 0);
            continue;
        }
        fprintf(stderr, "usage: %s\n", USAGE);
        return 2;
    }
    example_opts_check(&opts, USAGE);
    setup(&ep, &opts);
    return opts.server ? run_server(&ep, &opts) : run_client(&ep, &opts);
}
