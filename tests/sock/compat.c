/* viarun compatibility checks: one program, one TCP connection to itself
 * (a forked child dials, the parent accepts), one socket feature per MODE.
 * run.sh runs each MODE without viarun (the reference: kernel TCP) and
 * under viarun (where --stats must say the connection went over shm).
 *
 *   compat MODE   MODE: poll select epoll-lt epoll-et epoll-nested peek
 *                       dup threads sendfile aliases seccomp splice exec exec-vfork exec-connect
 *                       exec-bare exec-bare-connect exec-bare-used exec-bare-ahead
 *                       exec-closerange exec-closeloop exec-closefrom exec-used exec-self fork-used fork-close
 *                       fork-stream fork-first fork-race
 *                       epollout-et epollout-lt epollout-short sigsuspend rawclose halfclose fork-settling shutdown-wakes
 *                       linger0 ipv6 reuseport reuseport-plain selfloop stress reconnect
 *                       hangup
 *                       hangup-exit hangup-kill hangup-et wake nonblock
 *                       stdio stdio-exec stdio-dup2 epoll-quiet poll-quiet select-quiet
 *                       epoll2-quiet epoll-busy poll-busy select-busy epoll-unseen
 *                       epoll-mod slow-read slow-epoll slow-poll slow-settle
 *
 * Between hosts (tests/sock/hosts.sh): COMPAT_ADDR (IPv4) is where the
 * server listens instead of 127.0.0.1, and a child that dials first
 * enters the network namespace COMPAT_CLIENT_NETNS (a path such as
 * /var/run/netns/NAME), so the connection crosses a veth pair.
 *
 * Readiness is checked both ways: readable while data is unread, and NOT
 * readable once it is all read (a 100 ms poll must time out). The peers
 * sequence themselves with one-byte acks, never with sleeps; an alarm
 * turns a hang into a failure.
 *
 * This file has the helpers, the modes of one socket feature each, and
 * main; the others, by what they check: compat_alias.c, compat_exec.c, compat_flow.c,
 * compat_sandbox.c,
 * compat_listen.c, compat_stdio.c, compat_wait.c (compat.h joins them). */
#include "compat.h"

const char *mode;
#define ROUNDS 30

/* A dialing child: into the client's namespace, if one is named. */
void client_side(void) {
    const char *ns = getenv("COMPAT_CLIENT_NETNS");
    if (!ns) return;
    int f = open(ns, O_RDONLY | O_CLOEXEC);
    if (f < 0 || setns(f, CLONE_NEWNET)) FAIL("setns %s: %s", ns, strerror(errno));
    close(f);
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}
/* The byte at stream offset i of the stream seeded `seed`. */
unsigned char pattern(uint64_t seed, size_t i) {
    return (unsigned char)((i * 2654435761u) ^ (seed * 97) ^ (i >> 11));
}

void write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EAGAIN) {
            struct pollfd q = {fd, POLLOUT, 0};
            poll(&q, 1, 1000);
            continue;
        }
        if (w <= 0) FAIL("write: %s", strerror(errno));
        c += w;
        n -= (size_t)w;
    }
}
void read_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        ssize_t k = read(fd, c, n);
        if (k <= 0) FAIL("read: %zd %s", k, k < 0 ? strerror(errno) : "EOF");
        c += k;
        n -= (size_t)k;
    }
}
void ack(int fd) { write_all(fd, "k", 1); }
void await_ack(int fd) {
    char c;
    read_all(fd, &c, 1);
    if (c != 'k') FAIL("bad ack %d", c);
}
void nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* How the server waits for readability, per mode. */
static int ep, outer;
static int wait_readable(int fd, int ms) {
    if (strcmp(mode, "select") == 0) {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(fd, &r);
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        return select(fd + 1, &r, NULL, NULL, &tv);
    }
    if (strncmp(mode, "epoll", 5) == 0) {
        struct epoll_event e[2];
        int n = epoll_wait(strcmp(mode, "epoll-nested") == 0 ? outer : ep, e, 2, ms);
        return n;
    }
    struct pollfd q = {fd, POLLIN, 0};
    int n = poll(&q, 1, ms);
    if (n == 1 && !(q.revents & POLLIN)) FAIL("poll revents %#x", q.revents);
    return n;
}

/* Rounds of one message of random size; the server reads it nonblocking
 * as readiness says, then must see no readiness, then acks. */
