#!/bin/sh
# viarun between hosts: two network namespaces joined by a veth pair
# (MTU 1500), the network device carrying what both ends run under viarun.
# Needs root (CI is).
# Usage: tests/sock/hosts.sh BINDIR PEER_BINARY COMPAT_BINARY (run.sh builds them)
set -eu
bin=$1 peer=$2 compat=$3
here=$(dirname "$0")
dir=$(mktemp -d)
export OV_NS_A="sockhA$$" OV_NS_B="sockhB$$" OV_VETH="sockh$$"
cleanup() {
    sh "$here/../../scripts/netns.sh" down
    rm -rf "$dir"
}
trap cleanup EXIT
sh "$here/../../scripts/netns.sh" up 1500 >/dev/null
# The server is in B (10.77.0.2), the client in A.
export PEER_ADDR=10.77.0.2
V="$bin/viarun"
VS="$V --stats"

# pair SERVER_PREFIX MODE CLIENT_PREFIX CLIENT_ARGS...: the server's port
# (its first output line) is the readiness signal.
pair() {
    sp=$1 mode=$2 cp=$3
    shift 3
    rm -f "$dir/port"
    mkfifo "$dir/port"
    ip netns exec "$OV_NS_B" $sp "$peer" server "$mode" >"$dir/port" 2>"$dir/server.err" &
    spid=$!
    read -r port <"$dir/port"
    ip netns exec "$OV_NS_A" $cp "$peer" "$@" "$port" 2>"$dir/client.err"
    wait "$spid" || [ "$mode" = die ]
}
expect() {
    grep -qx "$2" "$dir/$1.err" || { echo "$1 said:"; cat "$dir/$1.err"; exit 1; }
}
UDP1='viarun: 1 connections over udp, 0 over kernel TCP'
TCP1='viarun: 0 connections over shm, 1 over kernel TCP'

# Both under viarun: 3 MB echoed (both directions), every byte checked.
pair "$VS" echo "$VS" client_swap 3000000
expect server "$UDP1"
expect client "$UDP1"
# A plain server: the client's probe meets a closed UDP port, which the
# kernel refuses at once; with a 5 s probe limit a fallback that waited
# for it would show.
start=$(date +%s)
VIARUN_PROBE_MS=5000 pair "" echo "$VS" client_swap 1000000
[ $(($(date +%s) - start)) -lt 4 ] || { echo "fallback to a plain server waited"; exit 1; }
expect client "$TCP1"
# A plain client: nothing is sent to it, the server stays on the kernel.
pair "$VS" echo "" client_swap 1000000
expect server "$TCP1"
# Peer death: EOF/ECONNRESET on read, EPIPE on write, within 1 s (peer.c).
pair "$V" die "$VS" survivor
expect client "$UDP1"
# Each socket feature (compat.c), the dialing child in the other
# namespace: kernel TCP first (the reference), then both under viarun,
# where the connections must have gone over udp.
for mode in poll select epoll-lt epoll-et epoll-nested peek dup threads sendfile aliases seccomp splice exec exec-vfork exec-connect exec-bare exec-bare-connect exec-closerange exec-closeloop exec-closefrom exec-used exec-self fork-used fork-close fork-stream fork-first fork-race stdio stdio-exec stdio-dup2 epollout-et epollout-lt epollout-short sigsuspend rawclose halfclose fork-settling shutdown-wakes linger0 \
    reuseport reuseport-plain stress reconnect hangup hangup-exit hangup-kill hangup-et wake nonblock slow-settle; do
    export COMPAT_ADDR=10.77.0.2 COMPAT_CLIENT_NETNS="/var/run/netns/$OV_NS_A"
    ip netns exec "$OV_NS_B" "$compat" "$mode" >/dev/null
    ip netns exec "$OV_NS_B" $VS "$compat" "$mode" >/dev/null 2>"$dir/compat.err" ||
        { cat "$dir/compat.err"; exit 1; }
    if [ "$mode" = reuseport-plain ]; then
        # The plain listener's connections (its count on stderr) must
        # have stayed on kernel TCP, every other one over udp.
        plain=$(awk '/^compat plain-listener: [0-9]+ connections$/ { print $3 }' "$dir/compat.err")
        expect compat "viarun: $((16 - plain)) connections over udp, $plain over kernel TCP"
        continue
    fi
    if [ "$mode" = reuseport ]; then
        # 16 connections over two listeners: the registered one's over
        # udp, the other's (declined through the port's agent) over TCP.
        total=$(awk '/^viarun: [0-9]+ connections over udp, [0-9]+ over kernel TCP$/ { print $2 + $6 }' "$dir/compat.err")
        [ "$total" = 16 ] || { echo "reuseport said:"; cat "$dir/compat.err"; exit 1; }
        continue
    fi
    if [ "$mode" = exec-bare ] || [ "$mode" = exec-bare-connect ]; then
        # The new program runs without viarun: the connection, agreed on
        # and not yet used, stayed on kernel TCP (link::BARE in the
        # stream, no page being shared between hosts).
        expect compat "viarun: 0 connections over udp, 1 over kernel TCP"
        continue
    fi
    n=1
    [ "$mode" = stress ] && n=3
    [ "$mode" = rawclose ] && n=6
    expect compat "viarun: $n connections over udp, 0 over kernel TCP"
