/* PVM across two hosts, checked from a program's point of view:
 *
 *   pvm_multihost HOST     master, run on the first host; HOST names the
 *                          other one (already in the virtual machine)
 *   pvm_multihost echo [direct|break]
 *                          echo slave: returns every message it gets (with
 *                          `direct`, having set PvmRouteDirect itself; with
 *                          `break`, also dropping its direct VI abruptly
 *                          after 20 messages came over it, as a failing
 *                          network would: OPENVIA_PVM_DIRECT_BREAK_AFTER)
 *   pvm_multihost sib      reports its sibling count and host to its parent
 *
 * Checks, printing "ok <what>" or "FAIL <what>" and exiting non-zero on
 * any failure:
 *  - pvm_config lists two hosts; pvm_mstat knows HOST;
 *  - a task spawned on HOST has HOST's tid host part; pvm_tidtohost agrees;
 *  - messages of 16 B ... 4 MB travel there and back intact (default
 *    route, XDR and raw encodings);
 *  - PvmRouteDirect (a VI task to task once set up): a stream of
 *    sequence-numbered messages of mixed sizes to the echo slave, the
 *    first part sent with the default route, the rest after switching to
 *    direct, comes back complete and in order while the route changes
 *    under it; then, with a slave that set PvmRouteDirect too, 16 B ...
 *    4 MB round trips, intact; a send to that peer after it was killed
 *    returns, never hangs; a direct VI that fails under two live tasks
 *    makes the next send return PvmSysErr at once (messages may have been
 *    lost with it; every message whose send succeeded comes back), and
 *    the route is opened again on a new VI;
 *  - four tasks spawned with default placement land on both hosts, and
 *    every one of them sees the same four siblings;
 *  - pvm_tasks(0) lists tasks of both hosts;
 *  - pvm_notify(PvmTaskExit) fires for a task that exits on HOST;
 *  - pvm_notify(PvmHostDelete) fires when HOST is deleted, and a send to a
 *    task of the deleted host then fails or is dropped, never hangs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pvm3.h"

#define TAG_ECHO 11
#define TAG_SIB 12
#define TAG_EXIT 13
#define TAG_HOSTDEL 14
#define TAG_STOP 15

static int failures;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok" : "FAIL", what);
	fflush(stdout);
	if (!ok)
		failures++;
}

static unsigned char pattern(int seed, int i)
{
	return (unsigned char)(((unsigned)seed * 2654435761u + (unsigned)i * 40503u) >> 5);
}

static int echo(int direct, int brk, int host_link_brk)
{
	int parent = pvm_parent(), bufid, len, tag, src;
	if (brk)
		setenv("OPENVIA_PVM_DIRECT_BREAK_AFTER", "20", 1);
	if (host_link_brk) {
		/* openvia: our link to the parent's pvmd drops after 20 echoes;
		 * the figures at exit (in the pvmd's log) say it did. */
		setenv("OPENVIA_PVM_HOSTLINK_BREAK_AFTER", "20", 1);
		setenv("OPENVIA_PVM_DIRECT_STATS", "1", 1);
		brk = 1;
	}
	if (direct)
		pvm_setopt(PvmRoute, PvmRouteDirect);
	for (;;) {
		bufid = pvm_recv(parent, -1);
		if (bufid < 0)
			return 1;
		pvm_bufinfo(bufid, &len, &tag, &src);
		if (tag == TAG_STOP)
			break;
		/* Send the very buffer back, freeing the one sent before (setsbuf
		 * does not, and its pool pages would pile up). */
		pvm_freebuf(pvm_setsbuf(pvm_setrbuf(0)));
		/* After its VI broke, a send reports it once (and is not
		 * sent): the next goes through. */
		if (pvm_send(parent, TAG_ECHO) < 0 && (!brk || pvm_send(parent, TAG_ECHO) < 0))
			return 1;
	}
	pvm_exit();
	return 0;
}

