/*
 * vnettest - ping-pong latency and bandwidth over one VI.
 *
 * The client sends a message of each size (0, 1, 2, 4 ... MAXSIZE) ITERS
 * times; the server echoes every message back on the same VI.  One-way
 * latency is half the measured round trip, bandwidth is size divided by it.
 * Every message carries its sequence number as immediate data, which the
 * echo must return unchanged; the payload is rewritten and checked on the
 * first and the last iteration of each size, so filling buffers does not
 * distort the timing in between.  A final message with STOP_IMMEDIATE ends
 * the server.
 *
 *   vnettest -s [-D dev] [-d disc] [-m maxsize] [-p]
 *   vnettest -c host [-D dev] [-d disc] [-n iters] [-m maxsize] [-p]
 *
 * -p polls (VipRecvDone/VipSendDone) instead of blocking in the Wait calls.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vipl.h"
#include "vipl_example.h"

#define USAGE "vnettest -s | -c HOST [-D DEVICE] [-d DISC] [-n ITERS] [-m MAXSIZE] [-p]"
#define RECV_DESCS 2
#define STOP_IMMEDIATE 0x53544f50u /* "STOP" */

struct endpoint {
    VIP_NIC_HANDLE nic;
    VIP_NIC_ATTRIBUTES attrs;
    VIP_PROTECTION_HANDLE ptag;
    VIP_VI_HANDLE vi;
    VIP_DESCRIPTOR *descs; /* RECV_DESCS receive descriptors, then one send descriptor */
    VIP_MEM_HANDLE descs_handle;
    unsigned char *bufs; /* RECV_DESCS receive buffers, then one send buffer */
    VIP_MEM_HANDLE bufs_handle;
    size_t buf_size;
    int poll;
};

static unsigned char *buffer_of(struct endpoint *ep, int index)
{
    return ep->bufs + (size_t)index * ep->buf_size;
}

static VIP_DESCRIPTOR *send_desc(struct endpoint *ep)
{
    return &ep->descs[RECV_DESCS];
}

static void post_recv(struct endpoint *ep, int index)
{
    example_fill_desc(&ep->descs[index], buffer_of(ep, index), ep->bufs_handle,
                      (VIP_UINT32)ep->buf_size);
    VIP_CHECK(VipPostRecv(ep->vi, &ep->descs[index], ep->descs_handle));
}

static VIP_DESCRIPTOR *wait_recv(struct endpoint *ep)
{
    VIP_DESCRIPTOR *desc = NULL;
    VIP_RETURN ret;

    if (ep->poll) {
        struct timespec start;

        clock_gettime(CLOCK_MONOTONIC, &start);
        while ((ret = VipRecvDone(ep->vi, &desc)) == VIP_NOT_DONE)
            if (example_elapsed_ms(&start) > EXAMPLE_TIMEOUT_MS)
                example_die("VipRecvDone: nothing arrived in %lu ms", EXAMPLE_TIMEOUT_MS);
    } else {
        ret = VipRecvWait(ep->vi, EXAMPLE_TIMEOUT_MS, &desc);
    }
    VIP_CHECK(ret);
    if (desc == NULL)
        example_die("receive completion returned no descriptor");
    example_expect_done(desc, VIP_STATUS_OP_RECEIVE, "receive");
    return desc;
}

static void send_and_wait(struct endpoint *ep, void *buf, VIP_UINT32 len, VIP_UINT32 immediate)
{
    VIP_DESCRIPTOR *desc = send_desc(ep);
    VIP_DESCRIPTOR *done = NULL;
    VIP_RETURN ret;

    example_fill_desc(desc, buf, ep->bufs_handle, len);
    desc->CS.Control |= VIP_CONTROL_IMMEDIATE;
    desc->CS.ImmediateData = immediate;
    VIP_CHECK(VipPostSend(ep->vi, desc, ep->descs_handle));
    if (ep->poll) {
        struct timespec start;

        clock_gettime(CLOCK_MONOTONIC, &start);
        while ((ret = VipSendDone(ep->vi, &done)) == VIP_NOT_DONE)
            if (example_elapsed_ms(&start) > EXAMPLE_TIMEOUT_MS)
                example_die("VipSendDone: not done in %lu ms", EXAMPLE_TIMEOUT_MS);
    } else {
        ret = VipSendWait(ep->vi, EXAMPLE_TIMEOUT_MS, &done);
    }
    VIP_CHECK(ret);
    if (done != desc)
        example_die("VipSendWait returned %p, posted %p", (void *)done, (void *)desc);
    example_expect_done(done, VIP_STATUS_OP_SEND, "send");
}

