#!/usr/bin/env bash
# viaip against the plain veth under it, same run, alternating rounds:
# iperf3 TCP throughput, sockperf TCP ping-pong (64-byte messages, median
# one-way latency, when sockperf is installed) and a python TCP ping-pong
# (64-byte messages, median round trip).
# Usage (root): scripts/viaip-bench.sh [VIAIP_BINARY] [ROUNDS] [MTU...]
# VIAIP_MODE=datagram measures datagram mode (default connected);
# VIAIP_UP_ARGS adds options to both `viaip up`s (e.g. --answer-spin-us 0).
# Namespaces ${VIAIP_BENCH_NS}A/${VIAIP_BENCH_NS}B (default viaipb) are
# created and deleted by this script; each line starts with `uptime`'s
# one-minute load average, and a last line per MTU gives the medians over
# the rounds (the ratios taken per round first).
set -euo pipefail
BIN=${1:-target/release/viaip}; ROUNDS=${2:-3}; shift 2 || true
MTUS=${*:-1500 9000}
T=${VIAIP_BENCH_NS:-viaipb}
A=${T}A B=${T}B
cleanup() { for n in $A $B; do ip netns pids $n 2>/dev/null | xargs -r kill 2>/dev/null || true; ip netns del $n 2>/dev/null || true; done; }
rm -f /tmp/$T-rounds.txt
trap 'cleanup; rm -f /tmp/$T-rounds.txt' EXIT
PP=$(mktemp /tmp/viaip-pp.XXXXXX.py)
cat > "$PP" <<'PY'
import socket, sys, time, statistics
role, addr = sys.argv[1], sys.argv[2]
if role == "server":
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, 5999)); l.listen(1); print("ready", flush=True)
    c, _ = l.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        m = c.recv(64, socket.MSG_WAITALL)
        if not m: break
        c.sendall(m)
else:
    s = socket.create_connection((addr, 5999)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = b"x" * 64; rtts = []
    for i in range(5000):
        t = time.perf_counter_ns(); s.sendall(msg); s.recv(64, socket.MSG_WAITALL); rtts.append(time.perf_counter_ns() - t)
    print("%.1f" % (statistics.median(rtts[500:]) / 1000))
PY
pingpong() { # ns_srv ns_cli addr -> median RTT in us
  exec 3< <(ip netns exec $1 python3 "$PP" server $3); read -r _ <&3
  ip netns exec $2 python3 "$PP" client $3; exec 3<&-; }
sockperf_pp() { # addr -> median one-way latency in us ("-" without sockperf)
  command -v sockperf >/dev/null || { echo -; return; }
  ip netns exec $B sockperf sr --tcp -i $1 -p 5998 >/dev/null 2>&1 & local s=$!
  for _ in $(seq 200); do ip netns exec $B ss -ltn | grep -q ":5998 " && break; sleep 0.05; done
  # --mps: sockperf sizes its table for 600k messages/s by default.
  ip netns exec $A sockperf pp --tcp -i $1 -p 5998 -m 64 -t 3 --mps 5000000 > /tmp/$T-sockperf.txt 2>&1 || true
  kill $s 2>/dev/null; wait $s 2>/dev/null || true
  sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' /tmp/$T-sockperf.txt; }
iperf() { # addr -> Gbit/s
  ip netns exec $B iperf3 -s -1 -B $1 >/dev/null 2>&1 & local s=$!
  # iperf3 -J exits 0 even when the server was not listening yet: retry
  # until the report has an end.
  for _ in $(seq 50); do ip netns exec $A iperf3 -c $1 -t 3 -J 2>/dev/null > /tmp/$T-iperf.json || true
    grep -q '"sum_received"' /tmp/$T-iperf.json && break; done
  wait $s || true
  python3 -c 'import json,sys;print("%.2f"%(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/1e9))' /tmp/$T-iperf.json; }
for MTU in $MTUS; do
  cleanup; ip netns add $A; ip netns add $B
  ip link add ${T}va netns $A type veth peer name ${T}vb netns $B
  ip -n $A addr add 10.75.0.1/24 dev ${T}va; ip -n $B addr add 10.75.0.2/24 dev ${T}vb
  for n in $A $B; do ip -n $n link set lo up; done
  ip -n $A link set ${T}va mtu $MTU up; ip -n $B link set ${T}vb mtu $MTU up
  printf '10.74.0.1 10.75.0.1\n10.74.0.2 10.75.0.2\n' > /tmp/$T-bench-peers
  ip netns exec $A $BIN up ${T}o 10.74.0.1/24 --link ${T}va --peers /tmp/$T-bench-peers --mode ${VIAIP_MODE:-connected} ${VIAIP_UP_ARGS:-} -d >/dev/null
  ip netns exec $B $BIN up ${T}o 10.74.0.2/24 --link ${T}vb --peers /tmp/$T-bench-peers --mode ${VIAIP_MODE:-connected} ${VIAIP_UP_ARGS:-} -d >/dev/null
  for r in $(seq $ROUNDS); do
    echo "load $(cut -d' ' -f1 /proc/loadavg) mtu $MTU round $r plain_gbps $(iperf 10.75.0.2) viaip_gbps $(iperf 10.74.0.2)" \
      "plain_sockperf_us $(sockperf_pp 10.75.0.2) viaip_sockperf_us $(sockperf_pp 10.74.0.2)" \
      "plain_rtt_us $(pingpong $B $A 10.75.0.2) viaip_rtt_us $(pingpong $B $A 10.74.0.2)"
  done | tee -a /tmp/$T-rounds.txt
done
# The medians over rounds of each figure and of the per-round ratios.
python3 - /tmp/$T-rounds.txt <<'PY'
import sys, statistics as st
rows = [dict(zip(l.split()[::2], l.split()[1::2])) for l in open(sys.argv[1]) if l.startswith("load")]
for mtu in dict.fromkeys(r["mtu"] for r in rows):
    rs = [r for r in rows if r["mtu"] == mtu]
    out = ["median mtu %s rounds %d load %s-%s" % (mtu, len(rs), min(r["load"] for r in rs), max(r["load"] for r in rs))]
    for k, unit in (("gbps", ""), ("sockperf_us", ""), ("rtt_us", "")):
        pairs = [(float(r["plain_" + k]), float(r["viaip_" + k])) for r in rs
                 if r.get("plain_" + k) not in (None, "-", "") and r.get("viaip_" + k) not in (None, "-", "")]
        if pairs:
            out.append("%s plain %.2f viaip %.2f ratio %.2f" % (k, st.median(p for p, _ in pairs),
                       st.median(v for _, v in pairs), st.median(v / p for p, v in pairs)))
    print("  ".join(out))
PY
rm -f "$PP" /tmp/$T-bench-peers /tmp/$T-iperf.json /tmp/$T-sockperf.txt /tmp/$T-rounds.txt
