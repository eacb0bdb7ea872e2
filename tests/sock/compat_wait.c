/* viarun compatibility checks (see compat.c): waiters that spin before
 * they sleep, and the doorbells they save their peers.
 *
 * Each mode's server says on stderr how many bytes the kernel carried to
 * its socket (TCP_INFO, which viarun does not touch): every byte over
 * kernel TCP; under viarun only the doorbells still rung (run.sh checks
 * there are few). */
#include "compat.h"
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received */
#include <time.h>

/* The bytes the kernel carried to `fd`, on stderr, beside the `sent`
 * bytes of the messages. */
static void kernel_carried(int fd, int sent) {
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl)) FAIL("TCP_INFO: %s", strerror(errno));
    fprintf(stderr, "compat %s: kernel carried %llu bytes of %d\n", mode,
            (unsigned long long)ti.tcpi_bytes_received, sent);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#define MSG_LEN 14

/* A new epoll set watching `fd` (made nonblocking) for EPOLLIN. */
static int epoll_on(int fd, uint64_t data) {
    nonblocking(fd);
    int e = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = data};
    if (e < 0 || epoll_ctl(e, EPOLL_CTL_ADD, fd, &ev)) FAIL("epoll_ctl");
    return e;
}

/* The client of every mode here: ROUNDS messages, each answered with its
 * bytes inverted, read in blocking reads; every byte checked. */
static void ping_pong_client(int fd, int rounds) {
    char m[MSG_LEN], back[MSG_LEN];
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < MSG_LEN; i++) m[i] = (char)pattern((uint64_t)r, (size_t)i);
        write_all(fd, m, sizeof m);
        read_all(fd, back, sizeof back);
        for (int i = 0; i < MSG_LEN; i++)
            if (back[i] != (char)~m[i]) FAIL("round %d: byte %d of the answer differs", r, i);
    }
}

/* A server's side of one round once its wait said readable: reads the
 * message (nonblocking, `wait` again on EAGAIN), checks it, answers. */
static void serve_round(int fd, int r, void (*wait)(int fd, int r)) {
    char m[MSG_LEN];
    size_t got = 0;
    while (got < sizeof m) {
        ssize_t k = read(fd, m + got, sizeof m - got);
        if (k < 0 && errno == EAGAIN) {
            wait(fd, r);
            continue;
        }
        if (k <= 0) FAIL("round %d: read %zd %s", r, k, k < 0 ? strerror(errno) : "EOF");
        got += (size_t)k;
    }
    for (int i = 0; i < MSG_LEN; i++) {
        if (m[i] != (char)pattern((uint64_t)r, (size_t)i)) FAIL("round %d: byte %d differs", r, i);
        m[i] = (char)~m[i];
    }
    write_all(fd, m, sizeof m);
}

/* Waits until `fd` is readable, the way the mode's name starts (epoll,
 * epoll2: epoll_pwait2 on `epfd`, poll, select), for at most 5 s: the
 * one readable event or a failure. */
static void wait_in(int fd, int epfd, int r) {
    if (strncmp(mode, "select", 6) == 0) {
        fd_set rs;
        FD_ZERO(&rs);
        FD_SET(fd, &rs);
        struct timeval tv = {5, 0};
        int n = select(fd + 1, &rs, NULL, NULL, &tv);
        if (n != 1 || !FD_ISSET(fd, &rs)) FAIL("round %d: select %d", r, n);
    } else if (strncmp(mode, "poll", 4) == 0) {
        struct pollfd q = {fd, POLLIN, 0};
        int n = poll(&q, 1, 5000);
        if (n != 1 || !(q.revents & POLLIN)) FAIL("round %d: poll %d revents %#x", r, n, q.revents);
    } else {
        struct epoll_event out[4];
        struct timespec t = {5, 0};
        int n = strncmp(mode, "epoll2", 6) == 0 ? epoll_pwait2(epfd, out, 4, &t, NULL)
                                                : epoll_wait(epfd, out, 4, 5000);
        if (n != 1 || out[0].data.u64 != 0x5eed || !(out[0].events & EPOLLIN))
            FAIL("round %d: epoll_wait %d events %#x", r, n, n > 0 ? out[0].events : 0);
    }
}