static void readiness_client(int fd) {
    uint64_t s = 7;
    static char buf[300000];
    for (int r = 0; r < ROUNDS; r++) {
        size_t n = 1 + rng(&s) % sizeof buf;
        for (size_t i = 0; i < n; i++) buf[i] = (char)pattern((uint64_t)r, i);
        write_all(fd, &n, sizeof n);
        write_all(fd, buf, n);
        await_ack(fd);
    }
}
static void readiness_server(int fd) {
    static char buf[300000 + sizeof(size_t)];
    int et = strcmp(mode, "epoll-et") == 0;
    nonblocking(fd);
    if (strncmp(mode, "epoll", 5) == 0) {
        ep = epoll_create1(0);
        struct epoll_event e = {.events = EPOLLIN | (et ? EPOLLET : 0), .data.fd = fd};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e)) FAIL("epoll_ctl");
        outer = epoll_create1(0);
        struct epoll_event o = {.events = EPOLLIN, .data.fd = ep};
        if (epoll_ctl(outer, EPOLL_CTL_ADD, ep, &o)) FAIL("epoll_ctl outer");
    }
    int hello_seen = 0;
    for (int r = 0; r < ROUNDS; r++) {
        size_t got = 0, n = 0;
        while (got < sizeof n || got < sizeof n + n) {
            if (wait_readable(fd, 5000) != 1) FAIL("round %d: no readiness with %zu read", r, got);
            do {
                /* Level-triggered: one byte at a time now and then, and the
                 * socket must stay readable while the peer's data is unread. */
                size_t want = !et && got % 3 == 1 ? 1 : sizeof buf - got;
                ssize_t k = read(fd, buf + got, want);
                if (k < 0 && errno == EAGAIN && et) break;
                /* Known under viarun: the peer's hello (its first use of the
                 * connection) makes the socket readable once with nothing
                 * to read yet. */
                if (k < 0 && errno == EAGAIN && r == 0 && got == 0 && !hello_seen++) break;
                if (k <= 0) FAIL("round %d: read %zd %s", r, k, k < 0 ? strerror(errno) : "EOF");
                got += (size_t)k;
                if (got >= sizeof n) memcpy(&n, buf, sizeof n);
                char c;
                if (!et && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1 && wait_readable(fd, 0) != 1)
                    FAIL("round %d: not readable with data unread", r);
            } while (et);
        }
        if (got != sizeof n + n) FAIL("round %d: %zu bytes, wanted %zu", r, got, sizeof n + n);
        for (size_t i = 0; i < n; i++)
            if (buf[sizeof n + i] != (char)pattern((uint64_t)r, i)) FAIL("round %d: byte %zu differs", r, i);
        /* Everything read: the socket must not say readable. */
        if (wait_readable(fd, 20) != 0) FAIL("round %d: readable with nothing unread", r);
        ack(fd);
    }
}

static void peek_client(int fd) {
    write_all(fd, "hello world", 11);
    await_ack(fd);
    char b[1000];
    memset(b, 'w', sizeof b);
    for (int i = 0; i < 3; i++) write_all(fd, b, sizeof b);
    await_ack(fd);
    struct iovec v[3] = {{"ab", 2}, {"cde", 3}, {"f", 1}};
    if (writev(fd, v, 3) != 6) FAIL("writev");
    await_ack(fd);
    /* A peek across writes: the second comes only after an ack, so the
     * reader's MSG_PEEK|MSG_WAITALL must wait for it. */
    write_all(fd, "abc", 3);
    await_ack(fd);
    write_all(fd, "defgh", 5);
    await_ack(fd);
}
/* FIONREAD: bytes unread on the socket (the data's, not doorbells). */
static int unread(int fd) {
    int n = -1;
    if (ioctl(fd, FIONREAD, &n)) FAIL("FIONREAD: %s", strerror(errno));
    return n;
}
static void peek_server(int fd) {
    char b[3000];
    if (recv(fd, b, 5, MSG_PEEK) != 5 || memcmp(b, "hello", 5)) FAIL("MSG_PEEK 5");
    if (recv(fd, b, 100, MSG_PEEK) < 5 || memcmp(b, "hello", 5)) FAIL("MSG_PEEK again");
    /* One write arrived whole (the peek of 100 saw it): all of it counts. */
    if (unread(fd) != 11) FAIL("FIONREAD after the peek: %d, not 11", unread(fd));
    if (read(fd, b, 5) != 5 || memcmp(b, "hello", 5)) FAIL("read after peek");
    if (unread(fd) != 6) FAIL("FIONREAD after reading 5: %d, not 6", unread(fd));
    ssize_t k = recv(fd, b, 100, MSG_PEEK);
    if (k != 6 || memcmp(b, " world", 6)) FAIL("peek of the rest: %zd", k);
    read_all(fd, b, 6);
    if (unread(fd) != 0) FAIL("FIONREAD with everything read: %d", unread(fd));
    if (recv(fd, b, 1, MSG_DONTWAIT) != -1 || errno != EAGAIN) FAIL("MSG_DONTWAIT on empty");
    ack(fd);
    if (recv(fd, b, 3000, MSG_WAITALL) != 3000) FAIL("MSG_WAITALL short");
    for (int i = 0; i < 3000; i++) if (b[i] != 'w') FAIL("MSG_WAITALL data");
    ack(fd);
    char x[2], y[4];
    struct iovec v[2] = {{x, 2}, {y, 4}};
    struct msghdr m = {.msg_iov = v, .msg_iovlen = 2};
    if (recvmsg(fd, &m, MSG_WAITALL) != 6 || memcmp(x, "ab", 2) || memcmp(y, "cdef", 4)) FAIL("recvmsg iovec");
    ack(fd);
    if (recv(fd, b, 3, MSG_PEEK | MSG_WAITALL) != 3 || memcmp(b, "abc", 3)) FAIL("MSG_PEEK of the first write");
    ack(fd);
    k = recv(fd, b, 8, MSG_PEEK | MSG_WAITALL);
    if (k != 8 || memcmp(b, "abcdefgh", 8)) FAIL("MSG_PEEK|MSG_WAITALL across two writes: %zd", k);
    if (unread(fd) != 8) FAIL("FIONREAD with two writes unread: %d, not 8", unread(fd));
    k = recv(fd, b, 100, MSG_PEEK);
    if (k != 8 || memcmp(b, "abcdefgh", 8)) FAIL("MSG_PEEK of two writes: %zd", k);
    read_all(fd, b, 8);
    if (memcmp(b, "abcdefgh", 8)) FAIL("read after the peeks");
    ack(fd);
}

