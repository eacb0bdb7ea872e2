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
# Every program of the package this script runs (docs/pvm-examples.md has
# the table of all of them).
examples="hello.pvm hello_other timing timing_slave master1 slave1 spmd gexample
	inherita inheritb inherit1 inherit2 inherit3 task0 task1 task_end lmbi
	mhf_server mhf_tickle dbwtest ibwtest pbwtest rbwtest gexamp thb tnb tst
	joinleave trsg gs.pvm fmaster1 fslave1 fspmd fgexample frsg hitc hitc_slave
	gmbi rme ge tjl tjf xep mtile srm.pvm"
for f in $examples pvmgs; do
	command -v "$f" >/dev/null || { echo "missing $f: apt-get install -y pvm pvm-examples"; exit 1; }
done
# xep is an X11 program: it runs on a virtual display, read back with xwd.
for f in Xvfb xwd xwininfo python3; do
	command -v "$f" >/dev/null || { echo "missing $f: apt-get install -y xvfb x11-apps x11-utils python3"; exit 1; }
done

work=$(mktemp -d)
export HOME=$work/home OPENVIA_PVM_SOCK=$work/pvmd.sock LD_LIBRARY_PATH=$work/lib
mkdir -p "$HOME/pvm3/bin/LINUX64" "$work/lib"
ln -s "$(readlink -f "$bindir/libpvm3.so")" "$work/lib/libpvm3.so.3"
# Executables are found the PVM way: $HOME/pvm3/bin/$PVM_ARCH.
for f in $examples pvmgs; do
	ln -s "$(command -v $f)" "$HOME/pvm3/bin/LINUX64/$f"
done
console="$bindir/pvm"
xvfb_pid=
cleanup() {
	echo halt | timeout 10 "$console" >/dev/null 2>&1 || true
	[ -n "$xvfb_pid" ] && kill "$xvfb_pid" 2>/dev/null
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

# The console prints job output as it arrives and quits at once, as stock's
# does: console_job.sh quits once the job has finished.
"$here/console_job.sh" 30 'spawn -4 -> spmd' -- "$console" >spmd.out 2>&1 || true
check spmd-ring spmd.out 'Pass a token through the +4 tid ring'
check spmd-done spmd.out 'token ring done'
[ "$(grep -c 'EOF' spmd.out)" -eq 4 ] || { echo "FAIL spmd: not 4 EOFs"; fail=1; }

printf '10\n4\n' | timeout 60 gexample >gexample.out 2>&1 || true
check gexample-norm gexample.out 'The 1-Norm is 55'
check gexample-prod gexample.out 'The product of column 1 is 3.6288e\+06'

# Context inheritance: children start in the context their parent had
# at pvm_spawn, grandchildren in their own parent's.
ctx_of() { sed -n "s/.*$2.* with changed context \([0-9]*\)\.$/\1/p" "$1" | head -1; }
timeout 20 inherita inherit1 >inherit1.out 2>&1 || true
c=$(ctx_of inherit1.out inherita)
check inherit1 inherit1.out "inherit2 t4[0-9a-f]+ on machine <.*> with context ${c:-none}\.$"
timeout 20 inherita inherit3 >inherit3.out 2>&1 || true
c3=$(sed -n 's/.*inherit3: I just spawned inherit2 as tid t[0-9a-f]* with context \([0-9]*\)\./\1/p' inherit3.out)
check inherit3 inherit3.out "inherit2 t4[0-9a-f]+ on machine <.*> with context ${c3:-none}\.$"
timeout 20 inheritb >inheritb.out 2>&1 || true
c2=$(sed -n 's/^2:inheritb: .* with new #2 context \([0-9]*\) .*/\1/p' inheritb.out)
check inheritb inheritb.out "^3:inheritb: t4[0-9a-f]+ .*inherit2 t4[0-9a-f]+ on machine <.*> with context ${c2:-none}\. <-- received from 2nd"

# Mailbox services: task0 offers one, two task1 clients and task_end use it.
# Lines are read from task0 as it prints them (line-buffered by stdbuf).
mkfifo task0.pipe
timeout 30 stdbuf -oL task0 svc >task0.pipe 2>&1 &
exec 4<task0.pipe
until_line() { # fd, pattern, log: reads lines into log until one matches
	while IFS= read -r -t 20 -u "$1" line; do
		printf '%s\n' "$line" >>"$3"
		case "$line" in *$2*) return 0 ;; esac
	done
	return 1
}
until_line 4 'just inserted service name <svc>' task0.out || true
timeout 10 task1 svc >task1.out 2>&1 || true
timeout 10 task1 svc 0 f >>task1.out 2>&1 || true
timeout 10 task_end svc 0 >>task1.out 2>&1 || true
until_line 4 'handled 3 service requests' task0.out || true
exec 4<&-
check task1 task1.out 'welcome to my server - you are service request number 2\.'
check task0 task0.out 'handled 3 service requests\.'
timeout 10 lmbi 3 p e >lmbi.out 2>&1 || true
[ "$(grep -c 'just inserted entry <t4[0-9a-f]*lmbi[0-2]> at index 0' lmbi.out)" -eq 3 ] && echo "ok   lmbi" ||
	{ echo "FAIL lmbi:"; sed 's/^/    /' lmbi.out; fail=1; }
