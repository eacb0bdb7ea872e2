#!/bin/sh
# openvia udp vs kernel TCP / UDP across two namespaces joined by veth
# (scripts/netns.sh), peers in the same run, as JSON lines on stdout.
# Server pinned to CPU 1 (`serve --cpu 1`), client to CPU 0 (`--cpu 0,1`).
# Usage: scripts/udp_compare.sh [quick | lat MTU | bw MTU | modes MTU |
#                                drop MTU | loss MTU | sweep | sizes MTU | rum MTU]
#   (no argument) MTU 9000 and 1500: latency and the RUM modes; 1 % drop
#   at 9000; then seed 000's sweep. quick: without the sweep.
#   lat: 8-byte ping-pong, kernel UDP/TCP (blocking and busy-polling) and
#        openvia at the reliability levels in RELS (default "ur rd rr");
#   bw: 1 MiB streaming, kernel TCP and openvia (default settings);
#   modes: the RUM modes side by side (Hetero, Homo, flow-control-only)
#        with kernel TCP;
#   drop: streaming with every byte verified, lossless then with 1 % of
#        the UDP datagrams dropped by nft, openvia and kernel TCP;
#   loss: per-datagram loss: offloads off on the veths (so nft drops one
#        datagram or TCP segment, never a GSO burst), then for each drop
#        in DROPS (default "0 1 5 20") openvia and kernel TCP streaming
#        LOSSN (default 64) 1 MiB messages, every byte verified, with
#        nft's counts of packets seen and dropped on stderr;
#   sweep: segment policy and size (fixed, page, largest, 1472, 4096,
#        8958 bytes) at MTU 1500, 4138 and 9000 (and the page policy at
#        4188, where a whole page fits), kernel TCP at each MTU.
#   sizes: latency and bandwidth over the sizes in SIZES (default the
#        paper's 32 B .. 64 KiB) for each segment policy in SEGS (default
#        "fixed page largest") and kernel TCP (latency also busy-polling),
#        at one MTU (seed 000's Fig. 7-10); ETHER_SEGS adds the Ethernet
#        device;
#   rum: bandwidth over SIZES for the RUM modes (Hetero, Homo,
#        flow-control-only), kernel TCP and raw kernel UDP (which counts
#        what it loses), and latency over SIZES for Hetero, kernel TCP and
#        UDP (seed 002's Fig. 7-8).
# Namespaces, viabench and ITERS, BWN, SIZES: scripts/net_bench_lib.sh.
# LAT_PEERS the kernel peers of `lat` (default: UDP and TCP, blocking and
# busy-polling; the blocking ones take seconds per run). ROUNDS
# (default 1) repeats `lat` and `modes`, the peers alternating within each
# round, every line tagged with its round: the machine's speed drifts
# between runs, so compare within a round (python/udp_summary.py gives
# each round's ratios and their median). scripts/net_compare.sh puts the
# Ethernet device beside these.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/net_bench_lib.sh"

lat() {
    for t in ${LAT_PEERS:-kernel-udp-spin kernel-udp kernel-tcp kernel-tcp-spin}; do
        run "lat-mtu$1" $t -- latency -s 8 -n "$ITERS"
    done
    for rel in ${RELS:-ur rd rr}; do
        run "lat-mtu$1-$rel" udp OPENVIA_BENCH_RELIABILITY=$rel -- latency -s 8 -n "$ITERS"
    done
}

bw() {
    run "bw-mtu$1" kernel-tcp -- bandwidth -s 1M -n "$BWN" -w 16
    run "bw-mtu$1" udp -- bandwidth -s 1M -n "$BWN" -w 16
}

modes() {
    run "modes-mtu$1" kernel-tcp -- bandwidth -s 1M -n "$BWN" -w 16
    for flow in hetero homo; do
        run "modes-mtu$1-$flow" udp OPENVIA_UDP_FLOW=$flow -- bandwidth -s 1M -n "$BWN" -w 16
    done
    run "modes-mtu$1-lossless" udp OPENVIA_UDP_LOSSLESS=1 -- bandwidth -s 1M -n "$BWN" -w 16
}

