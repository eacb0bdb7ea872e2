/*
 * cqtest - several VIs sharing one receive completion queue.
 *
 * The client opens NVIS connections to the server, all to the same
 * discriminator, which the server accepts NVIS times.  Every server VI sends
 * its receive completions to one CQ.  In each round the client posts one
 * message on every VI (starting with a different VI each round) before it
 * waits for any answer, so the server's CQ holds entries of several VIs at
 * once.  The server learns from VipCQWait which VI has data, collects it
 * with VipRecvDone, checks it (VI index, round in order, payload pattern)
 * and answers with a transformed payload that the client checks in turn.
 *
 *   cqtest -s [-D dev] [-d disc] [-v nvis] [-m size]
 *   cqtest -c host [-D dev] [-d disc] [-v nvis] [-n rounds] [-m size]
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vipl.h"
#include "vipl_example.h"

#define USAGE "cqtest -s | -c HOST [-D DEVICE] [-d DISC] [-v NVIS] [-n ROUNDS] [-m SIZE]"
#define MAX_VIS 16
#define RECVS_PER_VI 4
#define MSG_MAGIC 0x43515453u /* "CQTS" */
#define REPLY_SEED_OFFSET 0x5a5au

struct msg_header {
    uint32_t magic;
    uint32_t vi;
    uint32_t round;
    uint32_t rounds;
};

/* Per VI: RECVS_PER_VI receive descriptors and buffers, then one send pair. */
#define SLOTS_PER_VI (RECVS_PER_VI + 1)

struct endpoint {
    VIP_NIC_HANDLE nic;
    VIP_NIC_ATTRIBUTES attrs;
    VIP_PROTECTION_HANDLE ptag;
    VIP_CQ_HANDLE recv_cq; /* server only */
    int nvis;
    VIP_VI_HANDLE vis[MAX_VIS];
    VIP_DESCRIPTOR *descs;
    VIP_MEM_HANDLE descs_handle;
    unsigned char *bufs;
    VIP_MEM_HANDLE bufs_handle;
    size_t msg_size; /* header + payload */
};

static VIP_DESCRIPTOR *desc_at(struct endpoint *ep, int vi, int slot)
{
    return &ep->descs[vi * SLOTS_PER_VI + slot];
}

static unsigned char *buf_at(struct endpoint *ep, int vi, int slot)
{
    return ep->bufs + ((size_t)vi * SLOTS_PER_VI + (size_t)slot) * ep->msg_size;
}

static void post_recv(struct endpoint *ep, int vi, int slot)
{
    VIP_DESCRIPTOR *desc = desc_at(ep, vi, slot);

    example_fill_desc(desc, buf_at(ep, vi, slot), ep->bufs_handle, (VIP_UINT32)ep->msg_size);
    VIP_CHECK(VipPostRecv(ep->vis[vi], desc, ep->descs_handle));
}

/* Which receive slot of VI `vi` this completed descriptor is. */
static int recv_slot_of(struct endpoint *ep, int vi, const VIP_DESCRIPTOR *desc)
{
    long slot = desc - desc_at(ep, vi, 0);

    if (slot < 0 || slot >= RECVS_PER_VI)
        example_die("VI %d returned a receive descriptor that was not posted on it", vi);
    return (int)slot;
}

static void send_and_wait(struct endpoint *ep, int vi)
{
    VIP_DESCRIPTOR *desc = desc_at(ep, vi, RECVS_PER_VI);
    VIP_DESCRIPTOR *done = NULL;

    example_fill_desc(desc, buf_at(ep, vi, RECVS_PER_VI), ep->bufs_handle,
                      (VIP_UINT32)ep->msg_size);
    VIP_CHECK(VipPostSend(ep->vis[vi], desc, ep->descs_handle));
    VIP_CHECK(VipSendWait(ep->vis[vi], EXAMPLE_TIMEOUT_MS, &done));
    if (done != desc)
        example_die("VI %d: VipSendWait returned a different descriptor", vi);
    example_expect_done(done, VIP_STATUS_OP_SEND, "send");
}