static int sib(void)
{
	int *tids, n = pvm_siblings(&tids), me = pvm_mytid(), i, in = 0;
	for (i = 0; i < n; i++)
		in |= tids[i] == me;
	pvm_initsend(PvmDataDefault);
	pvm_pkint(&n, 1, 1);
	pvm_pkint(&in, 1, 1);
	pvm_pkint(tids, n, 1);
	pvm_send(pvm_parent(), TAG_SIB);
	pvm_exit();
	return 0;
}

static int round_trip(int peer, int len, int enc)
{
	unsigned char *out = malloc(len > 0 ? len : 1), *in = malloc(len > 0 ? len : 1);
	int i, ok = 1, rlen = -1;
	for (i = 0; i < len; i++)
		out[i] = pattern(len, i);
	pvm_initsend(enc);
	pvm_pkint(&len, 1, 1);
	pvm_pkbyte((char *)out, len, 1);
	if (pvm_send(peer, 1) < 0)
		ok = 0;
	if (ok && pvm_recv(peer, TAG_ECHO) > 0) {
		pvm_upkint(&rlen, 1, 1);
		ok = rlen == len && pvm_upkbyte((char *)in, len, 1) >= 0 && memcmp(in, out, len) == 0;
	} else {
		ok = 0;
	}
	free(out);
	free(in);
	return ok;
}

/* Length of stream message `seq`: 4 B .. ~70 KB, so some take one
 * fragment of the route and some several. */
static int stream_len(int seq)
{
	return (int)(((unsigned)seq * 7919u) % 70000u);
}

static void send_seq(int peer, int seq)
{
	int i, len = stream_len(seq);
	char *b = malloc(len > 0 ? len : 1);
	for (i = 0; i < len; i++)
		b[i] = (char)pattern(seq, i);
	pvm_initsend(PvmDataRaw);
	pvm_pkint(&seq, 1, 1);
	pvm_pkint(&len, 1, 1);
	pvm_pkbyte(b, len, 1);
	pvm_send(peer, 1);
	free(b);
}

/* The next echo must carry sequence number `want`, intact. */
static int recv_seq(int peer, int want)
{
	int seq = -1, len = -1, i, ok;
	char *b;
	if (pvm_recv(peer, TAG_ECHO) <= 0)
		return 0;
	pvm_upkint(&seq, 1, 1);
	pvm_upkint(&len, 1, 1);
	if (seq != want || len != stream_len(want))
		return 0;
	b = malloc(len > 0 ? len : 1);
	ok = pvm_upkbyte(b, len, 1) >= 0;
	for (i = 0; ok && i < len; i++)
		ok = b[i] == (char)pattern(seq, i);
	free(b);
	return ok;
}

/* `routed` messages with the default route, then PvmRouteDirect and
 * `direct` more; at most `window` echoes outstanding, so both sides keep
 * entering the library while the direct route is set up under the
 * stream. True if every echo came back intact and in order. */
static int ordered_stream(int peer, int routed, int direct, int window)
{
	int total = routed + direct, sent = 0, got = 0;
	pvm_setopt(PvmRoute, PvmAllowDirect);
	while (got < total) {
		if (sent < total && sent - got < window) {
			if (sent == routed)
				pvm_setopt(PvmRoute, PvmRouteDirect);
			send_seq(peer, sent++);
			continue;
		}
		if (!recv_seq(peer, got++))
			return 0;
	}
	return 1;
}

/* The echo slave drops its direct VI after 20 messages came over it. Sends
 * one message at a time and waits for its echo: a send that fails must say
 * PvmSysErr (the VI failed under a live peer); a message whose echo never
 * comes (lost with the VI) must be followed by such a failed send; and 60
 * round trips after the failure must work (over a new VI, which the stats
 * line at exit shows). */
