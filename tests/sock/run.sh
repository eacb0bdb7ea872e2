#!/bin/sh
# viarun tests: the C programs here, each without viarun and under it.
# Usage: tests/sock/run.sh BINDIR (holding viarun and libviarun.so)
set -eu
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
here=$(dirname "$0")
cc -Wall -Wextra -Werror -O2 -o "$dir/echo" "$here/echo.c"
cc -Wall -Wextra -Werror -O2 -o "$dir/peer" "$here/peer.c"
cc -Wall -Wextra -Werror -O2 -pthread -o "$dir/compat" "$here/compat.c" "$here/compat_alias.c" "$here/compat_exec.c" "$here/compat_sandbox.c" \
    "$here/compat_flow.c" "$here/compat_listen.c" "$here/compat_stdio.c" "$here/compat_wait.c"
shm_before=$(ls /dev/shm | wc -l)
V="$bin/viarun"

# pair SERVER_PREFIX MODE CLIENT_PREFIX CLIENT_ARGS...: a server (its port
# read from its first output line: the readiness signal) and one client.
pair() {
    sp=$1 mode=$2 cp=$3
    shift 3
    rm -f "$dir/port"
    mkfifo "$dir/port"
    $sp "$dir/peer" server "$mode" >"$dir/port" 2>"$dir/server.err" &
    spid=$!
    read -r port <"$dir/port"
    $cp "$dir/peer" "$@" "$port" 2>"$dir/client.err"
    wait "$spid" || [ "$mode" = die ]
}
# expect SIDE LINE: that side's --stats line.
expect() {
    grep -qx "$2" "$dir/$1.err" || { echo "$1 said:"; cat "$dir/$1.err"; exit 1; }
}
VS="$V --stats"
SHM1='viarun: 1 connections over shm, 0 over kernel TCP'
TCP1='viarun: 0 connections over shm, 1 over kernel TCP' 
# Fallback: one side without viarun stays on the kernel, data intact.
pair "$VS" echo "" client_swap 1000000
expect server "$TCP1"
pair "" echo "$VS" client_swap 1000000
expect client "$TCP1"
# Both under viarun.
pair "$VS" echo "$VS" client_swap 1000000
expect server "$SHM1"
expect client "$SHM1"
# Peer death: EOF/ECONNRESET on read, EPIPE on write, within 1 s.
pair "$V" die "$VS" survivor
expect client "$SHM1"
# Each socket feature (compat.c): kernel TCP first (the reference), then
# both ends under viarun, where the connections must have gone over shm.
for mode in poll select epoll-lt epoll-et epoll-nested peek dup threads sendfile aliases seccomp splice exec exec-vfork exec-connect exec-bare exec-bare-connect exec-bare-used exec-bare-ahead exec-closerange exec-closeloop exec-closefrom exec-used exec-self fork-used fork-close fork-stream fork-first fork-race stdio stdio-exec stdio-dup2 epollout-et epollout-lt epollout-short sigsuspend rawclose halfclose fork-settling shutdown-wakes linger0 \
    reuseport reuseport-plain selfloop ipv6 stress reconnect hangup hangup-exit hangup-kill hangup-et wake nonblock epoll-quiet poll-quiet select-quiet \
    epoll2-quiet epoll-busy poll-busy select-busy epoll-unseen epoll-mod; do
    "$dir/compat" "$mode"
    $VS "$dir/compat" "$mode" 2>"$dir/compat.err" || { cat "$dir/compat.err"; exit 1; }
    if [ "$mode" = reuseport-plain ]; then
        # The plain listener's connections (its count on stderr) must
        # have stayed on kernel TCP, every other one over shm.
        plain=$(awk '/^compat plain-listener: [0-9]+ connections$/ { print $3 }' "$dir/compat.err")
        expect compat "viarun: $((16 - plain)) connections over shm, $plain over kernel TCP"
        continue
    fi
    if [ "$mode" = reuseport ]; then
        # The kernel spreads the 16 connections over the two listeners:
        # those of the one holding the registration go over shm, the
        # others (declined) over kernel TCP.
        total=$(awk '/^viarun: [0-9]+ connections over shm, [0-9]+ over kernel TCP$/ { print $2 + $6 }' "$dir/compat.err")
        [ "$total" = 16 ] || { echo "reuseport said:"; cat "$dir/compat.err"; exit 1; }
        continue
    fi
    if [ "$mode" = exec-bare ] || [ "$mode" = exec-bare-connect ]; then
        # The new program runs without viarun: the connection, agreed on
        # and not yet used, stayed on kernel TCP.
        expect compat "viarun: 0 connections over shm, 1 over kernel TCP"
        continue
    fi
    n=1
    [ "$mode" = stress ] && n=3
    [ "$mode" = rawclose ] && n=6
    expect compat "viarun: $n connections over shm, 0 over kernel TCP"