static void echo_client(int fd) {
    char b[5000], c[5000];
    for (int r = 0; r < 20; r++) {
        for (int i = 0; i < 5000; i++) b[i] = (char)pattern((uint64_t)r + 100, (size_t)i);
        write_all(fd, b, sizeof b);
        read_all(fd, c, sizeof c);
        if (memcmp(b, c, sizeof b)) FAIL("echo round %d differs", r);
    }
    shutdown(fd, SHUT_WR);
    if (read(fd, c, 1) != 0) FAIL("no EOF after the echo");
}
/* Echo through duplicates, closing the earlier ones on the way. */
static void dup_server(int fd) {
    char b[5000];
    int a = dup(fd), c = dup2(fd, 77), d = fcntl(fd, F_DUPFD_CLOEXEC, 90);
    if (a < 0 || c != 77 || d < 90) FAIL("dup");
    int order[4] = {fd, a, c, d};
    for (int r = 0; r < 20; r++) {
        read_all(order[r % 4], b, sizeof b);
        write_all(order[(r + 1) % 4], b, sizeof b);
        if (r == 10) { close(fd); close(a); order[0] = order[1] = d; }
    }
    if (read(c, b, 1) != 0) FAIL("no EOF on a dup");
    close(c);
    close(d);
}

/* Two threads on one socket: one writes a stream while the other reads. */
struct stream { int fd; uint64_t seed; size_t n; };
static void *stream_writer(void *p) {
    struct stream *s = p;
    static __thread char b[70000];
    uint64_t r = s->seed;
    for (size_t off = 0; off < s->n;) {
        size_t k = 1 + rng(&r) % sizeof b;
        if (k > s->n - off) k = s->n - off;
        for (size_t i = 0; i < k; i++) b[i] = (char)pattern(s->seed, off + i);
        write_all(s->fd, b, k);
        off += k;
    }
    return NULL;
}
static void *stream_reader(void *p) {
    struct stream *s = p;
    static __thread char b[70000];
    uint64_t r = s->seed * 3 + 1;
    for (size_t off = 0; off < s->n;) {
        size_t k = 1 + rng(&r) % sizeof b;
        ssize_t got = read(s->fd, b, k);
        if (got <= 0) FAIL("stream read at %zu: %zd", off, got);
        for (ssize_t i = 0; i < got; i++)
            if (b[i] != (char)pattern(s->seed, off + (size_t)i)) FAIL("stream byte %zu differs", off + (size_t)i);
        off += (size_t)got;
    }
    return NULL;
}
static void both_ways(int fd, uint64_t mine, uint64_t theirs) {
    struct stream w = {fd, mine, 6u << 20}, r = {fd, theirs, 6u << 20};
    pthread_t tw, tr;
    pthread_create(&tw, NULL, stream_writer, &w);
    pthread_create(&tr, NULL, stream_reader, &r);
    pthread_join(tw, NULL);
    pthread_join(tr, NULL);
}

/* An unlinked temporary file holding `n` bytes of the stream seeded
 * `seed`, also left in `b`. */
