/*
 * vipl_example.c - setup steps shared by the example programs.
 *
 * Addresses are built the VIPL way: a buffer of sizeof(VIP_NET_ADDRESS) +
 * host length + discriminator length, the host part filled from the NIC
 * attributes (our own side) or by VipNSGetHostByName (the peer), then the
 * program's discriminator appended after the host bytes.
 */
#define _POSIX_C_SOURCE 200809L

#include "vipl_example.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void example_opts_init(struct example_opts *opts, const char *default_discriminator)
{
    const char *env = getenv("VIA_DEVICE");

    opts->server = 0;
    opts->host = NULL;
    opts->device = (env != NULL && env[0] != '\0') ? env : "/dev/via_lo";
    opts->discriminator = default_discriminator;
}

int example_common_opt(struct example_opts *opts, int opt, const char *arg)
{
    switch (opt) {
    case 's':
        opts->server = 1;
        return 1;
    case 'c':
        opts->host = arg;
        return 1;
    case 'D':
        opts->device = arg;
        return 1;
    case 'd':
        opts->discriminator = arg;
        return 1;
    default:
        return 0;
    }
}

void example_opts_check(const struct example_opts *opts, const char *usage)
{
    if (opts->server == (opts->host != NULL) || opts->discriminator[0] == '\0') {
        fprintf(stderr, "usage: %s\n", usage);
        exit(2);
    }
}

const char *example_return_name(VIP_RETURN ret)
{
    static const char *const names[] = {
        "VIP_SUCCESS",           "VIP_NOT_DONE",
        "VIP_INVALID_PARAMETER", "VIP_ERROR_RESOURCE",
        "VIP_TIMEOUT",           "VIP_REJECT",
        "VIP_INVALID_RELIABILITY_LEVEL", "VIP_INVALID_MTU",
        "VIP_INVALID_QOS",       "VIP_INVALID_PTAG",
        "VIP_INVALID_RDMAREAD",  "VIP_DESCRIPTOR_ERROR",
        "VIP_INVALID_STATE",     "VIP_ERROR_NAMESERVICE",
        "VIP_NO_MATCH",
    };
    if ((unsigned)ret < sizeof(names) / sizeof(names[0]))
        return names[ret];
    return "(unknown VIP_RETURN)";
}

void example_check(VIP_RETURN ret, const char *what, const char *file, int line)
{
    if (ret != VIP_SUCCESS) {
        fprintf(stderr, "%s:%d: %s returned %s (%d)\n", file, line, what,
                example_return_name(ret), (int)ret);
        exit(1);
    }
}

void example_die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

void example_ready(void)
{
    printf("READY\n");
    fflush(stdout);
}

void example_open_nic(const struct example_opts *opts, VIP_NIC_HANDLE *nic,
                      VIP_NIC_ATTRIBUTES *attrs)
{
    VIP_CHECK(VipOpenNic(opts->device, nic));
    VIP_CHECK(VipQueryNic(*nic, attrs));
    if (attrs->NicAddressLen == 0 || attrs->LocalNicAddress == NULL)
        example_die("%s: the NIC reports no address", opts->device);
    if (strlen(opts->discriminator) > attrs->MaxDiscriminatorLen)
        example_die("discriminator \"%s\" is longer than the NIC's maximum of %u bytes",
                    opts->discriminator, (unsigned)attrs->MaxDiscriminatorLen);
}

static VIP_NET_ADDRESS *alloc_address(size_t host_len, size_t disc_len)
{
    VIP_NET_ADDRESS *addr = calloc(1, sizeof(VIP_NET_ADDRESS) + host_len + disc_len);

    if (addr == NULL)
        example_die("out of memory");
    addr->HostAddressLen = (VIP_UINT16)host_len;
    addr->DiscriminatorLen = 0;
    return addr;
}

static void append_discriminator(VIP_NET_ADDRESS *addr, const char *discriminator)
{
    size_t len = strlen(discriminator);

    memcpy(addr->HostAddress + addr->HostAddressLen, discriminator, len);
    addr->DiscriminatorLen = (VIP_UINT16)len;
}

VIP_NET_ADDRESS *example_local_address(const VIP_NIC_ATTRIBUTES *attrs, const char *discriminator)
{
    VIP_NET_ADDRESS *addr = alloc_address(attrs->NicAddressLen, strlen(discriminator));

    memcpy(addr->HostAddress, attrs->LocalNicAddress, attrs->NicAddressLen);
    append_discriminator(addr, discriminator);
    return addr;
}

