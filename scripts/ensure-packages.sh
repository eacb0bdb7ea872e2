#!/bin/sh
# Makes sure Debian packages are installed, the one way every make target
# and CI do it: as root with apt-get, installs what is missing; otherwise
# stops at once with one line naming the packages and the command.
#
# Usage: scripts/ensure-packages.sh [--optional WHY] PKG...
#   --optional WHY: a missing package is not an error; when it cannot be
#   installed, one line "note: PKGS missing; WHY" and exit 0.
# Without dpkg (not Debian) nothing is checked: the caller's own error
# says what is missing.
set -eu
optional=""
if [ "${1:-}" = --optional ]; then
    optional=$2
    shift 2
fi
command -v dpkg-query >/dev/null || exit 0
missing=""
for p in "$@"; do
    # `dpkg -s` also succeeds for removed packages whose config remains.
    st=$(dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$st" = installed ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
missing=${missing# }
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing$(printf ' %s' $missing) (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Another apt run (a parallel job) holds the lock: wait for it.
    lock="-o DPkg::Lock::Timeout=600"
    # shellcheck disable=SC2086
    if apt-get $lock update -qq >/dev/null &&
        apt-get $lock install -y -qq $missing >/dev/null; then
        exit 0
    fi
    [ -n "$optional" ] && { echo "note: $missing could not be installed; $optional" >&2; exit 0; }
    echo "error: apt-get could not install: $missing" >&2
    exit 1
fi
if [ -n "$optional" ]; then
    echo "note: $missing missing; $optional (as root: apt-get install -y $missing)" >&2
    exit 0
fi
echo "error: missing packages: $missing; install them with: sudo apt-get install -y $missing" >&2
exit 1
