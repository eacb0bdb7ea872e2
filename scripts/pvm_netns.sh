#!/bin/sh
# Two "hosts" for multi-host PVM runs: network namespaces joined by a veth
# pair, on their own subnet and interface names so they never clash with
# scripts/netns.sh (ovA/ovB, 10.77.0.0/24, ov-veth*), which the UDP
# benchmarks use at the same time:
#   pvmA: pvm-veth0 10.78.0.1/24      pvmB: pvm-veth1 10.78.0.2/24
# Host name = namespace name: `up` adds "10.78.0.x pvmA" lines to /etc/hosts
# so gethostbyname() finds them (stock pvmd resolves every hostfile entry),
# each tagged with the comment below; `down` removes exactly those lines.
# scripts/netns-rsh is the PVM_RSH wrapper that runs a command "on" a host.
# Names can be changed with PVM_NS_A / PVM_NS_B (both scripts read them),
# the veth's with PVM_VETH (PVM_VETH0/1), the subnet with PVM_NETNS_NET
# (first three octets), so that two pairs can exist at once. Other
# namespace names also get their own /etc/hosts tag and, unless PVM_VETH
# is given, veth names derived from them; `down` then removes only its own
# pair's lines.
#
# Usage: scripts/pvm_netns.sh up [MTU] | down | status
set -eu
A=${PVM_NS_A:-pvmA}
B=${PVM_NS_B:-pvmB}
NET=${PVM_NETNS_NET:-10.78.0}
ADDR_A=$NET.1
ADDR_B=$NET.2
TAG="# openvia-pvm-netns"
V=pvm-veth
if [ "$A" != pvmA ] || [ "$B" != pvmB ]; then
    TAG="$TAG $A $B"
    # Interface names are at most 15 bytes.
    V=$(printf '%.12s' "$A")-v
fi
V=${PVM_VETH:-$V}
HOSTS=${PVM_NETNS_HOSTS_FILE:-/etc/hosts}

remove_host_lines() {
    # Rewrite in place (not mv): /etc/hosts may be a bind mount.
    mine=" ($A|$B) $TAG\$"
    if grep -Eq "$mine" "$HOSTS"; then
        tmp=$(mktemp)
        grep -Ev "$mine" "$HOSTS" >"$tmp" || true
        cat "$tmp" >"$HOSTS"
        rm -f "$tmp"
    fi
}

cmd=${1:-up}
case "$cmd" in
up)
    mtu=${2:-1500}
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    ip link del "${V}0" 2>/dev/null || true
    ip netns add "$A"
    ip netns add "$B"
    ip link add "${V}0" type veth peer name "${V}1"
    ip link set "${V}0" netns "$A"
    ip link set "${V}1" netns "$B"
    ip -n "$A" addr add "$ADDR_A/24" dev "${V}0"
    ip -n "$B" addr add "$ADDR_B/24" dev "${V}1"
    for ns in "$A" "$B"; do
        ip -n "$ns" link set lo up
    done
    ip -n "$A" link set "${V}0" mtu "$mtu" up
    ip -n "$B" link set "${V}1" mtu "$mtu" up
    remove_host_lines
    printf '%s %s %s\n%s %s %s\n' "$ADDR_A" "$A" "$TAG" "$ADDR_B" "$B" "$TAG" >>"$HOSTS"
    echo "hosts $A ($ADDR_A, ${V}0) and $B ($ADDR_B, ${V}1), MTU $mtu; /etc/hosts updated"
    ;;
down)
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    remove_host_lines
    ;;
status)
    ip netns list | grep -E "^($A|$B)( |\$)" || echo "no namespaces $A/$B"
    grep -E " ($A|$B) $TAG\$" "$HOSTS" || echo "no tagged /etc/hosts lines"
    ;;
*)
    echo "usage: $0 up [MTU] | down | status" >&2
    exit 2
    ;;
esac
