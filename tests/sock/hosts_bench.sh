#!/bin/sh
# viarun beside kernel TCP between two hosts (a benchmark, not a test):
# two network namespaces over veth (MTU 1500), the server in one, the
# client in the other; sockperf ping-pong at 14 B (blocking reads, and
# --nonblocked) and iperf3 one stream, default writes, kernel and viarun
# alternated in one run, ROUNDS times; prints each figure, the load
# average, and the medians. Root only (namespaces).
#   tests/sock/hosts_bench.sh BINDIR [ROUNDS]     (BINDIR holds viarun)
set -eu
bin=$1
rounds=${2:-5}
V="$bin/viarun"
for t in sockperf iperf3; do
    command -v $t >/dev/null || { echo "hosts_bench: $t not installed (apt-get install $t)"; exit 1; }
done
here=$(dirname "$0")
dir=$(mktemp -d)
export OV_NS_A="sockhbA$$" OV_NS_B="sockhbB$$" OV_VETH="sockhb$$"
cleanup() {
    sh "$here/../../scripts/netns.sh" down
    rm -rf "$dir"
}
trap cleanup EXIT
sh "$here/../../scripts/netns.sh" up 1500 >/dev/null
A="ip netns exec $OV_NS_A"
B="ip netns exec $OV_NS_B"
SRV=10.77.0.2

me=hosts_bench
. "$here/bench_lib.sh"
# listening_in PORT: as `listening`, inside the server's namespace.
listening_in() {
    i=0
    until $B ss -ltn | grep -q ":$1 "; do
        i=$((i + 1))
        [ $i -lt 200 ] || { echo "$me: no listener on $1" >&2; exit 1; }
        sleep 0.05
    done
}
# pp PREFIX ARGS...: median one-way latency (us) of one sockperf run.
pp() {
    pre=$1
    shift
    p=$(port)
    $B $pre sockperf sr --tcp -i $SRV -p "$p" "$@" >"$dir/sr" 2>&1 &
    s=$!
    listening_in "$p"
    $A $pre sockperf pp --tcp -i $SRV -p "$p" -m 14 -t 2 --mps 5000000 "$@" >"$dir/pp" 2>&1 ||
        { echo "$me: sockperf pp $pre failed:" >&2; tail -3 "$dir/pp" >&2; kill "$s"; exit 1; }
    kill "$s" 2>/dev/null || true
    wait "$s" 2>/dev/null || true
    sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$dir/pp"
}
# ip PREFIX: receiver Gbit/s of one iperf3 run.
ip3() {
    pre=$1
    p=$(port)
    $B $pre iperf3 -s -1 -p "$p" >/dev/null 2>&1 &
    s=$!
    listening_in "$p"
    $A $pre iperf3 -c $SRV -p "$p" -t 2 -J >"$dir/ip.json" ||
        { echo "$me: iperf3 $pre failed:" >&2; tail -3 "$dir/ip.json" >&2; kill "$s"; exit 1; }
    wait "$s" || true
    python3 -c "import json,sys; print('%.2f' % (json.load(open(sys.argv[1]))['end']['sum_received']['bits_per_second'] / 1e9))" "$dir/ip.json"
}

: >"$dir/lk"; : >"$dir/lkn"; : >"$dir/lv"; : >"$dir/lvn"; : >"$dir/tk"; : >"$dir/tv"
for r in $(seq "$rounds"); do
    lk=$(pp "")
    lv=$(pp "$V")
    lkn=$(pp "" --nonblocked)
    lvn=$(pp "$V" --nonblocked)
    tk=$(ip3 "")
    tv=$(ip3 "$V")
    echo "round $r ($(uptime | sed 's/.*load average: //')): latency kernel $lk us, viarun $lv us," \
        "kernel --nonblocked $lkn us, viarun --nonblocked $lvn us; iperf3 kernel $tk, viarun $tv Gbit/s"
    echo "$lk" >>"$dir/lk"; echo "$lkn" >>"$dir/lkn"; echo "$lv" >>"$dir/lv"; echo "$lvn" >>"$dir/lvn"
    echo "$tk" >>"$dir/tk"; echo "$tv" >>"$dir/tv"
done
mk=$(median <"$dir/lk") mkn=$(median <"$dir/lkn") mv=$(median <"$dir/lv") mvn=$(median <"$dir/lvn")
mtk=$(median <"$dir/tk") mtv=$(median <"$dir/tv")
ratio() { echo "$1 $2" | awk '{printf "%.2f", $1 / $2}'; }
echo "medians: latency kernel $mk us, viarun $mv us ($(ratio "$mv" "$mk")x);" \
    "--nonblocked kernel $mkn us, viarun $mvn us ($(ratio "$mvn" "$mkn")x);" \
    "iperf3 kernel $mtk, viarun $mtv Gbit/s ($(ratio "$mtv" "$mtk")x)"