/* epoll-quiet, epoll2-quiet, poll-quiet, select-quiet: a ping-pong of
 * QUIET_ROUNDS small messages, the server waiting in epoll_wait
 * (level-triggered), epoll_pwait2, poll or select, reading nonblocking.
 * Under viarun, where both ends spin before they sleep, few messages ring
 * a doorbell. */
#define QUIET_ROUNDS 2000
static int quiet_epoll = -1;
static void quiet_wait(int fd, int r) { wait_in(fd, quiet_epoll, r); }
void quiet_client(int fd) { ping_pong_client(fd, QUIET_ROUNDS); }
void quiet_server(int fd) {
    quiet_epoll = epoll_on(fd, 0x5eed);
    for (int r = 0; r < QUIET_ROUNDS; r++) {
        quiet_wait(fd, r);
        serve_round(fd, r, quiet_wait);
    }
    kernel_carried(fd, QUIET_ROUNDS * MSG_LEN);
    close(quiet_epoll);
}

/* epoll-busy, poll-busy, select-busy: a busy event loop. The server
 * answers, then works (spins BUSY_US) before its next wait, so the
 * client's next message comes while it is not waiting; under viarun the
 * token its last wait let stand (offered again by the read that used the
 * message up) takes that message, and it rings no doorbell. */
#define BUSY_ROUNDS 500
#define BUSY_US 100
static int busy_epoll = -1;
static void busy_wait(int fd, int r) { wait_in(fd, busy_epoll, r); }
void busy_client(int fd) { ping_pong_client(fd, BUSY_ROUNDS); }
void busy_server(int fd) {
    busy_epoll = epoll_on(fd, 0x5eed);
    for (int r = 0; r < BUSY_ROUNDS; r++) {
        busy_wait(fd, r);
        serve_round(fd, r, busy_wait);
        double until = now_s() + BUSY_US / 1e6;
        while (now_s() < until) {
        }
    }
    kernel_carried(fd, BUSY_ROUNDS * MSG_LEN);
    close(busy_epoll);
}

/* epoll-unseen: a waiter the library does not see. Every other round the
 * server waits with the epoll_wait system call itself (as a program that
 * makes its own system calls, or a wait in a nested set, would): under
 * viarun the client's message then takes the token the previous round's
 * wait let stand and rings no doorbell, and only the client's late ring
 * (before it sleeps for the answer, `unrung`) wakes the server; without
 * it the server would wait for good (here: fail after 5 s). */
#define UNSEEN_ROUNDS 40
static int unseen_epoll = -1;
static double unseen_slowest = 0;
static void unseen_wait(int fd, int r) {
    (void)fd;
    struct epoll_event out[4];
    int n;
    if (r % 2 == 0) {
        n = epoll_wait(unseen_epoll, out, 4, 5000);
    } else {
        double t0 = now_s();
        n = (int)syscall(SYS_epoll_wait, unseen_epoll, out, 4, 5000);
        if (now_s() - t0 > unseen_slowest) unseen_slowest = now_s() - t0;
    }
    if (n != 1 || !(out[0].events & EPOLLIN))
        FAIL("round %d: %s epoll_wait %d (not woken)", r, r % 2 ? "raw" : "library's", n);
}
void unseen_client(int fd) { ping_pong_client(fd, UNSEEN_ROUNDS); }
void unseen_server(int fd) {
    unseen_epoll = epoll_on(fd, 1);
    for (int r = 0; r < UNSEEN_ROUNDS; r++) {
        unseen_wait(fd, r);
        serve_round(fd, r, unseen_wait);
    }
    fprintf(stderr, "compat %s: slowest raw wait %.1f ms\n", mode, unseen_slowest * 1e3);
    close(unseen_epoll);
}

