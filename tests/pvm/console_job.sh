#!/bin/bash
# Runs console commands and quits once every job they started (each
# `spawn ->`) has printed "[N] finished": like stock's, our console prints
# job output as it arrives and `quit` does not wait for it.
# Usage: console_job.sh SECONDS 'command' ... -- CONSOLE [ARGS...]
# (stdout: the console's; status 1 if the jobs did not finish in time)
set -u
secs=$1
shift
cmds=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do cmds+=("$1"); shift; done
shift
jobs=0
for c in "${cmds[@]}"; do case "$c" in spawn*-\>*) jobs=$((jobs + 1)) ;; esac; done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkfifo "$dir/in" "$dir/out"
"$@" <"$dir/in" >"$dir/out" 2>&1 &
pid=$!
exec 7>"$dir/in" 8<"$dir/out"
printf '%s\n' "${cmds[@]}" >&7
end=$((SECONDS + secs))
done_jobs=0 rc=0
while [ "$done_jobs" -lt "$jobs" ]; do
	left=$((end - SECONDS))
	if [ "$left" -le 0 ] || ! IFS= read -r -t "$left" line <&8; then rc=1; break; fi
	printf '%s\n' "$line"
	case "$line" in *"] finished") done_jobs=$((done_jobs + 1)) ;; esac
done
echo quit >&7
exec 7>&-
timeout 10 cat <&8
wait "$pid" 2>/dev/null
exit $rc
