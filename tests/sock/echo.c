/* viarun test: a client sends random-sized blocks, a server echoes them;
 * both check a checksum of everything in both directions. The server
 * listens first and tells the client its port through a pipe (readiness,
 * no sleeps). Exits 0 on success. Usage: echo [TOTAL_BYTES] */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t mix(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv) {
    size_t total = argc > 1 ? strtoul(argv[1], NULL, 10) : 4u << 20;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 4) ||
        getsockname(lfd, (struct sockaddr *)&a, &len)) {
        perror("listen");
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(lfd);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a)) { perror("connect"); _exit(1); }
        unsigned char *buf = malloc(1 << 17), *back = malloc(1 << 17);
        uint64_t sent = 14695981039346656037ULL, got = sent;
        size_t done = 0;
        srand(7);
        while (done < total) {
            size_t n = 1 + (size_t)rand() % (1 << 17);
            if (n > total - done) n = total - done;
            for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)rand();
            if (write_all(fd, buf, n)) { perror("client write"); _exit(1); }
            sent = mix(sent, buf, n);
            size_t r = 0;
            while (r < n) {
                ssize_t k = read(fd, back + r, n - r);
                if (k <= 0) { perror("client read"); _exit(1); }
                r += (size_t)k;
            }
            got = mix(got, back, n);
            done += n;
        }
        shutdown(fd, SHUT_WR);
        char c;
        if (read(fd, &c, 1) != 0) { fprintf(stderr, "no EOF\n"); _exit(1); }
        close(fd);
        _exit(sent == got ? 0 : 3);
    }
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) { perror("accept"); return 1; }
    unsigned char buf[65536];
    size_t echoed = 0;
    for (;;) {
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0) { perror("server read"); return 1; }
        if (k == 0) break;
        if (write_all(fd, buf, (size_t)k)) { perror("server write"); return 1; }
        echoed += (size_t)k;
    }
    close(fd);
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || echoed != total) {
        fprintf(stderr, "echo: client status %d, echoed %zu of %zu\n", st, echoed, total);
        return 1;
    }
    printf("echo: %zu bytes checked both ways\n", total);
    return 0;
}
