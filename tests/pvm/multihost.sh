#!/bin/bash
# openvia PVM on two hosts: two network namespaces joined by a veth pair,
# the master pvmd in the first started with a hostfile naming the second,
# its slave pvmd started through PVM_RSH (an `ip netns exec` wrapper, as
# ssh would be between machines), pvmd to pvmd over openvia's UDP device.
# Runs tests/pvm/multihost.c (spawn across hosts, 16 B .. 4 MB round trips,
# PvmRouteDirect over a task-to-task VI with ordering across the switch,
# siblings, tasks, notify on task exit and host deletion) and Debian's spmd
# spawned as four from the console across both hosts.
# Needs root (namespaces). Usage: multihost.sh [DIR with libpvm3.so, pvmd, pvm]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bindir=${1:-${CARGO_TARGET_DIR:-$here/../../target}/debug}
bindir=$(cd "$bindir" && pwd)
[ "$(id -u)" = 0 ] || { echo "multihost.sh needs root (network namespaces)"; exit 1; }
for f in libpvm3.so pvmd pvm; do
	[ -e "$bindir/$f" ] || { echo "missing $bindir/$f"; exit 1; }
done

work=$(mktemp -d)
id=$$
# Namespace names are unique per run; PVM_TEST_NS_TAG puts a word of the
# caller's in them (so a shared machine's users can tell whose they are).
A=${PVM_TEST_NS_TAG:-ovp}a$id
B=${PVM_TEST_NS_TAG:-ovp}b$id
export HOME=$work/home LD_LIBRARY_PATH=$work/lib WORK=$work
mkdir -p "$HOME/pvm3/bin/LINUX64" "$work/lib"
ln -s "$(readlink -f "$bindir/libpvm3.so")" "$work/lib/libpvm3.so.3"