/* epoll-mod: an event loop that changes its registration around every
 * answer, as redis-benchmark's does: EPOLLOUT on before the write, off
 * after it (EPOLL_CTL_MOD, the same data), and the event's data changed
 * every third round. Every event must carry the registration's current
 * data and bits: EPOLLIN while the message is unread, none with nothing
 * unread (looked at every fourth round: it costs a 20 ms wait), EPOLLOUT
 * alone when asked for with nothing unread. */
#define MOD_ROUNDS 240
void epoll_mod_client(int fd) { ping_pong_client(fd, MOD_ROUNDS); }
void epoll_mod_server(int fd) {
    int e = epoll_on(fd, 0);
    uint64_t data = 0;
    struct epoll_event out[2];
    for (int r = 0; r < MOD_ROUNDS; r++) {
        if (r % 3 == 0) data = 1000 + (uint64_t)r;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = data};
        if (epoll_ctl(e, EPOLL_CTL_MOD, fd, &ev)) FAIL("round %d: MOD to EPOLLIN: %s", r, strerror(errno));
        char m[MSG_LEN];
        size_t got = 0;
        while (got < sizeof m) {
            int n = epoll_wait(e, out, 2, 5000);
            if (n != 1 || out[0].data.u64 != data || !(out[0].events & EPOLLIN))
                FAIL("round %d: epoll_wait %d, data %llu (want %llu), events %#x", r, n,
                     n > 0 ? (unsigned long long)out[0].data.u64 : 0ULL, (unsigned long long)data,
                     n > 0 ? out[0].events : 0);
            ssize_t k = read(fd, m + got, sizeof m - got);
            /* (The peer's hello may make it readable once with nothing
             * to read yet, see readiness_server.) */
            if (k < 0 && errno == EAGAIN) continue;
            if (k <= 0) FAIL("round %d: read %zd %s", r, k, k < 0 ? strerror(errno) : "EOF");
            got += (size_t)k;
        }
        for (int i = 0; i < MSG_LEN; i++)
            if (m[i] != (char)pattern((uint64_t)r, (size_t)i)) FAIL("round %d: byte %d differs", r, i);
        if (r % 4 == 0 && epoll_wait(e, out, 2, 20) != 0) FAIL("round %d: readable with nothing unread", r);
        ev.events = EPOLLIN | EPOLLOUT;
        if (epoll_ctl(e, EPOLL_CTL_MOD, fd, &ev)) FAIL("round %d: MOD to EPOLLOUT: %s", r, strerror(errno));
        int n = epoll_wait(e, out, 2, 5000);
        if (n != 1 || out[0].data.u64 != data || (out[0].events & (EPOLLIN | EPOLLOUT)) != EPOLLOUT)
            FAIL("round %d: writable wait %d, data %llu, events %#x", r, n,
                 n > 0 ? (unsigned long long)out[0].data.u64 : 0ULL, n > 0 ? out[0].events : 0);
        for (int i = 0; i < MSG_LEN; i++) m[i] = (char)~m[i];
        write_all(fd, m, sizeof m);
    }
    close(e);
}

/* slow-read, slow-epoll, slow-poll: a writer that sends one message every
 * SLOW_GAP_US, so that every wait of the server (a blocking read; or
 * epoll_wait, or poll, then a nonblocking read) outlasts any spin. Under
 * viarun a spin that does not pay shrinks (waitspin.rs): the server's
 * thread says on stderr how much CPU time it used against the time its
 * waits took, which run.sh checks (a spin of the whole window at every
 * wait, as before, took about half the time with a 1 ms window). */
