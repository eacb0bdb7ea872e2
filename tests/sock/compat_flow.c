/* compat (see compat.c): writers waiting for room, and the ways a
 * connection ends. Modes epollout-et, epollout-lt, epollout-short,
 * sigsuspend, rawclose, halfclose, shutdown-wakes,
 * linger0. */
#include "compat.h"

/* epollout-et: a nonblocking writer waits for EPOLLOUT with EPOLLET (as
 * nginx does) after each EAGAIN; only then does the reader (told through
 * a pipe) drain the connection. Under viarun the kernel socket never
 * fills, so its writability must be announced anew when the data ring
 * has room again; a writer that gets no edge within 10 s fails. */
#define ET_BYTES (8u << 20)
/* The writer's start: both ends use the connection first (under viarun
 * the first use meets the peer's), then the writer goes nonblocking and
 * waits for EPOLLOUT edges on the epoll set returned. */
static int edge_writer_start(int fd) {
    char h;
    read_all(fd, &h, 1);
    if (fcntl(fd, F_SETFL, O_NONBLOCK)) FAIL("O_NONBLOCK");
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLET, .data.fd = fd};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) FAIL("epoll");
    return ep;
}
void epollout_writer(int fd) {
    int ep = edge_writer_start(fd);
    struct epoll_event out;
    static char b[1 << 20];
    size_t sent = 0, again = 0;
    while (sent < ET_BYTES) {
        size_t n = ET_BYTES - sent < sizeof b ? ET_BYTES - sent : sizeof b;
        for (size_t i = 0; i < n; i++) b[i] = (char)pattern(9, sent + i);
        ssize_t k = write(fd, b, n);
        if (k > 0) { sent += (size_t)k; continue; }
        if (errno != EAGAIN) FAIL("write: %s", strerror(errno));
        again++;
        if (write(turn_pipe[1], "g", 1) != 1) FAIL("turn");
        int r;
        do r = epoll_wait(ep, &out, 1, 10000); while (r < 0 && errno == EINTR);
        if (r != 1 || !(out.events & EPOLLOUT)) FAIL("no EPOLLOUT within 10 s after EAGAIN at %zu bytes", sent);
    }
    if (again == 0) FAIL("never EAGAIN: the test did not test");
    if (write(turn_pipe[1], "e", 1) != 1) FAIL("turn");
    close(ep);
}
/* epollout-lt: as epollout-et, but the writer waits level-triggered
 * (epoll without EPOLLET, as libevent and libuv do), and after its first
 * EAGAIN the reader stalls for 100 ms before it drains everything. Under
 * viarun the kernel socket says writable all along, so a writer that is
 * not held back spins: write, EAGAIN, epoll_wait, again, thousands of
 * times, on a CPU its reader may need. Fails above 2000 EAGAINs in the
 * stall (kernel TCP: one or two; held back: at most one per 200 us). */
