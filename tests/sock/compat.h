/* Shared by the compat program's files (see compat.c): the helpers every
 * mode uses, and the modes that live in compat_alias.c (the calls' other
 * names in the C library), compat_sandbox.c (a child under a seccomp
 * filter), compat_exec.c (handing a
 * connection across fork and exec), compat_flow.c (writers waiting for
 * room, and ways a connection ends), compat_stdio.c (buffered streams on a
 * socket) and compat_listen.c (listeners and
 * the setting up of connections). */
#ifndef COMPAT_H
#define COMPAT_H
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
#include <semaphore.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>
#include <stddef.h>

#define FAIL(...) do { fprintf(stderr, "compat %s: ", mode); fprintf(stderr, __VA_ARGS__); \
                       fprintf(stderr, "\n"); exit(1); } while (0)
extern const char *mode;
extern int turn_pipe[2];

/* compat.c */
unsigned char pattern(uint64_t seed, size_t i);
void client_side(void);
void nonblocking(int fd);
void read_all(int fd, void *p, size_t n);
void write_all(int fd, const void *p, size_t n);
void ack(int fd);
void await_ack(int fd);
int pattern_file(char *b, size_t n, uint64_t seed);

/* compat_alias.c */
void aliases_client(int fd);
void aliases_server(int fd);

/* compat_sandbox.c */
void seccomp_client(int fd);
void seccomp_server(int fd);

/* compat_exec.c */
int exec_used_child(void);
int exec_self_child(void);
void exec_self_client(int fd);
void exec_self_server(int fd);
void check_echo(int in, int out);
void echo_bytes(int in, int out);
void exec_closing_on(int fd, const char *how, const char *next);
void exec_closing_server(int fd, const char *how);
void exec_on(int fd, const char *next);
void exec_handler(int fd, const char *next);
void exec_server(int fd);
void exec_bare_server(int fd);
void exec_bare_client(int fd);
void exec_bare_used_client(int fd);
void exec_bare_used_server(int fd);
void exec_bare_ahead_client(int fd);
int exec_bare_greeter(void);
void exec_used_client(int fd);
void exec_used_server(int fd);
void exec_vfork_server(int fd);
void fork_settling_client(int fd);
void fork_settling_server(int fd);
void fork_first_client(int fd);
void fork_race_client(int fd);
void fork_race_server(int fd);
void fork_first_server(int fd);
void fork_close_client(int fd);
void fork_close_server(int fd);
void fork_stream_client(int fd);
void fork_stream_server(int fd);
void fork_used_client(int fd);
void fork_used_server(int fd);

/* compat_flow.c */
void epollout_lt_writer(int fd);
void epollout_reader(int fd);
void epollout_short_reader(int fd);
void epollout_short_writer(int fd);
void epollout_writer(int fd);
void linger0_client(int fd);
void linger0_server(int fd);
void shutdown_wakes_server(int fd);
int rawclose(int lfd, struct sockaddr_in *a);
void halfclose_client(int fd);
void halfclose_server(int fd);
void sigsuspend_client(int fd);
void sigsuspend_server(int fd);

/* compat_stdio.c */
int stdio_handler(void);
void stdio_client(int fd);
void stdio_server(int fd);
void stdio_exec_client(int fd);
void stdio_exec_server(int fd);
void stdio_dup2_client(int fd);
void stdio_dup2_server(int fd);

/* compat_wait.c */
void quiet_client(int fd);
void quiet_server(int fd);
void busy_client(int fd);
void busy_server(int fd);
void slow_client(int fd);
void slow_server(int fd);
void slow_settle_client(int fd);
void slow_settle_server(int fd);
void unseen_client(int fd);
void unseen_server(int fd);
void epoll_mod_client(int fd);
void epoll_mod_server(int fd);

/* compat_listen.c */
int ipv6(void);
int plain_listener(void);
int reuseport(void);
int reuseport_plain(void);
int selfloop(void);
#endif