# pvm_getmboxinfo: lmbi's three entries, ownerless since lmbi exited (PVM
# matches the pattern anywhere in a class name).
timeout 10 gmbi lmbi >gmbi.out 2>&1 || true
check gmbi gmbi.out '^gmbi: 3 mbox entries returned\.$'
[ "$(grep -c 'owner_tid <t0>.*flags <1> = <PvmMboxPersistent >' gmbi.out)" -eq 3 ] ||
	{ echo "FAIL gmbi entries"; fail=1; }
# pvm_delinfo as PVM 3.4.6's mb_delete: another task may delete an
# overwritable entry, not one that is not (even with its owner gone).
mbox_entry() { sed -n 's/.*just inserted entry <\(t[0-9a-f]*lmbi0\)>.*/\1/p' "$1" | head -1; }
timeout 10 lmbi 1 po e >lmbi-o.out 2>&1 || true
timeout 10 rme "$(mbox_entry lmbi.out)" 0 >rme-p.out 2>&1 || true
check rme-refused rme-p.out "Key locked by another task, can't delete\.$"
timeout 10 rme "$(mbox_entry lmbi-o.out)" 0 >rme-o.out 2>&1 && echo "ok   rme-overwritable" ||
	{ echo "FAIL rme-overwritable:"; sed 's/^/    /' rme-o.out; fail=1; }
timeout 10 gmbi "$(mbox_entry lmbi-o.out)" >gmbi-o.out 2>&1 || true
check rme-gone gmbi-o.out '^gmbi: 0 mbox entries returned\.$'

# Message handlers, driven through mhf_tickle's menu one step at a time:
# each step waits for mhf_server to report the previous one.
mkfifo mhf.pipe tickle.pipe
timeout 30 mhf_server >mhf.pipe 2>&1 &
exec 4<mhf.pipe
until_line 4 'startup...' mhf.out || true
timeout 30 mhf_tickle <tickle.pipe >tickle.out 2>&1 &
exec 5>tickle.pipe
step() { printf "$1" >&5; until_line 4 "$2" mhf.out || echo "(no '$2')" >>mhf.out; }
step '1\n77\n0\n1\n' 'loaded SC1'
step '4\n77\n0\n1\nhello handlers\n' 'HIT:'
step '1\n78\n0\n6\n' 'loaded IC1'
step '4\n78\n0\n6\n4242\n' 'HIT:'
step '2\n0\n' 'AFTER delete'
step '4\n77\n0\n1\nafter delete\n' 'HIT:'
step '9\n' 'Termiate Self'
exec 4<&- 5>&-
check mhf-string mhf.out 'HIT:  ping target 1 - SC1   strings match <hello handlers>\.'
check mhf-int mhf.out 'HIT:  ping target 6 - IC1   magic_numbers match 4242\.'
check mhf-deleted mhf.out 'NO HIT:  lmh = 1 - SC1   mhf_catch = -99'

# The bandwidth testers, two of each spawned from the console; they pair
# up through the group server.
for b in dbwtest ibwtest pbwtest rbwtest; do
	"$here/console_job.sh" 60 "spawn -2 -> $b" -- "$console" >$b.out 2>&1 || true
	[ "$(grep -c '100000 doubles received correctly' $b.out)" -eq 2 ] || echo "(not 2 validations)" >>$b.out
	check $b $b.out 'Roundtrip T = [0-9]+ \(us\) .* Data size: 800000$'
	grep -q 'not 2 validations' $b.out && { echo "FAIL $b validations"; fail=1; }
done

# Group examples (gexamples).
timeout 30 gexamp 4 >gexamp.out 2>&1 || true
check gexamp gexamp.out '^gexamp 0: sync$'
grep -q "doesn't match" gexamp.out && { echo "FAIL gexamp ids"; fail=1; }
timeout 30 thb 3 >thb.out 2>&1 || true
check thb thb.out '^done\.$'
timeout 30 tst >tst.out 2>&1 || true
check tst tst.out '^left prognosis 0, negative 0$'
timeout 30 joinleave 200 >joinleave.out 2>&1 || true
check joinleave joinleave.out '^Joined 200 times$'
timeout 30 ge 4 >ge.out 2>&1 || true
check ge ge.out '^done$'
timeout 30 tjl >tjl.out 2>&1 || true
[ "$(grep -c '^joined group[0-9]*$' tjl.out)" -eq 32 ] && echo "ok   tjl" ||
	{ echo "FAIL tjl:"; tail -5 tjl.out | sed 's/^/    /'; fail=1; }
