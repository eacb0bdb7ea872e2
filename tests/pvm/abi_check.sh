#!/bin/bash
# Checks include/pvm3.h against PVM 3.4.6's header (REF, Debian's by default):
# 1. every object-like macro of REF has the same value with our header;
# 2. the four public structs have the same size and field offsets;
# 3. every prototype of REF is compatible with ours (both headers in one unit:
#    C accepts a redeclaration only when the types agree).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ours=${OURS:-$here/../../include/pvm3.h}
ref=${REF:-/usr/include/pvm3.h}
cc=${CC:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Object-like macros with a value, from the reference header.
names=$(sed -n 's/^#[[:space:]]*define[[:space:]]\{1,\}\([A-Za-z_][A-Za-z0-9_]*\)[[:space:]]\{1,\}[^[:space:]].*/\1/p' "$ref" |
	grep -v -e '^PVMTMPNAMFUN$' -e '^__ProtoGlarp__$' -e '^PvmMboxDirectIndex$' -e '^PvmMboxDirectIndexOf$' | sort -u)
[ -n "$names" ] || { echo "no macros found in $ref"; exit 1; }

{
	echo '#include <stdio.h>'
	echo '#include <stddef.h>'
	echo '#include HEADER'
	echo '#define SHOW(x) _Generic((x), char *: show_s, default: show_i)(#x, (x))'
	echo 'static void show_s(const char *n, const char *v) { printf("%s=\"%s\"\n", n, v); }'
	echo 'static void show_i(const char *n, long long v) { printf("%s=%lld\n", n, v); }'
	echo '#define FIELD(s, f) printf("%s.%s @%zu size %zu\n", #s, #f, offsetof(struct s, f), sizeof(((struct s *)0)->f))'
	echo 'int main(void) {'
	for n in $names; do echo "	SHOW($n);"; done
	for f in hi_tid hi_name hi_arch hi_speed hi_dsig; do echo "	FIELD(pvmhostinfo, $f);"; done
	for f in ti_tid ti_ptid ti_host ti_flag ti_a_out ti_pid; do echo "	FIELD(pvmtaskinfo, $f);"; done
	for f in len ctx tag wid enc crc src dst; do echo "	FIELD(pvmminfo, $f);"; done
	for f in mi_name mi_nentries mi_indices mi_owners mi_flags; do echo "	FIELD(pvmmboxinfo, $f);"; done
	for s in pvmhostinfo pvmtaskinfo pvmminfo pvmmboxinfo; do echo "	printf(\"sizeof $s %zu\\n\", sizeof(struct $s));"; done
	echo '	printf("PvmMboxDirectIndex(5)=%d Of=%u\n", PvmMboxDirectIndex(5), PvmMboxDirectIndexOf(5 << 10));'
	echo '	return 0; }'
} >"$work/dump.c"
$cc -Wall -Wextra -Werror -DHEADER="\"$ref\"" -o "$work/dump_ref" "$work/dump.c"
$cc -Wall -Wextra -Werror -DHEADER="\"$ours\"" -o "$work/dump_ours" "$work/dump.c"
"$work/dump_ref" >"$work/ref.txt"
"$work/dump_ours" >"$work/ours.txt"
diff -u "$work/ref.txt" "$work/ours.txt"

# Prototypes: include REF, forget its guard and macros, include ours minus
# its struct definitions (C11 refuses a second definition; step 2 covers them).
sed '/^struct pvm[a-z]* {/,/^};/d' "$ours" >"$work/ours_nostructs.h"
{
	echo '#include <stdio.h>'
	echo "#include \"$ref\""
	echo '#undef _PVM3_H_'
	for n in $names PVMTMPNAMFUN __ProtoGlarp__ PvmMboxDirectIndex PvmMboxDirectIndexOf; do echo "#undef $n"; done
	echo "#include \"$work/ours_nostructs.h\""
	echo 'int main(void) { return 0; }'
} >"$work/protos.c"
$cc -Wall -Wextra -Werror -o "$work/protos" "$work/protos.c"
echo "abi_check: $(wc -l <"$work/ref.txt") values and layouts equal, prototypes compatible"
