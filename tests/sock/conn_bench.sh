#!/bin/sh
# One connection per request, with and without viarun (a benchmark, not a
# test): N connections one after another (4 bytes each way, then close),
# kernel TCP and viarun alternated, ROUNDS times; prints the mean
# microseconds per connection of each run and the medians' ratio. On this
# host (tests/sock/conn_rate.py), or with `hosts` between two network
# namespaces over veth, MTU 1500 (tests/sock/conn_rate_net.py; root only).
#   tests/sock/conn_bench.sh BINDIR [ROUNDS] [N] [hosts]   (BINDIR holds viarun)
set -eu
bin=$(cd "$1" && pwd)
rounds=${2:-3}
n=${3:-300}
where=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
me=conn_bench
. "$here/bench_lib.sh"
dir=$(mktemp -d)
if [ "$where" = hosts ]; then
    export OV_NS_A="sockcbA$$" OV_NS_B="sockcbB$$" OV_VETH="sockcb$$"
    trap 'sh "$here/../../scripts/netns.sh" down; rm -rf "$dir"' EXIT
    sh "$here/../../scripts/netns.sh" up 1500 >/dev/null
else
    trap 'rm -rf "$dir"' EXIT
fi
# one PORT PREFIX: µs per connection of one run (PREFIX: empty or
# viarun); between hosts on PORT, the server saying "ready" once it
# listens.
one() {
    if [ "$where" != hosts ]; then
        $2 python3 "$here/conn_rate.py" "$n"
        return
    fi
    mkfifo "$dir/ready.$1"
    (cd "$here" && exec ip netns exec "$OV_NS_B" $2 python3 conn_rate_net.py server 10.77.0.2 "$1" "$n") >"$dir/ready.$1" &
    read -r _ <"$dir/ready.$1"
    (cd "$here" && ip netns exec "$OV_NS_A" $2 python3 conn_rate_net.py client 10.77.0.2 "$1" "$n")
    wait
}
: >"$dir/k"
: >"$dir/v"
for r in $(seq "$rounds"); do
    k=$(one $((20000 + 2 * r)) "")
    v=$(one $((20001 + 2 * r)) "$bin/viarun")
    echo "round $r: kernel $k us, viarun $v us per connection"
    echo "$k" >>"$dir/k"
    echo "$v" >>"$dir/v"
done
mk=$(median <"$dir/k") mv=$(median <"$dir/v")
echo "medians: kernel $mk us, viarun $mv us per connection ($(echo "$mv $mk" | awk '{printf "%.2f", $1 / $2}')x)"
