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