timeout 30 tjf >tjf.out 2>&1 || true
check tjf tjf.out '^joined group31$'
printf '4\n10\n' | timeout 30 trsg >trsg.out 2>&1 || true
check trsg trsg.out 'Test OK: Sum of Squares of first 40 integers is 22140'
timeout 30 gs.pvm 4 >gs.out 2>&1 && echo "ok   gs.pvm" || { echo "FAIL gs.pvm:"; tail -3 gs.out; fail=1; }

# Fortran versions (Debian links libfpvm3 statically into them).
timeout 30 fmaster1 </dev/null >fmaster1.out 2>&1 || true
[ "$(grep -c 'I got .* from .* (expected' fmaster1.out)" -eq 3 ] &&
	awk '/I got/ { if ($3 != $7) bad=1 } END { exit bad }' fmaster1.out && echo "ok   fmaster1" ||
	{ echo "FAIL fmaster1:"; sed 's/^/    /' fmaster1.out; fail=1; }
"$here/console_job.sh" 30 'spawn -4 -> fspmd' -- "$console" >fspmd.out 2>&1 || true
check fspmd fspmd.out 'token ring done'
timeout 30 fgexample </dev/null >fgexample.out 2>&1 || true
check fgexample fgexample.out 'The 1-Norm is +5050$'
check fgexample-prod fgexample.out 'The product of column 1 is +9\.33262154439441[0-9]*E\+157'
printf '4\n10\n' | timeout 30 frsg >frsg.out 2>&1 || true
frsg_ok='Test OK: Sum of Squares of first +40 +integers is +22140'
if grep -Eq "$frsg_ok" frsg.out; then echo "ok   frsg"; else
	# Debian's frsg (3.4.6-5) gets pvmfreduce's sum wrong on stock PVM too:
	# then it says nothing about ours.
	mkdir -p "$work/stock-tmp"
	stock() { PVM_TMP=$work/stock-tmp PVM_ROOT=/usr/lib/pvm3 PVM_ALLOW_ROOT=1 LD_LIBRARY_PATH= "$@"; }
	echo quit | stock timeout 20 setsid -w pvm >/dev/null 2>&1 || true
	printf '4\n10\n' | stock timeout 30 frsg >frsg-stock.out 2>&1 || true
	{ echo halt | stock timeout 10 setsid -w pvm >/dev/null 2>&1 || true; } 2>/dev/null
	if ! grep -Eq "$frsg_ok" frsg-stock.out && grep -q 'ERROR: The Sum of Squares' frsg-stock.out; then
		echo "skip frsg: it fails on stock PVM 3.4.6 too:"; grep ERROR frsg-stock.out | sed 's/^/    /'
	else
		check frsg frsg.out "$frsg_ok"
	fi
fi
timeout 60 hitc </dev/null >hitc.out 2>&1 || true
check hitc hitc.out 'Program Finished'
# Every task handed out (size > 0) came back with a result, after the one
# slave's (one host) first "idle" result.
ntask=$(grep -Ec 'task of size: +[0-9]+$' hitc.out)
[ "$ntask" -gt 0 ] && [ "$((ntask + 1))" -eq "$(grep -c 'I got result' hitc.out)" ] ||
	{ echo "FAIL hitc results"; fail=1; }

# Seed 003's contention case, 7 senders x 4 MB at once, through its own
# pvmd whose pool (8 MB) is far smaller: senders wait for pages, all data
# must arrive intact, bounded in time.
cc -O2 -Wall -Wextra -Werror -I"$here/../../include" -o "$HOME/pvm3/bin/LINUX64/pvm_contention" \
	"$here/contention.c" "$work/lib/libpvm3.so.3"
OPENVIA_PVM_SOCK=$work/pvmd2.sock OPENVIA_PVM_POOL_MB=8 timeout 120 \
	"$HOME/pvm3/bin/LINUX64/pvm_contention" 7 4 >contention.out 2>&1 || true
echo halt | OPENVIA_PVM_SOCK=$work/pvmd2.sock timeout 10 "$console" >/dev/null 2>&1 || true
check contention-7x4MB contention.out '^contention: 7 of 7 messages of 4096 KB intact, 0 bad, usec [0-9]+$'