static unsigned payload_seed(uint32_t vi, uint32_t round)
{
    return vi * 100003u + round;
}

/* Checks a message; returns its round. */
static uint32_t check_message(const unsigned char *buf, size_t msg_size, int vi, uint32_t round,
                              unsigned seed_offset, const char *who)
{
    struct msg_header hdr;
    size_t payload = msg_size - sizeof(hdr);
    size_t bad;

    memcpy(&hdr, buf, sizeof(hdr));
    if (hdr.magic != MSG_MAGIC)
        example_die("%s: VI %d: bad magic 0x%x", who, vi, (unsigned)hdr.magic);
    if (hdr.vi != (uint32_t)vi)
        example_die("%s: message for VI %u arrived on VI %d", who, (unsigned)hdr.vi, vi);
    if (hdr.round != round)
        example_die("%s: VI %d: round %u arrived, expected %u", who, vi, (unsigned)hdr.round,
                    (unsigned)round);
    bad = example_check_pattern(buf + sizeof(hdr), payload,
                                payload_seed(hdr.vi, hdr.round) + seed_offset);
    if (bad != payload)
        example_die("%s: VI %d round %u: payload differs at byte %zu", who, vi,
                    (unsigned)round, bad);
    return hdr.rounds;
}

static void build_message(unsigned char *buf, size_t msg_size, uint32_t vi, uint32_t round,
                          uint32_t rounds, unsigned seed_offset)
{
    struct msg_header hdr = {MSG_MAGIC, vi, round, rounds};

    memcpy(buf, &hdr, sizeof(hdr));
    example_fill_pattern(buf + sizeof(hdr), msg_size - sizeof(hdr),
                         payload_seed(vi, round) + seed_offset);
}

static void setup(struct endpoint *ep, const struct example_opts *opts)
{
    size_t slots = (size_t)ep->nvis * SLOTS_PER_VI;

    example_open_nic(opts, &ep->nic, &ep->attrs);
    if (ep->msg_size > ep->attrs.MaxTransferSize)
        example_die("message size %zu exceeds MaxTransferSize %lu", ep->msg_size,
                    ep->attrs.MaxTransferSize);
    VIP_CHECK(VipCreatePtag(ep->nic, &ep->ptag));
    ep->descs = example_alloc_registered(ep->nic, ep->ptag, slots * sizeof(VIP_DESCRIPTOR),
                                         VIP_FALSE, VIP_FALSE, &ep->descs_handle);
    ep->bufs = example_alloc_registered(ep->nic, ep->ptag, slots * ep->msg_size, VIP_FALSE,
                                        VIP_FALSE, &ep->bufs_handle);
}

static void create_vi(struct endpoint *ep, int vi, VIP_CQ_HANDLE recv_cq)
{
    VIP_VI_ATTRIBUTES vattrs;

    memset(&vattrs, 0, sizeof(vattrs));
    vattrs.ReliabilityLevel = (ep->attrs.ReliabilityLevelSupport & VIP_SERVICE_RELIABLE_DELIVERY)
                                  ? VIP_SERVICE_RELIABLE_DELIVERY
                                  : VIP_SERVICE_UNRELIABLE;
    vattrs.MaxTransferSize = ep->msg_size;
    vattrs.Ptag = ep->ptag;
    VIP_CHECK(VipCreateVi(ep->nic, &vattrs, NULL, recv_cq, &ep->vis[vi]));
    for (int slot = 0; slot < RECVS_PER_VI; slot++)
        post_recv(ep, vi, slot);
}

static void teardown(struct endpoint *ep)
{
    for (int vi = 0; vi < ep->nvis; vi++) {
        VIP_CHECK(VipDisconnect(ep->vis[vi]));
        example_drain_vi(ep->vis[vi]);
        VIP_CHECK(VipDestroyVi(ep->vis[vi]));
    }
    if (ep->recv_cq != NULL)
        VIP_CHECK(VipDestroyCQ(ep->recv_cq));
    example_free_registered(ep->nic, ep->bufs, ep->bufs_handle);
    example_free_registered(ep->nic, ep->descs, ep->descs_handle);
    VIP_CHECK(VipDestroyPtag(ep->nic, ep->ptag));
    VIP_CHECK(VipCloseNic(ep->nic));
}