int pattern_file(char *b, size_t n, uint64_t seed) {
    char path[] = "/tmp/viarun-compat-XXXXXX";
    int f = mkstemp(path);
    if (f < 0) FAIL("mkstemp");
    unlink(path);
    for (size_t i = 0; i < n; i++) b[i] = (char)pattern(seed, i);
    write_all(f, b, n);
    return f;
}

static void sendfile_server(int fd) {
    static char b[300000];
    int f = pattern_file(b, sizeof b, 5);
    off_t off = 1000;
    size_t left = sizeof b - 1000;
    while (left > 0) {
        ssize_t k = sendfile(fd, f, &off, left);
        if (k <= 0) FAIL("sendfile: %s", strerror(errno));
        left -= (size_t)k;
    }
    if (off != (off_t)sizeof b) FAIL("sendfile offset %ld", (long)off);
    lseek(f, 0, SEEK_SET);
    if (sendfile(fd, f, NULL, 1000) != 1000 || lseek(f, 0, SEEK_CUR) != 1000) FAIL("sendfile at file position");
    close(f);
    await_ack(fd);
}
static void sendfile_client(int fd) {
    static char b[300000];
    read_all(fd, b, sizeof b);
    for (size_t i = 0; i < sizeof b; i++)
        if (b[i] != (char)pattern(5, (i + 1000) % sizeof b)) FAIL("sendfile byte %zu differs", i);
    ack(fd);
}

/* splice: a file into the socket through a pipe (file -> pipe ->
 * socket) and out of it the same way (socket -> pipe -> read), some calls
 * with SPLICE_F_NONBLOCK; every byte checked. Under viarun the kernel
 * socket carries doorbells, not the data: a splice the library did not
 * take over would move those. */
static void splice_server(int fd) {
    static char b[300000];
    int f = pattern_file(b, sizeof b, 6);
    int p[2];
    if (pipe(p)) FAIL("pipe");
    /* Plain writes around the spliced stream, so that the connection is
     * carried (and its kernel socket holds doorbells) while it splices. */
    write_all(fd, "head", 4);
    loff_t off = 0;
    size_t left = sizeof b;
    unsigned k = 0;
    while (left > 0) {
        if (k % 4 == 3) {
            /* Now and then a plain write in the middle of the stream:
             * the reader's splices must see it in its place. */
            size_t n = left < 7000 ? left : 7000;
            write_all(fd, b + off, n);
            off += (loff_t)n;
            left -= n;
            k++;
            continue;
        }
        ssize_t in = splice(f, &off, p[1], NULL, left < 50000 ? left : 50000, SPLICE_F_MOVE);
        if (in <= 0) FAIL("splice from the file: %s", strerror(errno));
        size_t queued = (size_t)in;
        while (queued > 0) {
            ssize_t out = splice(p[0], NULL, fd, NULL, queued, (k++ & 1) ? SPLICE_F_NONBLOCK : 0);
            if (out < 0 && errno == EAGAIN) {
                struct pollfd w = {.fd = fd, .events = POLLOUT};
                poll(&w, 1, 1000);
                continue;
            }
            if (out <= 0) FAIL("splice into the socket: %s", strerror(errno));
            queued -= (size_t)out;
            left -= (size_t)out;
        }
    }
    write_all(fd, "tail", 4);
    errno = 0;
    if (splice(p[0], NULL, fd, NULL, 100, SPLICE_F_NONBLOCK) != -1 || errno != EAGAIN)
        FAIL("splice from an empty pipe, nonblocking: %s", strerror(errno));
    loff_t zero = 0;
    write_all(p[1], "x", 1);
    if (splice(p[0], &zero, fd, NULL, 1, 0) != -1 || errno != ESPIPE)
        FAIL("splice from a pipe with an offset: %s", strerror(errno));
    if (splice(p[0], NULL, fd, &zero, 1, 0) != -1 || errno != EINVAL)
        FAIL("splice to a socket with an offset: %s", strerror(errno));
    close(p[0]);
    close(p[1]);
    close(f);
    await_ack(fd);
}
static void splice_client(int fd) {
    int p[2];
    if (pipe(p)) FAIL("pipe");
    static char b[300000];
    char word[4];
    read_all(fd, word, 4);
    if (memcmp(word, "head", 4)) FAIL("bytes before the spliced ones differ");
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t in = splice(fd, NULL, p[1], NULL, sizeof b - got, 0);
        if (in <= 0) FAIL("splice out of the socket: %s", in ? strerror(errno) : "EOF");
        read_all(p[0], b + got, (size_t)in);
        got += (size_t)in;
    }
    for (size_t i = 0; i < sizeof b; i++)
        if (b[i] != (char)pattern(6, i)) FAIL("splice byte %zu differs", i);
    read_all(fd, word, 4);
    if (memcmp(word, "tail", 4)) FAIL("bytes after the spliced ones differ");
    close(p[0]);
    close(p[1]);
    ack(fd);
}