static void setup(struct endpoint *ep, const struct example_opts *opts, size_t max_size)
{
    VIP_VI_ATTRIBUTES vattrs;
    VIP_RELIABILITY_LEVEL level;

    example_open_nic(opts, &ep->nic, &ep->attrs);
    if (max_size > ep->attrs.MaxTransferSize)
        example_die("-m %zu exceeds the NIC's MaxTransferSize %lu", max_size,
                    ep->attrs.MaxTransferSize);
    VIP_CHECK(VipCreatePtag(ep->nic, &ep->ptag));

    /* The first receive of a 0-byte run still needs a valid buffer. */
    ep->buf_size = max_size > 0 ? max_size : 1;
    ep->descs = example_alloc_registered(ep->nic, ep->ptag,
                                         (RECV_DESCS + 1) * sizeof(VIP_DESCRIPTOR), VIP_FALSE,
                                         VIP_FALSE, &ep->descs_handle);
    ep->bufs = example_alloc_registered(ep->nic, ep->ptag, (RECV_DESCS + 1) * ep->buf_size,
                                        VIP_FALSE, VIP_FALSE, &ep->bufs_handle);

    level = (ep->attrs.ReliabilityLevelSupport & VIP_SERVICE_RELIABLE_DELIVERY)
                ? VIP_SERVICE_RELIABLE_DELIVERY
                : VIP_SERVICE_UNRELIABLE;
    memset(&vattrs, 0, sizeof(vattrs));
    vattrs.ReliabilityLevel = level;
    vattrs.MaxTransferSize = ep->buf_size;
    vattrs.Ptag = ep->ptag;
    VIP_CHECK(VipCreateVi(ep->nic, &vattrs, NULL, NULL, &ep->vi));

    /* Receives are posted before connecting, as VIA requires. */
    for (int i = 0; i < RECV_DESCS; i++)
        post_recv(ep, i);
}

static void teardown(struct endpoint *ep)
{
    VIP_CHECK(VipDisconnect(ep->vi));
    example_drain_vi(ep->vi);
    VIP_CHECK(VipDestroyVi(ep->vi));
    example_free_registered(ep->nic, ep->bufs, ep->bufs_handle);
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
    unsigned long echoed = 0;

    example_ready();
    VIP_CHECK(VipConnectWait(ep->nic, local, VIP_INFINITE, remote, &remote_attrs, &conn));
    VIP_CHECK(VipConnectAccept(conn, ep->vi));

    for (;;) {
        VIP_DESCRIPTOR *desc = wait_recv(ep);
        int index = (int)(desc - ep->descs);
        VIP_UINT32 immediate;

        if (index < 0 || index >= RECV_DESCS)
            example_die("receive completion returned a descriptor that was never posted");
        if (!(desc->CS.Status & VIP_STATUS_IMMEDIATE))
            example_die("message %lu arrived without immediate data", echoed);
        immediate = desc->CS.ImmediateData;
        /* Echo from the receive buffer itself, then give it back to the queue. */
        send_and_wait(ep, buffer_of(ep, index), desc->CS.Length, immediate);
        post_recv(ep, index);
        if (immediate == STOP_IMMEDIATE)
            break;
        echoed++;
    }
    printf("server: echoed %lu messages\n", echoed);
    teardown(ep);
    free(local);
    free(remote);
    return 0;
}

static double seconds_since(const struct timespec *start)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) * 1e-9;
}