#define SLOW_ROUNDS 150
#define SLOW_GAP_US 2000
static double thread_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
void slow_client(int fd) {
    char m[MSG_LEN];
    for (int r = 0; r < SLOW_ROUNDS; r++) {
        struct timespec gap = {0, SLOW_GAP_US * 1000L};
        nanosleep(&gap, NULL);
        for (int i = 0; i < MSG_LEN; i++) m[i] = (char)pattern((uint64_t)r, (size_t)i);
        write_all(fd, m, sizeof m);
    }
    char c; /* the server's close: all read */
    if (read(fd, &c, 1) != 0) FAIL("no EOF at the end");
}
static int slow_epoll = -1;
static void slow_wait(int fd, int r) {
    if (strcmp(mode, "slow-poll") == 0) {
        struct pollfd q = {fd, POLLIN, 0};
        int n = poll(&q, 1, 5000);
        if (n != 1 || !(q.revents & POLLIN)) FAIL("round %d: poll %d revents %#x", r, n, q.revents);
        return;
    }
    struct epoll_event out[4];
    int n = epoll_wait(slow_epoll, out, 4, 5000);
    if (n != 1 || !(out[0].events & EPOLLIN)) FAIL("round %d: epoll_wait %d", r, n);
}
void slow_server(int fd) {
    int blocking = strcmp(mode, "slow-read") == 0;
    if (!blocking) slow_epoll = epoll_on(fd, 1);
    double t0 = now_s(), c0 = thread_cpu_s();
    char m[MSG_LEN];
    for (int r = 0; r < SLOW_ROUNDS; r++) {
        size_t got = 0;
        if (!blocking) slow_wait(fd, r);
        while (got < sizeof m) {
            ssize_t k = read(fd, m + got, sizeof m - got);
            if (k < 0 && errno == EAGAIN && !blocking) {
                slow_wait(fd, r);
                continue;
            }
            if (k <= 0) FAIL("round %d: read %zd %s", r, k, k < 0 ? strerror(errno) : "EOF");
            got += (size_t)k;
        }
        for (int i = 0; i < MSG_LEN; i++)
            if (m[i] != (char)pattern((uint64_t)r, (size_t)i)) FAIL("round %d: byte %d differs", r, i);
    }
    double cpu = thread_cpu_s() - c0, wall = now_s() - t0;
    fprintf(stderr, "compat %s: cpu %.0f us of %.0f us\n", mode, cpu * 1e6, wall * 1e6);
    if (slow_epoll >= 0) close(slow_epoll);
}

/* slow-settle: a nonblocking connector that writes before its acceptor
 * has used the connection, and asks again whenever poll says POLLOUT
 * (at once: the kernel socket has room), as libpq does. Under viarun the
 * first write hands the settling to a thread and says EAGAIN until the
 * acceptor's first use, which comes SETTLE_LATE_US later; the connector's
 * thread says on stderr how much CPU time it used in that loop against
 * the time the loop took (run.sh checks; a write that only yielded before
 * saying EAGAIN again spun a whole CPU). Over kernel TCP the first write
 * goes through. */
#define SETTLE_LATE_US 300000
void slow_settle_client(int fd) {
    nonblocking(fd);
    double t0 = now_s(), c0 = thread_cpu_s();
    for (;;) {
        ssize_t w = write(fd, "s", 1);
        if (w == 1) break;
        if (w < 0 && errno != EAGAIN) FAIL("write: %s", strerror(errno));
        struct pollfd q = {fd, POLLOUT, 0};
        if (poll(&q, 1, 5000) != 1) FAIL("no POLLOUT");
    }
    double cpu = thread_cpu_s() - c0, wall = now_s() - t0;
    fprintf(stderr, "compat %s: cpu %.0f us of %.0f us\n", mode, cpu * 1e6, wall * 1e6);
    char c;
    for (;;) {
        struct pollfd q = {fd, POLLIN, 0};
        if (poll(&q, 1, 5000) != 1) FAIL("no answer");
        ssize_t k = read(fd, &c, 1);
        if (k == 1) break;
        if (k < 0 && errno == EAGAIN) continue;
        FAIL("answer: %zd %s", k, k < 0 ? strerror(errno) : "EOF");
    }
    if (c != 'S') FAIL("answer %c", c);
}
void slow_settle_server(int fd) {
    /* The scene, not a wait for readiness: an acceptor slow to its
     * connection's first use (a forking server's worker starting up). */
    struct timespec late = {0, SETTLE_LATE_US * 1000L};
    nanosleep(&late, NULL);
    char c;
    read_all(fd, &c, 1);
    if (c != 's') FAIL("byte %c", c);
    write_all(fd, "S", 1);
}