static int broken_vi(const char *host, char **argv)
{
	int peer = -1, seq, errs = 0, lost = 0, unreported = 0, after = 0, bad_code = 0;
	if (pvm_spawn("pvm_multihost", argv, PvmTaskHost, (char *)host, 1, &peer) != 1 || peer <= 0)
		return 0;
	pvm_setopt(PvmRoute, PvmRouteDirect);
	for (seq = 0; seq < 400 && after < 60; seq++) {
		int b, got = -1;
		pvm_initsend(PvmDataRaw);
		pvm_pkint(&seq, 1, 1);
		b = pvm_send(peer, 1);
		if (b < 0) {
			errs++;
			bad_code |= b != PvmSysErr;
			unreported = 0;
			continue;
		}
		/* A loss the send after it did not report. */
		if (unreported)
			break;
		/* Echoes come in order; one older than seq is a late one. */
		while (got < seq) {
			b = pvm_trecv(peer, TAG_ECHO, &(struct timeval){ 5, 0 });
			if (b <= 0)
				break;
			pvm_upkint(&got, 1, 1);
		}
		if (got != seq) {
			lost++;
			unreported = 1;
		} else if (errs > 0) {
			after++;
		}
	}
	printf("broken VI: %d sends failed, %d echoes missing (%s), %d round trips after\n", errs,
	       lost, unreported ? "one not reported" : "each reported", after);
	pvm_initsend(PvmDataRaw);
	pvm_send(peer, TAG_STOP);
	pvm_setopt(PvmRoute, PvmAllowDirect);
	return errs >= 1 && !bad_code && !unreported && after == 60;
}

/* The default route. The echo slave's own link to our pvmd (openvia's
 * host link) drops abruptly after 20 echoes went over it: its next send
 * reports the failure and it sends again, the relayed way. At most the
 * echo in flight on the link may be lost, and 60 round trips after the
 * break must work. */
static int broken_host_link(const char *host, char **argv)
{
	int peer = -1, seq, lost = 0, after = 0;
	if (pvm_spawn("pvm_multihost", argv, PvmTaskHost, (char *)host, 1, &peer) != 1 || peer <= 0)
		return 0;
	for (seq = 0; seq < 100; seq++) {
		int b, got = -1;
		pvm_initsend(PvmDataRaw);
		pvm_pkint(&seq, 1, 1);
		if (pvm_send(peer, 1) < 0)
			return 0;
		while (got < seq) {
			b = pvm_trecv(peer, TAG_ECHO, &(struct timeval){ 5, 0 });
			if (b <= 0)
				break;
			pvm_upkint(&got, 1, 1);
		}
		if (got != seq)
			lost++;
		else if (seq >= 40)
			after++;
	}
	printf("broken host link: %d echoes missing, %d round trips after\n", lost, after);
	pvm_initsend(PvmDataRaw);
	pvm_send(peer, TAG_STOP);
	return lost <= 1 && after == 60;
}