static int vi_index(const struct endpoint *ep, VIP_VI_HANDLE vi)
{
    for (int i = 0; i < ep->nvis; i++)
        if (ep->vis[i] == vi)
            return i;
    example_die("VipCQWait named a VI that this server never created");
}

static int run_server(struct endpoint *ep, const struct example_opts *opts)
{
    VIP_NET_ADDRESS *local = example_local_address(&ep->attrs, opts->discriminator);
    VIP_NET_ADDRESS *remote = example_address_buffer(&ep->attrs);
    uint32_t next_round[MAX_VIS] = {0};
    int finished = 0;
    unsigned long handled = 0;
    VIP_VI_HANDLE vi_handle;
    VIP_BOOLEAN is_recv;
    VIP_RETURN ret;

    VIP_CHECK(VipCreateCQ(ep->nic, (VIP_ULONG)ep->nvis * RECVS_PER_VI, &ep->recv_cq));
    example_ready();
    for (int vi = 0; vi < ep->nvis; vi++) {
        VIP_VI_ATTRIBUTES remote_attrs;
        VIP_CONN_HANDLE conn;

        VIP_CHECK(VipConnectWait(ep->nic, local, VIP_INFINITE, remote, &remote_attrs, &conn));
        create_vi(ep, vi, ep->recv_cq);
        VIP_CHECK(VipConnectAccept(conn, ep->vis[vi]));
    }

    while (finished < ep->nvis) {
        VIP_DESCRIPTOR *desc = NULL;
        int vi, slot;
        uint32_t rounds;

        VIP_CHECK(VipCQWait(ep->recv_cq, EXAMPLE_TIMEOUT_MS, &vi_handle, &is_recv));
        if (!is_recv)
            example_die("the CQ reported a send completion; only receive queues use it");
        vi = vi_index(ep, vi_handle);
        /* The CQ entry promises a completed receive on that VI. */
        VIP_CHECK(VipRecvDone(ep->vis[vi], &desc));
        slot = recv_slot_of(ep, vi, desc);
        example_expect_done(desc, VIP_STATUS_OP_RECEIVE, "receive");
        if (desc->CS.Length != ep->msg_size)
            example_die("VI %d: received %u bytes, expected %zu", vi, (unsigned)desc->CS.Length,
                        ep->msg_size);
        rounds = check_message(buf_at(ep, vi, slot), ep->msg_size, vi, next_round[vi], 0,
                               "server");
        build_message(buf_at(ep, vi, RECVS_PER_VI), ep->msg_size, (uint32_t)vi, next_round[vi],
                      rounds, REPLY_SEED_OFFSET);
        post_recv(ep, vi, slot);
        send_and_wait(ep, vi);
        handled++;
        if (++next_round[vi] == rounds)
            finished++;
    }

    /* Nothing more may have been received. The client tears down as soon
     * as it has the last reply, which can flush the receives reposted
     * above before this check: those entries carry an error status and are
     * passed over; a receive that completed well is an extra message. */
    while ((ret = VipCQDone(ep->recv_cq, &vi_handle, &is_recv)) == VIP_SUCCESS) {
        VIP_DESCRIPTOR *desc = NULL;

        VIP_CHECK(VipRecvDone(ep->vis[vi_index(ep, vi_handle)], &desc));
        if (!(desc->CS.Status & VIP_STATUS_ERROR_MASK))
            example_die("VipCQDone on a drained CQ found a completed receive (status 0x%x)",
                        (unsigned)desc->CS.Status);
    }
    if (ret != VIP_NOT_DONE)
        example_die("VipCQDone on a drained CQ returned %s, expected VIP_NOT_DONE",
                    example_return_name(ret));
    printf("server: %lu messages on %d VIs through one CQ\n", handled, ep->nvis);
    teardown(ep);
    free(local);
    free(remote);
    return 0;
}

