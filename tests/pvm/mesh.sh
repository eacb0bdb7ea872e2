#!/bin/bash
# openvia PVM on three hosts: slaves reach each other without the master.
# Three network namespaces (A, B, C) on one bridge; the master pvmd on A
# starts B and C from its hostfile; the slaves then link to each other
# (daemon/mesh.rs). tests/pvm/mesh.c exchanges 1000 messages between a
# task on B and one on C; the check is that they arrive intact and in
# order and that the master relayed (almost) none of them: its log counts
# the frames it relayed between other hosts.
# Needs root (namespaces). Usage: mesh.sh [DIR with libpvm3.so, pvmd, pvm]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ "$(id -u)" = 0 ] || { echo "mesh.sh needs root (network namespaces)"; exit 1; }
bindir=$(pvm_bindir "${1:-}" libpvm3.so pvmd pvm)

work=$(mktemp -d)
id=$$
# Unique per run; PVM_TEST_NS_TAG puts a word of the caller's in the names.
tag=${PVM_TEST_NS_TAG:-ovm}
A=${tag}a$id B=${tag}b$id C=${tag}c$id BR=${tag}br$id
export HOME=$work/home LD_LIBRARY_PATH=$work/lib WORK=$work
mkdir -p "$HOME/pvm3/bin/LINUX64" "$work/lib"
ln -s "$(readlink -f "$bindir/libpvm3.so")" "$work/lib/libpvm3.so.3"

cleanup() {
	for ns in $A $B $C $BR; do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
		ip netns del "$ns" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$BR"
ip -n "$BR" link add br0 type bridge
ip -n "$BR" link set br0 up
n=1
for ns in $A $B $C; do
	ip netns add "$ns"
	ip link add "ovm$n$id" type veth peer name "ovk$n$id"
	ip link set "ovm$n$id" netns "$ns"
	ip link set "ovk$n$id" netns "$BR"
	ip -n "$BR" link set "ovk$n$id" master br0 up
	ip -n "$ns" addr add "10.80.0.$n/24" dev "ovm$n$id"
	ip -n "$ns" link set lo up
	ip -n "$ns" link set "ovm$n$id" mtu 1500 up
	n=$((n + 1))
done

# The remote shell: `rsh HOST [-l user] COMMAND...` runs COMMAND in the
# namespace named HOST with a PVM_TMP of that host's own.
netns_rsh "$work/rsh"
export PVM_RSH=$work/rsh
mkdir -p "$work/tmp-$A"

cc -O2 -Wall -Wextra -Werror -I"$here/../../include" -o "$HOME/pvm3/bin/LINUX64/pvm_mesh" \
	"$here/mesh.c" "$work/lib/libpvm3.so.3"
printf '%s\n%s\n' "$B" "$C" >"$work/hostfile"
inA() { ip netns exec "$A" env PVM_TMP="$work/tmp-$A" "$@"; }

fail=0
inA timeout 60 "$bindir/pvmd" "$work/hostfile"
# Readiness: both slaves logged their link to each other (bounded wait).
for i in $(seq 200); do
	if grep -qs 'mesh link to host [0-9]* up' "$work/tmp-$B"/openvia-pvml.* &&
		grep -qs 'mesh link to host [0-9]* up' "$work/tmp-$C"/openvia-pvml.*; then
		break
	fi
	sleep 0.05
done
cd "$work"
inA timeout 120 "$HOME/pvm3/bin/LINUX64/pvm_mesh" "$B" "$C" >mesh.out 2>&1 || true
cat mesh.out
check mesh mesh.out '^mesh: all ok$'
echo halt | inA timeout 10 "$bindir/pvm" >/dev/null 2>&1 || true
for i in $(seq 100); do grep -q 'halted$' "$work/tmp-$A"/openvia-pvml.* && break; sleep 0.05; done
cat "$work/tmp-$A"/openvia-pvml.* >pvmd-a.log
grep -h 'mesh link' "$work"/tmp-*/openvia-pvml.* >mesh-links.log || true
check slaves-linked mesh-links.log 'mesh link to host [0-9]+ up'
# 2000 messages crossed between B and C: the master relayed at most the
# switch's own marks (4 frames) and a handful more.
grep -Eo 'frames relayed between other hosts: [0-9]+' pvmd-a.log | grep -Eo '[0-9]+$' >relayed.out || echo none >relayed.out
check master-relays-almost-nothing relayed.out '^([0-9]|[1-4][0-9])$'
if [ $fail != 0 ]; then
	for f in "$work"/tmp-*/openvia-pvml.*; do echo "== $f"; tail -20 "$f"; done
fi
exit $fail
