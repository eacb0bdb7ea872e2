/* The contention case of seed 003 (stock PVM crashed at 7 tasks x 4 MB):
 * N spawned senders each send one message to the master at once and exit
 * straight away (a message outlives its sender). The master checks every
 * byte. Run with a pool smaller than the total to make senders wait.
 *
 *   pvm_contention [N [MB [KB]]]  master (default 7 x 4 MB; KB, if given,
 *                                 sets the size per sender in KiB instead)
 *   pvm_contention slave BYTES    sender (spawned by the master)
 *
 * Senders pack first and report ready; the master then starts them all at
 * once (multicast) and prints the time until every message is in (usec):
 * the concurrent-senders measurement of seed 003's Tables 2/3.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include "pvm3.h"

#define TAG_DATA 1
#define TAG_READY 2
#define TAG_GO 3

static unsigned char pattern(int tid, int i)
{
	return (unsigned char)(((unsigned)tid * 2654435761u + (unsigned)i * 40503u) >> 3);
}

static double now_us(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return tv.tv_sec * 1e6 + tv.tv_usec;
}

static int slave(int len)
{
	int me = pvm_mytid(), parent = pvm_parent(), data, i;
	unsigned char *buf = malloc(len);
	for (i = 0; i < len; i++)
		buf[i] = pattern(me, i);
	data = pvm_initsend(PvmDataRaw);
	pvm_pkint(&me, 1, 1);
	pvm_pkint(&len, 1, 1);
	pvm_pkbyte((char *)buf, len, 1);
	free(buf);
	pvm_setsbuf(pvm_mkbuf(PvmDataRaw));
	pvm_send(parent, TAG_READY);
	pvm_recv(parent, TAG_GO);
	pvm_freebuf(pvm_setsbuf(data));
	if (pvm_send(parent, TAG_DATA) < 0)
		return 1;
	pvm_exit();
	return 0;
}

int main(int argc, char **argv)
{
	int n = 7, mb = 4, len, got = 0, bad = 0, i, k;
	int tids[64];
	char lens[16];
	char *args[] = { "slave", lens, NULL };
	unsigned char *buf;
	struct timeval tmout = { 60, 0 };
	double t0;

	if (argc > 2 && strcmp(argv[1], "slave") == 0)
		return slave(atoi(argv[2]));
	if (argc > 1)
		n = atoi(argv[1]);
	if (argc > 2)
		mb = atoi(argv[2]);
	len = argc > 3 ? atoi(argv[3]) << 10 : mb << 20;
	if (n < 1 || n > 64 || len < 1)
		return 2;
	snprintf(lens, sizeof lens, "%d", len);
	if (pvm_mytid() < 0)
		return 1;
	if (pvm_spawn("pvm_contention", args, PvmTaskDefault, "", n, tids) != n) {
		fprintf(stderr, "spawn failed\n");
		pvm_exit();
		return 1;
	}
	for (k = 0; k < n; k++)
		if (pvm_trecv(-1, TAG_READY, &tmout) <= 0) {
			fprintf(stderr, "senders not ready\n");
			pvm_exit();
			return 1;
		}
	/* Unpacked into one buffer per message; checked after the clock stops. */
	buf = malloc((size_t)len * n);
	int *from = calloc(n, sizeof(int));
	memset(buf, 0, (size_t)len * n); /* page faults outside the clock */
	t0 = now_us();
	pvm_initsend(PvmDataRaw);
	pvm_mcast(tids, n, TAG_GO);
	for (k = 0; k < n; k++) {
		int l;
		if (pvm_trecv(-1, TAG_DATA, &tmout) <= 0) {
			fprintf(stderr, "timed out after %d messages\n", got);
			break;
		}
		pvm_upkint(&from[k], 1, 1);
		pvm_upkint(&l, 1, 1);
		if (l != len || pvm_upkbyte((char *)buf + (size_t)len * k, l, 1) < 0) {
			from[k] = -1;
			continue;
		}
		got++;
	}
	t0 = now_us() - t0;
	for (k = 0; k < got; k++) {
		unsigned char *m = buf + (size_t)len * k;
		if (from[k] < 0) {
			bad++;
			continue;
		}
		for (i = 0; i < len; i++)
			if (m[i] != pattern(from[k], i)) {
				bad++;
				break;
			}
	}
	printf("contention: %d of %d messages of %d KB intact, %d bad, usec %.0f\n",
	       got - bad, n, len >> 10, bad, t0);
	free(from);
	free(buf);
	pvm_exit();
	return got == n && bad == 0 ? 0 : 1;
}