#define LT_STALL_NS 100000000LL
static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
void epollout_lt_writer(int fd) {
    char h;
    read_all(fd, &h, 1);
    if (fcntl(fd, F_SETFL, O_NONBLOCK)) FAIL("O_NONBLOCK");
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLOUT, .data.fd = fd}, out;
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) FAIL("epoll");
    static char b[1 << 20];
    size_t sent = 0;
    long spins = -1; /* EAGAINs in the stall; -1 before the first */
    long long stall = 0;
    int told = 0;
    size_t filled = (size_t)-1; /* the offset b holds the bytes of */
    while (sent < ET_BYTES) {
        size_t n = ET_BYTES - sent < sizeof b ? ET_BYTES - sent : sizeof b;
        if (filled != sent)
            for (size_t i = 0; i < n; i++) b[i] = (char)pattern(9, sent + i);
        filled = sent;
        ssize_t k = write(fd, b, n);
        if (k > 0) { sent += (size_t)k; continue; }
        if (errno != EAGAIN) FAIL("write: %s", strerror(errno));
        if (spins < 0) { spins = 0; stall = now_ns(); }
        long long left = stall + LT_STALL_NS - now_ns();
        if (!told && left <= 0) {
            told = 1;
            if (write(turn_pipe[1], "e", 1) != 1) FAIL("turn");
        }
        if (!told) spins++;
        int r;
        do r = epoll_wait(ep, &out, 1, told ? 10000 : (int)(left / 1000000) + 1); while (r < 0 && errno == EINTR);
        if (r < 0) FAIL("epoll_wait: %s", strerror(errno));
        if (told && r != 1) FAIL("no EPOLLOUT within 10 s after EAGAIN at %zu bytes", sent);
    }
    if (spins < 0) FAIL("never EAGAIN: the test did not test");
    if (!told && write(turn_pipe[1], "e", 1) != 1) FAIL("turn");
    if (spins > 2000) FAIL("%ld writes said EAGAIN in a 100 ms stall: a level-triggered writer spins", spins);
    fprintf(stderr, "compat epollout-lt: %ld EAGAINs in the stall\n", spins);
    close(ep);
}
void epollout_reader(int fd) {
    static char b[1 << 16];
    size_t got = 0;
    char t = 0;
    write_all(fd, "h", 1);
    while (got < ET_BYTES && t != 'e') {
        if (read(turn_pipe[0], &t, 1) != 1) FAIL("turn");
        /* 'g': drain what is there; 'e': the writer is done, read the rest. */
        int flags = t == 'g' ? MSG_DONTWAIT : 0;
        while (got < ET_BYTES) {
            ssize_t k = recv(fd, b, sizeof b, flags);
            if (k < 0 && errno == EAGAIN && t == 'g') break;
            if (k <= 0) FAIL("read: %zd %s", k, k ? strerror(errno) : "EOF");
            for (ssize_t i = 0; i < k; i++)
                if (b[i] != (char)pattern(9, got + (size_t)i)) FAIL("byte %zu differs", got + (size_t)i);
            got += (size_t)k;
        }
    }
    if (got != ET_BYTES) FAIL("read %zu of %u", got, ET_BYTES);
}


/* epollout-short: as nginx writes a response: nonblocking, EPOLLOUT with
 * EPOLLET, and a write or sendfile that takes less than it was given is
 * taken to mean the socket is full, so the writer waits for the next
 * EPOLLOUT edge (within 10 s, or fails) before it writes again. The
 * reader reads all along. The kernel returns a short count only when the
 * socket is full, and an edge follows once it has room; under viarun a
 * write may be short for other reasons (sendfile moved one message per
 * call), and the edge must come all the same: nginx between two hosts
 * stopped sending a 50 MB file part way until this held. */
#define SHORT_FILE (1u << 20)
#define SHORT_BYTES (24u << 20)
void epollout_short_writer(int fd) {
    static char b[SHORT_FILE];
    int f = pattern_file(b, sizeof b, 13);
    int ep = edge_writer_start(fd);
    struct epoll_event out;
    size_t sent = 0, calls = 0, shorts = 0;
    while (sent < SHORT_BYTES) {
        size_t at = sent % SHORT_FILE, n = SHORT_FILE - at;
        if (n > SHORT_BYTES - sent) n = SHORT_BYTES - sent;
        ssize_t k;
        if (calls++ % 2) {
            off_t off = (off_t)at;
            k = sendfile(fd, f, &off, n);
            if (k > 0 && off != (off_t)(at + (size_t)k)) FAIL("sendfile offset %ld after %zd", (long)off, k);
        } else {
            k = write(fd, b + at, n);
        }
        if (k < 0 && errno != EAGAIN) FAIL("write: %s", strerror(errno));
        if (k > 0) sent += (size_t)k;
        if (k > 0 && (size_t)k == n) continue;
        shorts++;
        int r;
        do r = epoll_wait(ep, &out, 1, 10000); while (r < 0 && errno == EINTR);
        if (r != 1 || !(out.events & EPOLLOUT)) FAIL("no EPOLLOUT within 10 s after a short write at %zu bytes", sent);
    }
    if (shorts == 0) FAIL("never short: the test did not test");
    close(ep);
    close(f);
    if (fcntl(fd, F_SETFL, 0)) FAIL("blocking again");
    await_ack(fd);
}
void epollout_short_reader(int fd) {
    static char b[1 << 16];
    write_all(fd, "h", 1);
    size_t got = 0;
    while (got < SHORT_BYTES) {
        ssize_t k = read(fd, b, sizeof b);
        if (k <= 0) FAIL("read: %zd %s", k, k ? strerror(errno) : "EOF");
        for (ssize_t i = 0; i < k; i++)
            if (b[i] != (char)pattern(13, (got + (size_t)i) % SHORT_FILE)) FAIL("byte %zu differs", got + (size_t)i);
        got += (size_t)k;
    }
    ack(fd);
}

