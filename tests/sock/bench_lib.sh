# Shared by tests/sock/bench.sh and tests/sock/server_bench.sh (sourced,
# not run): ports, the readiness wait, medians. The sourcing script sets
# `me` (its name in messages) first.

# port: a random port no socket holds in any state (others may run servers
# here too), below the kernel's ephemeral range (32768 up): a client port
# of an earlier run still in TIME_WAIT there made a server's bind fail.
port() {
    while :; do
        p=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000))
        ss -tan | grep -q ":$p " || { echo "$p"; return; }
    done
}
# listening PORT: waits until a TCP listener holds PORT (the readiness signal).
listening() {
    i=0
    until ss -ltn | grep -q ":$1 "; do
        i=$((i + 1))
        [ $i -lt 200 ] || { echo "$me: no listener on $1" >&2; exit 1; }
        sleep 0.05
    done
}
# median: the median of the numbers on stdin, one per line.
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
