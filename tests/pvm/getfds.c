/* pvm_getfds() readiness (issue 14): an event-driven program (xep's
 * XtAppAddInput + pvm_nrecv) select()s on the descriptor pvm_getfds()
 * gives and receives only when it is readable. It must become readable
 * for every message, however it came (the pool, the socket from the pvmd,
 * a direct route), stay readable while one is still waiting, and not stay
 * readable once everything has been received.
 *
 *   pvm_getfds [HOST [direct]]   the master: spawns itself as the child
 *                                (on HOST if given; "direct" makes the
 *                                child use PvmRouteDirect)
 *
 * The child sends 5 small messages (the pool on one host, the network
 * between hosts); the master sends one to itself; the child then sends
 * one of LARGE bytes (larger than a 1 MB pool: the
 * socket way), then makes round trips for a while, then exits (the
 * TaskExit notify comes from the pvmd). The master takes exactly one
 * message per readiness. Prints "getfds: all ok"
 * at the end, or FAIL lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include "pvm3.h"

#define NSMALL 5
#define LARGE (1536 * 1024)
#define TAG_SMALL 1
#define TAG_ACK 2
#define TAG_LARGE 3
#define TAG_SELF 5
#define TAG_PING 6
/* Round trips at the end: at least this many, and for at least PING_MS,
 * so that between hosts the direct route is up for some of them. */
#define NPING 20
#define PING_MS 500
#define TAG_EXIT 9

static int failures;

static void fail(const char *what)
{
	printf("FAIL %s\n", what);
	failures++;
}

/* Whether fd becomes readable within ms milliseconds. */
static int readable(int fd, int ms)
{
	fd_set r;
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	FD_ZERO(&r);
	FD_SET(fd, &r);
	return select(fd + 1, &r, NULL, NULL, &tv) > 0 && FD_ISSET(fd, &r);
}

/* One readiness, one pvm_nrecv: the new buffer (0 when the readiness was
 * stale). Waits at most 20 s; a message waiting all that time without the
 * descriptor becoming readable is a failure. */
static int next_message(int fd, const char *what, int *stale)
{
	char line[160];
	int b;
	if (!readable(fd, 20000)) {
		snprintf(line, sizeof line, "no readiness in 20 s for %s (pvm_probe: %d)", what,
			 pvm_probe(-1, -1));
		fail(line);
		return -1;
	}
	b = pvm_nrecv(-1, -1);
	if (b == 0)
		(*stale)++;
	return b;
}

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000L + t.tv_nsec / 1000000;
}

static int child(int route)
{
	long start;
	int parent = pvm_parent();
	int i;
	char *big;
	pvm_setopt(PvmRoute, route);
	for (i = 0; i < NSMALL; i++) {
		pvm_initsend(PvmDataRaw);
		pvm_pkint(&i, 1, 1);
		pvm_send(parent, TAG_SMALL);
	}
	pvm_recv(parent, TAG_ACK);
	big = malloc(LARGE);
	if (!big)
		return 1;
	for (i = 0; i < LARGE; i++)
		big[i] = (char)(i * 7 + 3);
	pvm_initsend(PvmDataRaw);
	pvm_pkbyte(big, LARGE, 1);
	pvm_send(parent, TAG_LARGE);
	free(big);
	pvm_recv(parent, TAG_ACK);
	start = now_ms();
	for (i = 0; i < 5000 && (i < NPING || now_ms() - start < PING_MS); i++) {
		pvm_initsend(PvmDataRaw);
		pvm_send(parent, TAG_PING);
		pvm_recv(parent, TAG_ACK);
	}
	pvm_exit();
	return 0;
}

