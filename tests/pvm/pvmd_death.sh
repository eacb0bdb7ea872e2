#!/bin/bash
# Kills the pvmd with SIGKILL under two tasks of tests/pvm/pvmd_death.c
# (issue 19, defect 5): the master, blocked in pvm_recv with a TaskExit
# notify armed on its peer, must get PvmSysErr within 1 s, later calls too,
# and the peer's blocked pvm_recv must fail with PvmSysErr as well.
# Then the console (issue 15): waiting for input when its pvmd is killed,
# it exits with status 1 within 1 s instead of hanging.
# Usage: pvmd_death.sh [DIR with libpvm3.so, pvmd and pvm]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bindir=$(pvm_bindir "${1:-}" libpvm3.so pvmd pvm) || exit 1
work=$(mktemp -d)
export HOME=$work/home OPENVIA_PVM_SOCK=$work/pvmd.sock LD_LIBRARY_PATH=$work/lib
mkdir -p "$HOME/pvm3/bin/LINUX64" "$work/lib"
ln -s "$(readlink -f "$bindir/libpvm3.so")" "$work/lib/libpvm3.so.3"
exe=$HOME/pvm3/bin/LINUX64/pvmd_death
cc -O2 -Wall -Wextra -Werror -I"$here/../../include" -o "$exe" "$here/pvmd_death.c" "$work/lib/libpvm3.so.3"
pvmd_pid=
master_pid=
console_pid=
cleanup() {
	[ -n "$console_pid" ] && kill -9 "$console_pid" 2>/dev/null
	[ -n "$master_pid" ] && kill -9 "$master_pid" 2>/dev/null
	[ -n "$pvmd_pid" ] && kill -9 "$pvmd_pid" 2>/dev/null
	[ ! -s "$work/echo.result" ] && [ -s "$work/echo.result.pid" ] && kill -9 "$(cat "$work/echo.result.pid")" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

# The pvmd in the foreground, so that its pid is $!; its ready byte comes
# through a fifo.
mkfifo "$work/ready"
"$bindir/pvmd" --foreground --ready-fd 3 3>"$work/ready" </dev/null >/dev/null 2>&1 &
pvmd_pid=$!
read -r -n 1 _ <"$work/ready"

mkfifo "$work/master.out"
"$exe" "$work/echo.result" >"$work/master.out" 2>&1 &
master_pid=$!
exec 4<"$work/master.out"
read -r -t 30 line <&4 || line=
[ "$line" = blocking ] || { echo "FAIL pvmd-death: master said '$line'"; exit 1; }

start=$(date +%s%N)
{ kill -9 "$pvmd_pid" && wait "$pvmd_pid"; } 2>/dev/null || true
pvmd_pid=
read -r -t 5 line <&4 || line=
end=$(date +%s%N)
ms=$(((end - start) / 1000000))
rest=$(timeout 5 cat <&4 || true)
# A master still blocked by now is killed: the verdict is already FAIL.
kill -9 "$master_pid" 2>/dev/null || true
wait "$master_pid" 2>/dev/null && rc=0 || rc=$?
master_pid=
fail=0
echo "pvm_recv returned '$line' ${ms} ms after the pvmd's SIGKILL"
if [ "$line" = "pvm_recv -14" ] && [ "$ms" -lt 1000 ]; then echo "ok   pvmd-death-recv"; else
	echo "FAIL pvmd-death-recv"; fail=1
fi
if [ "$rc" = 0 ]; then echo "ok   pvmd-death-later-calls"; else
	echo "FAIL pvmd-death-later-calls (rc $rc): $rest"; fail=1
fi
# The echo task writes its result when its own blocked pvm_recv fails.
for _ in $(seq 100); do [ -s "$work/echo.result" ] && break; sleep 0.05; done
if [ "$(cat "$work/echo.result" 2>/dev/null)" = -14 ]; then echo "ok   pvmd-death-peer"; else
	echo "FAIL pvmd-death-peer: '$(cat "$work/echo.result" 2>/dev/null)'"; fail=1
fi

# The console on a pvmd that dies while it waits for a command.
rm -f "$work/ready"
mkfifo "$work/ready" "$work/cons.in" "$work/cons.out"
"$bindir/pvmd" --foreground --ready-fd 3 3>"$work/ready" </dev/null >/dev/null 2>&1 &
pvmd_pid=$!
read -r -n 1 _ <"$work/ready"
"$bindir/pvm" <"$work/cons.in" >"$work/cons.out" 2>"$work/cons.err" &
console_pid=$!
exec 5>"$work/cons.in" 6<"$work/cons.out"
read -r -t 30 line <&6 || line=
[ "$line" = "pvmd already running." ] || { echo "FAIL console-start: '$line'"; exit 1; }
IFS= read -r -t 30 -n 5 prompt <&6 || prompt=
[ "$prompt" = "pvm> " ] || { echo "FAIL console-prompt: '$prompt'"; exit 1; }
start=$(date +%s%N)
{ kill -9 "$pvmd_pid" && wait "$pvmd_pid"; } 2>/dev/null || true
pvmd_pid=
for _ in $(seq 200); do kill -0 "$console_pid" 2>/dev/null || break; sleep 0.01; done
end=$(date +%s%N)
ms=$(((end - start) / 1000000))
kill -9 "$console_pid" 2>/dev/null || true
wait "$console_pid" 2>/dev/null && rc=0 || rc=$?
console_pid=
exec 5>&- 6<&-
echo "console exited (status $rc) ${ms} ms after the pvmd's SIGKILL: $(cat "$work/cons.err")"
if [ "$rc" = 1 ] && [ "$ms" -lt 1000 ]; then echo "ok   pvmd-death-console"; else
	echo "FAIL pvmd-death-console"; fail=1
fi
exit $fail