cleanup() {
	for ns in $A $B; do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
		ip netns del "$ns" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$A"
ip netns add "$B"
ip link add "ova$id" type veth peer name "ovb$id"
ip link set "ova$id" netns "$A"
ip link set "ovb$id" netns "$B"
ip -n "$A" addr add 10.79.0.1/24 dev "ova$id"
ip -n "$B" addr add 10.79.0.2/24 dev "ovb$id"
for ns in $A $B; do ip -n "$ns" link set lo up; done
ip -n "$A" link set "ova$id" mtu 9000 up
ip -n "$B" link set "ovb$id" mtu 9000 up

# The remote shell: `rsh HOST [-l user] COMMAND...` runs COMMAND in the
# namespace named HOST, with a PVM_TMP of that host's own (the namespaces
# share one file system, real hosts would not).
netns_rsh "$work/rsh"
export PVM_RSH=$work/rsh
mkdir -p "$work/tmp-$A"

cc -O2 -Wall -Wextra -Werror -I"$here/../../include" -o "$HOME/pvm3/bin/LINUX64/pvm_multihost" \
	"$here/multihost.c" "$work/lib/libpvm3.so.3"
spmd=$(command -v spmd || true)
[ -n "$spmd" ] && ln -s "$spmd" "$HOME/pvm3/bin/LINUX64/spmd"

printf '# the second host, reached through PVM_RSH\n%s\n' "$B" >"$work/hostfile"
inA() { ip netns exec "$A" env PVM_TMP="$work/tmp-$A" "$@"; }

fail=0
# The master pvmd; it starts the slave before serving tasks.
inA timeout 30 "$bindir/pvmd" "$work/hostfile"
cd "$work"
# The master prints its direct routes' figures at pvm_exit.
inA env OPENVIA_PVM_DIRECT_STATS=1 timeout 120 "$HOME/pvm3/bin/LINUX64/pvm_multihost" "$B" >multihost.out 2>&1 || true
cat multihost.out
check multihost multihost.out '^multihost: all ok$'
# The three slaves (the default-route echo, the direct one, the one whose
# VI broke, which may be reconnecting as the master exits) were reached
# over a VI, both ways.
grep -E '^openvia-pvm direct t[0-9a-f]+ -> t[0-9a-f]+: (up|off|idle|connecting), [1-9][0-9]* messages sent and [1-9][0-9]* received over the VI$' \
	multihost.out >direct.out || true
check direct-vi-used <(wc -l <direct.out) '^3$'
# Default-route messages to the other host went over the master task's
# own link to that host's pvmd once it was up (task/host_link.rs).
check host-link-used multihost.out '^openvia-pvm host link t[0-9a-f]+ -> host 2: up, [1-9][0-9]* messages sent over the VI$'
# The VI that failed under the third slave was opened again (its connect
# started: the slave may exit before the new one is up).
check direct-vi-reopened multihost.out '^openvia-pvm direct t[0-9a-f]+ -> t[0-9a-f]+: reopened [1-9][0-9]* times$'

if [ -n "$spmd" ]; then
	# The host was deleted above: add it again from the console, then
	# Debian's spmd as four tasks over both hosts.
	"$here/console_job.sh" 60 "add $B" conf 'spawn -4 -> spmd' -- \
		ip netns exec "$A" env PVM_TMP="$work/tmp-$A" "$bindir/pvm" >spmd.out 2>&1 || true
	check console-add spmd.out "^ *$B +[0-9a-f]+ +LINUX64"
	check spmd-ring spmd.out 'Pass a token through the +4 tid ring'
	check spmd-done spmd.out 'token ring done'
	check spmd-remote spmd.out "^\[1:tc[0-9a-f]{4}\] EOF"
fi
# pvm_getfds (tests/pvm/getfds.c): its descriptor becomes readable for
# messages that come over the direct route from a task on the other host
# (PvmRouteDirect), and for the pvmd's TaskExit notify.
cc -O2 -Wall -Wextra -Werror -I"$here/../../include" -o "$HOME/pvm3/bin/LINUX64/pvm_getfds" \
	"$here/getfds.c" "$work/lib/libpvm3.so.3"
[ -n "$spmd" ] || echo "add $B" | inA timeout 30 "$bindir/pvm" >/dev/null 2>&1 || true
# The child prints its direct route's figures at pvm_exit (to a pvmd log).
inA env OPENVIA_PVM_DIRECT_STATS=1 PVM_EXPORT=OPENVIA_PVM_DIRECT_STATS timeout 60 \
	"$HOME/pvm3/bin/LINUX64/pvm_getfds" "$B" direct >getfds.out 2>&1 || true
check getfds-direct getfds.out '^getfds: all ok$'
# Idle daemons do not poll: the progress threads' poll before sleeping
# (Nic::set_progress_spin) shrinks to nothing while nothing comes, so both
# pvmds together use under a tenth of a CPU second in a quiet second.
cpu_ticks() { # user+system clock ticks of every process in both namespaces
	for ns in $A $B; do ip netns pids "$ns"; done |
		while read -r p; do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null; done |
		awk '{s += $1} END {print s + 0}'
}
sleep 0.3 # let the last exchanges' windows run out
t0=$(cpu_ticks)
sleep 1
t1=$(cpu_ticks)
hz=$(getconf CLK_TCK)
echo "idle pvmds: $((t1 - t0)) ticks of $hz in 1 s" >idle.out
cat idle.out
check idle-daemons-sleep <(echo $(((t1 - t0) * 10 < hz))) '^1$'
echo halt | inA timeout 10 "$bindir/pvm" >/dev/null 2>&1 || true
# Messages from the other host went straight into the receiver's pool
# pages (or, with a pool too small for them, the socket way).
for i in $(seq 100); do grep -q 'halted$' "$work/tmp-$A"/openvia-pvml.* && break; sleep 0.05; done
cat "$work/tmp-$A"/openvia-pvml.* >pvmd-a.log
cat "$work"/tmp-*/openvia-pvml.* >pvmd-all.log
# The echo slave whose host link broke (multihost.c, broken_host_link)
# sent 20 echoes over it, then went the relayed way.
check host-link-broke pvmd-all.log 'openvia-pvm host link t8[0-9a-f]+ -> host 1: off, 20 messages sent over the VI$'
check getfds-direct-vi pvmd-all.log 'openvia-pvm direct tc[0-9a-f]+ -> t4[0-9a-f]+: (up|off), [1-9][0-9]* messages sent and [0-9]+ received over the VI$'
if [ "${OPENVIA_PVM_POOL_MB:-64}" -ge 16 ]; then
	check inbound-pool pvmd-a.log 'messages from other hosts: [1-9][0-9]* into the pool, 0 by socket'
else
	check inbound-socket pvmd-a.log 'messages from other hosts: [0-9]+ into the pool, [1-9][0-9]* by socket'
fi
# The relayed default route (stock PVM's way, every message through both
# pvmds: OPENVIA_PVM_HOSTLINK=0, which the master hands to its slave and
# the pvmds to their tasks) carries the same program on a fresh virtual
# machine, and no host link is made.
inA env OPENVIA_PVM_HOSTLINK=0 timeout 30 "$bindir/pvmd" "$work/hostfile"
inA env OPENVIA_PVM_HOSTLINK=0 OPENVIA_PVM_DIRECT_STATS=1 timeout 120 \
	"$HOME/pvm3/bin/LINUX64/pvm_multihost" "$B" >relayed.out 2>&1 || true
echo halt | inA timeout 10 "$bindir/pvm" >/dev/null 2>&1 || true
check relayed relayed.out '^multihost: all ok$'
check relayed-no-host-link <(grep -c '^openvia-pvm host link' relayed.out || true) '^0$'
if [ $fail != 0 ]; then
	tail -40 relayed.out
	for f in "$work"/tmp-*/openvia-pvml.*; do echo "== $f"; tail -30 "$f"; done
fi
exit $fail
