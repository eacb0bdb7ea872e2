#!/usr/bin/env python3
"""Seed 003's Table 1 on one host: PVM round-trip time for 16 B .. 4 MB
between two tasks, default route, for openvia's PVM and stock PVM 3.4.6
(Debian's `pvm` package) in the same run, rounds alternating between the
two. Also runs Debian's unmodified `timing` example on both and compares its
minimal-message round trip, and Tables 2/3: N = 1..10 concurrent senders
moving 2 MB and 8 MB in total to one receiver (tests/pvm/contention.c), plus
the 7 x 4 MB case that crashed stock PVM in the paper.

The same ping-pong binary (tests/pvm/pingpong.c, built against Debian's
/usr/include/pvm3.h) runs on both libraries; openvia's is picked with
LD_LIBRARY_PATH. The two daemons do not collide: stock PVM keeps its
socket in its own PVM_TMP, openvia's pvmd in OPENVIA_PVM_SOCK.

Usage: python/pvm_bench.py [--bindir target-pvm2/release] [--rounds 3]
                           [--json out.json]
Needs: gcc, apt-get install pvm pvm-dev pvm-examples; run as root is fine
(PVM_ALLOW_ROOT=1 is set for stock PVM).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STOCK_CONSOLE = "/usr/bin/pvm"
SENDERS = (1, 2, 4, 7, 10)


def run(cmd, env, stdin=None, timeout=600):
    p = subprocess.run(cmd, env=env, input=stdin, capture_output=True,
                       text=True, timeout=timeout)
    return p


class Impl:
    """One PVM installation: its environment, start and stop."""

    def __init__(self, name, work, pingpong, bindir=None):
        self.name = name
        self.bindir = bindir
        base = os.path.join(work, name)
        home = os.path.join(base, "home")
        bindir_pvm = os.path.join(home, "pvm3", "bin", "LINUX64")
        os.makedirs(bindir_pvm)
        os.makedirs(os.path.join(base, "tmp"))
        # Executables are found the PVM way: $HOME/pvm3/bin/$PVM_ARCH.
        os.symlink(pingpong, os.path.join(bindir_pvm, "pvm_pingpong"))
        os.symlink(pingpong + "-contention", os.path.join(bindir_pvm, "pvm_contention"))
        os.symlink(shutil.which("timing_slave"),
                   os.path.join(bindir_pvm, "timing_slave"))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PVM_", "OPENVIA_PVM"))
               and k != "LD_LIBRARY_PATH"}
        env.update(HOME=home, PVM_TMP=os.path.join(base, "tmp"),
                   PVM_ROOT="/usr/lib/pvm3", PVM_ARCH="LINUX64",
                   PVM_ALLOW_ROOT="1")
        if bindir:
            lib = os.path.join(base, "lib")
            os.makedirs(lib)
            os.symlink(os.path.realpath(os.path.join(bindir, "libpvm3.so")),
                       os.path.join(lib, "libpvm3.so.3"))
            env.update(LD_LIBRARY_PATH=lib,
                       OPENVIA_PVM_SOCK=os.path.join(base, "pvmd.sock"))
        self.env = env
        self.cwd = base

    def console(self):
        return os.path.join(self.bindir, "pvm") if self.bindir else STOCK_CONSOLE

    def start(self):
        if not self.bindir:
            # The stock console starts pvmd and leaves it running on quit.
            run([STOCK_CONSOLE], self.env, stdin="quit\n", timeout=30)
        # openvia's first task starts its pvmd itself.

    def stop(self):
        try:
            run([self.console()], self.env, stdin="halt\n", timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def pingpong(self, scale):
        p = run([os.path.join(self.cwd, "home/pvm3/bin/LINUX64/pvm_pingpong"),
                 str(scale)], self.env, timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"{self.name} pingpong failed: {p.stderr}{p.stdout}")
        rows = {}
        for line in p.stdout.split("\n"):
            f = line.split()
            if len(f) == 5:
                rows[int(f[0])] = dict(median_us=float(f[1]), mean_us=float(f[2]),
                                       min_us=float(f[3]), reps=int(f[4]))
        return rows

    def contention(self, n, kb):
        """Microseconds until n senders of kb KiB each are all in, or None."""
        try:
            p = run([os.path.join(self.cwd, "home/pvm3/bin/LINUX64/pvm_contention"),
                     str(n), "0", str(kb)], self.env, timeout=120)
        except subprocess.TimeoutExpired:
            return None
        m = re.search(r"contention: (\d+) of (\d+) messages .* 0 bad, usec (\d+)", p.stdout)
        if p.returncode != 0 or not m or m.group(1) != m.group(2):
            return None
        return int(m.group(3))

    def timing(self):
        p = run(["timing"], self.env, timeout=300)
        out = p.stdout
        m = re.search(r"minimal message size\s*\n\s*N\s+uSec\n((?:\s*\d+\s+\d+\n)+)", out)
        avg = re.search(r"RTT Avg uSec (\d+)", out)
        if not (m and avg and "done" in out):
            raise RuntimeError(f"{self.name} timing failed: {out}{p.stderr}")
        rtts = [int(l.split()[1]) for l in m.group(1).strip().split("\n")]
        sends = {}
        for size, send in re.findall(
                r"Message size (\d+)\n.*?Avg uSec\n\s*\d+\s+(\d+)", out, re.S):
            sends[int(size)] = int(send)
        return dict(rtt_avg_us=int(avg.group(1)), rtt_median_us=statistics.median(rtts),
                    rtts_us=rtts, bandwidth_rtt_avg_us=sends)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bindir", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=int, default=1, help="multiplies repetitions")
    ap.add_argument("--json", help="also write the JSON here")
    a = ap.parse_args()
    for f in ("libpvm3.so", "pvmd", "pvm"):
        if not os.path.exists(os.path.join(a.bindir, f)):
            sys.exit(f"missing {a.bindir}/{f}: cargo build --release -p pvm3 -p openvia-pvm")
    for f in (STOCK_CONSOLE, "/usr/include/pvm3.h", shutil.which("timing") or "/nonexistent"):
        if not os.path.exists(f):
            sys.exit(f"missing {f}: apt-get install -y pvm pvm-dev pvm-examples")

    work = tempfile.mkdtemp(prefix="pvm-bench-")
    try:
        pingpong = os.path.join(work, "pvm_pingpong")
        for src, exe in (("pingpong.c", pingpong), ("contention.c", pingpong + "-contention")):
            subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", exe,
                            os.path.join(ROOT, "tests/pvm", src), "-lpvm3"], check=True)
        impls = [Impl("stock", work, pingpong),
                 Impl("openvia", work, pingpong, os.path.abspath(a.bindir))]
        runs = {i.name: [] for i in impls}
        for r in range(a.rounds):
            order = impls if r % 2 == 0 else impls[::-1]
            for impl in order:
                impl.start()
                try:
                    pp = impl.pingpong(a.scale)
                    tm = impl.timing()
                    ct = {}
                    for total_mb in (2, 8):
                        for n in SENDERS:
                            ct[f"{total_mb}MB/{n}"] = impl.contention(n, total_mb * 1024 // n)
                    ct["7x4MB"] = impl.contention(7, 4096)
                finally:
                    impl.stop()
                runs[impl.name].append(dict(pingpong=pp, timing=tm, contention=ct))
                print(f"round {r + 1}/{a.rounds} {impl.name}: timing RTT median "
                      f"{tm['rtt_median_us']} us, 4 MB RTT {pp[4194304]['median_us']} us",
                      file=sys.stderr)
        report = summarize(runs, a)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(report)
    text = json.dumps(report, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


def summarize(runs, a):
    sizes = sorted(runs["stock"][0]["pingpong"])
    table = []
    for s in sizes:
        row = {"size": s}
        for name in runs:
            row[name + "_us"] = statistics.median(x["pingpong"][s]["median_us"] for x in runs[name])
        row["ratio"] = round(row["openvia_us"] / row["stock_us"], 4)
        table.append(row)
    timing = {}
    for name in runs:
        timing[name] = dict(
            rtt_median_us=statistics.median(x["timing"]["rtt_median_us"] for x in runs[name]),
            rtt_avg_us=statistics.median(x["timing"]["rtt_avg_us"] for x in runs[name]))
    contention = {}
    for key in runs["stock"][0]["contention"]:
        row = {}
        for name in runs:
            vals = [x["contention"][key] for x in runs[name]]
            ok = [v for v in vals if v is not None]
            row[name + "_us"] = statistics.median(ok) if ok else None
            row[name + "_failed_runs"] = len(vals) - len(ok)
        contention[key] = row
    t_ratio = timing["openvia"]["rtt_median_us"] / max(timing["stock"]["rtt_median_us"], 1)
    big = [r for r in table if r["size"] == 4194304][0]["ratio"]
    return dict(
        what="PVM round trip, two tasks on one host, default route, PvmDataRaw; "
             "median of per-round medians",
        rounds=a.rounds, table1_local=table, timing_minimal=timing,
        tables23_concurrent_senders=contention,
        targets=dict(timing_minimal_ratio=round(t_ratio, 4), timing_target=0.2,
                     timing_met=t_ratio <= 0.2, rtt_4mb_ratio=big,
                     rtt_4mb_target=0.1, rtt_4mb_met=big <= 0.1),
        raw=runs)


def print_table(rep):
    print(f"{'size':>9} {'stock us':>11} {'openvia us':>11} {'ratio':>7}")
    for r in rep["table1_local"]:
        print(f"{r['size']:>9} {r['stock_us']:>11.1f} {r['openvia_us']:>11.1f} {r['ratio']:>7.3f}")
    print("\nconcurrent senders to one receiver (total MB/senders): time until all in")
    print(f"{'case':>9} {'stock us':>11} {'openvia us':>11} {'ratio':>7}")
    for key, r in rep["tables23_concurrent_senders"].items():
        st, ov = r["stock_us"], r["openvia_us"]
        ratio = f"{ov / st:7.3f}" if st and ov else "      -"
        st_s = f"{st:11.0f}" if st else "     failed"
        ov_s = f"{ov:11.0f}" if ov else "     failed"
        print(f"{key:>9} {st_s} {ov_s} {ratio}")
    t = rep["timing_minimal"]
    g = rep["targets"]
    print(f"timing (Debian example, minimal message) RTT median: stock "
          f"{t['stock']['rtt_median_us']} us, openvia {t['openvia']['rtt_median_us']} us, "
          f"ratio {g['timing_minimal_ratio']} (target <= 0.2: "
          f"{'met' if g['timing_met'] else 'NOT met'})")
    print(f"4 MB local RTT ratio {g['rtt_4mb_ratio']} (target <= 0.1: "
          f"{'met' if g['rtt_4mb_met'] else 'NOT met'})")


if __name__ == "__main__":
    main()