/* Tells one side of a mode when to go on (see each mode). */
int turn_pipe[2];
#define CONNS 3
static void wait_children(int n) {
    for (int i = 0; i < n; i++) {
        int st;
        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("a child failed");
    }
}
static int stress(int lfd, struct sockaddr_in *a) {
    for (int i = 0; i < CONNS; i++) {
        if (fork() == 0) {
            close(lfd);
            client_side();
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(fd, (struct sockaddr *)a, sizeof *a)) FAIL("connect");
            unsigned char id = (unsigned char)i;
            write_all(fd, &id, 1);
            both_ways(fd, 100 + (uint64_t)i, 200 + (uint64_t)i);
            close(fd);
            exit(0);
        }
    }
    for (int i = 0; i < CONNS; i++) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) FAIL("accept");
        if (fork() == 0) {
            close(lfd);
            unsigned char id;
            read_all(fd, &id, 1);
            both_ways(fd, 200 + (uint64_t)id, 100 + (uint64_t)id);
            close(fd);
            exit(0);
        }
        close(fd);
    }
    wait_children(2 * CONNS);
    printf("compat stress: ok\n");
    return 0;
}

/* reconnect: a nonblocking connect asked again once the server has
 * accepted (hiredis, redis-benchmark and many event loops do this to
 * learn that the connection is up): the second call must say connected
 * (0 or EISCONN) and the connection must keep working, still carried. */
static int accepted_pipe[2];
static void reconnect_client(int fd, struct sockaddr_in *a) {
    nonblocking(fd);
    int r = connect(fd, (struct sockaddr *)a, sizeof *a);
    if (r != 0 && errno != EINPROGRESS) FAIL("first connect: %s", strerror(errno));
    char c;
    if (read(accepted_pipe[0], &c, 1) != 1) FAIL("no accept signal");
    struct pollfd q = {fd, POLLOUT, 0};
    if (poll(&q, 1, 5000) != 1) FAIL("not writable after accept");
    r = connect(fd, (struct sockaddr *)a, sizeof *a);
    if (r != 0 && errno != EISCONN) FAIL("second connect: %s", strerror(errno));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    echo_client(fd);
}

/* hangup*: the connector writes HANGUP_MSGS messages of random size and
 * then closes (hangup), exits without closing (hangup-exit: no atexit
 * handlers) or SIGKILLs itself (hangup-kill; hangup-et: the same, read
 * nonblocking as edge-triggered epoll says); the acceptor waits until
 * it is gone (waitpid: the readiness signal), then must read every byte
 * and then EOF, twice, as from kernel TCP. The acceptor speaks first so
 * that the connection is set up before the writer goes. */
#define HANGUP_MSGS 12
static void hangup_writer(int fd) {
    static char b[16000];
    uint64_t s = 99;
    size_t off = 0;
    await_ack(fd);
    for (int m = 0; m < HANGUP_MSGS; m++) {
        size_t n = 1 + rng(&s) % sizeof b;
        for (size_t i = 0; i < n; i++) b[i] = (char)pattern(3, off + i);
        write_all(fd, b, n);
        off += n;
    }
    write_all(fd, &off, sizeof off);
    if (strcmp(mode, "hangup-exit") == 0) _exit(0);
    if (strcmp(mode, "hangup-kill") == 0 || strcmp(mode, "hangup-et") == 0) kill(getpid(), SIGKILL);
    close(fd);
    exit(0);
}
static void hangup_reader(int fd, pid_t writer) {
    static char b[HANGUP_MSGS * 16000 + sizeof(size_t)];
    int et = strcmp(mode, "hangup-et") == 0, e = -1;
    ack(fd);
    int st;
    if (waitpid(writer, &st, 0) != writer) FAIL("waitpid");
    int killed = et || strcmp(mode, "hangup-kill") == 0;
    if (killed ? !WIFSIGNALED(st) : !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("writer failed");
    struct pollfd q = {fd, POLLIN, 0};
    if (poll(&q, 1, 5000) != 1) FAIL("not readable after the writer left");
    if (et) {
        nonblocking(fd);
        e = epoll_create1(0);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = fd};
        if (e < 0 || epoll_ctl(e, EPOLL_CTL_ADD, fd, &ev)) FAIL("epoll_ctl");
    }
    size_t got = 0;
    uint64_t s = 5;
    for (;;) {
        size_t want = 1 + rng(&s) % 20000;
        if (want > sizeof b - got) want = sizeof b - got;
        ssize_t k = read(fd, b + got, want);
        if (k < 0 && errno == EAGAIN && et) {
            /* Edge-triggered: the peer's end of stream came before we
             * drained; only a read that reports it (0) ends this. */
            struct epoll_event out;
            if (epoll_wait(e, &out, 1, 10000) != 1) FAIL("EAGAIN at %zu and no edge: end of stream lost", got);
            continue;
        }
        if (k < 0) FAIL("read at %zu: %s", got, strerror(errno));
        if (k == 0) break;
        got += (size_t)k;
    }
    size_t sent;
    if (got < sizeof sent) FAIL("EOF after %zu bytes", got);
    memcpy(&sent, b + got - sizeof sent, sizeof sent);
    if (got != sent + sizeof sent) FAIL("%zu bytes, the writer sent %zu", got, sent + sizeof sent);
    for (size_t i = 0; i < sent; i++)
        if (b[i] != (char)pattern(3, i)) FAIL("byte %zu differs", i);
    if (read(fd, b, 1) != 0) FAIL("no second EOF");
    if (poll(&q, 1, 0) != 1) FAIL("not readable at EOF");
    if (e >= 0) close(e);
}