/* shutdown-wakes: a thread blocked reading a connection that gets no
 * data is woken by shutdown(SHUT_RDWR) from another thread, with EOF (as
 * programs stop a reader thread). linger0: an acceptor that sets
 * SO_LINGER to {1, 0} and closes resets the connection: the connector's
 * read says ECONNRESET. */
static volatile long reader_tid;
static void *blocked_read(void *p) {
    reader_tid = (long)syscall(SYS_gettid);
    char c;
    intptr_t r = read(*(int *)p, &c, 1);
    return (void *)r;
}
/* Whether thread `tid` of this process sleeps (state S in its stat). */
static int thread_sleeps(long tid) {
    char path[64], st[256];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    FILE *f = fopen(path, "r");
    int s = f && fgets(st, sizeof st, f) && strstr(st, ") S ");
    if (f) fclose(f);
    return s;
}
void shutdown_wakes_server(int fd) {
    char c;
    read_all(fd, &c, 1); /* the connection's first use, both ends */
    pthread_t t;
    if (pthread_create(&t, NULL, blocked_read, &fd)) FAIL("thread");
    /* Until the reader sleeps in the kernel (after any spin). */
    for (long i = 0; !reader_tid || !thread_sleeps(reader_tid); i++) {
        if (i > 1000000) FAIL("the reader thread never slept");
        sched_yield();
    }
    if (shutdown(fd, SHUT_RDWR)) FAIL("shutdown: %s", strerror(errno));
    void *r;
    pthread_join(t, &r); /* a reader never woken is caught by the alarm */
    if ((intptr_t)r != 0) FAIL("the woken read returned %ld, not EOF", (long)(intptr_t)r);
}
void linger0_server(int fd) {
    char c;
    read_all(fd, &c, 1);
    struct linger lg = {1, 0};
    if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg)) FAIL("SO_LINGER");
}
void linger0_client(int fd) {
    write_all(fd, "h", 1);
    char c;
    ssize_t k = read(fd, &c, 1);
    if (!(k < 0 && errno == ECONNRESET)) FAIL("read after the peer's reset: %zd %s", k, k < 0 ? strerror(errno) : "");
}

/* sigsuspend: a program that blocks a signal and takes it in sigsuspend,
 * as nginx's master takes SIGTERM. The acceptor blocks SIGTERM once the
 * connection is in use (under viarun the library's threads run by then),
 * the connector sends it SIGTERM, and sigsuspend must then return with the
 * handler run. A library thread that left its signals unblocked took the
 * pending signal itself (the kernel hands a process's signal to any thread
 * not blocking it), the handler ran there and sigsuspend never returned:
 * nginx under viarun ignored `kill` for good. Fails after 5 s. */
static volatile sig_atomic_t term_seen, alarm_seen;
static void on_term(int s) { (void)s; term_seen = 1; }
static void on_alarm(int s) { (void)s; alarm_seen = 1; }
void sigsuspend_server(int fd) {
    char c;
    read_all(fd, &c, 1);
    struct sigaction sa = {.sa_handler = on_term}, al = {.sa_handler = on_alarm};
    sigemptyset(&sa.sa_mask);
    sigemptyset(&al.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGALRM, &al, NULL)) FAIL("sigaction");
    sigset_t term, none;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigemptyset(&none);
    if (sigprocmask(SIG_BLOCK, &term, NULL)) FAIL("sigprocmask");
    write_all(fd, "k", 1);
    read_all(fd, &c, 1); /* the connector has sent SIGTERM */
    /* As nginx: the flags are looked at only once sigsuspend returns. */
    alarm(5);
    sigsuspend(&none);
    alarm(0);
    if (alarm_seen || !term_seen) FAIL("SIGTERM sent while blocked did not end sigsuspend (%s)", term_seen ? "taken by another thread" : "lost");
    sigprocmask(SIG_UNBLOCK, &term, NULL);
}
void sigsuspend_client(int fd) {
    char c;
    write_all(fd, "h", 1);
    read_all(fd, &c, 1);
    if (kill(getppid(), SIGTERM)) FAIL("kill");
    write_all(fd, "d", 1);
}