done
# A waiter in epoll, poll or select that spins costs its peer no doorbell
# (epoll.rs, poll.rs, select.rs): with a spin longer than the run, at most
# half of the 2000 messages ring one (a byte each into the server's kernel
# socket; all 2000 did before, and over kernel TCP all 28000 bytes go
# there). Most runs see under 20; a message that comes between the
# server's reply and its next wait still rings, and a loaded box widens
# that window (227 seen once for select in CI). epoll-busy: a server that
# works between its waits, so that every message comes while it does not
# wait; the token its last wait let stand saves the doorbell (all 500 rang
# before, and over kernel TCP all 7000 bytes go through the kernel); the
# same in poll and select (poll-busy, select-busy).
# epoll2-quiet waits in epoll_pwait2 (not intercepted before: all rang).
for mode in epoll-quiet epoll2-quiet poll-quiet select-quiet epoll-busy poll-busy select-busy; do
    VIARUN_SPIN_US=200000 $VS "$dir/compat" $mode 2>"$dir/compat.err" || { cat "$dir/compat.err"; exit 1; }
    expect compat "$SHM1"
    carried=$(awk -v m="$mode" '$1 == "compat" && $2 == m ":" && $3 == "kernel" { print $5; n = $8 } END { print n }' "$dir/compat.err")
    sent=$(echo "$carried" | tail -n1)
    carried=$(echo "$carried" | head -n1)
    [ -n "$carried" ] && [ "$carried" -le $((sent / 14 / 2)) ] ||
        { echo "$mode: the kernel carried too much:"; cat "$dir/compat.err"; exit 1; }
    echo "compat $mode: $carried bytes of doorbells for $((sent / 14)) messages"
done
# A waiter whose messages come seldom stops spinning (waitspin.rs): with
# a 1 ms window and a message every 2 ms, a spin of the whole window at
# every wait took ~47 % of the server thread's time; now ~5 %. At most a
# quarter passes (a loaded box can only lower the share). slow-settle:
# a nonblocking connector asking again and again while its acceptor
# takes 300 ms to its first use; its write yielded and said EAGAIN
# (~99 % of the thread's time), it now sleeps until the settling ends or
# 1 ms passes (~1 %).
for mode in slow-read slow-epoll slow-poll slow-settle; do
    VIARUN_SPIN_US=1000 $VS "$dir/compat" $mode 2>"$dir/compat.err" || { cat "$dir/compat.err"; exit 1; }
    expect compat "$SHM1"
    awk -v m="$mode" '$1 == "compat" && $2 == m ":" && $3 == "cpu" { found = 1; if ($4 * 4 > $7) bad = 1 }
        END { exit !(found && !bad) }' "$dir/compat.err" ||
        { echo "$mode: the waiting thread spun too long:"; cat "$dir/compat.err"; exit 1; }
    grep "^compat $mode: cpu" "$dir/compat.err"
done
# A server accepting one connection after another keeps no descriptor
# per connection (leak_check.py).
python3 "$here/leak_check.py"
$VS python3 "$here/leak_check.py" 2>"$dir/compat.err" || { cat "$dir/compat.err"; exit 1; }
expect compat "viarun: 100 connections over shm, 0 over kernel TCP"
# Connections one after another between two processes take up the VI the
# last one kept, and what its writer left behind is never read as the new
# one's (reuse_check.py: every byte checked).
python3 "$here/reuse_check.py" 300
$VS python3 "$here/reuse_check.py" 300 2>"$dir/py.err" || { cat "$dir/py.err"; exit 1; }
expect py "viarun: 300 connections over shm, 0 over kernel TCP"
grep -Eq '^viarun: [1-9][0-9]* on a VI kept from an earlier connection$' "$dir/py.err" ||
    { echo "reuse_check: no VI was taken up again:"; cat "$dir/py.err"; exit 1; }
# Python's subprocess on sockets (subprocess_check.py): a connection handed
# to `cat` with the default close_fds, `head` run on a used one, and a
# second program on a connection a first one used and took away with it
# (sibling: the connecting end; sibling-accept: the accepting end).
for mode in handoff used sibling sibling-accept; do
    python3 "$here/subprocess_check.py" "$mode"
    $VS python3 "$here/subprocess_check.py" "$mode" 2>"$dir/py.err" || { cat "$dir/py.err"; exit 1; }
    expect py "$SHM1"
done
# `head` on one of 100 connections in use (many: past the records kept
# and the connections an exec looked at before).
python3 "$here/subprocess_check.py" many
$VS python3 "$here/subprocess_check.py" many 2>"$dir/py.err" || { cat "$dir/py.err"; exit 1; }
expect py "viarun: 100 connections over shm, 0 over kernel TCP"
# `head` on a connection made with the descriptor table half full
# (crowded): no room for its exec record, so it stays on kernel TCP.
python3 "$here/subprocess_check.py" crowded
$VS python3 "$here/subprocess_check.py" crowded 2>"$dir/py.err" || { cat "$dir/py.err"; exit 1; }
expect py "viarun: 0 connections over shm, 1 over kernel TCP"
# A program using nearly all of its descriptor limit (limit_check.py):
# the library's own descriptors must not take the program's. With room
# under the hard limit for the library's raise, every connection is
# carried.
(
    ulimit -Sn 1024
    ulimit -Hn 8192 2>/dev/null || :
    python3 "$here/limit_check.py" 1024
    $VS python3 "$here/limit_check.py" 1024 2>"$dir/py.err" || { cat "$dir/py.err"; exit 1; }
    hard=$(ulimit -Hn)
    case $hard in unlimited) hard=1048576 ;; esac
    if [ "$hard" -ge 5184 ]; then
        expect py "viarun: 960 connections over shm, 0 over kernel TCP"
    fi
)
"$dir/echo" 3000000
"$bin/viarun" --stats "$dir/echo" 3000000 2>"$dir/stats"
cat "$dir/stats"
grep -qx 'viarun: 1 connections over shm, 0 over kernel TCP' "$dir/stats"
# Between hosts (network namespaces: root only, as in CI).
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null; then
    "$here/hosts.sh" "$bin" "$dir/peer" "$dir/compat"
else
    echo "sock tests between hosts: skipped (need root for network namespaces)"
fi
shm_after=$(ls /dev/shm | wc -l)
[ "$shm_after" -le "$shm_before" ] || { echo "left in /dev/shm:"; ls /dev/shm; exit 1; }
echo "sock tests: ok"