/* nonblock: the socket's mode changed after its first use, each way a
 * program can (ioctl FIONBIO, fcntl, fcntl64): an empty read must say
 * EAGAIN when nonblocking and wait for data when blocking again. */
static void nonblock_server(int fd) {
    char b[16];
    await_ack(fd);
    int on = 1, off = 0;
    if (ioctl(fd, FIONBIO, &on)) FAIL("FIONBIO");
    if (read(fd, b, sizeof b) != -1 || errno != EAGAIN) FAIL("read after FIONBIO on: not EAGAIN");
    if (ioctl(fd, FIONBIO, &off)) FAIL("FIONBIO off");
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)) FAIL("fcntl");
    if (read(fd, b, sizeof b) != -1 || errno != EAGAIN) FAIL("read after fcntl O_NONBLOCK: not EAGAIN");
    if (fcntl64(fd, F_SETFL, fcntl64(fd, F_GETFL) & ~O_NONBLOCK)) FAIL("fcntl64");
    if (fcntl64(fd, F_SETFL, fcntl64(fd, F_GETFL) | O_NONBLOCK)) FAIL("fcntl64");
    if (read(fd, b, sizeof b) != -1 || errno != EAGAIN) FAIL("read after fcntl64 O_NONBLOCK: not EAGAIN");
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) FAIL("fcntl");
    ack(fd);
    read_all(fd, b, 5);
    if (memcmp(b, "hello", 5)) FAIL("data after blocking again");
}
static void nonblock_client(int fd) {
    ack(fd);
    await_ack(fd);
    write_all(fd, "hello", 5);
}

/* wake: a ping-pong in which both ends sleep in epoll_wait before each
 * read (nonblocking, read until EAGAIN) with a 10 s limit that only a
 * lost wake-up reaches: the writer's data must wake a sleeping reader. */
