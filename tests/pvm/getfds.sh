#!/bin/bash
# pvm_getfds() readiness (issue 14): tests/pvm/getfds.c, built with
# -Wall -Wextra -Werror under ASan/UBSan, select()s on the descriptor and
# receives small messages through the pool, a large one and a TaskExit
# notify through the socket (a 1 MB pool of its own pvmd).
# Usage: getfds.sh [DIR with libpvm3.so, pvmd and pvm]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bindir=$(pvm_bindir "${1:-}" libpvm3.so pvmd pvm) || exit 1
work=$(mktemp -d)
export HOME=$work/home OPENVIA_PVM_SOCK=$work/pvmd.sock LD_LIBRARY_PATH=$work/lib OPENVIA_PVM_POOL_MB=1
mkdir -p "$HOME/pvm3/bin/LINUX64" "$work/lib"
ln -s "$(readlink -f "$bindir/libpvm3.so")" "$work/lib/libpvm3.so.3"
exe=$HOME/pvm3/bin/LINUX64/pvm_getfds
cleanup() {
	echo halt | timeout 10 "$bindir/pvm" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
cc -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Wall -Wextra -Werror \
	-I"$here/../../include" -o "$exe" "$here/getfds.c" "$work/lib/libpvm3.so.3"
# The Rust library is not instrumented; the leak check would only see
# the pvmd's start-up.
export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1
timeout 60 "$exe" >"$work/getfds.out" 2>&1 || true
sed 's/^/    /' "$work/getfds.out"
if grep -q '^getfds: all ok$' "$work/getfds.out" && ! grep -q 'ERROR: AddressSanitizer\|runtime error' "$work/getfds.out"; then
	echo "ok   getfds"
else
	echo "FAIL getfds"
	exit 1
fi
