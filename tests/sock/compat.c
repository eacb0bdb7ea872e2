/* viarun compatibility checks: one program, one TCP connection to itself
 * (a forked child dials, the parent accepts), one socket feature per MODE.
 * run.sh runs each MODE without viarun (the reference: kernel TCP) and
 * under viarun (where --stats must say the connection went over shm).
 *
 *   compat MODE   MODE: poll select epoll-lt epoll-et epoll-nested peek
 *                       dup threads sendfile splice exec exec-vfork exec-connect
 *                       exec-closerange exec-closeloop exec-closefrom exec-used
 *                       epollout-et epollout-lt fork-settling shutdown-wakes
 *                       linger0 ipv6 reuseport reuseport-plain selfloop stress reconnect
 *                       hangup
 *                       hangup-exit hangup-kill hangup-et wake nonblock
 *
 * Between hosts (tests/sock/hosts.sh): COMPAT_ADDR (IPv4) is where the
 * server listens instead of 127.0.0.1, and a child that dials first
 * enters the network namespace COMPAT_CLIENT_NETNS (a path such as
 * /var/run/netns/NAME), so the connection crosses a veth pair.
 *
 * Readiness is checked both ways: readable while data is unread, and NOT
 * readable once it is all read (a 100 ms poll must time out). The peers
 * sequence themselves with one-byte acks, never with sleeps; an alarm
 * turns a hang into a failure. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, "compat %s: ", mode); fprintf(stderr, __VA_ARGS__); \
                       fprintf(stderr, "\n"); exit(1); } while (0)
static const char *mode;
#define ROUNDS 30

/* A dialing child: into the client's namespace, if one is named. */
static void client_side(void) {
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
static unsigned char pattern(uint64_t seed, size_t i) {
    return (unsigned char)((i * 2654435761u) ^ (seed * 97) ^ (i >> 11));
}

static void write_all(int fd, const void *p, size_t n) {
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
static void read_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        ssize_t k = read(fd, c, n);
        if (k <= 0) FAIL("read: %zd %s", k, k < 0 ? strerror(errno) : "EOF");
        c += k;
        n -= (size_t)k;
    }
}
static void ack(int fd) { write_all(fd, "k", 1); }
static void await_ack(int fd) {
    char c;
    read_all(fd, &c, 1);
    if (c != 'k') FAIL("bad ack %d", c);
}
static void nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

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
static int pattern_file(char *b, size_t n, uint64_t seed) {
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

/* exec: a process hands the connection, not yet used, to a new program
 * (this one again) on its stdin and stdout: dup2, close, exec. `exec`:
 * the acceptor's forked handler does it, as inetd and tcpserver do, and
 * the new program echoes what the client sends. `exec-connect`: the
 * dialing child does it right after connect, as `nc -e` does, and the
 * new program sends and checks the echo. Under viarun the new program
 * must carry on the connection both ends agreed on: the peer waits for
 * its VI. */
#define EXEC_BYTES 200000
static void echo_bytes(int in, int out) {
    static char b[EXEC_BYTES];
    read_all(in, b, sizeof b);
    write_all(out, b, sizeof b);
}
static void check_echo(int in, int out) {
    static char b[EXEC_BYTES], back[EXEC_BYTES];
    for (size_t i = 0; i < sizeof b; i++) b[i] = (char)pattern(8, i);
    write_all(out, b, sizeof b);
    read_all(in, back, sizeof back);
    if (memcmp(b, back, sizeof b)) FAIL("echo through the exec'd program differs");
}
/* Puts `fd` on stdin and stdout and becomes `compat NEXT`. */
static void exec_on(int fd, const char *next) {
    if (dup2(fd, 0) != 0 || dup2(fd, 1) != 1) FAIL("dup2");
    close(fd);
    execl("/proc/self/exe", "compat", next, (char *)NULL);
    FAIL("exec: %s", strerror(errno));
}
static void exec_server(int fd) {
    pid_t h = fork();
    if (h < 0) FAIL("fork");
    if (h == 0) exec_on(fd, "exec-handler");
    int st;
    if (waitpid(h, &st, 0) != h || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("handler failed");
}
/* exec-vfork: as exec, but the handler is started as Python's subprocess
 * starts one: vfork, then dup2 and close in the child, in the parent's
 * memory, before the exec. The parent's own descriptors must be left as
 * they were: it then writes to its stdout. */
static void exec_vfork_server(int fd) {
    pid_t h = vfork();
    if (h < 0) FAIL("vfork");
    if (h == 0) {
        if (dup2(fd, 0) != 0 || dup2(fd, 1) != 1) _exit(3);
        close(fd);
        execl("/proc/self/exe", "compat", "exec-handler", (char *)NULL);
        _exit(4);
    }
    int st;
    if (waitpid(h, &st, 0) != h || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("handler failed");
    static const char line[] = "compat exec-vfork: the parent's stdout still works\n";
    if (write(1, line, sizeof line - 1) != (ssize_t)(sizeof line - 1)) FAIL("stdout: %s", strerror(errno));
}

/* exec-closerange, exec-closeloop, exec-closefrom: as exec, but before
 * its exec the handing process closes every descriptor above stderr, as
 * programs about to exec do: Python's subprocess by default (vfork, then
 * close_range), a loop of close (daemons), closefrom (OpenSSH; here on
 * the dialing side). The connection lives on in stdin and stdout, and the
 * new program must be able to carry on with it. */
static void close_above_stderr(const char *how) {
    if (strcmp(how, "range") == 0) {
        if (close_range(3, ~0U, 0)) _exit(5);
    } else if (strcmp(how, "from") == 0) {
        closefrom(3);
    } else {
        for (int fd = 3; fd < 1024; fd++) close(fd);
    }
}
static void exec_closing_on(int fd, const char *how, const char *next) {
    if (dup2(fd, 0) != 0 || dup2(fd, 1) != 1) _exit(3);
    close_above_stderr(how);
    execl("/proc/self/exe", "compat", next, (char *)NULL);
    _exit(4);
}
static void exec_closing_server(int fd, const char *how) {
    /* vfork where Python would use it, fork for the loop. */
    pid_t h = strcmp(how, "range") == 0 ? vfork() : fork();
    if (h < 0) FAIL("fork");
    if (h == 0) exec_closing_on(fd, how, "exec-handler");
    int st;
    if (waitpid(h, &st, 0) != h || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("handler failed");
}

/* fork-settling: a nonblocking connector's first write hands the
 * settling to a thread (under viarun: EAGAIN until the acceptor's first
 * use), and the process forks meanwhile. The child, which has no such
 * thread, writes once more and exits through exit(): neither may hang
 * (under viarun its write says EIO, as for a connection its parent
 * carries). Then the acceptor starts reading, and the connector's 1000
 * bytes must arrive after whatever the first two writes put in. */
#define SETTLE_BYTES 1000
/* Tells one side of a mode when to go on (see each mode). */
static int turn_pipe[2];
static void fork_settling_client(int fd) {
    nonblocking(fd);
    ssize_t w = write(fd, "x", 1);
    if (w != 1 && !(w < 0 && errno == EAGAIN)) FAIL("first write: %s", strerror(errno));
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    if (c == 0) {
        alarm(5); /* a hang here fails the test, not just the child */
        for (;;) {
            ssize_t k = write(fd, "y", 1);
            if (k == 1 || (k < 0 && errno != EAGAIN)) break;
            struct pollfd q = {fd, POLLOUT, 0};
            poll(&q, 1, 100);
        }
        exit(0);
    }
    int st;
    if (waitpid(c, &st, 0) != c) FAIL("waitpid");
    if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL("the child forked while settling hung (status %#x)", st);
    if (write(turn_pipe[1], "g", 1) != 1) FAIL("turn");
    char z[SETTLE_BYTES];
    memset(z, 'z', sizeof z);
    write_all(fd, z, sizeof z);
    shutdown(fd, SHUT_WR);
    for (;;) {
        struct pollfd q = {fd, POLLIN, 0};
        poll(&q, 1, 1000);
        char b;
        ssize_t k = read(fd, &b, 1);
        if (k == 0) break;
        if (k < 0 && errno == EAGAIN) continue;
        FAIL("no EOF: %zd %s", k, k < 0 ? strerror(errno) : "");
    }
}
static void fork_settling_server(int fd) {
    char t, b[SETTLE_BYTES + 8];
    if (read(turn_pipe[0], &t, 1) != 1) FAIL("turn");
    size_t got = 0;
    for (;;) {
        if (got == sizeof b) FAIL("more than expected");
        ssize_t k = read(fd, b + got, sizeof b - got);
        if (k < 0) FAIL("read: %s", strerror(errno));
        if (k == 0) break;
        got += (size_t)k;
    }
    size_t at = 0;
    if (at < got && b[at] == 'x') at++;
    if (at < got && b[at] == 'y') at++;
    if (got - at != SETTLE_BYTES) FAIL("%zu bytes after the first writes, not %d", got - at, SETTLE_BYTES);
    for (size_t i = at; i < got; i++) if (b[i] != 'z') FAIL("byte %zu differs", i);
}

/* exec-used: the dialing process uses the connection (one echo), then a
 * forked child puts it on stdin and stdout and execs a new program, as
 * bash does for `exec 3<>/dev/tcp/...; echo >&3; cat <&3`. Over kernel
 * TCP the new program carries on (writes "more", reads "data"). Under
 * viarun the stream is carried by the first process's VI and rings, so
 * the new program must get an error at once (ECONNRESET or EIO): never
 * the doorbell bytes as data, never a wait (the alarm). */
static void exec_used_client(int fd) {
    char b[4];
    write_all(fd, "used", 4);
    read_all(fd, b, 4);
    if (memcmp(b, "used", 4)) FAIL("first echo");
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    if (c == 0) exec_on(fd, "exec-used-child");
    int st;
    if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("the exec'd program failed (status %#x)", st);
}
static int exec_used_child(void) {
    alarm(10);
    char b[4];
    ssize_t w = write(1, "more", 4);
    if (w < 0 && (errno == ECONNRESET || errno == EIO)) return 0;
    if (w != 4) FAIL("write: %zd %s", w, strerror(errno));
    size_t got = 0;
    while (got < 4) {
        ssize_t k = read(0, b + got, 4 - got);
        if (k < 0 && (errno == ECONNRESET || errno == EIO) && got == 0) return 0;
        if (k <= 0) FAIL("read: %zd %s", k, k < 0 ? strerror(errno) : "EOF");
        got += (size_t)k;
    }
    if (memcmp(b, "data", 4)) FAIL("read %.4s, not data: another stream's bytes", b);
    return 0;
}
static void exec_used_server(int fd) {
    char b[4];
    read_all(fd, b, 4);
    write_all(fd, b, 4);
    ssize_t k = read(fd, b, 4);
    if (k == 4 && !memcmp(b, "more", 4)) write_all(fd, "data", 4);
    else if (k != 0 && !(k < 0 && errno == ECONNRESET)) FAIL("after the exec: %zd %s", k, k < 0 ? strerror(errno) : "");
}

/* epollout-et: a nonblocking writer waits for EPOLLOUT with EPOLLET (as
 * nginx does) after each EAGAIN; only then does the reader (told through
 * a pipe) drain the connection. Under viarun the kernel socket never
 * fills, so its writability must be announced anew when the data ring
 * has room again; a writer that gets no edge within 10 s fails. */
#define ET_BYTES (8u << 20)
static void epollout_writer(int fd) {
    /* Both ends use the connection first (under viarun the first use
     * meets the peer's), then the writer goes nonblocking. */
    char h;
    read_all(fd, &h, 1);
    if (fcntl(fd, F_SETFL, O_NONBLOCK)) FAIL("O_NONBLOCK");
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLET, .data.fd = fd}, out;
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) FAIL("epoll");
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
static void epollout_lt_writer(int fd) {
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
static void epollout_reader(int fd) {
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

/* reuseport: two listeners on one port (SO_REUSEPORT), so that only one
 * of them holds viarun's registration of the port; a child connects 16
 * times (from the client's namespace between hosts), each an echo of
 * 1000 bytes. A connection the kernel gives the other listener must not
 * leave its connector waiting for an answer. */
#define REUSE_CONNS 16
static int reuse_listener(struct sockaddr_in *a) {
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof *a;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) ||
        bind(fd, (struct sockaddr *)a, sizeof *a) || listen(fd, 32) ||
        getsockname(fd, (struct sockaddr *)a, &len)) FAIL("listen: %s", strerror(errno));
    return fd;
}
/* The connecting child: REUSE_CONNS echoes of 1000 bytes each, the
 * connector writing first; exits. */
static void reuse_clients(const struct sockaddr_in *a, uint64_t seed) {
    char b[1000], c[1000];
    for (int i = 0; i < REUSE_CONNS; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (const struct sockaddr *)a, sizeof *a)) FAIL("connect %d", i);
        for (size_t j = 0; j < sizeof b; j++) b[j] = (char)pattern((uint64_t)i + seed, j);
        write_all(fd, b, sizeof b);
        read_all(fd, c, sizeof c);
        if (memcmp(b, c, sizeof b)) FAIL("echo %d differs", i);
        close(fd);
    }
    exit(0);
}
/* Accepts one connection on `l` and echoes its 1000 bytes. */
static void reuse_serve_one(int l) {
    int fd = accept(l, NULL, NULL);
    if (fd < 0) FAIL("accept");
    char b[1000];
    read_all(fd, b, sizeof b);
    write_all(fd, b, sizeof b);
    close(fd);
}
static int reuseport(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    const char *addr = getenv("COMPAT_ADDR");
    if (addr && inet_pton(AF_INET, addr, &a.sin_addr) != 1) FAIL("COMPAT_ADDR %s", addr);
    int l[2];
    l[0] = reuse_listener(&a);
    l[1] = reuse_listener(&a);
    pid_t pid = fork();
    if (pid == 0) {
        client_side();
        reuse_clients(&a, 40);
    }
    int by[2] = {0, 0};
    for (int i = 0; i < REUSE_CONNS; i++) {
        struct pollfd p[2] = {{.fd = l[0], .events = POLLIN}, {.fd = l[1], .events = POLLIN}};
        if (poll(p, 2, 20000) <= 0) FAIL("no connection %d", i);
        int k = (p[0].revents & POLLIN) ? 0 : 1;
        reuse_serve_one(l[k]);
        by[k]++;
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("client failed");
    printf("compat reuseport: ok (%d and %d connections on the two listeners)\n", by[0], by[1]);
    return 0;
}

/* reuseport-plain: as reuseport, but the second listener's program does
 * not run under viarun (this program again, exec'd without LD_PRELOAD:
 * mode plain-listener), so nobody there can answer a connector that
 * found the port's registration: a connection the kernel gives it must
 * still go through, over kernel TCP. The connector writes first (as an
 * HTTP client does), so a connector waiting for an answer hangs. */
static int plain_listener(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    const char *addr = getenv("COMPAT_ADDR"), *port = getenv("COMPAT_PORT");
    if (addr && inet_pton(AF_INET, addr, &a.sin_addr) != 1) FAIL("COMPAT_ADDR %s", addr);
    if (!port) FAIL("COMPAT_PORT");
    a.sin_port = htons((uint16_t)atoi(port));
    int l = reuse_listener(&a), n = 0;
    if (write(1, "r", 1) != 1) FAIL("ready");
    for (;;) {
        struct pollfd p[2] = {{.fd = l, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
        if (poll(p, 2, -1) <= 0) FAIL("poll");
        if (p[1].revents) break; /* told to stop: stdin's EOF */
        reuse_serve_one(l);
        n++;
    }
    fprintf(stderr, "compat plain-listener: %d connections\n", n);
    return 0;
}
static int reuseport_plain(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    const char *addr = getenv("COMPAT_ADDR");
    if (addr && inet_pton(AF_INET, addr, &a.sin_addr) != 1) FAIL("COMPAT_ADDR %s", addr);
    int l = reuse_listener(&a), stop[2], ready[2], done[2];
    if (pipe(stop) || pipe(ready)) FAIL("pipe");
    char port[16];
    snprintf(port, sizeof port, "%u", ntohs(a.sin_port));
    pid_t plain = fork();
    if (plain == 0) {
        if (dup2(stop[0], 0) != 0 || dup2(ready[1], 1) != 1) _exit(3);
        close(l); /* and the pipes' other ends: stdin's EOF is the stop */
        close(stop[0]); close(stop[1]); close(ready[0]); close(ready[1]);
        unsetenv("LD_PRELOAD");
        setenv("COMPAT_PORT", port, 1);
        execl("/proc/self/exe", "compat", "plain-listener", (char *)NULL);
        _exit(4);
    }
    close(stop[0]);
    close(ready[1]);
    char r;
    if (read(ready[0], &r, 1) != 1) FAIL("plain listener not ready");
    if (pipe(done)) FAIL("pipe"); /* after the plain fork: its EOF is the client's exit */
    pid_t pid = fork();
    if (pid == 0) {
        close(done[0]);
        client_side();
        reuse_clients(&a, 60);
    }
    close(done[1]);
    int mine = 0;
    for (;;) {
        struct pollfd p[2] = {{.fd = l, .events = POLLIN}, {.fd = done[0], .events = POLLIN}};
        if (poll(p, 2, -1) <= 0) FAIL("poll");
        if (p[0].revents & POLLIN) {
            reuse_serve_one(l);
            mine++;
            continue;
        }
        break; /* the client is done: its end of `done` closed */
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("client failed");
    close(stop[1]);
    if (waitpid(plain, &st, 0) != plain || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("plain listener failed");
    printf("compat reuseport-plain: ok (%d of %d connections on the viarun listener)\n", mine, REUSE_CONNS);
    return 0;
}

/* selfloop: one thread is both ends (an event loop that connects to its
 * own listener, as asyncio tests do): nonblocking sockets, a
 * level-triggered epoll loop that accepts, echoes and checks 100 000
 * bytes. Neither end's first use may wait for the other's. */
#define SELF_BYTES 100000
/* ipv6: one connection over IPv6 loopback (::1), 300 000 bytes echoed
 * and checked, then EOF both ways (one host only). */
#define V6_BYTES 300000
static int ipv6(void) {
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    socklen_t len = sizeof a;
    int l = socket(AF_INET6, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4) ||
        getsockname(l, (struct sockaddr *)&a, &len)) FAIL("listen on ::1: %s", strerror(errno));
    static char out[V6_BYTES], back[V6_BYTES];
    for (size_t i = 0; i < sizeof out; i++) out[i] = (char)pattern(13, i);
    pid_t pid = fork();
    if (pid == 0) {
        close(l);
        int fd = socket(AF_INET6, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) FAIL("connect to ::1: %s", strerror(errno));
        write_all(fd, out, sizeof out);
        shutdown(fd, SHUT_WR);
        read_all(fd, back, sizeof back);
        if (memcmp(out, back, sizeof out)) FAIL("echo over IPv6 differs");
        if (read(fd, back, 1) != 0) FAIL("no EOF over IPv6");
        exit(0);
    }
    int fd = accept(l, NULL, NULL);
    if (fd < 0) FAIL("accept");
    read_all(fd, back, sizeof back);
    char extra;
    if (read(fd, &extra, 1) != 0) FAIL("no EOF after the client's shutdown");
    write_all(fd, back, sizeof back);
    close(fd);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("client failed");
    printf("compat ipv6: ok\n");
    return 0;
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
static void shutdown_wakes_server(int fd) {
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
static void linger0_server(int fd) {
    char c;
    read_all(fd, &c, 1);
    struct linger lg = {1, 0};
    if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg)) FAIL("SO_LINGER");
}
static void linger0_client(int fd) {
    write_all(fd, "h", 1);
    char c;
    ssize_t k = read(fd, &c, 1);
    if (!(k < 0 && errno == ECONNRESET)) FAIL("read after the peer's reset: %zd %s", k, k < 0 ? strerror(errno) : "");
}

static int selfloop(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4) ||
        getsockname(l, (struct sockaddr *)&a, &alen)) FAIL("listen");
    int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (connect(c, (struct sockaddr *)&a, sizeof a) && errno != EINPROGRESS) FAIL("connect: %s", strerror(errno));
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l};
    epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
    ev.events = EPOLLIN | EPOLLOUT; ev.data.fd = c;
    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
    static char out[SELF_BYTES], echo[SELF_BYTES], back[SELF_BYTES];
    for (size_t i = 0; i < sizeof out; i++) out[i] = (char)pattern(10, i);
    size_t sent = 0, echoed_in = 0, echoed_out = 0, got = 0;
    int s = -1;
    while (got < SELF_BYTES) {
        struct epoll_event e[4];
        int n = epoll_wait(ep, e, 4, 10000);
        if (n <= 0) FAIL("nothing ready within 10 s (sent %zu, echoed %zu, got %zu)", sent, echoed_out, got);
        for (int i = 0; i < n; i++) {
            int fd = e[i].data.fd;
            if (fd == l) {
                s = accept4(l, NULL, NULL, SOCK_NONBLOCK);
                if (s < 0) { if (errno == EAGAIN) continue; FAIL("accept"); }
                struct epoll_event sv = {.events = EPOLLIN | EPOLLOUT, .data.fd = s};
                epoll_ctl(ep, EPOLL_CTL_ADD, s, &sv);
            } else if (fd == c) {
                if ((e[i].events & EPOLLOUT) && sent < SELF_BYTES) {
                    ssize_t k = write(c, out + sent, SELF_BYTES - sent);
                    if (k > 0) sent += (size_t)k;
                    else if (errno != EAGAIN) FAIL("client write: %s", strerror(errno));
                }
                if (e[i].events & EPOLLIN) {
                    ssize_t k = read(c, back + got, SELF_BYTES - got);
                    if (k > 0) got += (size_t)k;
                    else if (k == 0 || errno != EAGAIN) FAIL("client read: %zd %s", k, strerror(errno));
                }
            } else if (fd == s) {
                if ((e[i].events & EPOLLIN) && echoed_in < SELF_BYTES) {
                    ssize_t k = read(s, echo + echoed_in, SELF_BYTES - echoed_in);
                    if (k > 0) echoed_in += (size_t)k;
                    else if (k == 0 || errno != EAGAIN) FAIL("server read: %zd %s", k, strerror(errno));
                }
                if ((e[i].events & EPOLLOUT) && echoed_out < echoed_in) {
                    ssize_t k = write(s, echo + echoed_out, echoed_in - echoed_out);
                    if (k > 0) echoed_out += (size_t)k;
                    else if (errno != EAGAIN) FAIL("server write: %s", strerror(errno));
                }
            }
        }
    }
    if (memcmp(out, back, sizeof out)) FAIL("echo differs");
    close(c);
    close(s);
    close(l);
    printf("compat selfloop: ok\n");
    return 0;
}

/* Across fork: clients fork before they connect; the server forks a
 * handler per accepted connection, which is the first to use it. Each
 * pair streams both ways at once, random sizes, every byte checked. */
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
    if (strcmp(mode, "exec-used-child") == 0) return exec_used_child();
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
        else if (strcmp(mode, "splice") == 0) splice_client(fd);
        else if (strcmp(mode, "exec") == 0 || strcmp(mode, "exec-vfork") == 0 ||
                 strcmp(mode, "exec-closerange") == 0 || strcmp(mode, "exec-closeloop") == 0) check_echo(fd, fd);
        else if (strcmp(mode, "exec-connect") == 0) exec_on(fd, "exec-dialer");
        else if (strcmp(mode, "exec-closefrom") == 0) exec_closing_on(fd, "from", "exec-dialer");
        else if (strcmp(mode, "epollout-et") == 0 || strcmp(mode, "epollout-lt") == 0) epollout_reader(fd);
        else if (strcmp(mode, "fork-settling") == 0) fork_settling_client(fd);
        else if (strcmp(mode, "exec-used") == 0) exec_used_client(fd);
        else if (strcmp(mode, "shutdown-wakes") == 0) {
            write_all(fd, "h", 1);
            char c; /* the acceptor's SHUT_RDWR ends its direction */
            if (read(fd, &c, 1) != 0) FAIL("no EOF after the peer's shutdown");
        }
        else if (strcmp(mode, "linger0") == 0) linger0_client(fd);
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
    else if (strcmp(mode, "splice") == 0) splice_server(fd);
    else if (strcmp(mode, "exec") == 0) exec_server(fd);
    else if (strcmp(mode, "exec-vfork") == 0) exec_vfork_server(fd);
    else if (strcmp(mode, "exec-closerange") == 0) exec_closing_server(fd, "range");
    else if (strcmp(mode, "exec-closeloop") == 0) exec_closing_server(fd, "loop");
    else if (strcmp(mode, "exec-connect") == 0 || strcmp(mode, "exec-closefrom") == 0) echo_bytes(fd, fd);
    else if (strcmp(mode, "epollout-et") == 0) epollout_writer(fd);
    else if (strcmp(mode, "epollout-lt") == 0) epollout_lt_writer(fd);
    else if (strcmp(mode, "fork-settling") == 0) fork_settling_server(fd);
    else if (strcmp(mode, "exec-used") == 0) exec_used_server(fd);
    else if (strcmp(mode, "shutdown-wakes") == 0) shutdown_wakes_server(fd);
    else if (strcmp(mode, "linger0") == 0) linger0_server(fd);
    else if (!strcmp(mode, "poll") || !strcmp(mode, "select") || !strncmp(mode, "epoll-", 6)) readiness_server(fd);
    else FAIL("unknown mode");
    close(fd);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("client failed");
    printf("compat %s: ok\n", mode);
    return 0;
}
