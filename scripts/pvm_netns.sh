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
# Names can be changed with PVM_NS_A / PVM_NS_B (both scripts read them);
# other names get their own veth names and /etc/hosts tag (derived from
# the namespace names), so two such pairs can be up at once.
#
# Usage: scripts/pvm_netns.sh up [MTU] | down | status
set -eu
A=${PVM_NS_A:-pvmA}
B=${PVM_NS_B:-pvmB}
ADDR_A=10.78.0.1
ADDR_B=10.78.0.2
TAG="# openvia-pvm-netns"
VETH_A=pvm-veth0
VETH_B=pvm-veth1
if [ "$A" != pvmA ] || [ "$B" != pvmB ]; then
    TAG="$TAG $A $B"
    # Interface names are at most 15 bytes.
    VETH_A=$(printf '%.12s' "$A")-v0
    VETH_B=$(printf '%.12s' "$B")-v1
fi
HOSTS=${PVM_NETNS_HOSTS_FILE:-/etc/hosts}

remove_host_lines() {
    # Rewrite in place (not mv): /etc/hosts may be a bind mount.
    if grep -q "$TAG\$" "$HOSTS"; then
        tmp=$(mktemp)
        grep -v "$TAG\$" "$HOSTS" >"$tmp" || true
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
    ip link del "$VETH_A" 2>/dev/null || true
    ip netns add "$A"
    ip netns add "$B"
    ip link add "$VETH_A" type veth peer name "$VETH_B"
    ip link set "$VETH_A" netns "$A"
    ip link set "$VETH_B" netns "$B"
    ip -n "$A" addr add "$ADDR_A/24" dev "$VETH_A"
    ip -n "$B" addr add "$ADDR_B/24" dev "$VETH_B"
    for ns in "$A" "$B"; do
        ip -n "$ns" link set lo up
    done
    ip -n "$A" link set "$VETH_A" mtu "$mtu" up
    ip -n "$B" link set "$VETH_B" mtu "$mtu" up
    remove_host_lines
    printf '%s %s %s\n%s %s %s\n' "$ADDR_A" "$A" "$TAG" "$ADDR_B" "$B" "$TAG" >>"$HOSTS"
    echo "hosts $A ($ADDR_A, $VETH_A) and $B ($ADDR_B, $VETH_B), MTU $mtu; /etc/hosts updated"
    ;;
down)
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    remove_host_lines
    ;;
status)
    ip netns list | grep -E "^($A|$B)( |\$)" || echo "no namespaces $A/$B"
    grep "$TAG\$" "$HOSTS" || echo "no tagged /etc/hosts lines"
    ;;
*)
    echo "usage: $0 up [MTU] | down | status" >&2
    exit 2
    ;;
esac
