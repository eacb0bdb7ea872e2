#!/bin/sh
# Builds two network namespaces joined by a veth pair, for the UDP device:
#   ovA: veth0 10.77.0.1/24      ovB: veth1 10.77.0.2/24
# Usage: scripts/netns.sh up [MTU] | down | drop PERCENT | nodrop
# `drop` installs an nft rule in ovB dropping PERCENT % of incoming UDP at
# random (both directions are covered by also adding it in ovA).
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
        ip netns exec "$ns" nft add rule inet ovtest in meta l4proto udp numgen random mod 100 "<" "$pct" drop
    done
    echo "dropping ~${pct}% of incoming UDP datagrams in each namespace"
    ;;
nodrop)
    for ns in "$A" "$B"; do
        ip netns exec "$ns" nft delete table inet ovtest 2>/dev/null || true
    done
    ;;
*)
    echo "usage: $0 up [MTU] | down | drop PERCENT | nodrop" >&2
    exit 2
    ;;
esac
