/* compat (see compat.c): listeners and the setting up of connections.
 * Modes reuseport, reuseport-plain (with plain-listener), ipv6,
 * selfloop. */
#include "compat.h"

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
int reuseport(void) {
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
int plain_listener(void) {
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
int reuseport_plain(void) {
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

/* ipv6: one connection over IPv6 loopback (::1), 300 000 bytes echoed
 * and checked, then EOF both ways (one host only). */
#define V6_BYTES 300000
int ipv6(void) {
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


/* selfloop: one thread is both ends (an event loop that connects to its
 * own listener, as asyncio tests do): nonblocking sockets, a
 * level-triggered epoll loop that accepts, echoes and checks 100 000
 * bytes. Neither end's first use may wait for the other's. */
#define SELF_BYTES 100000
int selfloop(void) {
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
