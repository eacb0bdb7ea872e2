#!/bin/sh
# Builds two network namespaces joined by a veth pair, for the UDP device:
#   ovA: veth0 10.77.0.1/24      ovB: veth1 10.77.0.2/24
# Usage: scripts/netns.sh up [MTU] | down | drop PERCENT | nodrop |
#                         offloads on|off | counters
# `drop` installs an nft rule in each namespace dropping PERCENT % of the
# incoming UDP and TCP packets at random (both directions covered), with
# counters. `offloads off` turns segmentation and receive offloads off on
# both veths (TSO, GSO, GRO, UDP segmentation): with them on, a GSO burst
# (TCP's or the UDP device's UDP_SEGMENT) crosses the veth as one packet,
# and nft drops the whole burst instead of one datagram or segment.
# `counters` prints, per namespace, the packets nft saw and dropped.
# OV_NS_A, OV_NS_B and OV_VETH (the veth pair's names while in the root
# namespace, OV_VETH0/1) choose other names, so that two users of this
# script can hold a pair each at the same time.
set -eu
A=${OV_NS_A:-ovA}
B=${OV_NS_B:-ovB}
V=${OV_VETH:-ov-veth}
cmd=${1:-up}
case "$cmd" in
up)
    mtu=${2:-1500}
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    ip netns add "$A"
    ip netns add "$B"
    ip link add "${V}0" type veth peer name "${V}1"
    ip link set "${V}0" netns "$A" name veth0
    ip link set "${V}1" netns "$B" name veth1
    ip -n "$A" addr add 10.77.0.1/24 dev veth0
    ip -n "$B" addr add 10.77.0.2/24 dev veth1
    for ns in "$A" "$B"; do
        ip -n "$ns" link set lo up
    done
    ip -n "$A" link set veth0 mtu "$mtu" up
    ip -n "$B" link set veth1 mtu "$mtu" up
    echo "namespaces $A (10.77.0.1, veth0) and $B (10.77.0.2, veth1), MTU $mtu"
    ;;
down)
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    ;;
drop)
    pct=${2:-1}
    for ns in "$A" "$B"; do
        ip netns exec "$ns" nft delete table inet ovtest 2>/dev/null || true
        ip netns exec "$ns" nft add table inet ovtest
        ip netns exec "$ns" nft add chain inet ovtest in '{ type filter hook input priority 0; }'
        ip netns exec "$ns" nft add rule inet ovtest in meta l4proto "{ udp, tcp }" counter
        ip netns exec "$ns" nft add rule inet ovtest in meta l4proto "{ udp, tcp }" numgen random mod 100 "<" "$pct" counter drop
    done
    echo "dropping ~${pct}% of incoming UDP and TCP packets in each namespace"
    ;;
offloads)
    state=${2:-off}
    command -v ethtool >/dev/null ||
        { echo "netns.sh offloads: needs ethtool (apt-get install ethtool)" >&2; exit 1; }
    for pair in "$A veth0" "$B veth1"; do
        set -- $pair
        for f in tso gso gro tx-udp-segmentation; do
            ip netns exec "$1" ethtool -K "$2" "$f" "$state" 2>/dev/null || true
        done
        ip netns exec "$1" ethtool -k "$2" | grep -E '^(tcp-segmentation-offload|generic-segmentation-offload|generic-receive-offload|tx-udp-segmentation):' | tr '\n' ' '
        echo "($1)"
    done
    ;;
counters)
    for ns in "$A" "$B"; do
        printf '%s: ' "$ns"
        ip netns exec "$ns" nft list table inet ovtest 2>/dev/null |
            grep -o 'counter packets [0-9]*' | awk '{printf "%s ", $3}'
        echo "(seen, dropped)"
    done
    ;;
nodrop)
    for ns in "$A" "$B"; do
        ip netns exec "$ns" nft delete table inet ovtest 2>/dev/null || true
    done
    ;;
*)
    echo "usage: $0 up [MTU] | down | drop PERCENT | nodrop | offloads on|off | counters" >&2
    exit 2
    ;;
esac