int main(int argc, char **argv)
{
	int nhost, narch, me, echo_tid, fresh_tid, direct_tid, tids[4], i, n, ok;
	int sizes[] = { 16, 1024, 65536, 1 << 20, 4 << 20 };
	struct pvmhostinfo *hosts;
	struct pvmtaskinfo *tasks;
	char *host, *sib_argv[] = { "sib", NULL }, *echo_argv[] = { "echo", NULL };
	char *direct_argv[] = { "echo", "direct", NULL }, *break_argv[] = { "echo", "break", NULL };
	char *hlbreak_argv[] = { "echo", "hlbreak", NULL };
	int remote_host_part = -1, hosts_seen[2] = { 0, 0 };
	char what[128];

	if (argc > 1 && strcmp(argv[1], "echo") == 0)
		return echo(argc > 2 && strcmp(argv[2], "direct") == 0,
			    argc > 2 && strcmp(argv[2], "break") == 0,
			    argc > 2 && strcmp(argv[2], "hlbreak") == 0);
	if (argc > 1 && strcmp(argv[1], "sib") == 0)
		return sib();
	if (argc < 2) {
		fprintf(stderr, "usage: pvm_multihost HOST\n");
		return 2;
	}
	host = argv[1];
	me = pvm_mytid();
	check(me > 0, "enrolled");

	check(pvm_config(&nhost, &narch, &hosts) == 0 && nhost == 2, "config lists two hosts");
	for (i = 0; i < nhost; i++)
		if (strcmp(hosts[i].hi_name, host) == 0)
			remote_host_part = hosts[i].hi_tid;
	check(remote_host_part > 0 && remote_host_part != (me & 0x3ffc0000), "config names the other host");
	check(pvm_mstat(host) == PvmOk, "mstat knows the other host");

	n = pvm_spawn("pvm_multihost", echo_argv, PvmTaskHost, host, 1, &echo_tid);
	check(n == 1 && echo_tid > 0, "spawn on the other host");
	if (n != 1 || echo_tid <= 0)
		return 1;
	check((echo_tid & 0x3ffc0000) == remote_host_part, "spawned tid carries the other host");
	check(pvm_tidtohost(echo_tid) == remote_host_part, "tidtohost");

	for (i = 0; i < (int)(sizeof sizes / sizeof sizes[0]); i++) {
		snprintf(what, sizeof what, "round trip %d B raw", sizes[i]);
		check(round_trip(echo_tid, sizes[i], PvmDataRaw), what);
	}
	check(round_trip(echo_tid, 100000, PvmDataDefault), "round trip 100000 B XDR");
	/* A fresh echo slave: its echoes start the relayed way and move to its
	 * own link to this host's pvmd while 256 are in flight; order holds
	 * (openvia's task/host_link.rs: LINK_MARK). */
	n = pvm_spawn("pvm_multihost", echo_argv, PvmTaskHost, host, 1, &fresh_tid);
	check(n == 1 && fresh_tid > 0, "spawn a fresh echo slave");
	check(ordered_stream(fresh_tid, 3000, 0, 256), "3000 default-route echoes, 256 in flight, in order");
	pvm_initsend(PvmDataRaw);
	pvm_send(fresh_tid, TAG_STOP);

	/* PvmRouteDirect: the route changes under a stream, order holds (the
	 * echo slave keeps PVM's default, PvmAllowDirect, and accepts). */
	check(ordered_stream(echo_tid, 300, 3000, 8), "300 routed then 3000 direct messages, in order");
	/* Both sides ask for direct (their requests cross). */
	n = pvm_spawn("pvm_multihost", direct_argv, PvmTaskHost, host, 1, &direct_tid);
	check(n == 1 && direct_tid > 0, "spawn a direct echo slave on the other host");
	if (n != 1 || direct_tid <= 0)
		return 1;
	check(ordered_stream(direct_tid, 0, 500, 8), "both direct: 500 messages in order");
	for (i = 0; i < (int)(sizeof sizes / sizeof sizes[0]); i++) {
		snprintf(what, sizeof what, "direct round trip %d B raw", sizes[i]);
		check(round_trip(direct_tid, sizes[i], PvmDataRaw), what);
	}
	check(round_trip(direct_tid, 100000, PvmDataDefault), "direct round trip 100000 B XDR");
	/* The direct peer dies: a send returns at once (over the dying VI, or
	 * the pvmds once the VI is reported down), and so do later ones. */
	pvm_notify(PvmTaskExit, TAG_EXIT, 1, &direct_tid);
	pvm_kill(direct_tid);
	{
		int b = pvm_trecv(-1, TAG_EXIT, &(struct timeval){ 20, 0 }), who = 0;
		if (b > 0)
			pvm_upkint(&who, 1, 1);
		check(b > 0 && who == direct_tid, "killed direct peer: exit notify");
		pvm_initsend(PvmDataRaw);
		pvm_pkint(&b, 1, 1);
		b = pvm_send(direct_tid, 1);
		check(b == 0 || b == PvmNoTask, "send to the killed direct peer returns");
	}
	check(broken_vi(host, break_argv), "a failed direct VI: PvmSysErr at once, then a new VI");
	pvm_setopt(PvmRoute, PvmAllowDirect);
	check(broken_host_link(host, hlbreak_argv),
	      "a failed default-route link: at most one echo lost, then the relayed way");

	/* Default placement spreads tasks over both hosts; siblings agree. */
	n = pvm_spawn("pvm_multihost", sib_argv, PvmTaskDefault, "", 4, tids);
	check(n == 4, "spawn 4 with default placement");
	ok = n == 4;
	for (i = 0; i < n; i++) {
		int cnt = 0, in = 0, sibs[8], j, k, src, len, tag;
		int b = pvm_recv(-1, TAG_SIB);
		pvm_bufinfo(b, &len, &tag, &src);
		pvm_upkint(&cnt, 1, 1);
		pvm_upkint(&in, 1, 1);
		if (cnt != 4 || !in) {
			ok = 0;
			continue;
		}
		pvm_upkint(sibs, 4, 1);
		for (j = 0; j < 4; j++) {
			int found = 0;
			for (k = 0; k < 4; k++)
				found |= sibs[j] == tids[k];
			ok &= found;
		}
		hosts_seen[(src & 0x3ffc0000) == remote_host_part] = 1;
	}
	check(ok, "every sibling sees the same four tids");
	check(hosts_seen[0] && hosts_seen[1], "default placement used both hosts");

	check(pvm_tasks(0, &n, &tasks) == 0 && n >= 2, "tasks(0)");
	ok = 0;
	for (i = 0; i < n; i++)
		ok |= tasks[i].ti_tid == echo_tid && tasks[i].ti_host == remote_host_part;
	check(ok, "tasks(0) includes the task on the other host");

	/* Task exit on the other host is notified here. */
	pvm_notify(PvmTaskExit, TAG_EXIT, 1, &echo_tid);
	pvm_initsend(PvmDataDefault);
	pvm_send(echo_tid, TAG_STOP);
	{
		int b = pvm_trecv(-1, TAG_EXIT, &(struct timeval){ 20, 0 }), who = 0;
		if (b > 0)
			pvm_upkint(&who, 1, 1);
		check(b > 0 && who == echo_tid, "task-exit notify from the other host");
	}

	/* Host deletion is notified; the machine shrinks to one host. A task
	 * still running there is reported exited along with its host. */
	pvm_notify(PvmHostDelete, TAG_HOSTDEL, 1, &remote_host_part);
	{
		char *names[] = { host };
		int info = 0, b, who = 0, doomed = 0;
		n = pvm_spawn("pvm_multihost", echo_argv, PvmTaskHost, host, 1, &doomed);
		check(n == 1 && doomed > 0, "spawn one more on the other host");
		pvm_notify(PvmTaskExit, TAG_EXIT + 100, 1, &doomed);
		pvm_delhosts(names, 1, &info);
		check(info == 0, "delhosts");
		b = pvm_trecv(-1, TAG_HOSTDEL, &(struct timeval){ 20, 0 });
		if (b > 0)
			pvm_upkint(&who, 1, 1);
		check(b > 0 && who == remote_host_part, "host-delete notify");
		b = pvm_trecv(-1, TAG_EXIT + 100, &(struct timeval){ 20, 0 });
		who = 0;
		if (b > 0)
			pvm_upkint(&who, 1, 1);
		check(b > 0 && who == doomed, "task-exit notify for a task of the deleted host");
		check(pvm_config(&nhost, &narch, &hosts) == 0 && nhost == 1, "config lists one host after delete");
		check(pvm_mstat(host) != PvmOk, "mstat: deleted host is gone");
		pvm_initsend(PvmDataDefault);
		b = pvm_send(echo_tid, 1);
		check(b == 0 || b == PvmNoTask || b == PvmHostFail, "send to a task of a deleted host returns");
	}
	pvm_exit();
	printf("%s\n", failures ? "multihost: FAILED" : "multihost: all ok");
	return failures != 0;
}