# Lossless first, in the same run: verifying every byte costs both ends
# CPU, so the drop figure is compared with a verified lossless stream.
drop() {
    for t in udp kernel-tcp; do
        run "verify-mtu$1" $t -- bandwidth -s 1M -n "$BWN" -w 16 --verify
    done
    "$NS" drop 1 >&2
    for t in udp kernel-tcp; do
        run "verify-mtu$1-drop1" $t -- bandwidth -s 1M -n "$BWN" -w 16 --verify
    done
    "$NS" nodrop >&2
}

# Per-datagram loss: offloads off first, so that nft sees (and drops)
# single datagrams and segments.
loss() {
    "$NS" offloads off >&2
    for pct in ${DROPS:-0 1 5 20}; do
        for t in udp kernel-tcp; do
            "$NS" drop "$pct" >&2
            run "loss-mtu$1-drop$pct" $t -- bandwidth -s 1M -n "${LOSSN:-64}" -w 16 --verify
            echo "drop $pct % $t:" >&2
            "$NS" counters >&2
        done
    done
    "$NS" nodrop >&2
}

# Seed 000's sweep: segment policy or size x MTU. A segment larger than
# the MTU allows travels as IP fragments (without GSO).
sweep() {
    for mtu in 1500 4138 9000 4188; do
        "$NS" up $mtu >&2
        run "sweep-mtu$mtu" kernel-tcp -- bandwidth -s 1M -n "$BWN" -w 16
        segs="fixed page largest 1472 4096 8958"
        [ $mtu = 4188 ] && segs=page
        for seg in $segs; do
            run "sweep-mtu$mtu-seg$seg" udp OPENVIA_UDP_SEGMENT=$seg -- bandwidth -s 1M -n "$BWN" -w 16
        done
    done
    "$NS" down
}

# ETHER_SEGS (default: none) adds the Ethernet device (transport ETHER,
# default ether) with those segment policies, where it can run.
sizes() {
    run "sizes-mtu$1" kernel-tcp -- latency -s "$SIZES" -n "$ITERS"
    run "sizes-mtu$1" kernel-tcp-spin -- latency -s "$SIZES" -n "$ITERS"
    run "sizes-mtu$1" kernel-tcp -- bandwidth -s "$SIZES" -n "$BWN" -w 16
    sizes_of "sizes-mtu$1" udp "${SEGS:-fixed page largest}"
    if [ -n "${ETHER_SEGS:-}" ] && usable "${ETHER:-ether}"; then
        sizes_of "sizes-mtu$1" "${ETHER:-ether}" "$ETHER_SEGS"
    fi
}

rum() {
    for t in kernel-tcp kernel-udp-spin; do
        run "rum-mtu$1" $t -- bandwidth -s "$SIZES" -n "$BWN" -w 16
        run "rum-mtu$1" $t -- latency -s "$SIZES" -n "$ITERS"
    done
    for flow in hetero homo; do
        run "rum-mtu$1-$flow" udp OPENVIA_UDP_FLOW=$flow -- bandwidth -s "$SIZES" -n "$BWN" -w 16
    done
    run "rum-mtu$1-lossless" udp OPENVIA_UDP_LOSSLESS=1 -- bandwidth -s "$SIZES" -n "$BWN" -w 16
    run "rum-mtu$1-hetero" udp -- latency -s "$SIZES" -n "$ITERS"
}

case "${1:-}" in
lat | modes)
    "$NS" up "$2" >&2
    while [ "$ROUND" -le "$ROUNDS" ]; do
        "$1" "$2"
        ROUND=$((ROUND + 1))
    done
    "$NS" down
    exit 0
    ;;
bw | drop | loss | sizes | rum)
    "$NS" up "$2" >&2
    "$1" "$2"
    "$NS" down
    exit 0
    ;;
sweep)
    sweep
    exit 0
    ;;
esac
for mtu in 9000 1500; do
    "$NS" up $mtu >&2
    lat $mtu
    modes $mtu
    [ $mtu = 9000 ] && drop $mtu
done
"$NS" down
[ "${1:-}" = quick ] && exit 0
sweep
