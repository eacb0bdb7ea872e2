/* Mode seccomp: as OpenSSH's privilege-separated server does, a child
 * forked after the connection was used puts itself under a seccomp filter
 * that kills it at any system call but a few (read, write, poll and the
 * like), then talks on the connection; its parent uses the connection
 * again once the child is gone. The client reads the way OpenSSH's does:
 * nonblocking, poll, then read, where a read that says EAGAIN after poll
 * said readable is fatal. Under viarun the library may make none of its
 * own calls in the child (before: the child was killed, SIGSYS, at the
 * library's first fcntl); the connection is handed to the kernel right
 * before the filter goes in. Every byte checked. */
#include "compat.h"
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>

#define BULK 100000

#if defined(__x86_64__)
#define OUR_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define OUR_ARCH AUDIT_ARCH_AARCH64
#else
#error "seccomp test: unknown architecture"
#endif

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
                  BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static void sandbox(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, OUR_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW(__NR_read), ALLOW(__NR_write), ALLOW(__NR_ppoll),
#ifdef __NR_poll
        ALLOW(__NR_poll),
#endif
        ALLOW(__NR_exit), ALLOW(__NR_exit_group), ALLOW(__NR_rt_sigreturn),
        ALLOW(__NR_futex), ALLOW(__NR_getpid), ALLOW(__NR_clock_gettime),
        ALLOW(__NR_brk), ALLOW(__NR_mmap), ALLOW(__NR_munmap), ALLOW(__NR_madvise),
        ALLOW(__NR_rt_sigprocmask), ALLOW(__NR_clock_nanosleep),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) FAIL("no_new_privs: %s", strerror(errno));
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) FAIL("seccomp: %s", strerror(errno));
}

/* Reads exactly n bytes with read() alone (the filter allows no more). */
static void plain_read_all(int fd, char *p, size_t n) {
    while (n > 0) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, -1) != 1) _exit(11);
        ssize_t k = read(fd, p, n);
        if (k <= 0) _exit(12);
        p += k;
        n -= (size_t)k;
    }
}
static void plain_write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EAGAIN) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            poll(&pf, 1, -1);
            continue;
        }
        if (k <= 0) _exit(13);
        p += k;
        n -= (size_t)k;
    }
}

void seccomp_server(int fd) {
    char b[9];
    read_all(fd, b, 5); /* "hello"; "more!" stays unread here */
    if (memcmp(b, "hello", 5)) FAIL("request %.5s", b);
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    if (c == 0) {
        sandbox();
        static char bulk[BULK];
        plain_read_all(fd, b, 5);
        if (memcmp(b, "more!", 5)) _exit(14);
        plain_write_all(fd, "world", 5);
        for (size_t i = 0; i < BULK; i++) bulk[i] = (char)pattern(31, i);
        plain_write_all(fd, bulk, BULK);
        plain_read_all(fd, bulk, BULK);
        for (size_t i = 0; i < BULK; i++)
            if (bulk[i] != (char)pattern(32, i)) _exit(15);
        _exit(0);
    }
    int st;
    if (waitpid(c, &st, 0) != c) FAIL("waitpid");
    if (WIFSIGNALED(st)) FAIL("the sandboxed child was killed by signal %d", WTERMSIG(st));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) FAIL("the sandboxed child exited %d", WEXITSTATUS(st));
    write_all(fd, "done", 4);
    read_all(fd, b, 3);
    if (memcmp(b, "bye", 3)) FAIL("last word %.3s", b);
}

/* Nonblocking, poll, then read: EAGAIN after a readable poll fails. */
static void strict_read_all(int fd, char *p, size_t n) {
    while (n > 0) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 10000) != 1) FAIL("no readiness in 10 s");
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EAGAIN) FAIL("read said EAGAIN after poll said readable");
        if (k <= 0) FAIL("read: %zd %s", k, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
}

void seccomp_client(int fd) {
    write_all(fd, "hellomore!", 10);
    nonblocking(fd);
    char b[5];
    strict_read_all(fd, b, 5);
    if (memcmp(b, "world", 5)) FAIL("answer %.5s", b);
    static char bulk[BULK];
    strict_read_all(fd, bulk, BULK);
    for (size_t i = 0; i < BULK; i++)
        if (bulk[i] != (char)pattern(31, i)) FAIL("bulk byte %zu differs", i);
    for (size_t i = 0; i < BULK; i++) bulk[i] = (char)pattern(32, i);
    size_t off = 0;
    while (off < BULK) {
        ssize_t k = write(fd, bulk + off, BULK - off);
        if (k < 0 && errno == EAGAIN) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            poll(&pf, 1, 10000);
            continue;
        }
        if (k <= 0) FAIL("write: %s", strerror(errno));
        off += (size_t)k;
    }
    strict_read_all(fd, b, 4);
    if (memcmp(b, "done", 4)) FAIL("done %.4s", b);
    write_all(fd, "bye", 3);
}
