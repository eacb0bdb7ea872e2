# Sourced by PVM test scripts.
# pvm_bindir DIR FILE...: DIR (else $CARGO_TARGET_DIR or target, debug
# profile) made absolute, after checking that each FILE was built there.
pvm_bindir() {
	local d=${1:-${CARGO_TARGET_DIR:-$here/../../target}/debug}
	shift
	d=$(cd "$d" && pwd) || return 1
	for f in "$@"; do
		[ -e "$d/$f" ] || { echo "missing $d/$f (cargo build -p pvm3 -p openvia-pvm)" >&2; return 1; }
	done
	echo "$d"
}

# netns_rsh FILE: writes the remote shell of the namespace tests to FILE:
# `FILE HOST [-l user] COMMAND...` runs COMMAND in the namespace named
# HOST, with a PVM_TMP of that host's own under $WORK (the namespaces
# share one file system, real hosts would not).
netns_rsh() {
	cat >"$1" <<'RSH'
#!/bin/sh
host=$1; shift
while [ "${1:-}" = -l ] || [ "${1:-}" = -n ]; do
	[ "$1" = -l ] && shift
	shift
done
mkdir -p "$WORK/tmp-$host"
exec ip netns exec "$host" env PVM_TMP="$WORK/tmp-$host" "$@"
RSH
	chmod +x "$1"
}

# check NAME FILE REGEX: "ok NAME" if FILE has a line matching the
# extended REGEX, else "FAIL NAME" with FILE shown, and fail=1.
check() {
	if grep -Eq "$3" "$2"; then echo "ok   $1"; else
		echo "FAIL $1 (wanted /$3/):"; sed 's/^/    /' "$2"; fail=1
	fi
}
