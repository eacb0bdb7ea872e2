#!/bin/sh
# One connection per request, with and without viarun (a benchmark, not a
# test): tests/sock/conn_rate.py makes N connections (4 bytes each way,
# then close), kernel TCP and viarun alternated, ROUNDS times; prints the
# mean microseconds per connection of each run and the medians' ratio.
#   tests/sock/conn_bench.sh BINDIR [ROUNDS] [N]   (BINDIR holds viarun)
set -eu
bin=$1
rounds=${2:-3}
n=${3:-300}
here=$(dirname "$0")
me=conn_bench
. "$here/bench_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
: >"$dir/k"
: >"$dir/v"
for r in $(seq "$rounds"); do
    k=$(python3 "$here/conn_rate.py" "$n")
    v=$("$bin/viarun" python3 "$here/conn_rate.py" "$n")
    echo "round $r: kernel $k us, viarun $v us per connection"
    echo "$k" >>"$dir/k"
    echo "$v" >>"$dir/v"
done
mk=$(median <"$dir/k") mv=$(median <"$dir/v")
echo "medians: kernel $mk us, viarun $mv us per connection ($(echo "$mv $mk" | awk '{printf "%.2f", $1 / $2}')x)"