# xep (X11, Mandelbrot set) on an Xvfb display: it spawns an mtile worker,
# hands it tiles and learns of each result only from select() on
# pvm_getfds()'s descriptor (XtAppAddInput, then pvm_nrecv). Its canvas
# starts as diagonal stripes; xep_tiles.py reads the canvas back (xwd) and
# says whether the computed set (symmetric about the real axis) replaced
# them. Nothing is clicked: this is xep's first picture, computed at start.
mkfifo xdisplay.pipe xep.pipe
Xvfb -displayfd 3 -noreset -nolisten tcp -screen 0 800x600x24 3>xdisplay.pipe >xvfb.log 2>&1 &
xvfb_pid=$!
read -r -t 20 xdisplay <xdisplay.pipe || xdisplay=none
DISPLAY=:$xdisplay timeout 60 xep >xep.pipe 2>&1 &
xep_pid=$!
exec 4<xep.pipe
# xep prints this once its window is up, just before its event loop.
until_line 4 'addaninputfile()' xep.out || true
canvas=$(DISPLAY=:$xdisplay xwininfo -tree -name xep 2>/dev/null |
	sed -n 's/^ *\(0x[0-9a-f]*\) .*200x200+.*/\1/p' | head -1)
# The tiles take a moment: look again every 0.25 s, for 15 s at most.
for _ in $(seq 60); do
	DISPLAY=:$xdisplay xwd -silent -id "${canvas:-none}" >xep.xwd 2>/dev/null &&
		python3 "$here/xep_tiles.py" xep.xwd >xep.tiles 2>&1 && break
	sleep 0.25
done
printf 'ps -a\nquit\n' | timeout 10 "$console" >xep-ps.out 2>&1 || true
kill "$xep_pid" 2>/dev/null || true
exec 4<&-
if python3 "$here/xep_tiles.py" xep.xwd >>xep.out 2>&1; then echo "ok   xep-tiles"; else
	echo "FAIL xep-tiles (the stripes stayed: mtile's tiles were not collected):"
	sed 's/^/    /' xep.out; fail=1
fi
check mtile xep-ps.out ' mtile'
kill "$xvfb_pid" 2>/dev/null || true
xvfb_pid=

# srm.pvm, PVM's sample resource manager (pvm_reg_rm): while it runs, the
# pvmd hands it spawns and host changes (its log says so) and srm answers
# the asking task; when it dies, even with a spawn waiting for it, the
# pvmd serves them again.
log=$OPENVIA_PVM_SOCK.log
handed() { grep -c "$1 request of t[0-9a-f]* handed to the resource manager" "$log"; }
mkfifo srm.pipe
# (In a subshell, so that its SIGKILL below is not announced as a job's.)
(timeout 60 sh -c 'echo $$ >srm.pid; exec stdbuf -oL srm.pvm' >srm.pipe 2>&1 || true) 2>/dev/null &
srm_job=$!
exec 4<srm.pipe
until_line 4 'SRM registered as Resource Manager.' srm.out || true
timeout 20 hello.pvm >hello-rm.out 2>&1 || true
check srm-spawn hello-rm.out '^from t4[0-9a-f]{4}: hello, world from '
printf 'add %s\ndelete nosuchhost\nquit\n' "$(hostname)" | timeout 20 "$console" >srm-hosts.out 2>&1 || true
check srm-add srm-hosts.out "^ *$(hostname) Duplicate host$"
check srm-delete srm-hosts.out '^ *nosuchhost +No such host$'
[ "$(handed spawn)" -eq 1 ] && [ "$(handed add-host)" -eq 1 ] && [ "$(handed delete-host)" -eq 1 ] &&
	echo "ok   srm-handed" || { echo "FAIL srm-handed:"; sed 's/^/    /' "$log"; fail=1; }
# srm stopped, a spawn handed to it, then srm killed: the spawn completes.
srm_pid=$(cat srm.pid 2>/dev/null || echo none)
kill -STOP "$srm_pid" 2>/dev/null || true
timeout 30 hello.pvm >hello-rmdead.out 2>&1 &
hello_job=$!
timeout 20 tail -n +1 -f "$log" | grep -m2 'spawn request of .* handed' | tail -n +2 | grep -q . || true
kill -9 "$srm_pid" 2>/dev/null || true
wait "$srm_job" 2>/dev/null || true
wait "$hello_job" 2>/dev/null || true
exec 4<&-
check srm-dead hello-rmdead.out '^from t4[0-9a-f]{4}: hello, world from '
check srm-dead-log "$log" 'resource manager t4[0-9a-f]* exited: the pvmd serves spawns and hosts again$'

printf 'conf\nps\nquit\n' | timeout 10 "$console" >console.out 2>&1 || true
check console-conf console.out 'LINUX64'
exit $fail
