#!/usr/bin/env bash
# C ABI tests of libvipl.
#
#   tests/c/run.sh [LIBDIR]      LIBDIR holds libvipl.so (default: $LIBDIR,
#                                else target/release of this workspace)
#
# Checks vipl.h's layout (C) and that it parses as C++, builds the example
# programs (plain and with AddressSanitizer + UBSan), runs each as a
# server/client pair on the local device, and runs bad_input (argument
# checking).  A server is started with its stdout on a fifo; the client
# starts only once the server has printed READY, read with a bounded
# `read -t` loop: a readiness signal, never a sleep.
#
# Environment: VIA_DEVICE (default /dev/via_lo), VIA_HOST (the name the
# client looks up, default localhost), CC (default cc), CXX (default g++).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIBDIR=${1:-${LIBDIR:-$ROOT/target/release}}
DEVICE=${VIA_DEVICE:-/dev/via_lo}
HOST=${VIA_HOST:-localhost}
CC=${CC:-cc}
CXX=${CXX:-g++}
READY_SECONDS=30
RUN_SECONDS=60
CFLAGS=(-std=c11 -Wall -Wextra -Werror -O2 -I"$ROOT/include")
SANFLAGS=(-fsanitize=address,undefined -fno-omit-frame-pointer -g)

# LeakSanitizer stays off: libvipl is Rust and keeps process-wide state (the
# handle registries, the progress thread and its stack) alive until exit by
# design, which LSan would report as leaks of the C program.  Memory errors
# (use after free, overflows) are still caught by ASan, and UBSan stops at
# the first report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vipl-c-abi.XXXXXX")
BACKGROUND_PIDS=()
cleanup() {
    local pid
    for pid in "${BACKGROUND_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

passed=0
failed=0
pass() {
    passed=$((passed + 1))
    echo "PASS $1"
}
fail() {
    failed=$((failed + 1))
    echo "FAIL $1"
}
finish() {
    echo "c-abi: $passed passed, $failed failed"
    if ((failed > 0)); then exit 1; fi
    exit 0
}
# Shows the end of a log after a failure.
show() {
    local file
    for file in "$@"; do
        if [[ -s $file ]]; then
            echo "---- ${file#"$WORK"/}"
            tail -n 25 "$file"
        fi
    done
}

# ---------------------------------------------------------------------------
# The header on its own: no library needed.
# ---------------------------------------------------------------------------
if "$CC" "${CFLAGS[@]}" -o "$WORK/layout_test" "$ROOT/tests/c/layout_test.c" \
    2>"$WORK/layout.err" && "$WORK/layout_test" >/dev/null; then
    pass "layout_test"
else
    fail "layout_test"
    show "$WORK/layout.err"
fi

if "$CXX" -fsyntax-only -Wall -Wextra -Werror -x c++ "$ROOT/include/vipl.h" 2>"$WORK/cxx.err"; then
    pass "vipl.h as C++"
else
    fail "vipl.h as C++"
    show "$WORK/cxx.err"
fi

if [[ ! -e $LIBDIR/libvipl.so ]]; then
    fail "libvipl.so not found in $LIBDIR (build it: cargo build --release -p vipl)"
    finish
fi
LIBDIR=$(cd "$LIBDIR" && pwd)

# Every function vipl.h declares must be exported, not only those the
# examples happen to call.
declared=$(grep -oE '^VIP_RETURN Vip[A-Za-z]+' "$ROOT/include/vipl.h" | cut -d' ' -f2 | sort)
exported=$(nm -D --defined-only "$LIBDIR/libvipl.so" | awk '{print $3}' | sort)
missing=$(comm -23 <(printf '%s\n' "$declared") <(printf '%s\n' "$exported"))
if [[ -z $missing ]]; then
    pass "libvipl.so exports all $(wc -l <<<"$declared") VIPL functions"
else
    fail "libvipl.so lacks: $(tr '\n' ' ' <<<"$missing")"
fi

# ---------------------------------------------------------------------------
# Builds
# ---------------------------------------------------------------------------
BUILD=$WORK/build
if make -s -C "$ROOT/examples/c" LIBDIR="$LIBDIR" BUILDDIR="$BUILD" CC="$CC" all sanitize \
    >"$WORK/make.log" 2>&1; then
    pass "examples build (plain and sanitize)"
else
    fail "examples build (plain and sanitize)"
    show "$WORK/make.log"
    finish
fi

LINK=(-L"$LIBDIR" -lvipl -Wl,-rpath,"$LIBDIR")
if "$CC" "${CFLAGS[@]}" -o "$BUILD/bad_input" "$ROOT/tests/c/bad_input.c" "${LINK[@]}" \
    2>"$WORK/bad_input.err" &&
    "$CC" "${CFLAGS[@]}" "${SANFLAGS[@]}" -o "$BUILD/bad_input-asan" \
        "$ROOT/tests/c/bad_input.c" "${LINK[@]}" 2>>"$WORK/bad_input.err"; then
    pass "bad_input build"
else
    fail "bad_input build"
    show "$WORK/bad_input.err"
fi

# ---------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------

# run_single LABEL PROGRAM ARGS...
run_single() {
    local label=$1 prog=$2
    shift 2
    local log=$WORK/$label.log rc=0
    if [[ ! -x $prog ]]; then
        fail "$label (not built)"
        return
    fi
    timeout "$RUN_SECONDS" "$prog" "$@" >"$log" 2>&1 || rc=$?
    if ((rc == 0)); then
        pass "$label"
    else
        fail "$label (exit $rc)"
        # Its own FAIL lines, then whatever else it printed (sanitizer reports).
        grep -v '^ok ' "$log" | tail -n 60 || true
    fi
}

# run_pair LABEL PROGRAM DISCRIMINATOR ARGS...
# Starts PROGRAM -s, waits for READY, runs PROGRAM -c HOST, checks both exits.
run_pair() {
    local label=$1 prog=$2 disc=$3
    shift 3
    local fifo=$WORK/$label.fifo sout=$WORK/$label.server.out serr=$WORK/$label.server.err
    local cout=$WORK/$label.client.out line ready=0 server_pid drain_pid fd
    local src=0 crc=0 deadline

    if [[ ! -x $prog ]]; then
        fail "$label (not built)"
        return
    fi
    mkfifo "$fifo"
    timeout "$RUN_SECONDS" "$prog" -s -D "$DEVICE" -d "$disc" "$@" >"$fifo" 2>"$serr" &
    server_pid=$!
    BACKGROUND_PIDS+=("$server_pid")
    exec {fd}<"$fifo"

    deadline=$((SECONDS + READY_SECONDS))
    while ((SECONDS < deadline)); do
        if IFS= read -r -t 1 -u "$fd" line; then
            printf '%s\n' "$line" >>"$sout"
            if [[ $line == READY ]]; then
                ready=1
                break
            fi
        elif ! kill -0 "$server_pid" 2>/dev/null; then
            break # the server exited before it was ready
        fi
    done

    # Keep draining the server's stdout so it can never block on the fifo.
    cat <&"$fd" >>"$sout" &
    drain_pid=$!
    exec {fd}<&-

    if ((ready)); then
        timeout "$RUN_SECONDS" "$prog" -c "$HOST" -D "$DEVICE" -d "$disc" "$@" >"$cout" 2>&1 ||
            crc=$?
    else
        crc=-1
        kill "$server_pid" 2>/dev/null || true
    fi
    wait "$server_pid" || src=$?
    wait "$drain_pid" || true

    if ((ready && src == 0 && crc == 0)); then
        pass "$label"
    elif ((!ready)); then
        fail "$label (server never printed READY, exit $src)"
        show "$sout" "$serr"
    else
        fail "$label (server exit $src, client exit $crc)"
        show "$sout" "$serr" "$cout"
    fi
}

run_single "bad_input" "$BUILD/bad_input" "$DEVICE"
run_single "bad_input-asan" "$BUILD/bad_input-asan" "$DEVICE"

# Discriminators carry the shell's pid so concurrent runs cannot meet.
tag=$$
for variant in "" "-asan"; do
    v=${variant:+a}
    run_pair "vnettest$variant" "$BUILD/vnettest$variant" "vn$v$tag" -n 200 -m 65536
    run_pair "vnettest-poll$variant" "$BUILD/vnettest$variant" "vp$v$tag" -n 200 -m 4096 -p
    run_pair "cqtest$variant" "$BUILD/cqtest$variant" "cq$v$tag" -v 4 -n 50
    run_pair "rdma_imm$variant" "$BUILD/rdma_imm$variant" "rd$v$tag" -m 65536
done

finish