static int run_client(struct endpoint *ep, const struct example_opts *opts, uint32_t rounds)
{
    VIP_NET_ADDRESS *local = example_local_address(&ep->attrs, opts->discriminator);
    VIP_NET_ADDRESS *remote =
        example_remote_address(ep->nic, &ep->attrs, opts->host, opts->discriminator);

    for (int vi = 0; vi < ep->nvis; vi++) {
        VIP_VI_ATTRIBUTES remote_attrs;
        VIP_VI_STATE state;
        VIP_VI_ATTRIBUTES attrs;
        VIP_BOOLEAN send_empty, recv_empty;

        create_vi(ep, vi, NULL);
        VIP_CHECK(VipConnectRequest(ep->vis[vi], local, remote, EXAMPLE_TIMEOUT_MS,
                                    &remote_attrs));
        VIP_CHECK(VipQueryVi(ep->vis[vi], &state, &attrs, &send_empty, &recv_empty));
        if (state != VIP_STATE_CONNECTED)
            example_die("VI %d: state %d after VipConnectRequest", vi, (int)state);
        if (!send_empty || recv_empty)
            example_die("VI %d: queues report send empty %d, receive empty %d", vi, send_empty,
                        recv_empty);
    }

    for (uint32_t round = 0; round < rounds; round++) {
        int first = (int)(round % (uint32_t)ep->nvis);

        /* Every VI has a message in flight before any answer is awaited. */
        for (int k = 0; k < ep->nvis; k++) {
            int vi = (first + k) % ep->nvis;

            build_message(buf_at(ep, vi, RECVS_PER_VI), ep->msg_size, (uint32_t)vi, round,
                          rounds, 0);
            send_and_wait(ep, vi);
        }
        for (int k = 0; k < ep->nvis; k++) {
            int vi = (first + k) % ep->nvis;
            VIP_DESCRIPTOR *desc = NULL;
            int slot;

            VIP_CHECK(VipRecvWait(ep->vis[vi], EXAMPLE_TIMEOUT_MS, &desc));
            slot = recv_slot_of(ep, vi, desc);
            example_expect_done(desc, VIP_STATUS_OP_RECEIVE, "receive");
            check_message(buf_at(ep, vi, slot), ep->msg_size, vi, round, REPLY_SEED_OFFSET,
                          "client");
            post_recv(ep, vi, slot);
        }
    }
    printf("client: %u rounds on %d VIs verified\n", (unsigned)rounds, ep->nvis);
    teardown(ep);
    free(local);
    free(remote);
    return 0;
}

int main(int argc, char **argv)
{
    struct example_opts opts;
    struct endpoint ep;
    unsigned long rounds = 100, payload = 1024;
    int opt;

    memset(&ep, 0, sizeof(ep));
    ep.nvis = 4;
    example_opts_init(&opts, "cqtest");
    while ((opt = getopt(argc, argv, EXAMPLE_COMMON_OPTS "v:n:m:")) != -1) {
        if (example_common_opt(&opts, opt, optarg))
            continue;
        switch (opt) {
        case 'v':
            ep.nvis = atoi(optarg);
            break;
        case 'n':
            rounds = strtoul(optarg, NULL, 0);
            break;
        case 'm':
            payload = strtoul(optarg, NULL, 0);
            break;
        default:
            fprintf(stderr, "usage: %s\n", USAGE);
            return 2;
        }
    }
    example_opts_check(&opts, USAGE);
    if (ep.nvis < 1 || ep.nvis > MAX_VIS || rounds == 0 || rounds > UINT32_MAX)
        example_die("-v must be 1..%d and -n at least 1", MAX_VIS);
    ep.msg_size = sizeof(struct msg_header) + payload;

    setup(&ep, &opts);
    return opts.server ? run_server(&ep, &opts) : run_client(&ep, &opts, (uint32_t)rounds);
}