VIP_NET_ADDRESS *example_remote_address(VIP_NIC_HANDLE nic, const VIP_NIC_ATTRIBUTES *attrs,
                                        const char *host, const char *discriminator)
{
    VIP_NET_ADDRESS *addr = alloc_address(attrs->NicAddressLen, strlen(discriminator));
    char name[256];

    /* VipNSGetHostByName takes a non-const name, as in VIPL 1.0. */
    snprintf(name, sizeof(name), "%s", host);
    VIP_CHECK(VipNSGetHostByName(nic, name, addr, 0));
    if (addr->HostAddressLen != attrs->NicAddressLen)
        example_die("VipNSGetHostByName(%s) gave a %u-byte address, the NIC uses %u", host,
                    (unsigned)addr->HostAddressLen, (unsigned)attrs->NicAddressLen);
    append_discriminator(addr, discriminator);
    return addr;
}

VIP_NET_ADDRESS *example_address_buffer(const VIP_NIC_ATTRIBUTES *attrs)
{
    VIP_NET_ADDRESS *addr = alloc_address(attrs->NicAddressLen, attrs->MaxDiscriminatorLen);

    addr->DiscriminatorLen = attrs->MaxDiscriminatorLen;
    return addr;
}

void *example_alloc_registered(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, size_t size,
                               VIP_BOOLEAN rdma_write, VIP_BOOLEAN rdma_read,
                               VIP_MEM_HANDLE *handle)
{
    VIP_MEM_ATTRIBUTES mattrs;
    long page = sysconf(_SC_PAGESIZE);
    void *mem = NULL;

    if (size == 0)
        size = 1;
    if (posix_memalign(&mem, page > 0 ? (size_t)page : 4096, size) != 0)
        example_die("posix_memalign(%zu) failed", size);
    memset(mem, 0, size);

    memset(&mattrs, 0, sizeof(mattrs));
    mattrs.Ptag = ptag;
    mattrs.EnableRdmaWrite = rdma_write;
    mattrs.EnableRdmaRead = rdma_read;
    VIP_CHECK(VipRegisterMem(nic, mem, size, &mattrs, handle));
    return mem;
}

void example_free_registered(VIP_NIC_HANDLE nic, void *mem, VIP_MEM_HANDLE handle)
{
    VIP_CHECK(VipDeregisterMem(nic, mem, handle));
    free(mem);
}

void example_fill_desc(VIP_DESCRIPTOR *desc, void *buf, VIP_MEM_HANDLE buf_handle, VIP_UINT32 len)
{
    memset(desc, 0, sizeof(*desc));
    desc->CS.Control = VIP_CONTROL_OP_SENDRECV;
    desc->CS.SegCount = 1;
    desc->CS.Length = len;
    desc->DS[0].Local.Data.Address = buf;
    desc->DS[0].Local.Handle = buf_handle;
    desc->DS[0].Local.Length = len;
}

void example_expect_done(const VIP_DESCRIPTOR *desc, VIP_UINT32 status_op, const char *what)
{
    VIP_UINT32 status = desc->CS.Status;

    if (!(status & VIP_STATUS_DONE))
        example_die("%s: descriptor returned without VIP_STATUS_DONE (status 0x%x)", what,
                    (unsigned)status);
    if (status & VIP_STATUS_ERROR_MASK)
        example_die("%s: descriptor completed with error bits 0x%x", what,
                    (unsigned)(status & VIP_STATUS_ERROR_MASK));
    if ((status & VIP_STATUS_OP_MASK) != status_op)
        example_die("%s: descriptor op code 0x%x, expected 0x%x", what,
                    (unsigned)(status & VIP_STATUS_OP_MASK), (unsigned)status_op);
}

void example_drain_vi(VIP_VI_HANDLE vi)
{
    VIP_DESCRIPTOR *desc;
    VIP_RETURN ret;

    while ((ret = VipRecvDone(vi, &desc)) == VIP_SUCCESS)
        ;
    if (ret != VIP_NOT_DONE)
        example_check(ret, "VipRecvDone (drain)", __FILE__, __LINE__);
    while ((ret = VipSendDone(vi, &desc)) == VIP_SUCCESS)
        ;
    if (ret != VIP_NOT_DONE)
        example_check(ret, "VipSendDone (drain)", __FILE__, __LINE__);
}

unsigned long example_elapsed_ms(const struct timespec *start)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (unsigned long)((now.tv_sec - start->tv_sec) * 1000L +
                           (now.tv_nsec - start->tv_nsec) / 1000000L);
}

/* Bytes of a position- and seed-dependent sequence: a shifted or stale
 * buffer does not match. */
static unsigned char pattern_byte(size_t i, unsigned seed)
{
    unsigned x = (unsigned)i * 2654435761u + seed * 40503u + 0x9e37u;

    return (unsigned char)(x >> 13);
}

void example_fill_pattern(unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = pattern_byte(i, seed);
}

size_t example_check_pattern(const unsigned char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pattern_byte(i, seed))
            return i;
    return len;
}
