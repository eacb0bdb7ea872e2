#!/bin/sh
# viarun tests: the C programs here, each without viarun and under it.
# Usage: tests/sock/run.sh BINDIR (holding viarun and libviarun.so)
set -eu
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
here=$(dirname "$0")
cc -Wall -Wextra -Werror -O2 -o "$dir/echo" "$here/echo.c"
shm_before=$(ls /dev/shm | wc -l)
"$dir/echo" 3000000
"$bin/viarun" --stats "$dir/echo" 3000000 2>"$dir/stats"
cat "$dir/stats"
grep -qx 'viarun: 1 connections over shm, 0 over kernel TCP' "$dir/stats"
shm_after=$(ls /dev/shm | wc -l)
[ "$shm_after" -le "$shm_before" ] || { echo "left in /dev/shm:"; ls /dev/shm; exit 1; }
echo "sock tests: ok"
