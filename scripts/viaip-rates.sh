#!/usr/bin/env bash
# Seed 004's IPoIB figures 2-4 (packets per second, and per 1 % of CPU, vs
# message size) for `make report`: iperf3 TCP with writes of SIZE bytes
# over the plain veth between two namespaces, and over viaip on top of it
# in connected and in datagram mode. One JSON line per run on stdout:
#   {"link": "plain"|"connected"|"datagram", "size": N, "round": R,
#    "bytes_per_s": B, "cpu": C}
# C is the whole machine's CPU while the client ran, from /proc/stat, in
# % of one CPU (so viaip's own threads and the kernel's softirq count,
# not only iperf3's two processes).
# Usage (root): scripts/viaip-rates.sh VIAIP_BINARY SECONDS ROUNDS SIZE...
# Namespaces ${VIAIP_RATES_NS:-ovrepI}A/B are made and removed here; the
# underlay MTU is 1500.
set -euo pipefail
BIN=$1 SECS=$2 ROUNDS=$3; shift 3
SIZES=$*
T=${VIAIP_RATES_NS:-ovrepI}
A=${T}A B=${T}B
cleanup() {
  for n in $A $B; do
    ip netns pids $n 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del $n 2>/dev/null || true
  done
  rm -f "/tmp/$T-peers" "/tmp/$T-iperf.json"
}
trap cleanup EXIT
up() { # MODE: the namespaces, the veth and viaip in MODE on both ends
  cleanup
  ip netns add $A; ip netns add $B
  ip link add ${T}va netns $A type veth peer name ${T}vb netns $B
  ip -n $A addr add 10.73.0.1/24 dev ${T}va; ip -n $B addr add 10.73.0.2/24 dev ${T}vb
  for n in $A $B; do ip -n $n link set lo up; done
  ip -n $A link set ${T}va mtu 1500 up; ip -n $B link set ${T}vb mtu 1500 up
  printf '10.72.0.1 10.73.0.1\n10.72.0.2 10.73.0.2\n' > "/tmp/$T-peers"
  ip netns exec $A "$BIN" up ${T}o 10.72.0.1/24 --link ${T}va --peers "/tmp/$T-peers" --mode "$1" -d >/dev/null
  ip netns exec $B "$BIN" up ${T}o 10.72.0.2/24 --link ${T}vb --peers "/tmp/$T-peers" --mode "$1" -d >/dev/null
}
iperf() { # LINK ADDR SIZE ROUND: one JSON line
  ip netns exec $B iperf3 -s -1 -B $2 >/dev/null 2>&1 & local s=$!
  # iperf3 -J exits 0 even when the server was not listening yet: retry
  # until the report has an end.
  local before after
  for _ in $(seq 50); do
    before=$(head -1 /proc/stat)
    ip netns exec $A iperf3 -c $2 -l $3 -t "$SECS" -J 2>/dev/null > "/tmp/$T-iperf.json" || true
    after=$(head -1 /proc/stat)
    grep -q '"sum_received"' "/tmp/$T-iperf.json" && break
  done
  wait $s || true
  python3 - "$1" "$3" "$4" "/tmp/$T-iperf.json" "$before" "$after" <<'PY'
import json, os, sys
link, size, rnd, path, before, after = sys.argv[1:]
e = json.load(open(path))["end"]
# cpu user nice system idle iowait irq softirq steal ...: busy is all but
# idle and iowait, in clock ticks.
def busy(line):
    f = [int(x) for x in line.split()[1:9]]
    return sum(f) - f[3] - f[4], sum(f)
b0, t0 = busy(before)
b1, t1 = busy(after)
ncpu = os.cpu_count() or 1
cpu = 100.0 * ncpu * (b1 - b0) / max(t1 - t0, 1)
print(json.dumps({"link": link, "size": int(size), "round": int(rnd),
                  "bytes_per_s": e["sum_received"]["bytes"] / e["sum_received"]["seconds"],
                  "cpu": cpu}))
PY
}
for mode in connected datagram; do
  up $mode
  for r in $(seq "$ROUNDS"); do
    for size in $SIZES; do
      # The plain link is measured beside each mode, so each ratio is
      # taken with the same machine.
      [ $mode = connected ] && iperf plain 10.73.0.2 $size $r
      iperf $mode 10.72.0.2 $size $r
    done
  done
done
