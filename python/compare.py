#!/usr/bin/env python3
"""Compare viabench against UCX and libfabric over shared memory, on one host.

Runs, with the same pinning as viabench (server on CPU 1, client on CPU 0):
  * UCX ``ucx_perftest`` tag_lat (8, 64, 4K, 64K, 1M) and tag_bw (64K, 1M, 4M)
    over shared memory (``UCX_TLS=sm,self`` by default);
  * libfabric ``fi_pingpong -p shm -e rdm`` latency for the same sizes;
  * ``viabench latency/bandwidth --json`` for the same sizes over ``shm`` when
    viabench lists it, else over kernel transports;
and prints one table with the ratios viabench/UCX and viabench/libfabric
(or one JSON object per line with ``--json``).

Units: latency is one-way (round trip / 2) in nanoseconds, median;
bandwidth is GB/s = 1e9 bytes/s (UCX prints MB/s meaning MiB/s: converted).
Only the Python standard library is used.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

LAT_SIZES = [8, 64, 4096, 65536, 1048576]
BW_SIZES = [65536, 1048576, 4194304]
CLIENT_CPU, SERVER_CPU = 0, 1
READY_TIMEOUT = 10.0  # seconds a server may take to start listening
RUN_TIMEOUT = 300.0  # seconds one measurement may take
KERNEL_FALLBACK = ["kernel-tcp", "kernel-tcp-spin", "kernel-udp-spin"]


class ToolMissing(Exception):
    """The benchmark program is not installed."""


class ToolFailed(Exception):
    """The benchmark program ran but produced no usable result."""


def latency_iters(size, quick):
    """Round trips per size, as viabench chooses them (fewer with --quick)."""
    full = 100_000 if size <= 4096 else max(100, 100_000 * 4096 // size)
    return max(100, full // 20) if quick else full


def bandwidth_msgs(size, quick):
    if quick:
        return min(10_000, max(16, (64 << 20) // size))
    return min(100_000, max(256, (1 << 30) // size))


def human(size):
    if size % (1 << 20) == 0:
        return "%dM" % (size >> 20)
    if size % (1 << 10) == 0:
        return "%dK" % (size >> 10)
    return str(size)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    """True once some socket listens on TCP `port` (read from /proc/net)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    local, state = fields[1], fields[3]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            continue
    return False


def wait_listening(port, server):
    """Waits for the server's port to be in LISTEN state (bounded), or its exit."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if listening(port):
            return
        if server.poll() is not None:
            raise ToolFailed("server exited before listening: " + server.stdout.read().strip()[-300:])
        time.sleep(0.005)  # short poll of a kernel table, not a guess
    raise ToolFailed("server did not listen on port %d within %.0fs" % (port, READY_TIMEOUT))


def pinned(cpu, argv):
    return ["taskset", "-c", str(cpu)] + argv


def run_pair(server_argv, client_argv, port, env=None):
    """Runs server (CPU 1) and client (CPU 0); returns the client's output."""
    if shutil.which(server_argv[0]) is None:
        raise ToolMissing(server_argv[0] + " not installed")
    full_env = dict(os.environ, **(env or {}))
    server = subprocess.Popen(pinned(SERVER_CPU, server_argv), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=full_env)
    try:
        wait_listening(port, server)
        client = subprocess.run(pinned(CLIENT_CPU, client_argv), capture_output=True, text=True,
                                env=full_env, timeout=RUN_TIMEOUT)
        if client.returncode != 0:
            raise ToolFailed("%s exited %d: %s" % (client_argv[0], client.returncode,
                                                   (client.stdout + client.stderr).strip()[-300:]))
        return client.stdout
    except subprocess.TimeoutExpired:
        raise ToolFailed("%s timed out" % client_argv[0])
    finally:
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def ucx_final_line(out):
    """The numbers of ucx_perftest -f: iters, lat p50/avg/overall (us), bw avg/overall (MiB/s), rate avg/overall."""
    for line in reversed(out.splitlines()):
        fields = line.replace("Final:", "").split()
        if len(fields) == 8:
            try:
                return [float(x) for x in fields]
            except ValueError:
                continue
    raise ToolFailed("no result line in ucx_perftest output: " + out.strip()[-300:])


