/* stdio on a socket: the C library's buffered streams write and read with
 * its own internal calls, which no preloaded hook sees. The modes:
 *
 * stdio: both ends fdopen the connection ("r" on it, "w" on a dup), send
 *   lines with fprintf and read them with fgets; fileno gives the socket.
 * stdio-exec: the acceptor's forked handler puts the connection on stdin
 *   and stdout and execs `compat stdio-handler`, which echoes lines with
 *   fgets and fputs, as inetd services do, and says bye on stderr.
 * stdio-dup2: as bash does for `exec 3<>/dev/tcp/...; echo hi >&3`: the
 *   dialer puts the connection on stdout for one printf (dup2, printf,
 *   fflush, dup2 back), then reads the answer with read(2). */
#include "compat.h"

#define LINES 40

static void line_of(char *b, size_t n, int i) {
    snprintf(b, n, "line %d %0*d\n", i, 1 + (i * 37) % 300, i);
}

/* Sends LINES lines on `out` and checks each echo on `in`. */
static void lines_echoed(FILE *in, FILE *out) {
    char want[512], got[512];
    for (int i = 0; i < LINES; i++) {
        line_of(want, sizeof want, i);
        if (fputs(want, out) < 0 || fflush(out)) FAIL("fputs line %d: %s", i, strerror(errno));
        if (!fgets(got, sizeof got, in)) FAIL("fgets echo %d: %s", i, feof(in) ? "EOF" : strerror(errno));
        if (strcmp(want, got)) FAIL("echo %d: got %s", i, got);
    }
}

/* Echoes lines from `in` to `out` until EOF. */
static void echo_lines(FILE *in, FILE *out) {
    char b[512];
    while (fgets(b, sizeof b, in)) {
        if (fputs(b, out) < 0 || fflush(out)) FAIL("fputs: %s", strerror(errno));
    }
    if (ferror(in)) FAIL("fgets: %s", strerror(errno));
}

static void open_both(int fd, FILE **in, FILE **out) {
    *in = fdopen(fd, "r");
    *out = fdopen(dup(fd), "w");
    if (!*in || !*out) FAIL("fdopen: %s", strerror(errno));
    if (fileno(*in) != fd) FAIL("fileno %d, not the socket %d", fileno(*in), fd);
}

void stdio_client(int fd) {
    FILE *in, *out;
    open_both(fd, &in, &out);
    lines_echoed(in, out);
    if (shutdown(fileno(out), SHUT_WR)) FAIL("shutdown: %s", strerror(errno));
    if (fgetc(in) != EOF || !feof(in)) FAIL("no EOF after the echo");
    fclose(out);
    fclose(in);
}

void stdio_server(int fd) {
    FILE *in, *out;
    open_both(dup(fd), &in, &out);
    echo_lines(in, out);
    fclose(out);
    fclose(in);
}

/* stdio-exec, the dialing side: lines through the exec'd handler. */
void stdio_exec_client(int fd) {
    FILE *in, *out;
    open_both(fd, &in, &out);
    lines_echoed(in, out);
    if (shutdown(fd, SHUT_WR)) FAIL("shutdown: %s", strerror(errno));
    char bye[16];
    if (!fgets(bye, sizeof bye, in) || strcmp(bye, "bye\n")) FAIL("no bye from the handler's stderr");
    if (fgetc(in) != EOF) FAIL("no EOF after the handler ended");
    fclose(out);
    fclose(in);
}

void stdio_exec_server(int fd) { exec_handler(fd, "stdio-handler"); }

int stdio_handler(void) {
    echo_lines(stdin, stdout);
    /* A last word on stderr (unbuffered), moved onto the connection. */
    if (dup2(1, 2) != 2 || fprintf(stderr, "bye\n") != 4) FAIL("stderr: %s", strerror(errno));
    return 0;
}

/* stdio-dup2, the dialing side (bash's echo >&3): the first bytes on the
 * connection go out through stdout. */
void stdio_dup2_client(int fd) {
    char want[512], got[512];
    for (int i = 0; i < LINES; i++) {
        line_of(want, sizeof want, i);
        int saved = dup(1);
        if (saved < 0 || dup2(fd, 1) != 1) FAIL("dup2 onto stdout");
        if (printf("%s", want) < 0 || fflush(stdout)) FAIL("printf: %s", strerror(errno));
        if (dup2(saved, 1) != 1) FAIL("dup2 back");
        close(saved);
        size_t n = strlen(want);
        read_all(fd, got, n);
        if (memcmp(want, got, n)) FAIL("answer %d differs", i);
    }
}

/* Echoes each line back with write(2). */
void stdio_dup2_server(int fd) {
    char want[512], got[512];
    for (int i = 0; i < LINES; i++) {
        line_of(want, sizeof want, i);
        size_t n = strlen(want);
        read_all(fd, got, n);
        if (memcmp(want, got, n)) FAIL("line %d differs: %.*s", i, (int)n, got);
        write_all(fd, got, n);
    }
}
