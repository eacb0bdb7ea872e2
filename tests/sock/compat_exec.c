/* compat (see compat.c): handing a connection across fork and exec.
 * Modes exec, exec-vfork, exec-connect, exec-bare, exec-bare-connect,
 * exec-bare-used, exec-bare-ahead, exec-closerange, exec-closeloop,
 * exec-closefrom, exec-used, exec-self, fork-used, fork-close, fork-stream,
 * fork-settling. */
#include "compat.h"

/* exec: a process hands the connection, not yet used, to a new program
 * (this one again) on its stdin and stdout: dup2, close, exec. `exec`:
 * the acceptor's forked handler does it, as inetd and tcpserver do, and
 * the new program echoes what the client sends. `exec-connect`: the
 * dialing child does it right after connect, as `nc -e` does, and the
 * new program sends and checks the echo. Under viarun the new program
 * must carry on the connection both ends agreed on: the peer waits for
 * its VI. */
#define EXEC_BYTES 200000
void echo_bytes(int in, int out) {
    static char b[EXEC_BYTES];
    read_all(in, b, sizeof b);
    write_all(out, b, sizeof b);
}
void check_echo(int in, int out) {
    static char b[EXEC_BYTES], back[EXEC_BYTES];
    for (size_t i = 0; i < sizeof b; i++) b[i] = (char)pattern(8, i);
    write_all(out, b, sizeof b);
    read_all(in, back, sizeof back);
    if (memcmp(b, back, sizeof b)) FAIL("echo through the exec'd program differs");
}
/* Puts `fd` on stdin and stdout and becomes `compat NEXT`. */
void exec_on(int fd, const char *next) {
    if (dup2(fd, 0) != 0 || dup2(fd, 1) != 1) FAIL("dup2");
    close(fd);
    execl("/proc/self/exe", "compat", next, (char *)NULL);
    FAIL("exec: %s", strerror(errno));
}
/* A forked handler becomes `compat NEXT` on the connection; waits for it. */
void exec_handler(int fd, const char *next) {
    pid_t h = fork();
    if (h < 0) FAIL("fork");
    if (h == 0) exec_on(fd, next);
    int st;
    if (waitpid(h, &st, 0) != h || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("handler failed");
}
void exec_server(int fd) { exec_handler(fd, "exec-handler"); }

/* exec-bare, exec-bare-connect: as exec and exec-connect, but the new
 * program runs without viarun (an environment without LD_PRELOAD, as a
 * statically linked or set-user-ID program would): it reads and writes
 * the kernel socket only. The connection both ends agreed on and did not
 * use yet must then stay on kernel TCP, with no byte of viarun's in the
 * stream (before, the peer's hello reached the new program as data and
 * the peer waited for good for a VI nobody made). */
static void exec_bare_on(int fd, const char *next) {
    if (dup2(fd, 0) != 0 || dup2(fd, 1) != 1) FAIL("dup2");
    close(fd);
    char *argv[] = {"compat", (char *)next, NULL};
    char *envp[] = {"COMPAT_BARE=1", NULL};
    execve("/proc/self/exe", argv, envp);
    FAIL("exec: %s", strerror(errno));
}
void exec_bare_server(int fd) {
    pid_t h = fork();
    if (h < 0) FAIL("fork");
    if (h == 0) exec_bare_on(fd, strcmp(mode, "exec-bare-used") == 0 ? "exec-greeter" : "exec-handler");
    int st;
    if (waitpid(h, &st, 0) != h || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("handler failed");
}
void exec_bare_client(int fd) { exec_bare_on(fd, "exec-dialer"); }

/* exec-bare-used: the acceptor reads the client's request (so under
 * viarun the connection is carried), then its forked handler execs a
 * program without viarun on it, which greets the client and echoes
 * EXEC_BYTES. The client sends nothing more until the greeting came, so
 * nothing of its lies unread in the acceptor's ring at the exec: the
 * stream goes back to the kernel, plain for the new program (before, it
 * read the client's doorbells as data and both waited for good). */
void exec_bare_used_client(int fd) {
    write_all(fd, "r", 1);
    char g[5];
    read_all(fd, g, sizeof g);
    if (memcmp(g, "ready", sizeof g)) FAIL("greeting %.5s", g);
    check_echo(fd, fd);
}
void exec_bare_used_server(int fd) {
    char r;
    read_all(fd, &r, 1);
    if (r != 'r') FAIL("request %c", r);
    exec_bare_server(fd);
}
/* exec-bare-ahead: as exec-bare-used, but the client sends its request
 * and the whole payload at once, so the payload lies unread in the
 * acceptor's ring when its handler execs the program without viarun:
 * the client's side must send it again through the kernel. */
void exec_bare_ahead_client(int fd) {
    static char b[1 + EXEC_BYTES], back[EXEC_BYTES];
    b[0] = 'r';
    for (size_t i = 0; i < EXEC_BYTES; i++) b[1 + i] = (char)pattern(8, i);
    write_all(fd, b, sizeof b);
    read_all(fd, back, sizeof back);
    if (memcmp(b + 1, back, sizeof back)) FAIL("echo through the exec'd program differs");
}
int exec_bare_greeter(void) {
    write_all(1, "ready", 5);
    echo_bytes(0, 1);
    return 0;
}
/* exec-vfork: as exec, but the handler is started as Python's subprocess
 * starts one: vfork, then dup2 and close in the child, in the parent's
 * memory, before the exec. The parent's own descriptors must be left as
 * they were: it then writes to its stdout. */
void exec_vfork_server(int fd) {
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
void exec_closing_on(int fd, const char *how, const char *next) {
    if (dup2(fd, 0) != 0 || dup2(fd, 1) != 1) _exit(3);
    close_above_stderr(how);
    execl("/proc/self/exe", "compat", next, (char *)NULL);
    _exit(4);
}
void exec_closing_server(int fd, const char *how) {
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
void fork_settling_client(int fd) {
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
void fork_settling_server(int fd) {
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

/* The dialing side's first use of a connection: writes `w` and reads
 * its echo. */
static void use_once(int fd, const char *w) {
    char b[16];
    size_t n = strlen(w);
    write_all(fd, w, n);
    read_all(fd, b, n);
    if (memcmp(b, w, n)) FAIL("first echo");
}
/* The server's side of it: echoes `n` bytes. */
static void echo_once(int fd, size_t n) {
    char b[16];
    read_all(fd, b, n);
    write_all(fd, b, n);
}
/* Waits for child `c`, which must exit with 0. */
static void wait_child(pid_t c) {
    int st;
    if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("child %d failed (status %#x)", (int)c, st);
}

/* exec-used: the dialing process uses the connection (one echo), then a
 * forked child puts it on stdin and stdout and execs a new program, as
 * bash does for `exec 3<>/dev/tcp/...; echo >&3; cat <&3`. The new
 * program must carry on (writes "more", reads "data"): over kernel TCP
 * as a matter of course; under viarun the connection is handed back to
 * the kernel at the new program's first call (between hosts the
 * dialer's library does it on the new program's request). */
void exec_used_client(int fd) {
    use_once(fd, "used");
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    if (c == 0) exec_on(fd, "exec-used-child");
    wait_child(c);
}
int exec_used_child(void) {
    alarm(10);
    char b[4];
    ssize_t w = write(1, "more", 4);
    if (w != 4) FAIL("write: %zd %s", w, strerror(errno));
    size_t got = 0;
    while (got < 4) {
        ssize_t k = read(0, b + got, 4 - got);
        if (k <= 0) FAIL("read: %zd %s", k, k < 0 ? strerror(errno) : "EOF");
        got += (size_t)k;
    }
    if (memcmp(b, "data", 4)) FAIL("read %.4s, not data: another stream's bytes", b);
    return 0;
}
void exec_used_server(int fd) {
    char b[4];
    echo_once(fd, 4);
    read_all(fd, b, 4);
    if (memcmp(b, "more", 4)) FAIL("after the exec: %.4s, not more", b);
    write_all(fd, "data", 4);
}

/* fork-used: the dialing process uses the connection and leaves data
 * unread in both directions, then forks, and both processes use the one
 * socket, as with kernel TCP: the child reads the rest of what the
 * server sent (995 of 1000 bytes; the echo and the first 5 were read
 * before the fork),
 * then parent and child each write FORK_RECORDS records of 64 bytes at
 * once (writer, number, check; one record at a time: see record_turn),
 * and the server must get every record,
 * each writer's in order; after the child exits the parent writes a last
 * record and reads the server's verdict. Under viarun the child's first
 * call hands the connection back to the kernel (one host). */
#define FORK_RECORDS 2000
#define FORK_UNREAD 1000
struct fork_record { uint32_t writer, number, check; char pad[52]; };
static uint32_t record_check(uint32_t w, uint32_t n) { return w * 2654435761u ^ n * 40503u ^ 0x5a5a5a5au; }
/* Taken around each record: two processes writing one TCP socket at once
 * may have their writes interleaved mid-record (a send that waits for
 * buffer space lets the other one in; kernel TCP alone tore records this
 * way in 4 of 60 runs between namespaces beside two CPU hogs). */
static sem_t *record_turn;
static void write_records(int fd, uint32_t writer, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        struct fork_record r = {writer, i, record_check(writer, i), {0}};
        while (sem_wait(record_turn) && errno == EINTR) {}
        write_all(fd, &r, sizeof r);
        sem_post(record_turn);
    }
}
void fork_used_client(int fd) {
    char b[FORK_UNREAD + 5];
    record_turn = mmap(NULL, sizeof *record_turn, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (record_turn == MAP_FAILED || sem_init(record_turn, 1, 1)) FAIL("semaphore");
    use_once(fd, "hello");
    read_all(fd, b + 5, 5); /* the first 5 bytes of the data */
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    if (c == 0) {
        alarm(20);
        read_all(fd, b + 10, FORK_UNREAD - 5);
        for (size_t i = 0; i < FORK_UNREAD; i++)
            if ((unsigned char)b[5 + i] != pattern(3, i)) FAIL("child: byte %zu of the data differs", i);
        write_records(fd, 1, FORK_RECORDS);
        _exit(0);
    }
    write_records(fd, 2, FORK_RECORDS);
    wait_child(c);
    write_records(fd, 3, 1);
    read_all(fd, b, 4);
    if (memcmp(b, "good", 4)) FAIL("server's verdict %.4s", b);
}
void fork_used_server(int fd) {
    char b[FORK_UNREAD];
    echo_once(fd, 5);
    for (size_t i = 0; i < FORK_UNREAD; i++) b[i] = (char)pattern(3, i);
    write_all(fd, b, FORK_UNREAD);
    uint32_t next[4] = {0, 0, 0, 0};
    for (;;) {
        struct fork_record r;
        read_all(fd, &r, sizeof r);
        if (r.writer < 1 || r.writer > 3 || r.check != record_check(r.writer, r.number))
            FAIL("a record torn or from nowhere (writer %u, number %u)", r.writer, r.number);
        if (r.number != next[r.writer]) FAIL("writer %u: record %u, wanted %u", r.writer, r.number, next[r.writer]);
        next[r.writer]++;
        if (r.writer == 3) break;
    }
    if (next[1] != FORK_RECORDS || next[2] != FORK_RECORDS) FAIL("records: child %u, parent %u", next[1], next[2]);
    write_all(fd, "good", 4);
}

/* fork-first: the dialing process forks before it uses the connection;
 * the child uses it first (one echo, then 5 bytes of the server's 1000)
 * and exits; then the parent reads the other 995 and answers. Under
 * viarun the child made the VI and took it with it: the parent must get
 * the bytes left in it (before, its first read said EIO). */
/* Runs `first` on `fd` in a child forked before anyone here used the
 * connection, and waits for it. */
static void in_child_first(int fd, void (*first)(int)) {
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    if (c == 0) {
        alarm(20);
        first(fd);
        _exit(0);
    }
    wait_child(c);
}
static void first_client_use(int fd) {
    char b[5];
    use_once(fd, "hello");
    read_all(fd, b, 5);
}
void fork_first_client(int fd) {
    char b[FORK_UNREAD];
    in_child_first(fd, first_client_use);
    read_all(fd, b + 5, FORK_UNREAD - 5);
    for (size_t i = 5; i < FORK_UNREAD; i++)
        if ((unsigned char)b[i] != pattern(3, i)) FAIL("parent: byte %zu of the data differs", i);
    write_all(fd, "done", 4);
    read_all(fd, b, 4);
    if (memcmp(b, "good", 4)) FAIL("server's verdict %.4s", b);
}
/* The accepting end does the same: a child it forks before the first use
 * echoes and writes the 1000 bytes, then exits; the parent takes the
 * client's answer. */
static void first_server_use(int fd) {
    char b[FORK_UNREAD];
    echo_once(fd, 5);
    for (size_t i = 0; i < FORK_UNREAD; i++) b[i] = (char)pattern(3, i);
    write_all(fd, b, FORK_UNREAD);
}
void fork_first_server(int fd) {
    char b[4];
    in_child_first(fd, first_server_use);
    read_all(fd, b, 4);
    if (memcmp(b, "done", 4)) FAIL("client's word %.4s", b);
    write_all(fd, "good", 4);
}

/* fork-race: each end forks before it uses the connection, and both of
 * its processes write a word at once (the child exits at once); then the
 * parent reads the peer's two words, in either order. Under viarun the
 * process that came second to the unused connection, while the other
 * was setting it up, said EIO; or its switch byte went before the
 * other's hello, which the peer then read as data. */
static void race_words(int fd, const char *kid, const char *dad, const char *want1, const char *want2) {
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    if (c == 0) {
        alarm(20);
        write_all(fd, kid, 4);
        _exit(0);
    }
    write_all(fd, dad, 4);
    wait_child(c);
    char b[8];
    read_all(fd, b, 8);
    int ok = (!memcmp(b, want1, 4) && !memcmp(b + 4, want2, 4)) ||
             (!memcmp(b, want2, 4) && !memcmp(b + 4, want1, 4));
    if (!ok) FAIL("got %.8s", b);
}
void fork_race_client(int fd) {
    race_words(fd, "kid!", "dad!", "srv1", "srv2");
    write_all(fd, "bye!", 4);
}
void fork_race_server(int fd) {
    race_words(fd, "srv1", "srv2", "kid!", "dad!");
    char b[4];
    read_all(fd, b, 4);
    if (memcmp(b, "bye!", 4)) FAIL("client's last word %.4s", b);
}

/* fork-close: the dialing process uses the connection, forks a child to
 * carry on, and closes its own descriptor at once (a server's usual
 * accept, read the request, fork a handler, close). Only then does the
 * server write 1000 bytes, and the child, which has not touched the
 * socket yet, must read them and echo them back (the server writes them
 * in 100 pieces, more than a VI has sends in flight). Under viarun the
 * parent's close must not end the connection it still shares. */
void fork_close_client(int fd) {
    char b[1000];
    use_once(fd, "hello");
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    if (c == 0) {
        alarm(20);
        char t;
        if (read(turn_pipe[0], &t, 1) != 1) FAIL("turn");
        read_all(fd, b, sizeof b);
        for (size_t i = 0; i < sizeof b; i++)
            if ((unsigned char)b[i] != pattern(5, i)) FAIL("child: byte %zu differs", i);
        write_all(fd, b, sizeof b);
        read_all(fd, b, 4);
        if (memcmp(b, "good", 4)) FAIL("verdict %.4s", b);
        _exit(0);
    }
    close(fd);
    if (write(turn_pipe[1], "c", 1) != 1 || write(turn_pipe[1], "c", 1) != 1) FAIL("turn");
    wait_child(c);
}
void fork_close_server(int fd) {
    char b[1000];
    echo_once(fd, 5);
    char t;
    if (read(turn_pipe[0], &t, 1) != 1) FAIL("turn");
    for (size_t i = 0; i < sizeof b; i++) b[i] = (char)pattern(5, i);
    /* In 100 writes: more messages than a VI has sends in flight. */
    for (size_t i = 0; i < sizeof b; i += 10) write_all(fd, b + i, 10);
    char back[1000];
    read_all(fd, back, sizeof back);
    if (memcmp(b, back, sizeof b)) FAIL("echo differs");
    write_all(fd, "good", 4);
}

/* exec-self: the dialing process uses the connection and then execs a
 * new program on it itself (no fork: `exec cat <&3` in a shell that
 * opened it). The server then writes 1000 bytes in 100 pieces (more
 * messages than a VI has sends in flight) before the new program's first
 * call, and the new program must read them all and answer. Under viarun
 * the exec'ing process hands the connection to the kernel first: its VI
 * ends with it. */
void exec_self_client(int fd) {
    use_once(fd, "used");
    char turn[16];
    snprintf(turn, sizeof turn, "%d", turn_pipe[0]);
    if (setenv("COMPAT_TURN_FD", turn, 1)) FAIL("setenv");
    exec_on(fd, "exec-self-child");
}
static int turn_pipe_fd(void) {
    const char *t = getenv("COMPAT_TURN_FD");
    if (!t) FAIL("no COMPAT_TURN_FD");
    return atoi(t);
}
int exec_self_child(void) {
    alarm(20);
    char t;
    if (read(turn_pipe_fd(), &t, 1) != 1) FAIL("turn");
    char b[1000];
    read_all(0, b, sizeof b);
    for (size_t i = 0; i < sizeof b; i++)
        if ((unsigned char)b[i] != pattern(6, i)) FAIL("byte %zu differs", i);
    write_all(1, "more", 4);
    return 0;
}
void exec_self_server(int fd) {
    char b[1000];
    echo_once(fd, 4);
    for (size_t i = 0; i < sizeof b; i++) b[i] = (char)pattern(6, i);
    for (size_t i = 0; i < sizeof b; i += 10) write_all(fd, b + i, 10);
    if (write(turn_pipe[1], "w", 1) != 1) FAIL("turn");
    read_all(fd, b, 4);
    if (memcmp(b, "more", 4)) FAIL("answer %.4s", b);
}

/* fork-stream: the server streams 8 MiB in writes of random size while
 * the dialing process, after one echo, forks a child that reads it all
 * (the parent never reads): under viarun the child's first read switches
 * the connection in the middle of the server's stream, which then
 * carries on over the kernel; every byte is checked. */
#define FORK_STREAM (8u << 20)
void fork_stream_client(int fd) {
    use_once(fd, "hello");
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    if (c == 0) {
        alarm(30);
        static char buf[65536];
        size_t at = 0;
        while (at < FORK_STREAM) {
            size_t want = FORK_STREAM - at < sizeof buf ? FORK_STREAM - at : sizeof buf;
            ssize_t k = read(fd, buf, want);
            if (k <= 0) FAIL("child: read at %zu: %zd %s", at, k, k < 0 ? strerror(errno) : "EOF");
            for (ssize_t i = 0; i < k; i++)
                if ((unsigned char)buf[i] != pattern(7, at + (size_t)i)) FAIL("child: byte %zu differs", at + (size_t)i);
            at += (size_t)k;
        }
        write_all(fd, "good", 4);
        _exit(0);
    }
    wait_child(c);
}
void fork_stream_server(int fd) {
    char b[5];
    echo_once(fd, 5);
    static char buf[100000];
    unsigned seed = 11;
    size_t at = 0;
    while (at < FORK_STREAM) {
        size_t n = 1 + (size_t)(rand_r(&seed) % sizeof buf);
        if (n > FORK_STREAM - at) n = FORK_STREAM - at;
        for (size_t i = 0; i < n; i++) buf[i] = (char)pattern(7, at + i);
        write_all(fd, buf, n);
        at += n;
    }
    read_all(fd, b, 4);
    if (memcmp(b, "good", 4)) FAIL("verdict %.4s", b);
}
