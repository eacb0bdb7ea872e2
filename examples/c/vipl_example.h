/*
 * vipl_example.h - the setup steps every example program repeats: command
 * line options, opening the NIC, building network addresses, registering
 * memory and judging completed descriptors.
 *
 * Only vipl.h and the C library are used, the way VIA programs were written
 * in 1999.  Every failure is fatal: an example prints what failed and exits
 * with status 1, so a test harness sees a non-zero exit for any error.
 */
#ifndef VIPL_EXAMPLE_H
#define VIPL_EXAMPLE_H

#include <stddef.h>
#include <time.h>

#include "vipl.h"

/* How long a blocking call may take before the example gives up (ms). */
#define EXAMPLE_TIMEOUT_MS 20000UL

struct example_opts {
    int server;             /* -s */
    const char *host;       /* -c HOST */
    const char *device;     /* -D DEVICE, default $VIA_DEVICE or /dev/via_lo */
    const char *discriminator; /* -d DISCRIMINATOR */
};

/* The getopt letters handled by example_common_opt(). */
#define EXAMPLE_COMMON_OPTS "sc:D:d:"

void example_opts_init(struct example_opts *opts, const char *default_discriminator);
/* Returns 1 if opt was one of the common options and has been stored. */
int example_common_opt(struct example_opts *opts, int opt, const char *arg);
/* Exits with a usage message unless exactly one of -s / -c HOST was given. */
void example_opts_check(const struct example_opts *opts, const char *usage);

const char *example_return_name(VIP_RETURN ret);

/* Exit with a message when ret is not VIP_SUCCESS. */
#define VIP_CHECK(call) example_check((call), #call, __FILE__, __LINE__)
void example_check(VIP_RETURN ret, const char *what, const char *file, int line);
void example_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Tell the test harness that the server is waiting for connections. */
void example_ready(void);

/* Opens the device named in opts and queries its attributes. */
void example_open_nic(const struct example_opts *opts, VIP_NIC_HANDLE *nic,
                      VIP_NIC_ATTRIBUTES *attrs);

/* This NIC's own address followed by the discriminator. */
VIP_NET_ADDRESS *example_local_address(const VIP_NIC_ATTRIBUTES *attrs,
                                       const char *discriminator);
/* The host looked up with VipNSGetHostByName followed by the discriminator. */
VIP_NET_ADDRESS *example_remote_address(VIP_NIC_HANDLE nic, const VIP_NIC_ATTRIBUTES *attrs,
                                        const char *host, const char *discriminator);
/* Room for any address this NIC can report (VipConnectWait's out parameter). */
VIP_NET_ADDRESS *example_address_buffer(const VIP_NIC_ATTRIBUTES *attrs);

/* Page-aligned memory of `size` bytes registered under ptag. */
void *example_alloc_registered(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, size_t size,
                               VIP_BOOLEAN rdma_write, VIP_BOOLEAN rdma_read,
                               VIP_MEM_HANDLE *handle);
void example_free_registered(VIP_NIC_HANDLE nic, void *mem, VIP_MEM_HANDLE handle);

/* A descriptor with one local data segment (or none when len is 0). */
void example_fill_desc(VIP_DESCRIPTOR *desc, void *buf, VIP_MEM_HANDLE buf_handle, VIP_UINT32 len);

/* Exits unless the descriptor is done without error and its op code matches. */
void example_expect_done(const VIP_DESCRIPTOR *desc, VIP_UINT32 status_op, const char *what);

/*
 * After VipDisconnect the provider completes what is still posted (flushed);
 * VIA destroys only a VI with empty queues, so collect those descriptors.
 */
void example_drain_vi(VIP_VI_HANDLE vi);

/* Milliseconds elapsed since *start (CLOCK_MONOTONIC), for bounded polling. */
unsigned long example_elapsed_ms(const struct timespec *start);

/* Fills / checks `len` bytes with a pattern that depends on seed. */
void example_fill_pattern(unsigned char *buf, size_t len, unsigned seed);
/* Returns the offset of the first wrong byte, or len when all are right. */
size_t example_check_pattern(const unsigned char *buf, size_t len, unsigned seed);

#endif /* VIPL_EXAMPLE_H */
