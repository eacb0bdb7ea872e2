#!/bin/bash
# Runs Debian's unmodified PVM 3.4.6 example binaries (apt-get install
# pvm pvm-examples) on openvia's libpvm3.so.3 and pvmd, and checks what
# they print. Usage: run_examples.sh [DIR with libpvm3.so, pvmd and pvm]
# (default: $CARGO_TARGET_DIR or target, debug profile).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bindir=${1:-${CARGO_TARGET_DIR:-$here/../../target}/debug}
bindir=$(cd "$bindir" && pwd)
for f in libpvm3.so pvmd pvm; do
	[ -e "$bindir/$f" ] || { echo "missing $bindir/$f (cargo build -p pvm3 -p openvia-pvm)"; exit 1; }
done
for f in hello.pvm hello_other timing timing_slave master1 slave1 spmd gexample pvmgs; do
	command -v "$f" >/dev/null || { echo "missing $f: apt-get install -y pvm pvm-examples"; exit 1; }
done

work=$(mktemp -d)
export HOME=$work/home OPENVIA_PVM_SOCK=$work/pvmd.sock LD_LIBRARY_PATH=$work/lib
mkdir -p "$HOME/pvm3/bin/LINUX64" "$work/lib"
ln -s "$(readlink -f "$bindir/libpvm3.so")" "$work/lib/libpvm3.so.3"
# Executables are found the PVM way: $HOME/pvm3/bin/$PVM_ARCH.
for f in hello_other timing_slave slave1 spmd gexample pvmgs; do
	ln -s "$(command -v $f)" "$HOME/pvm3/bin/LINUX64/$f"
done
console="$bindir/pvm"
cleanup() {
	echo halt | timeout 10 "$console" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
fail=0
check() { # name, output file, extended regex that must match
	if grep -Eq "$3" "$2"; then echo "ok   $1"; else
		echo "FAIL $1 (wanted /$3/):"; sed 's/^/    /' "$2"; fail=1
	fi
}
cd "$work"

# The first task starts the pvmd itself, as in PVM.
timeout 20 hello.pvm >hello.out 2>&1 || true
check hello hello.out '^from t4[0-9a-f]{4}: hello, world from '"$(hostname)"'$'

timeout 60 timing >timing.out 2>&1 || true
grep -E "Avg|bytes" timing.out >&2 || true
check timing-rtt timing.out '^RTT Avg uSec [0-9]+$'
check timing-done timing.out '^done$'

timeout 20 master1 >master1.out 2>&1 || true
check master1 master1.out 'SUCCESSFUL'
[ "$(grep -c 'I got' master1.out)" -ge 3 ] && grep 'I got' master1.out | awk '{ if ($3")" != $7) bad=1 } END { exit bad }' ||
	{ echo "FAIL master1 sums"; fail=1; }

printf 'spawn -4 -> spmd\nquit\n' | timeout 30 "$console" >spmd.out 2>&1 || true
check spmd-ring spmd.out 'Pass a token through the +4 tid ring'
check spmd-done spmd.out 'token ring done'
[ "$(grep -c 'EOF' spmd.out)" -eq 4 ] || { echo "FAIL spmd: not 4 EOFs"; fail=1; }

printf '10\n4\n' | timeout 60 gexample >gexample.out 2>&1 || true
check gexample-norm gexample.out 'The 1-Norm is 55'
check gexample-prod gexample.out 'The product of column 1 is 3.6288e\+06'

# Seed 003's contention case, 7 senders x 4 MB at once, through its own
# pvmd whose pool (8 MB) is far smaller: senders wait for pages, all data
# must arrive intact, bounded in time.
cc -O2 -Wall -Wextra -Werror -I"$here/../../include" -o "$HOME/pvm3/bin/LINUX64/pvm_contention" \
	"$here/contention.c" "$work/lib/libpvm3.so.3"
OPENVIA_PVM_SOCK=$work/pvmd2.sock OPENVIA_PVM_POOL_MB=8 timeout 120 \
	"$HOME/pvm3/bin/LINUX64/pvm_contention" 7 4 >contention.out 2>&1 || true
echo halt | OPENVIA_PVM_SOCK=$work/pvmd2.sock timeout 10 "$console" >/dev/null 2>&1 || true
check contention-7x4MB contention.out '^contention: 7 of 7 messages of 4096 KB intact, 0 bad, usec [0-9]+$'

printf 'conf\nps\nquit\n' | timeout 10 "$console" >console.out 2>&1 || true
check console-conf console.out 'LINUX64'
exit $fail
