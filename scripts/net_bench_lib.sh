# Shared by scripts/udp_compare.sh and scripts/net_compare.sh (sourced,
# not run): two namespaces joined by veth (scripts/netns.sh), viabench's
# server in one, its client in the other, one JSON line per result on
# stdout, tagged with a label and the round.
# Server pinned to CPU 1 (`serve --cpu 1`), client to CPU 0 (`--cpu 0,1`).
# OV_NS_A / OV_NS_B / OV_VETH name the namespaces and veth (scripts/netns.sh).
# Needs root and target/release/viabench (or VIABENCH=path). ITERS, BWN
# set the latency iterations and the streamed 1 MiB messages; ROUNDS
# repeats what a script says it repeats, every line tagged with its round.
# The sourcing script must set `here` (its folder) first.
B=${VIABENCH:-$here/../target/release/viabench}
NS="$here/netns.sh"
A=${OV_NS_A:-ovA}
BNS=${OV_NS_B:-ovB}
PEER=10.77.0.2
ITERS=${ITERS:-20000}
BWN=${BWN:-2000}
ROUNDS=${ROUNDS:-1}
ROUND=1
SIZES=${SIZES:-32,64,128,256,512,1K,2K,4K,8K,16K,32K,64K}
SRV_LOG=/tmp/ov_srv.$$
# Leave no namespace behind, whatever happens.
trap '"$NS" down >/dev/null 2>&1 || true; rm -f "$SRV_LOG"' EXIT
trap 'exit 130' INT TERM

# run LABEL TRANSPORT ENV... -- viabench-args...
# Fails (status 1) when the server does not start; a client that fails
# prints no line.
run() {
    label=$1; transport=$2; shift 2
    envs=""
    while [ "$1" != "--" ]; do envs="$envs $1"; shift; done
    shift
    port=$((20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 20000))
    # shellcheck disable=SC2086
    ip netns exec "$BNS" env $envs OPENVIA_BENCH_DEVICE=/dev/via_veth1 \
        "$B" serve -t "$transport" --cpu 1 --once --port "$port" >"$SRV_LOG" 2>&1 &
    spid=$!
    # Readiness: wait for the server's READY line, never a fixed sleep.
    i=0
    while ! grep -q READY "$SRV_LOG" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 500 ] && { echo "server did not start" >&2; kill $spid; return 1; }
        kill -0 $spid 2>/dev/null || { cat "$SRV_LOG" >&2; return 1; }
        sleep 0.01
    done
    # shellcheck disable=SC2086
    ip netns exec "$A" env $envs OPENVIA_BENCH_DEVICE=/dev/via_veth0 \
        timeout 300 "$B" "$@" -t "$transport" --peer "$PEER:$port" --cpu 0,1 --json |
        sed "s/^{/{\"label\":\"$label\",\"round\":$ROUND,/"
    # A server whose client failed may wait for it forever: give it a
    # bounded time to finish, then end it.
    i=0
    while kill -0 $spid 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 3000 ] && { kill $spid 2>/dev/null; break; }
        sleep 0.01
    done
    wait $spid || true
    rm -f "$SRV_LOG"
}

# try_run: as run, but a failure is noted on stderr and the script goes on
# (a device this host or build lacks leaves its lines out, not the rest).
try_run() {
    run "$@" || echo "$1 $2: no result (see above)" >&2
}

# usable TRANSPORT: whether viabench can run TRANSPORT on veth0 here (in
# namespace A, at the MTU now set); if not, says why on stderr.
usable() {
    why=$(ip netns exec "$A" env OPENVIA_BENCH_DEVICE=/dev/via_veth0 "$B" transports |
        awk -v t="$1" '$1 == t { $1 = ""; $2 = ""; sub(/^ +/, ""); print }')
    [ "$why" = yes ] && return 0
    why=${why#no: }
    echo "$1 skipped: ${why:-not listed by $B}" >&2
    return 1
}

# sizes_of LABEL TRANSPORT SEGS: latency and bandwidth over SIZES on an
# openvia network device, once per segment policy in SEGS.
sizes_of() {
    for seg in $3; do
        try_run "$1-seg$seg" "$2" OPENVIA_UDP_SEGMENT="$seg" -- latency -s "$SIZES" -n "$ITERS"
        try_run "$1-seg$seg" "$2" OPENVIA_UDP_SEGMENT="$seg" -- bandwidth -s "$SIZES" -n "$BWN" -w 16
    done
}