#define WAKE_ROUNDS 2000
static void wake_side(int fd, int first) {
    static char b[4096];
    nonblocking(fd);
    int e = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (e < 0 || epoll_ctl(e, EPOLL_CTL_ADD, fd, &ev)) FAIL("epoll_ctl");
    uint64_t s = 17;
    for (int r = 0; r < WAKE_ROUNDS; r++) {
        size_t n = 1 + rng(&s) % sizeof b;
        if ((r % 2 == 0) == first) {
            for (size_t i = 0; i < n; i++) b[i] = (char)pattern((uint64_t)r, i);
            write_all(fd, b, n);
            continue;
        }
        size_t got = 0;
        while (got < n) {
            struct epoll_event out;
            if (epoll_wait(e, &out, 1, 10000) != 1) FAIL("round %d: no wake-up with %zu of %zu read", r, got, n);
            while (got < n) {
                ssize_t k = read(fd, b + got, sizeof b - got);
                if (k < 0 && errno == EAGAIN) break;
                if (k <= 0) FAIL("round %d: read %zd", r, k);
                got += (size_t)k;
            }
        }
        if (got != n) FAIL("round %d: %zu bytes, wanted %zu", r, got, n);
        for (size_t i = 0; i < n; i++)
            if (b[i] != (char)pattern((uint64_t)r, i)) FAIL("round %d: byte %zu differs", r, i);
    }
    close(e);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: compat MODE\n"); return 2; }
    mode = argv[1];
    alarm(60);
    if (strcmp(mode, "exec-handler") == 0) { echo_bytes(0, 1); return 0; }
    if (strcmp(mode, "exec-dialer") == 0) { check_echo(0, 1); return 0; }
    if (strcmp(mode, "exec-greeter") == 0) return exec_bare_greeter();
    if (strcmp(mode, "exec-used-child") == 0) return exec_used_child();
    if (strcmp(mode, "exec-self-child") == 0) return exec_self_child();
    if (strcmp(mode, "stdio-handler") == 0) return stdio_handler();
    if (strcmp(mode, "reuseport") == 0) return reuseport();
    if (strcmp(mode, "reuseport-plain") == 0) return reuseport_plain();
    if (strcmp(mode, "plain-listener") == 0) return plain_listener();
    if (strcmp(mode, "selfloop") == 0) return selfloop();
    if (strcmp(mode, "ipv6") == 0) return ipv6();
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    const char *addr = getenv("COMPAT_ADDR");
    if (addr && inet_pton(AF_INET, addr, &a.sin_addr) != 1) FAIL("COMPAT_ADDR %s", addr);
    socklen_t len = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 8) ||
        getsockname(lfd, (struct sockaddr *)&a, &len)) FAIL("listen");
    if (strcmp(mode, "stress") == 0) return stress(lfd, &a);
    if (strcmp(mode, "rawclose") == 0) return rawclose(lfd, &a);
    int reconnect = strcmp(mode, "reconnect") == 0;
    int hangup = strncmp(mode, "hangup", 6) == 0;
    if (pipe(accepted_pipe) || pipe(turn_pipe)) FAIL("pipe");
    pid_t pid = fork();
    if (pid == 0) {
        close(lfd);
        client_side();
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (reconnect) {
            reconnect_client(fd, &a);
            close(fd);
            return 0;
        }
        if (connect(fd, (struct sockaddr *)&a, sizeof a)) FAIL("connect");
        if (hangup) hangup_writer(fd);
        else if (strcmp(mode, "wake") == 0) wake_side(fd, 1);
        else if (strcmp(mode, "nonblock") == 0) nonblock_client(fd);
        else if (strcmp(mode, "peek") == 0) peek_client(fd);
        else if (strcmp(mode, "dup") == 0) echo_client(fd);
        else if (strcmp(mode, "threads") == 0) both_ways(fd, 11, 12);
        else if (strcmp(mode, "sendfile") == 0) sendfile_client(fd);
        else if (strcmp(mode, "aliases") == 0) aliases_client(fd);
        else if (strcmp(mode, "seccomp") == 0) seccomp_client(fd);
        else if (strcmp(mode, "splice") == 0) splice_client(fd);
        else if (strcmp(mode, "exec") == 0 || strcmp(mode, "exec-vfork") == 0 ||
                 strcmp(mode, "exec-closerange") == 0 || strcmp(mode, "exec-closeloop") == 0) check_echo(fd, fd);
        else if (strcmp(mode, "exec-connect") == 0) exec_on(fd, "exec-dialer");
        else if (strcmp(mode, "exec-bare") == 0) check_echo(fd, fd);
        else if (strcmp(mode, "exec-bare-connect") == 0) exec_bare_client(fd);
        else if (strcmp(mode, "exec-bare-used") == 0) exec_bare_used_client(fd);
        else if (strcmp(mode, "exec-bare-ahead") == 0) exec_bare_ahead_client(fd);
        else if (strcmp(mode, "exec-closefrom") == 0) exec_closing_on(fd, "from", "exec-dialer");
        else if (strcmp(mode, "epollout-et") == 0 || strcmp(mode, "epollout-lt") == 0) epollout_reader(fd);
        else if (strcmp(mode, "epollout-short") == 0) epollout_short_reader(fd);
        else if (strcmp(mode, "sigsuspend") == 0) sigsuspend_client(fd);
        else if (strcmp(mode, "halfclose") == 0) halfclose_client(fd);
        else if (strcmp(mode, "fork-settling") == 0) fork_settling_client(fd);
        else if (strcmp(mode, "exec-used") == 0) exec_used_client(fd);
        else if (strcmp(mode, "fork-used") == 0) fork_used_client(fd);
        else if (strcmp(mode, "fork-close") == 0) fork_close_client(fd);
        else if (strcmp(mode, "fork-stream") == 0) fork_stream_client(fd);
        else if (strcmp(mode, "fork-first") == 0) fork_first_client(fd);
        else if (strcmp(mode, "fork-race") == 0) fork_race_client(fd);
        else if (strcmp(mode, "exec-self") == 0) exec_self_client(fd);
        else if (strcmp(mode, "stdio") == 0) stdio_client(fd);
        else if (strcmp(mode, "stdio-exec") == 0) stdio_exec_client(fd);
        else if (strcmp(mode, "stdio-dup2") == 0) stdio_dup2_client(fd);
        else if (strcmp(mode, "shutdown-wakes") == 0) {
            write_all(fd, "h", 1);
            char c; /* the acceptor's SHUT_RDWR ends its direction */
            if (read(fd, &c, 1) != 0) FAIL("no EOF after the peer's shutdown");
        }
        else if (strcmp(mode, "linger0") == 0) linger0_client(fd);
        else if (strstr(mode, "-quiet")) quiet_client(fd);
        else if (strstr(mode, "-busy")) busy_client(fd);
        else if (strcmp(mode, "slow-settle") == 0) slow_settle_client(fd);
        else if (strncmp(mode, "slow-", 5) == 0) slow_client(fd);
        else if (strcmp(mode, "epoll-unseen") == 0) unseen_client(fd);
        else if (strcmp(mode, "epoll-mod") == 0) epoll_mod_client(fd);
        else readiness_client(fd);
        close(fd);
        return 0;
    }
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) FAIL("accept");
    if (write(accepted_pipe[1], "a", 1) != 1) FAIL("accept signal");
    if (hangup) {
        hangup_reader(fd, pid);
        close(fd);
        printf("compat %s: ok\n", mode);
        return 0;
    }
    if (strcmp(mode, "peek") == 0) peek_server(fd);
    else if (reconnect || strcmp(mode, "dup") == 0) dup_server(fd);
    else if (strcmp(mode, "wake") == 0) wake_side(fd, 0);
    else if (strcmp(mode, "nonblock") == 0) nonblock_server(fd);
    else if (strcmp(mode, "threads") == 0) both_ways(fd, 12, 11);
    else if (strcmp(mode, "sendfile") == 0) sendfile_server(fd);
    else if (strcmp(mode, "aliases") == 0) aliases_server(fd);
    else if (strcmp(mode, "seccomp") == 0) seccomp_server(fd);
    else if (strcmp(mode, "splice") == 0) splice_server(fd);
    else if (strcmp(mode, "exec") == 0) exec_server(fd);
    else if (strcmp(mode, "exec-bare") == 0) exec_bare_server(fd);
    else if (strcmp(mode, "exec-bare-connect") == 0) echo_bytes(fd, fd);
    else if (strcmp(mode, "exec-bare-used") == 0 || strcmp(mode, "exec-bare-ahead") == 0) exec_bare_used_server(fd);
    else if (strcmp(mode, "exec-vfork") == 0) exec_vfork_server(fd);
    else if (strcmp(mode, "exec-closerange") == 0) exec_closing_server(fd, "range");
    else if (strcmp(mode, "exec-closeloop") == 0) exec_closing_server(fd, "loop");
    else if (strcmp(mode, "exec-connect") == 0 || strcmp(mode, "exec-closefrom") == 0) echo_bytes(fd, fd);
    else if (strcmp(mode, "epollout-et") == 0) epollout_writer(fd);
    else if (strcmp(mode, "epollout-lt") == 0) epollout_lt_writer(fd);
    else if (strcmp(mode, "epollout-short") == 0) epollout_short_writer(fd);
    else if (strcmp(mode, "sigsuspend") == 0) sigsuspend_server(fd);
    else if (strcmp(mode, "halfclose") == 0) halfclose_server(fd);
    else if (strcmp(mode, "fork-settling") == 0) fork_settling_server(fd);
    else if (strcmp(mode, "exec-used") == 0) exec_used_server(fd);
    else if (strcmp(mode, "fork-used") == 0) fork_used_server(fd);
    else if (strcmp(mode, "fork-close") == 0) fork_close_server(fd);
    else if (strcmp(mode, "fork-stream") == 0) fork_stream_server(fd);
    else if (strcmp(mode, "fork-first") == 0) fork_first_server(fd);
    else if (strcmp(mode, "fork-race") == 0) fork_race_server(fd);
    else if (strcmp(mode, "exec-self") == 0) exec_self_server(fd);
    else if (strcmp(mode, "stdio") == 0) stdio_server(fd);
    else if (strcmp(mode, "stdio-exec") == 0) stdio_exec_server(fd);
    else if (strcmp(mode, "stdio-dup2") == 0) stdio_dup2_server(fd);
    else if (strcmp(mode, "shutdown-wakes") == 0) shutdown_wakes_server(fd);
    else if (strcmp(mode, "linger0") == 0) linger0_server(fd);
    else if (strstr(mode, "-quiet")) quiet_server(fd);
    else if (strstr(mode, "-busy")) busy_server(fd);
    else if (strcmp(mode, "slow-settle") == 0) slow_settle_server(fd);
    else if (strncmp(mode, "slow-", 5) == 0) slow_server(fd);
    else if (strcmp(mode, "epoll-unseen") == 0) unseen_server(fd);
    else if (strcmp(mode, "epoll-mod") == 0) epoll_mod_server(fd);
    else if (!strcmp(mode, "poll") || !strcmp(mode, "select") || !strncmp(mode, "epoll-", 6)) readiness_server(fd);
    else FAIL("unknown mode");
    close(fd);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("client failed");
    printf("compat %s: ok\n", mode);
    return 0;
}
