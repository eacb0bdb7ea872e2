/* Mode aliases: the C library's other names for the socket calls, each
 * of which a program reaches without naming it — sendfile64 (built with
 * _FILE_OFFSET_BITS=64, as nginx is), __recvfrom_chk (built with
 * _FORTIFY_SOURCE, a buffer of known size) — and the batched sendmmsg and
 * recvmmsg. Under viarun the kernel socket carries doorbells: a call that
 * passed the library would put file data among them (nginx's bodies
 * failed with EIO at curl) or read them as data. So each is met by a
 * plain call at the other end (write, read), which the library takes:
 * four phases, every byte checked. */
#include "compat.h"

ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                       struct sockaddr *addr, socklen_t *alen);

#define FILE_BYTES 300000
#define MSGS 3
#define MSG_BYTES 5000

static void tell(int fd) {
    write_all(fd, "k", 1);
}
static void hear(int fd) {
    char c;
    read_all(fd, &c, 1);
    if (c != 'k') FAIL("ack byte %d", c);
}

/* Phase data: `n` bytes of the stream seeded `seed`. */
static void fill(char *b, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) b[i] = (char)pattern(seed, i);
}
static void check(const char *b, size_t n, uint64_t seed, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != (char)pattern(seed, i)) FAIL("%s: byte %zu differs", what, i);
}

void aliases_server(int fd) {
    /* 1: sendfile64 here, read there. */
    static char b[FILE_BYTES];
    int f = pattern_file(b, sizeof b, 21);
    off64_t off = 0;
    size_t left = sizeof b;
    while (left > 0) {
        ssize_t k = sendfile64(fd, f, &off, left);
        if (k <= 0) FAIL("sendfile64: %s", strerror(errno));
        left -= (size_t)k;
    }
    if (off != (off64_t)sizeof b) FAIL("sendfile64 offset %ld", (long)off);
    close(f);
    hear(fd);
    /* 2: write here, __recvfrom_chk there. */
    fill(b, sizeof b, 23);
    write_all(fd, b, sizeof b);
    hear(fd);
    /* 3: sendmmsg here (three messages in one call; a stream may take
     * part of them), read there. */
    static char m[MSGS][MSG_BYTES];
    struct iovec iov[MSGS];
    struct mmsghdr v[MSGS];
    memset(v, 0, sizeof v);
    fill(&m[0][0], sizeof m, 22);
    for (int i = 0; i < MSGS; i++) {
        iov[i] = (struct iovec){m[i], MSG_BYTES};
        v[i].msg_hdr.msg_iov = &iov[i];
        v[i].msg_hdr.msg_iovlen = 1;
    }
    int sent = sendmmsg(fd, v, MSGS, 0);
    if (sent < 1) FAIL("sendmmsg: %s", strerror(errno));
    for (int i = 0; i < sent; i++)
        if (v[i].msg_len != MSG_BYTES) FAIL("sendmmsg message %d: %u bytes", i, v[i].msg_len);
    for (int i = sent; i < MSGS; i++) write_all(fd, m[i], MSG_BYTES);
    hear(fd);
    /* 4: write here, recvmmsg there. */
    fill(&m[0][0], sizeof m, 24);
    write_all(fd, m, sizeof m);
    hear(fd);
}

void aliases_client(int fd) {
    static char b[FILE_BYTES];
    read_all(fd, b, sizeof b);
    check(b, sizeof b, 21, "sendfile64");
    tell(fd);
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t k = __recvfrom_chk(fd, b + got, sizeof b - got, sizeof b - got, 0, NULL, NULL);
        if (k <= 0) FAIL("__recvfrom_chk: %zd %s", k, strerror(errno));
        got += (size_t)k;
    }
    check(b, sizeof b, 23, "__recvfrom_chk");
    tell(fd);
    static char m[MSGS * MSG_BYTES];
    read_all(fd, m, sizeof m);
    check(m, sizeof m, 22, "sendmmsg");
    tell(fd);
    got = 0;
    while (got < sizeof m) {
        /* Two parts per call: whatever the stream has, in order. */
        size_t left = sizeof m - got, half = left > 1 ? left / 2 : left;
        struct iovec iov[2] = {{m + got, half}, {m + got + half, left - half}};
        struct mmsghdr v[2];
        memset(v, 0, sizeof v);
        v[0].msg_hdr.msg_iov = &iov[0];
        v[0].msg_hdr.msg_iovlen = 1;
        v[1].msg_hdr.msg_iov = &iov[1];
        v[1].msg_hdr.msg_iovlen = 1;
        int n = recvmmsg(fd, v, left > half ? 2 : 1, MSG_WAITFORONE, NULL);
        if (n < 1) FAIL("recvmmsg: %d %s", n, strerror(errno));
        size_t first = v[0].msg_len;
        if (first == 0) FAIL("recvmmsg: EOF");
        /* A first part not filled leaves the second's bytes after it. */
        if (n == 2 && first < half) memmove(m + got + first, m + got + half, v[1].msg_len);
        got += first + (n == 2 ? v[1].msg_len : 0);
    }
    check(m, sizeof m, 24, "recvmmsg");
    tell(fd);
}