/* One ping-pong; returns the descriptor index holding the echo. */
static int ping(struct endpoint *ep, size_t size, VIP_UINT32 seq, int check, unsigned seed)
{
    unsigned char *out = buffer_of(ep, RECV_DESCS);
    VIP_DESCRIPTOR *desc;
    int index;

    if (check)
        example_fill_pattern(out, size, seed);
    send_and_wait(ep, out, (VIP_UINT32)size, seq);
    desc = wait_recv(ep);
    index = (int)(desc - ep->descs);
    if (index < 0 || index >= RECV_DESCS)
        example_die("receive completion returned a descriptor that was never posted");
    if (desc->CS.Length != size)
        example_die("size %zu: echo of %u bytes", size, (unsigned)desc->CS.Length);
    if (!(desc->CS.Status & VIP_STATUS_IMMEDIATE) || desc->CS.ImmediateData != seq)
        example_die("size %zu: echo carries immediate 0x%x, sent 0x%x", size,
                    (unsigned)desc->CS.ImmediateData, (unsigned)seq);
    if (check) {
        size_t bad = example_check_pattern(buffer_of(ep, index), size, seed);

        if (bad != size)
            example_die("size %zu: echoed payload differs at byte %zu", size, bad);
    }
    return index;
}

static int run_client(struct endpoint *ep, const struct example_opts *opts, unsigned long iters,
                      size_t max_size)
{
    VIP_NET_ADDRESS *local = example_local_address(&ep->attrs, opts->discriminator);
    VIP_NET_ADDRESS *remote =
        example_remote_address(ep->nic, &ep->attrs, opts->host, opts->discriminator);
    VIP_VI_ATTRIBUTES remote_attrs;
    VIP_UINT32 seq = 0;

    VIP_CHECK(VipConnectRequest(ep->vi, local, remote, EXAMPLE_TIMEOUT_MS, &remote_attrs));
    printf("%10s %12s %12s\n", "bytes", "latency_us", "MB/s");

    for (size_t size = 0; size <= max_size; size = size ? size * 2 : 1) {
        struct timespec start;
        double elapsed, one_way_us;

        clock_gettime(CLOCK_MONOTONIC, &start);
        for (unsigned long i = 0; i < iters; i++) {
            int first_or_last = (i == 0 || i + 1 == iters);
            int index = ping(ep, size, seq, first_or_last, (unsigned)(size + i));

            seq = (seq + 1) % STOP_IMMEDIATE;
            post_recv(ep, index);
        }
        elapsed = seconds_since(&start);
        one_way_us = elapsed * 1e6 / (double)iters / 2.0;
        printf("%10zu %12.2f %12.2f\n", size, one_way_us,
               one_way_us > 0 ? (double)size / one_way_us : 0.0);
        fflush(stdout);
    }

    /* The server answers STOP too, so it has seen everything before we disconnect. */
    {
        VIP_DESCRIPTOR *desc;

        send_and_wait(ep, buffer_of(ep, RECV_DESCS), 0, STOP_IMMEDIATE);
        desc = wait_recv(ep);
        if (desc->CS.ImmediateData != STOP_IMMEDIATE)
            example_die("STOP was answered with immediate 0x%x", (unsigned)desc->CS.ImmediateData);
    }
    printf("client: all sizes verified\n");
    teardown(ep);
    free(local);
    free(remote);
    return 0;
}

int main(int argc, char **argv)
{
    struct example_opts opts;
    struct endpoint ep;
    unsigned long iters = 1000;
    size_t max_size = 65536;
    int opt;

    memset(&ep, 0, sizeof(ep));
    example_opts_init(&opts, "vnettest");
    while ((opt = getopt(argc, argv, EXAMPLE_COMMON_OPTS "n:m:p")) != -1) {
        if (example_common_opt(&opts, opt, optarg))
            continue;
        switch (opt) {
        case 'n':
            iters = strtoul(optarg, NULL, 0);
            break;
        case 'm':
            max_size = strtoul(optarg, NULL, 0);
            break;
        case 'p':
            ep.poll = 1;
            break;
        default:
            fprintf(stderr, "usage: %s\n", USAGE);
            return 2;
        }
    }
    example_opts_check(&opts, USAGE);
    if (iters == 0)
        example_die("-n must be at least 1");

    setup(&ep, &opts, max_size);
    return opts.server ? run_server(&ep, &opts) : run_client(&ep, &opts, iters, max_size);
}