/* rawclose: an acceptor that closes each connection with the raw system
 * call, as libuv (Node.js) does: `syscall(SYS_close, fd)`. Six connections
 * one after another, each a request and its answer; the connector must
 * read the answer and then EOF, never ECONNRESET. After each close a pipe
 * takes the freed number (usually), and its bytes must be the pipe's:
 * under viarun a close it did not see left the connection in its table,
 * the next socket reset, and a reused number still named the old
 * connection. */
#define RAW_CONNS 6
int rawclose(int lfd, struct sockaddr_in *a) {
    if (fork() == 0) {
        close(lfd);
        client_side();
        for (int i = 0; i < RAW_CONNS; i++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)a, sizeof *a)) FAIL("connect %d", i);
            char req[8] = {'q', (char)('0' + i)}, ans[8];
            write_all(fd, req, sizeof req);
            read_all(fd, ans, sizeof ans);
            if (ans[0] != 'a' || ans[1] != (char)('0' + i)) FAIL("answer %d: %.2s", i, ans);
            ssize_t k = read(fd, ans, 1);
            if (k != 0) FAIL("connection %d: %s after the answer", i, k < 0 ? strerror(errno) : "a byte, not EOF");
            close(fd);
        }
        exit(0);
    }
    for (int i = 0; i < RAW_CONNS; i++) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) FAIL("accept %d", i);
        char req[8], ans[8] = {'a', (char)('0' + i)};
        read_all(fd, req, sizeof req);
        if (req[0] != 'q' || req[1] != (char)('0' + i)) FAIL("request %d", i);
        write_all(fd, ans, sizeof ans);
        if (syscall(SYS_close, fd)) FAIL("syscall close: %s", strerror(errno));
        int p[2];
        if (pipe(p)) FAIL("pipe");
        char b[3];
        write_all(p[1], "abc", 3);
        read_all(p[0], b, 3);
        if (memcmp(b, "abc", 3)) FAIL("pipe on descriptor %d (the closed connection's was %d) read %.3s", p[0], fd, b);
        close(p[0]);
        close(p[1]);
    }
    int st;
    if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) FAIL("connector failed");
    printf("compat rawclose: ok\n");
    return 0;
}

/* halfclose: the acceptor writes 300 000 bytes and shuts its side with
 * shutdown(SHUT_WR); a write after that fails with EPIPE; it then still
 * reads the connector's answer, which the connector sends once it has
 * read every byte and then EOF. Between hosts the FIN waits aside for
 * the peer's acknowledgements (Node.js ends each response with a
 * shutdown, and its event loop waited in the call): nothing may be lost
 * or come after the EOF, and the read side must stay open. */
#define HALF_BYTES 300000
void halfclose_server(int fd) {
    static char b[HALF_BYTES];
    for (size_t i = 0; i < sizeof b; i++) b[i] = (char)pattern(17, i);
    write_all(fd, b, sizeof b);
    if (shutdown(fd, SHUT_WR)) FAIL("shutdown: %s", strerror(errno));
    if (send(fd, "x", 1, MSG_NOSIGNAL) != -1 || errno != EPIPE)
        FAIL("a write after shutdown(SHUT_WR): %s, not EPIPE", strerror(errno));
    char a[3];
    read_all(fd, a, 3);
    if (memcmp(a, "bye", 3)) FAIL("answer %.3s", a);
}
void halfclose_client(int fd) {
    static char b[HALF_BYTES + 1];
    size_t got = 0;
    for (;;) {
        ssize_t k = read(fd, b + got, sizeof b - got);
        if (k < 0) FAIL("read: %s", strerror(errno));
        if (k == 0) break;
        got += (size_t)k;
        if (got > HALF_BYTES) FAIL("more than was sent");
    }
    if (got != HALF_BYTES) FAIL("EOF after %zu of %u bytes", got, HALF_BYTES);
    for (size_t i = 0; i < got; i++)
        if (b[i] != (char)pattern(17, i)) FAIL("byte %zu differs", i);
    write_all(fd, "bye", 3);
}
