/* Three hosts: messages between tasks on two slaves (B and C) go pvmd to
 * pvmd between them, not through the master (A), and stay intact and in
 * order while the slaves' own link is set up under them.
 *
 *   pvm_mesh HOST_B HOST_C   master, on the first host: spawns a ponger
 *                            on C and a pinger on B, tells the pinger the
 *                            ponger's tid, waits for the pinger's verdict
 *   pvm_mesh ping            exchanges ROUNDS sequence-numbered messages
 *                            (16 B .. ~60 KB) with the ponger, default route
 *   pvm_mesh pong            echoes every message to its sender
 *
 * Prints "mesh: all ok" when every echo came back intact and in order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pvm3.h"

#define TAG_PEER 21
#define TAG_DATA 22
#define TAG_ECHO 23
#define TAG_DONE 24
#define TAG_STOP 25
#define ROUNDS 1000

static int len_of(int seq)
{
	return 16 + (int)(((unsigned)seq * 7919u) % 60000u);
}

static char byte_of(int seq, int i)
{
	return (char)(((unsigned)seq * 2654435761u + (unsigned)i * 40503u) >> 5);
}

static int pong(void)
{
	for (;;) {
		int len, tag, src, b = pvm_recv(-1, -1);
		if (b < 0 || pvm_bufinfo(b, &len, &tag, &src) < 0 || tag == TAG_STOP)
			break;
		pvm_freebuf(pvm_setsbuf(pvm_setrbuf(0)));
		if (pvm_send(src, TAG_ECHO) < 0)
			return 1;
	}
	pvm_exit();
	return 0;
}

static int ping(void)
{
	int peer = -1, seq, ok = 1, i, got, len;
	char *out = malloc(70000), *in = malloc(70000);
	pvm_recv(pvm_parent(), TAG_PEER);
	pvm_upkint(&peer, 1, 1);
	for (seq = 0; seq < ROUNDS && ok; seq++) {
		len = len_of(seq);
		for (i = 0; i < len; i++)
			out[i] = byte_of(seq, i);
		pvm_initsend(PvmDataRaw);
		pvm_pkint(&seq, 1, 1);
		pvm_pkint(&len, 1, 1);
		pvm_pkbyte(out, len, 1);
		if (pvm_send(peer, TAG_DATA) < 0 || pvm_recv(peer, TAG_ECHO) < 0) {
			ok = 0;
			break;
		}
		got = -1;
		pvm_upkint(&got, 1, 1);
		pvm_upkint(&i, 1, 1);
		ok = got == seq && i == len && pvm_upkbyte(in, len, 1) >= 0 && memcmp(in, out, len) == 0;
	}
	pvm_initsend(PvmDataDefault);
	pvm_pkint(&ok, 1, 1);
	pvm_pkint(&seq, 1, 1);
	pvm_send(pvm_parent(), TAG_DONE);
	pvm_initsend(PvmDataDefault);
	pvm_send(peer, TAG_STOP);
	pvm_exit();
	return 0;
}

int main(int argc, char **argv)
{
	int pinger = -1, ponger = -1, ok = 0, done = 0;
	char *ping_argv[] = { "ping", NULL }, *pong_argv[] = { "pong", NULL };
	if (argc > 1 && strcmp(argv[1], "ping") == 0)
		return ping();
	if (argc > 1 && strcmp(argv[1], "pong") == 0)
		return pong();
	if (argc < 3) {
		fprintf(stderr, "usage: pvm_mesh HOST_B HOST_C\n");
		return 2;
	}
	if (pvm_mytid() < 0)
		return 1;
	if (pvm_spawn("pvm_mesh", pong_argv, PvmTaskHost, argv[2], 1, &ponger) != 1 ||
	    pvm_spawn("pvm_mesh", ping_argv, PvmTaskHost, argv[1], 1, &pinger) != 1) {
		printf("mesh: spawn failed (%d %d)\n", ponger, pinger);
		pvm_exit();
		return 1;
	}
	pvm_initsend(PvmDataDefault);
	pvm_pkint(&ponger, 1, 1);
	pvm_send(pinger, TAG_PEER);
	if (pvm_recv(pinger, TAG_DONE) > 0) {
		pvm_upkint(&ok, 1, 1);
		pvm_upkint(&done, 1, 1);
	}
	printf("mesh: %d of %d round trips between t%x and t%x intact and in order\n",
	       ok ? done : done - 1, ROUNDS, pinger, ponger);
	printf("%s\n", ok && done == ROUNDS ? "mesh: all ok" : "mesh: FAILED");
	pvm_exit();
	return !(ok && done == ROUNDS);
}