def ucx(test, size, iters, tls):
    port = free_port()
    warmup = str(min(1000, max(10, iters // 10)))
    common = ["-p", str(port)]
    client = ["ucx_perftest", "127.0.0.1", "-t", test, "-s", str(size), "-n", str(iters),
              "-w", warmup, "-f"] + common
    out = run_pair(["ucx_perftest"] + common, client, port, env={"UCX_TLS": tls})
    nums = ucx_final_line(out)
    if test == "tag_lat":
        return {"median_ns": nums[1] * 1000.0}
    return {"gbytes_per_s": nums[5] * 1048576 / 1e9}


def fi_pingpong(size, iters):
    port = free_port()
    base = ["fi_pingpong", "-p", "shm", "-e", "rdm", "-S", str(size), "-I", str(iters)]
    out = run_pair(base + ["-B", str(port)], base + ["-P", str(port), "127.0.0.1"], port)
    lines = out.splitlines()
    for header, data in zip(lines, lines[1:]):
        # The size column is abbreviated ("4k", "1m"): find the row under the header.
        if header.split()[:1] == ["bytes"] and len(data.split()) == 8:
            # usec/xfer = elapsed / (iterations * 2 transfers), i.e. one-way; a mean, not a median.
            return {"median_ns": float(data.split()[6]) * 1000.0}
    raise ToolFailed("no result line in fi_pingpong output: " + out.strip()[-300:])


def viabench_transports(viabench):
    out = subprocess.run([viabench, "transports", "--json"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise ToolFailed("viabench transports failed: " + out.stderr.strip())
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def viabench(path, test, transport, size, iters):
    argv = [path, test, "--transport", transport, "--size", str(size), "--iters", str(iters),
            "--json", "--cpu", "%d,%d" % (CLIENT_CPU, SERVER_CPU)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    if out.returncode != 0:
        raise ToolFailed("viabench: " + out.stderr.strip()[-300:])
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    key = "median_ns" if test == "latency" else "gbytes_per_s"
    return {key: rec[key], "mode": rec.get("mode"), "pin": rec.get("pin")}


def measure(label, fn, *args):
    """Runs one measurement; a missing tool or a failure becomes a row, not a traceback."""
    try:
        return fn(*args)
    except ToolMissing as e:
        return {"error": "not installed"}
    except (ToolFailed, OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
        print("compare.py: %s: %s" % (label, e), file=sys.stderr)
        return {"error": "failed (see stderr)"}


def value(result, test):
    return result.get("median_ns" if test == "latency" else "gbytes_per_s")


def fmt(result, test):
    if result is None:
        return "-"
    if "error" in result:
        return result["error"]
    v = value(result, test)
    return "%.1f" % v if test == "latency" else "%.3f" % v


def ratio(mine, theirs, test):
    a, b = value(mine, test), (value(theirs, test) if theirs else None)
    if a is None or not b:
        return None
    return a / b


def table(rows, headers):
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    lines = []
    for r in [headers] + rows:
        cells = [str(c).ljust(w) if i < 3 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def combine(rounds, test):
    """Medians over rounds of each tool's value; each tool's result keeps its
    per-round values so ratios can be taken round by round (peers measured
    seconds apart, under the same machine conditions)."""
    out = {}
    for tool in rounds[0]:
        per = [r[tool] for r in rounds if r.get(tool) is not None and value(r[tool], test) is not None]
        if not per:
            out[tool] = rounds[0][tool]
            continue
        per.sort(key=lambda res: value(res, test))
        best = dict(per[len(per) // 2])
        best["rounds"] = [value(res, test) for res in per]
        out[tool] = best
    out["_rounds"] = rounds
    return out


def round_ratio(row, tool, peer, test):
    """Median over rounds of (tool / peer) measured in the same round."""
    rs = []
    for r in row["_rounds"]:
        x = ratio(r.get(tool), r.get(peer), test) if r.get(tool) and r.get(peer) else None
        if x is not None:
            rs.append(x)
    if not rs:
        return None
    rs.sort()
    return rs[len(rs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--viabench", default="target/release/viabench", help="path to the viabench binary")
    ap.add_argument("--transports", help="viabench transports (comma-separated); default: shm if listed, else "
                    + ",".join(KERNEL_FALLBACK))
    ap.add_argument("--ucx-tls", default="sm,self", help="UCX_TLS for ucx_perftest (default: sm,self)")
    ap.add_argument("--quick", action="store_true", help="fewer iterations (smoke test)")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternate all tools this many times per size; report medians over rounds "
                         "(the machine's speed drifts: interleaving keeps peers comparable)")
    args = ap.parse_args()

    if args.transports:
        transports = args.transports.split(",")
    else:
        try:
            listed = viabench_transports(args.viabench)
        except (OSError, ToolFailed, subprocess.SubprocessError) as e:
            print("compare.py: cannot run viabench (%s): build it (cargo build --release -p viabench) "
                  "or pass --viabench PATH" % e, file=sys.stderr)
            return 2
        shm = [t["name"] for t in listed if t["name"] in ("shm", "shm-block") and t["available"]]
        kernel = [t["name"] for t in listed if t["name"] in KERNEL_FALLBACK]
        transports = shm + kernel

    results = []  # (test, size, {tool: result})
    plan = [("latency", s) for s in LAT_SIZES] + [("bandwidth", s) for s in BW_SIZES]
    for test, size in plan:
        n = latency_iters(size, args.quick) if test == "latency" else bandwidth_msgs(size, args.quick)
        rounds = []
        for r in range(max(1, args.rounds)):
            print("compare.py: %s %s (round %d)" % (test, human(size), r + 1), file=sys.stderr)
            row = {"ucx": measure("ucx " + test, ucx, "tag_lat" if test == "latency" else "tag_bw", size, n,
                                  args.ucx_tls)}
            row["libfabric"] = measure("fi_pingpong", fi_pingpong, size, n) if test == "latency" else None
            for t in transports:
                row[t] = measure("viabench " + t, viabench, args.viabench, test, t, size, n)
            rounds.append(row)
        results.append((test, size, combine(rounds, test)))

    if args.json:
        for test, size, row in results:
            for tool, res in row.items():
                if res is None or tool == "_rounds":
                    continue
                rec = {"tool": tool, "test": test, "size": size}
                rec.update(res)
                if tool not in ("ucx", "libfabric"):
                    rec["ratio_vs_ucx"] = round_ratio(row, tool, "ucx", test)
                    rec["ratio_vs_libfabric"] = round_ratio(row, tool, "libfabric", test)
                print(json.dumps(rec))
        return 0

    print("# pin: client CPU %d, server CPU %d; UCX_TLS=%s" % (CLIENT_CPU, SERVER_CPU, args.ucx_tls))
    print("# latency: one-way median ns (lower is better); bandwidth: GB/s = 1e9 B/s (higher is better)")
    print("# x/UCX, x/libfabric: viabench value divided by the peer's, taken within each round, median over"
          " %d rounds (latency: <1 = viabench faster; bandwidth: >1 = viabench faster)" % max(1, args.rounds))
    headers = ["test", "size", "viabench transport", "viabench", "UCX", "x/UCX", "libfabric", "x/libfabric"]
    rows = []
    for test, size, row in results:
        for t in transports:
            r_ucx, r_fab = round_ratio(row, t, "ucx", test), round_ratio(row, t, "libfabric", test)
            rows.append([test, human(size), t, fmt(row[t], test), fmt(row["ucx"], test),
                         "-" if r_ucx is None else "%.2f" % r_ucx, fmt(row["libfabric"], test),
                         "-" if r_fab is None else "%.2f" % r_fab])
    print(table(rows, headers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