done
# Python's subprocess (vfork) on a used connection: head reads from it,
# printf writes to it (hosts_subprocess.py).
rm -f "$dir/port"
mkfifo "$dir/port"
ip netns exec "$OV_NS_B" $VS python3 "$here/hosts_subprocess.py" server 10.77.0.2 >"$dir/port" 2>"$dir/server.err" &
spid=$!
read -r port <"$dir/port"
ip netns exec "$OV_NS_A" $VS python3 "$here/hosts_subprocess.py" client 10.77.0.2 "$port" 2>"$dir/client.err" ||
    { cat "$dir/client.err"; exit 1; }
wait "$spid" || { cat "$dir/server.err"; exit 1; }
expect server "$UDP1"
expect client "$UDP1"
# hosts_subprocess.py, each mode without viarun and under it:
# - sibling (the connecting end), sibling-accept (the accepting end): a
#   second program on a connection a first one used and took away with
#   it reads what the first one's VI left unread;
# - spawn-close: a client that ran a program closes its used connections
#   (each handed to the kernel at its close): the server reads EOF on
#   each, never a reset;
# - forking: a forking server, a child per connection, answers 20
#   requests, each ending in EOF.
UDP20="viarun: 20 connections over udp, 0 over kernel TCP"
for mode in sibling sibling-accept spawn-close forking; do
    for pre in "" "$VS"; do
        rm -f "$dir/port"
        mkfifo "$dir/port"
        ip netns exec "$OV_NS_B" $pre python3 "$here/hosts_subprocess.py" server 10.77.0.2 "$mode" >"$dir/port" 2>"$dir/server.err" &
        spid=$!
        read -r port <"$dir/port"
        ip netns exec "$OV_NS_A" $pre python3 "$here/hosts_subprocess.py" client 10.77.0.2 "$port" "$mode" 2>"$dir/client.err" ||
            { cat "$dir/client.err" "$dir/server.err"; exit 1; }
        wait "$spid" || { cat "$dir/server.err"; exit 1; }
    done
    case $mode in
    sibling*) expect server "$UDP1"; expect client "$UDP1" ;;
    spawn-close) expect server "$UDP20"; expect client "$UDP20" ;;
    # The forking server's connections are its children's.
    forking) expect client "$UDP20" ;;
    esac
done
# A client using nearly all of its descriptor limit (limit_check.py): the
# library's descriptors (the offer's and the VI's UDP sockets, the
# records) must not take the program's; with room under the hard limit,
# every connection is carried. The server accepts only once the client
# has made all 960 (LIMIT_LATE_FIFO): each must still be carried.
(
    ulimit -Sn 1024
    ulimit -Hn 8192 2>/dev/null || :
    for pre in "" "$VS"; do
        rm -f "$dir/port" "$dir/late"
        mkfifo "$dir/port" "$dir/late"
        export LIMIT_LATE_FIFO="$dir/late"
        ip netns exec "$OV_NS_B" $pre python3 "$here/limit_check.py" 1024 serve 10.77.0.2 >"$dir/port" 2>"$dir/server.err" &
        spid=$!
        read -r port <"$dir/port"
        ip netns exec "$OV_NS_A" $pre python3 "$here/limit_check.py" 1024 connect 10.77.0.2 "$port" 2>"$dir/client.err" ||
            { kill "$spid" 2>/dev/null; cat "$dir/client.err" "$dir/server.err"; exit 1; }
        wait "$spid" || { cat "$dir/server.err"; exit 1; }
    done
    hard=$(ulimit -Hn)
    case $hard in unlimited) hard=1048576 ;; esac
    if [ "$hard" -ge 5184 ]; then
        expect server "viarun: 960 connections over udp, 0 over kernel TCP"
        expect client "viarun: 960 connections over udp, 0 over kernel TCP"
    fi
)
echo "sock tests between hosts: ok"
