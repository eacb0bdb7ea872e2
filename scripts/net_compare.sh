#!/bin/sh
# openvia's Ethernet device (raw frames, EtherType 0x88B5; its AF_PACKET
# path `ether` and AF_XDP path `ether-xdp`) beside the UDP device (`udp`)
# and kernel UDP / TCP, blocking and busy-polling, across two namespaces
# joined by veth (scripts/netns.sh), peers in the same run, as JSON lines
# on stdout (python/udp_summary.py prints the ratios).
# Usage: scripts/net_compare.sh [quick | lat MTU | bw MTU | sizes MTU | sweep]
#   (no argument) at MTU 1500, 4138 and 9000: lat and bw, ROUNDS rounds;
#        then the sweep. quick: without the sweep.
#   lat: 8-byte ping-pong: kernel UDP and TCP (blocking and busy-polling),
#        the UDP device and the Ethernet device on each of ETHERS
#        (default "ether ether-xdp"), all at reliability RELS (default rd);
#   bw: 1 MiB streaming (window 16): kernel TCP, the UDP device, ETHERS;
#   sizes: latency and bandwidth over SIZES on the Ethernet device
#        (transport ETHER, default ether) for each segment policy in SEGS
#        (default "fixed page largest"), kernel TCP beside it (latency
#        also busy-polling), at one MTU;
#   sweep: seed 000's sweep: sizes at MTU 1500, 4138 and 9000 (fixed:
#        MTU - header; page: the largest power of two up to one 4 KiB
#        page per segment; largest: the most that fits), and the page
#        policy alone at PAGE_MTU (default 4146), the least MTU at which
#        the Ethernet device's page policy carries a whole page (its
#        longest data header is 50 bytes, M-VIA's was 42: at 4138 a
#        page needs two segments).
# ROUNDS (default 1) repeats each mode, the transports (and MTUs and
# policies) alternating within each round: compare within a round. A transport this host or build
# cannot run (`viabench transports` says why) is left out, on stderr.
# Namespaces, viabench and ITERS, BWN, SIZES: scripts/net_bench_lib.sh.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/net_bench_lib.sh"

# The Ethernet transports that can run at the MTU now set.
ethers() {
    for t in ${ETHERS:-ether ether-xdp}; do
        usable "$t" && printf '%s ' "$t"
    done
    return 0
}

lat() {
    for t in ${LAT_PEERS:-kernel-udp-spin kernel-udp kernel-tcp kernel-tcp-spin}; do
        run "lat-mtu$1" $t -- latency -s 8 -n "$ITERS"
    done
    for rel in ${RELS:-rd}; do
        tag=$([ "$rel" = rd ] && echo "" || echo "-$rel")
        for t in udp $2; do
            try_run "lat-mtu$1$tag" $t OPENVIA_BENCH_RELIABILITY=$rel -- latency -s 8 -n "$ITERS"
        done
    done
}

bw() {
    run "bw-mtu$1" kernel-tcp -- bandwidth -s 1M -n "$BWN" -w 16
    for t in udp $2; do
        try_run "bw-mtu$1" $t -- bandwidth -s 1M -n "$BWN" -w 16
    done
}

# sizes MTU [POLICIES]
sizes() {
    run "sweep-mtu$1" kernel-tcp -- latency -s "$SIZES" -n "$ITERS"
    run "sweep-mtu$1" kernel-tcp-spin -- latency -s "$SIZES" -n "$ITERS"
    run "sweep-mtu$1" kernel-tcp -- bandwidth -s "$SIZES" -n "$BWN" -w 16
    usable "${ETHER:-ether}" || return 0
    sizes_of "sweep-mtu$1" "${ETHER:-ether}" "${2:-${SEGS:-fixed page largest}}"
}

# lat and bw at MTU $1, ROUNDS rounds.
rounds() {
    "$NS" up "$1" >&2
    e=$(ethers)
    while [ "$ROUND" -le "$ROUNDS" ]; do
        lat "$1" "$e"
        bw "$1" "$e"
        ROUND=$((ROUND + 1))
    done
    ROUND=1
}

case "${1:-}" in
lat | bw)
    "$NS" up "$2" >&2
    e=$(ethers)
    while [ "$ROUND" -le "$ROUNDS" ]; do
        "$1" "$2" "$e"
        ROUND=$((ROUND + 1))
    done
    "$NS" down
    exit 0
    ;;
sizes)
    "$NS" up "$2" >&2
    while [ "$ROUND" -le "$ROUNDS" ]; do
        sizes "$2"
        ROUND=$((ROUND + 1))
    done
    "$NS" down
    exit 0
    ;;
sweep) ;;
"" | quick)
    for mtu in 1500 4138 9000; do
        rounds $mtu
    done
    "$NS" down
    [ "${1:-}" = quick ] && exit 0
    ;;
*)
    sed -n 's/^# Usage: //p' "$0" >&2
    exit 2
    ;;
esac
while [ "$ROUND" -le "$ROUNDS" ]; do
    for mtu in 1500 4138 9000; do
        "$NS" up $mtu >&2
        sizes $mtu
    done
    "$NS" up "${PAGE_MTU:-4146}" >&2
    sizes "${PAGE_MTU:-4146}" page
    ROUND=$((ROUND + 1))
done
"$NS" down
