#!/bin/sh
# A Debian server program beside its clients, with and without viarun (a
# benchmark, not a test): redis-server on CPU 0, redis-benchmark (SET and
# GET, 50 clients, default 3-byte values) on CPU 1, kernel TCP and viarun
# alternated in one run (which goes first alternates too), ROUNDS times;
# prints each round's requests/s and the medians with their ratio.
#   tests/sock/server_bench.sh BINDIR [ROUNDS] [REQUESTS]   (BINDIR holds viarun)
# Under viarun, both the server and the benchmark run under it, and both
# `viarun --stats` lines must say every connection went over shm and none
# over kernel TCP, or the run stops.
set -eu
bin=$1
rounds=${2:-5}
requests=${3:-100000}
V="$bin/viarun"
for t in redis-server redis-benchmark; do
    command -v $t >/dev/null || { echo "server_bench: $t not installed (apt-get install redis-server redis-tools)"; exit 1; }
done
dir=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$dir"' EXIT

me=server_bench
. "$(dirname "$0")/bench_lib.sh"
# one PREFIX: prints "SET GET" requests/s of one server and benchmark run.
one() {
    pre=$1
    p=$(port)
    taskset -c 0 $pre ${pre:+--stats} redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no >"$dir/server.log" 2>&1 &
    server=$!
    listening "$p"
    if [ -n "$pre" ]; then
        taskset -c 1 $pre --stats redis-benchmark -p "$p" -t set,get -n "$requests" --csv \
            >"$dir/csv" 2>"$dir/stats"
        grep -Eqx 'viarun: [0-9]+ connections over shm, 0 over kernel TCP' "$dir/stats" ||
            { echo "server_bench: not every connection over shm:" >&2; cat "$dir/stats" >&2; exit 1; }
        tail -n1 "$dir/stats" >&2
    else
        taskset -c 1 redis-benchmark -p "$p" -t set,get -n "$requests" --csv >"$dir/csv"
    fi
    kill "$server"
    wait "$server" 2>/dev/null || true
    server=
    if [ -n "$pre" ]; then
        grep -Eq '^viarun: [0-9]+ connections over shm, 0 over kernel TCP$' "$dir/server.log" ||
            { echo "server_bench: the server's connections not all over shm:" >&2; tail -3 "$dir/server.log" >&2; exit 1; }
    fi
    awk -F'"' '$2 == "SET" { s = $4 } $2 == "GET" { g = $4 } END { print s, g }' "$dir/csv"
}

: >"$dir/k"
: >"$dir/v"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then
        k=$(one "")
        v=$(one "$V")
    else
        v=$(one "$V")
        k=$(one "")
    fi
    echo "round $r: kernel SET/GET $k, viarun SET/GET $v requests/s"
    echo "$k" >>"$dir/k"
    echo "$v" >>"$dir/v"
done
ks=$(cut -d' ' -f1 "$dir/k" | median) kg=$(cut -d' ' -f2 "$dir/k" | median)
vs=$(cut -d' ' -f1 "$dir/v" | median) vg=$(cut -d' ' -f2 "$dir/v" | median)
echo "medians: SET kernel $ks, viarun $vs ($(echo "$vs $ks" | awk '{printf "%.2f", $1 / $2}')x);" \
    "GET kernel $kg, viarun $vg ($(echo "$vg $kg" | awk '{printf "%.2f", $1 / $2}')x) requests/s"
