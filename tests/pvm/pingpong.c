/* Round-trip time between two PVM tasks, for message sizes 16 B .. 4 MB
 * (seed 003, Table 1), on one host or between two. Built once against PVM
 * 3.4.6's header and run on either libpvm3.so.3 (stock or openvia's)
 * unchanged.
 *
 *   pvm_pingpong [reps-scale] [host]   master: spawns the echo slave (on
 *                                      `host` if given: PvmTaskHost), prints
 *                                      "size median_us mean_us min_us reps"
 *   pvm_pingpong slave [direct]        echo slave (spawned by the master)
 *
 * Each round trip packs the payload (PvmDataRaw), sends it, and waits for
 * the slave's echo, which the slave unpacks and packs again: both sides do
 * what a real program does. The route is PVM's default (through the pvmds)
 * unless PVM_PINGPONG_ROUTE=direct is set for the master, which then asks
 * for PvmRouteDirect on both sides (the slave learns it from its argv,
 * since a spawned task does not inherit the master's environment). The
 * route and the slave's host go to stderr, the table alone to stdout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include "pvm3.h"

#define TAG_PING 1
#define TAG_PONG 2
#define TAG_READY 3
#define MAX_SIZE (4 << 20)

static double now_us(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return tv.tv_sec * 1e6 + tv.tv_usec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int slave(int direct)
{
	char *buf = malloc(MAX_SIZE);
	int parent = pvm_parent();
	if (direct)
		pvm_setopt(PvmRoute, PvmRouteDirect);
	pvm_initsend(PvmDataRaw);
	pvm_send(parent, TAG_READY);
	for (;;) {
		int len, tag, src;
		int id = pvm_recv(parent, -1);
		if (id < 0 || pvm_bufinfo(id, &len, &tag, &src) < 0)
			return 1;
		if (tag != TAG_PING)
			break;
		if (len > MAX_SIZE || pvm_upkbyte(buf, len, 1) < 0)
			return 1;
		pvm_initsend(PvmDataRaw);
		pvm_pkbyte(buf, len, 1);
		if (pvm_send(parent, TAG_PONG) < 0)
			return 1;
	}
	free(buf);
	pvm_exit();
	return 0;
}

static int reps_for(int size, int scale)
{
	int r = size <= 65536 ? 400 : size <= 1048576 ? 60 : 16;
	return r * scale;
}

int main(int argc, char **argv)
{
	int sizes[] = { 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304 };
	int nsizes = sizeof sizes / sizeof sizes[0];
	int scale = 1, stid = -1, i, k, direct;
	char *out, *back, *host = NULL, *route = getenv("PVM_PINGPONG_ROUTE");
	char slave_word[] = "slave", direct_word[] = "direct";
	char *slave_argv[] = { slave_word, NULL, NULL };

	if (argc > 1 && strcmp(argv[1], "slave") == 0)
		return slave(argc > 2 && strcmp(argv[2], "direct") == 0);
	if (argc > 1)
		scale = atoi(argv[1]) > 0 ? atoi(argv[1]) : 1;
	if (argc > 2 && argv[2][0] != '\0')
		host = argv[2];
	if (route && strcmp(route, "direct") != 0 && strcmp(route, "default") != 0) {
		fprintf(stderr, "PVM_PINGPONG_ROUTE must be direct or default, not %s\n", route);
		return 2;
	}
	direct = route && strcmp(route, "direct") == 0;
	if (pvm_mytid() < 0)
		return 1;
	if (direct) {
		pvm_setopt(PvmRoute, PvmRouteDirect);
		slave_argv[1] = direct_word;
	}
	if (pvm_spawn("pvm_pingpong", slave_argv, host ? PvmTaskHost : PvmTaskDefault,
		      host ? host : "", 1, &stid) != 1 || stid < 0) {
		fprintf(stderr, "cannot spawn pvm_pingpong slave%s%s: %d\n",
			host ? " on " : "", host ? host : "", stid);
		pvm_exit();
		return 1;
	}
	if (pvm_recv(stid, TAG_READY) < 0) {
		fprintf(stderr, "pvm_pingpong slave t%x never reported ready\n", stid);
		pvm_exit();
		return 1;
	}
	fprintf(stderr, "pvm_pingpong: master t%x on host dtid %x, slave t%x on host dtid %x%s%s, route %s\n",
		pvm_mytid(), pvm_tidtohost(pvm_mytid()), stid, pvm_tidtohost(stid),
		host ? " = " : "", host ? host : "", direct ? "direct" : "default");
	out = malloc(MAX_SIZE);
	back = malloc(MAX_SIZE);
	for (i = 0; i < MAX_SIZE; i++)
		out[i] = (char)(i * 7 + 3);
	for (k = 0; k < nsizes; k++) {
		int size = sizes[k], reps = reps_for(size, scale), warm = 3, n;
		double *t = malloc(sizeof(double) * reps), sum = 0;
		for (n = -warm; n < reps; n++) {
			double t0 = now_us();
			pvm_initsend(PvmDataRaw);
			pvm_pkbyte(out, size, 1);
			if (pvm_send(stid, TAG_PING) < 0 || pvm_recv(stid, TAG_PONG) < 0)
				return 1;
			pvm_upkbyte(back, size, 1);
			if (n >= 0)
				t[n] = now_us() - t0;
		}
		if (memcmp(out, back, size) != 0) {
			fprintf(stderr, "data corrupted at size %d\n", size);
			return 1;
		}
		for (n = 0; n < reps; n++)
			sum += t[n];
		qsort(t, reps, sizeof(double), cmp_double);
		printf("%d %.1f %.1f %.1f %d\n", size, t[reps / 2], sum / reps, t[0], reps);
		fflush(stdout);
		free(t);
	}
	pvm_initsend(PvmDataRaw);
	pvm_send(stid, TAG_READY);
	free(out);
	free(back);
	pvm_exit();
	return 0;
}
