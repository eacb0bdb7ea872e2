#!/bin/sh
# viarun beside kernel TCP on one host (a benchmark, not a test):
# sockperf ping-pong at 14 B and iperf3 one stream, default writes, the
# server on CPU 0 and the client on CPU 1, kernel and viarun alternated
# in one run, ROUNDS times; prints each figure and the medians.
#   tests/sock/bench.sh BINDIR [ROUNDS]     (BINDIR holds viarun)
# Latency is taken both ways, kernel and viarun: blocking reads
# (sockperf's default; under viarun they spin in the library,
# VIARUN_SPIN_US) and --nonblocked (sockperf spinning on recv: the
# kernel's busy-poll).
set -eu
bin=$1
rounds=${2:-5}
V="$bin/viarun"
for t in sockperf iperf3; do
    command -v $t >/dev/null || { echo "bench: $t not installed (apt-get install $t)"; exit 1; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

me=bench
. "$(dirname "$0")/bench_lib.sh"
# pp PREFIX ARGS...: median one-way latency (us) of one sockperf run.
pp() {
    pre=$1
    shift
    p=$(port)
    taskset -c 0 $pre sockperf sr --tcp -i 127.0.0.1 -p "$p" "$@" >"$dir/sr" 2>&1 &
    s=$!
    listening "$p"
    # --mps: sockperf sizes its table for 600k messages/s by default and
    # stops ("_seqN > m_maxSequenceNo") when a ping-pong goes faster.
    taskset -c 1 $pre sockperf pp --tcp -i 127.0.0.1 -p "$p" -m 14 -t 3 --mps 5000000 "$@" >"$dir/pp" 2>&1 ||
        { echo "bench: sockperf pp $pre failed:" >&2; tail -3 "$dir/pp" >&2; kill "$s"; exit 1; }
    kill "$s" 2>/dev/null || true
    wait "$s" 2>/dev/null || true
    sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$dir/pp"
}
# line: the round trip of one cache line between CPUs 0 and 1 now, in ns
# (`viabench line`, when BINDIR has it; else "?"). On a VM the host moves
# the two vCPUs between cores that share a cache and cores that do not,
# and the latency figures of a round move with it (docs/sockets.md).
line() {
    if [ -x "$bin/viabench" ]; then
        "$bin/viabench" line --batches 5 | awk '{print $(NF-1)}'
    else
        echo "?"
    fi
}
# ip PREFIX: receiver Gbit/s of one iperf3 run.
ip() {
    pre=$1
    p=$(port)
    taskset -c 0 $pre iperf3 -s -1 -p "$p" >/dev/null 2>&1 &
    s=$!
    listening "$p"
    taskset -c 1 $pre iperf3 -c 127.0.0.1 -p "$p" -t 3 -J >"$dir/ip.json" ||
        { echo "bench: iperf3 $pre failed:" >&2; tail -3 "$dir/ip.json" >&2; kill "$s"; exit 1; }
    wait "$s" || true
    python3 -c "import json,sys; print('%.1f' % (json.load(open(sys.argv[1]))['end']['sum_received']['bits_per_second'] / 1e9))" "$dir/ip.json"
}

: >"$dir/lk"; : >"$dir/lkn"; : >"$dir/lv"; : >"$dir/lvn"; : >"$dir/tk"; : >"$dir/tv"
for r in $(seq "$rounds"); do
    l1=$(line)
    lk=$(pp "")
    lkn=$(pp "" --nonblocked)
    lv=$(pp "$V")
    lvn=$(pp "$V" --nonblocked)
    l2=$(line)
    tk=$(ip "")
    tv=$(ip "$V")
    echo "round $r: latency kernel $lk us, kernel --nonblocked $lkn us, viarun $lv us, viarun --nonblocked $lvn us;" \
        "iperf3 kernel $tk, viarun $tv Gbit/s; cache line round trip $l1 then $l2 ns"
    echo "$lk" >>"$dir/lk"; echo "$lkn" >>"$dir/lkn"; echo "$lv" >>"$dir/lv"; echo "$lvn" >>"$dir/lvn"
    echo "$tk" >>"$dir/tk"; echo "$tv" >>"$dir/tv"
done
mk=$(median <"$dir/lk") mkn=$(median <"$dir/lkn") mv=$(median <"$dir/lv") mvn=$(median <"$dir/lvn")
mtk=$(median <"$dir/tk") mtv=$(median <"$dir/tv")
echo "medians: latency kernel $mk us, kernel --nonblocked $mkn us, viarun $mv us, viarun --nonblocked $mvn us" \
    "($(echo "$mv $mkn" | awk '{printf "%.2f", $1 / $2}')x the busy-polling kernel);" \
    "iperf3 kernel $mtk, viarun $mtv Gbit/s ($(echo "$mtv $mtk" | awk '{printf "%.2f", $1 / $2}')x)"
