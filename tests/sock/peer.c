/* viarun test peers, run as separate programs so one side can run without
 * viarun:
 *   peer server MODE   listens on 127.0.0.1, prints its port, accepts one
 *                      connection; MODE echo: echoes until EOF;
 *                      MODE die: reads one byte, then SIGKILLs itself
 *   peer client PORT N writes N checksummed bytes, reads them back, checks
 *   peer survivor PORT writes one byte to a server in MODE die, then
 *                      expects EOF/ECONNRESET on read and EPIPE on write,
 *                      each within 1 s.
 * PEER_ADDR (an IPv4 address, default 127.0.0.1) is where the server
 * listens and the clients dial: another host's (namespace's) address
 * for the tests between hosts. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void peer_addr(struct sockaddr_in *a) {
    const char *s = getenv("PEER_ADDR");
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s && inet_pton(AF_INET, s, &a->sin_addr) != 1) {
        fprintf(stderr, "PEER_ADDR: not an IPv4 address: %s\n", s);
        exit(2);
    }
}

static int dial(int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    peer_addr(&a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) { perror("connect"); exit(1); }
    return fd;
}

static int server(const char *mode) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    peer_addr(&a);
    socklen_t len = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 4) ||
        getsockname(lfd, (struct sockaddr *)&a, &len)) { perror("listen"); return 1; }
    printf("%d\n", ntohs(a.sin_port));
    fflush(stdout);
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) { perror("accept"); return 1; }
    char buf[65536];
    if (strcmp(mode, "die") == 0) {
        if (read(fd, buf, 1) != 1) return 1;
        raise(SIGKILL);
    }
    for (;;) {
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0) { perror("server read"); return 1; }
        if (k == 0) return 0;
        for (ssize_t o = 0; o < k;) {
            ssize_t w = write(fd, buf + o, (size_t)(k - o));
            if (w <= 0) { perror("server write"); return 1; }
            o += w;
        }
    }
}

static int client(int port, size_t total) {
    int fd = dial(port);
    unsigned char *out = malloc(total), *in = malloc(total);
    for (size_t i = 0; i < total; i++) out[i] = (unsigned char)(i * 131 + (i >> 9));
    size_t sent = 0, got = 0;
    while (got < total) {
        if (sent < total) {
            size_t n = total - sent < 50000 ? total - sent : 50000;
            ssize_t w = write(fd, out + sent, n);
            if (w <= 0) { perror("client write"); return 1; }
            sent += (size_t)w;
        }
        while (got < sent) {
            ssize_t k = read(fd, in + got, sent - got);
            if (k <= 0) { perror("client read"); return 1; }
            got += (size_t)k;
        }
    }
    shutdown(fd, SHUT_WR);
    char c;
    if (read(fd, &c, 1) != 0) { fprintf(stderr, "client: no EOF\n"); return 1; }
    if (memcmp(in, out, total)) { fprintf(stderr, "client: data differs\n"); return 1; }
    printf("client: %zu bytes echoed intact\n", total);
    return 0;
}

static int survivor(int port) {
    signal(SIGPIPE, SIG_IGN);
    int fd = dial(port);
    if (write(fd, "x", 1) != 1) { perror("survivor write"); return 1; }
    double t0 = now();
    char c;
    ssize_t k = read(fd, &c, 1);
    double t_read = now() - t0;
    if (!(k == 0 || (k < 0 && errno == ECONNRESET)) || t_read > 1.0) {
        fprintf(stderr, "survivor: read gave %zd (%s) after %.3f s\n", k, strerror(errno), t_read);
        return 1;
    }
    t0 = now();
    char buf[4096] = {0};
    while (write(fd, buf, sizeof buf) > 0) {
        if (now() - t0 > 1.0) { fprintf(stderr, "survivor: writes still succeed\n"); return 1; }
    }
    if (errno != EPIPE && errno != ECONNRESET) { perror("survivor: write error"); return 1; }
    printf("survivor: read %s after %.3f s, write %s after %.3f s\n", k == 0 ? "EOF" : "ECONNRESET",
           t_read, strerror(errno), now() - t0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "server") == 0) return server(argv[2]);
    /* client_swap N PORT: the port last, as the test script passes it. */
    if (argc >= 4 && strcmp(argv[1], "client_swap") == 0) return client(atoi(argv[3]), strtoul(argv[2], NULL, 10));
    if (argc >= 4 && strcmp(argv[1], "client") == 0) return client(atoi(argv[2]), strtoul(argv[3], NULL, 10));
    if (argc >= 3 && strcmp(argv[1], "survivor") == 0) return survivor(atoi(argv[2]));
    fprintf(stderr, "usage: peer server echo|die | client PORT N | survivor PORT\n");
    return 2;
}
