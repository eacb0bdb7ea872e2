/* Round-trip time between two PVM tasks on one host, for message sizes
 * 16 B .. 4 MB (seed 003, Table 1). Built once against PVM 3.4.6's header
 * and run on either libpvm3.so.3 (stock or openvia's) unchanged.
 *
 *   pvm_pingpong [reps-scale]     master: spawns the echo slave, prints
 *                                 "size median_us mean_us min_us reps"
 *   pvm_pingpong slave            echo slave (spawned by the master)
 *
 * Each round trip packs the payload (PvmDataRaw), sends it, and waits for
 * the slave's echo, which the slave unpacks and packs again: both sides do
 * what a real program does. The default route is used (no PvmRouteDirect).
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

static int slave(void)
{
	char *buf = malloc(MAX_SIZE);
	int parent = pvm_parent();
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
	int scale = 1, stid = -1, i, k;
	char *out, *back;
	char *slave_argv[] = { "slave", NULL };

	if (argc > 1 && strcmp(argv[1], "slave") == 0)
		return slave();
	if (argc > 1)
		scale = atoi(argv[1]) > 0 ? atoi(argv[1]) : 1;
	if (pvm_mytid() < 0)
		return 1;
	if (pvm_spawn("pvm_pingpong", slave_argv, PvmTaskDefault, "", 1, &stid) != 1 || stid < 0) {
		fprintf(stderr, "cannot spawn pvm_pingpong slave: %d\n", stid);
		pvm_exit();
		return 1;
	}
	pvm_recv(stid, TAG_READY);
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
