/* A pvmd killed with SIGKILL under two tasks that exchange messages
 * (issue 19, defect 5), through libpvm3's C interface. Built against PVM
 * 3.4.6's header; run by pvmd_death.sh, which starts the pvmd and kills it.
 *
 *   pvmd_death RESULTFILE        master: spawns the echo task, arms a
 *                                TaskExit notify on it, does 20 round
 *                                trips, prints "blocking" and blocks in
 *                                pvm_recv; once that returns, checks that
 *                                later calls fail too and prints a verdict
 *   pvmd_death echo RESULTFILE   echo task (spawned by the master): answers
 *                                pings until a call fails, writes the
 *                                failing code to RESULTFILE
 *
 * Both tasks keep SIGPIPE's default action, as C programs do: writing to
 * the dead pvmd's socket must not kill them. The echo task's output goes
 * to the pvmd, so it must not print once the pvmd is gone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pvm3.h"

#define TAG_PING 1
#define TAG_PONG 2
#define TAG_EXIT 3

static int echo(const char *result)
{
	int parent = pvm_parent(), cc, x = 0;
	/* Its stderr is a pipe to the pvmd: an error printed after the pvmd
	 * died would raise SIGPIPE (as with stock PVM). */
	pvm_setopt(PvmAutoErr, 0);
	/* Its pid, for the script to end it if it never returns. */
	char pidfile[4096];
	snprintf(pidfile, sizeof pidfile, "%s.pid", result);
	FILE *p = fopen(pidfile, "w");
	if (p) {
		fprintf(p, "%d\n", (int)getpid());
		fclose(p);
	}
	for (;;) {
		cc = pvm_recv(parent, TAG_PING);
		if (cc >= 0)
			cc = pvm_upkint(&x, 1, 1);
		if (cc >= 0)
			cc = pvm_initsend(PvmDataDefault);
		if (cc >= 0)
			cc = pvm_pkint(&x, 1, 1);
		if (cc >= 0)
			cc = pvm_send(parent, TAG_PONG);
		if (cc < 0)
			break;
	}
	FILE *f = fopen(result, "w");
	if (f) {
		fprintf(f, "%d\n", cc);
		fclose(f);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "echo") == 0)
		return echo(argv[2]);
	if (argc != 2) {
		fprintf(stderr, "usage: pvmd_death RESULTFILE\n");
		return 2;
	}
	char *args[] = {"echo", argv[1], NULL};
	int peer, k, x, cc, bad = 0;
	pvm_setopt(PvmAutoErr, 0);
	if (pvm_spawn("pvmd_death", args, PvmTaskDefault, "", 1, &peer) != 1) {
		printf("spawn failed: %d\n", peer);
		return 1;
	}
	if (pvm_notify(PvmTaskExit, TAG_EXIT, 1, &peer) < 0) {
		printf("notify failed\n");
		return 1;
	}
	for (k = 0; k < 20; k++) {
		pvm_initsend(PvmDataDefault);
		pvm_pkint(&k, 1, 1);
		pvm_send(peer, TAG_PING);
		if (pvm_recv(peer, TAG_PONG) < 0 || pvm_upkint(&x, 1, 1) < 0 || x != k) {
			printf("round trip %d failed\n", k);
			return 1;
		}
	}
	printf("blocking\n");
	fflush(stdout);
	cc = pvm_recv(-1, TAG_EXIT);
	printf("pvm_recv %d\n", cc);
	fflush(stdout);
	if (cc != PvmSysErr)
		bad = 1;
	/* Every later call fails the same way. */
	x = 1;
	if ((cc = pvm_initsend(PvmDataDefault)) != PvmSysErr)
		printf("pvm_initsend %d\n", cc), bad = 1;
	if ((cc = pvm_send(peer, TAG_PING)) != PvmSysErr)
		printf("pvm_send %d\n", cc), bad = 1;
	if ((cc = pvm_nrecv(-1, -1)) != PvmSysErr)
		printf("pvm_nrecv %d\n", cc), bad = 1;
	if ((cc = pvm_probe(-1, -1)) != PvmSysErr)
		printf("pvm_probe %d\n", cc), bad = 1;
	if ((cc = pvm_pstat(peer)) != PvmSysErr)
		printf("pvm_pstat %d\n", cc), bad = 1;
	if ((cc = pvm_mytid()) != PvmSysErr)
		printf("pvm_mytid %d\n", cc), bad = 1;
	printf(bad ? "FAILED\n" : "all calls PvmSysErr\n");
	return bad;
}