int main(int argc, char **argv)
{
	int *fds, nfds, fd, tid, got = 0, stale = 0, b, bytes, tag, src, i, v, pings = 0, exited = 0;
	int route = PvmAllowDirect;
	char *where = NULL, *args[3] = { "child", NULL, NULL }, *big;
	char line[160];

	if (argc >= 2 && !strcmp(argv[1], "child"))
		return child(argc >= 3 && !strcmp(argv[2], "direct") ? PvmRouteDirect : PvmAllowDirect);
	if (argc >= 2)
		where = argv[1];
	if (argc >= 3 && !strcmp(argv[2], "direct")) {
		route = PvmRouteDirect;
		args[1] = "direct";
	}
	if (pvm_mytid() < 0)
		return 1;
	pvm_setopt(PvmRoute, route);
	nfds = pvm_getfds(&fds);
	if (nfds < 1) {
		printf("FAIL pvm_getfds returned %d\n", nfds);
		return 1;
	}
	fd = fds[0];
	if (pvm_spawn(argv[0], args, where ? PvmTaskHost : PvmTaskDefault, where, 1, &tid) != 1) {
		printf("FAIL spawn: %d\n", tid);
		return 1;
	}
	pvm_notify(PvmTaskExit, TAG_EXIT, 1, &tid);

	/* Small messages, one receive per readiness: the descriptor stays
	 * readable while some are still waiting. */
	while (got < NSMALL && failures == 0) {
		snprintf(line, sizeof line, "small message %d", got);
		b = next_message(fd, line, &stale);
		if (b <= 0)
			continue;
		pvm_bufinfo(b, &bytes, &tag, &src);
		pvm_upkint(&v, 1, 1);
		if (tag != TAG_SMALL || src != tid || v != got) {
			snprintf(line, sizeof line, "small message %d: tag %d src t%x value %d", got, tag,
				 src, v);
			fail(line);
		}
		got++;
	}
	/* All received: at most one stale readiness (a wake-up already
	 * handled), which one pvm_nrecv clears. */
	if (failures == 0 && readable(fd, 0)) {
		if (pvm_nrecv(-1, -1) != 0)
			fail("a message beyond the small ones");
		stale++;
		if (readable(fd, 0))
			fail("descriptor still readable with nothing waiting (a select loop would spin)");
	}
	/* A message to itself rings no doorbell, and must show too. */
	if (failures == 0) {
		pvm_initsend(PvmDataRaw);
		pvm_send(pvm_mytid(), TAG_SELF);
		b = next_message(fd, "a message to itself", &stale);
		if (b > 0) {
			pvm_bufinfo(b, &bytes, &tag, &src);
			if (tag != TAG_SELF)
				fail("expected the message to itself");
		}
	}
	pvm_initsend(PvmDataRaw);
	pvm_send(tid, TAG_ACK);

	/* The large message (the socket way with a 1 MB pool), the round
	 * trips, then the notify the pvmd sends when the child exits. */
	for (got = 0; !exited && failures == 0;) {
		b = next_message(fd, got ? "a round trip or the TaskExit notify" : "the large message",
				 &stale);
		if (b <= 0)
			continue;
		pvm_bufinfo(b, &bytes, &tag, &src);
		if (got == 0) {
			big = malloc(LARGE);
			if (!big)
				return 1;
			if (tag != TAG_LARGE || bytes < LARGE || pvm_upkbyte(big, LARGE, 1) < 0) {
				snprintf(line, sizeof line, "large message: tag %d, %d bytes", tag, bytes);
				fail(line);
			}
			for (i = 0; i < LARGE && failures == 0; i++)
				if (big[i] != (char)(i * 7 + 3))
					fail("large message: bytes differ");
			free(big);
			pvm_initsend(PvmDataRaw);
			pvm_send(tid, TAG_ACK);
		} else if (tag == TAG_PING) {
			pings++;
			pvm_initsend(PvmDataRaw);
			pvm_send(tid, TAG_ACK);
		} else if (tag == TAG_EXIT) {
			exited = 1;
		} else {
			snprintf(line, sizeof line, "expected a round trip or the notify, got tag %d", tag);
			fail(line);
		}
		got++;
	}
	if (failures == 0 && pings < NPING)
		fail("fewer round trips than the child makes");
	printf("getfds: %d round trips, %d stale readiness(es)\n", pings, stale);
	/* A stale readiness is a wake-up for a message already taken (at
	 * most one per message) or for a pvmd reply: never a loop. */
	if (stale > got + NSMALL + 8)
		fail("too many stale readinesses");
	if (failures == 0)
		printf("getfds: all ok\n");
	pvm_exit();
	return failures != 0;
}
