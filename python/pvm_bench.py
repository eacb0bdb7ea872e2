#!/usr/bin/env python3
"""Seed 003's Table 1: PVM round-trip time for 16 B .. 4 MB between two
tasks, for openvia's PVM and stock PVM 3.4.6 (Debian's `pvm` package) in
the same run, rounds alternating between the two. Local mode (default): one
host, default route. Also runs Debian's unmodified `timing` example on both and compares its
minimal-message round trip, and Tables 2/3: N = 1..10 concurrent senders
moving 2 MB and 8 MB in total to one receiver (tests/pvm/contention.c), plus
the 7 x 4 MB case that crashed stock PVM in the paper.

The same ping-pong binary (tests/pvm/pingpong.c, built against Debian's
/usr/include/pvm3.h) runs on both libraries; openvia's is picked with
LD_LIBRARY_PATH. The two daemons do not collide: stock PVM keeps its
socket in its own PVM_TMP, openvia's pvmd in OPENVIA_PVM_SOCK.

Remote mode (--remote): Table 1's remote rows. Two hosts are the network
namespaces of scripts/pvm_netns.sh (pvmA, pvmB; brought up here if absent
and then taken down again), reached through the PVM_RSH wrapper
scripts/netns-rsh. Each PVM's master pvmd runs on host A with a hostfile
listing A and B and starts the pvmd on B through the wrapper (openvia:
target/release/pvmd, stock: /usr/lib/pvm3/lib/pvmd); the ping-pong master
runs on A and spawns its slave on B (PvmTaskHost), once with the default
route and once with PVM_PINGPONG_ROUTE=direct (PvmRouteDirect). A PVM that
cannot start both hosts or run the ping-pong is reported per row as
"failed: <reason>"; the other's figures still come out.

Usage: python/pvm_bench.py [--bindir target-pvm2/release] [--rounds 3]
                           [--json out.json]
       python/pvm_bench.py --remote [--impls stock,openvia] [--rounds 3]
                           [--json out.json]
Needs: gcc, apt-get install pvm pvm-dev pvm-examples; run as root is fine
(PVM_ALLOW_ROOT=1 is set for stock PVM). --remote needs root (namespaces).
"""

import argparse
import json
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STOCK_CONSOLE = "/usr/bin/pvm"
SENDERS = (1, 2, 4, 7, 10)


def parse_pingpong(stdout):
    """pvm_pingpong's "size median_us mean_us min_us reps" lines, by size."""
    rows = {}
    for line in stdout.split("\n"):
        f = line.split()
        if len(f) == 5:
            rows[int(f[0])] = dict(median_us=float(f[1]), mean_us=float(f[2]),
                                   min_us=float(f[3]), reps=int(f[4]))
    return rows


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
        return parse_pingpong(p.stdout)

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


def build_programs(work):
    """Compiles the ping-pong and contention programs against Debian's
    pvm3.h; returns the ping-pong's path (contention is beside it)."""
    pingpong = os.path.join(work, "pvm_pingpong")
    for src, exe in (("pingpong.c", pingpong), ("contention.c", pingpong + "-contention")):
        subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", exe,
                        os.path.join(ROOT, "tests/pvm", src), "-lpvm3"], check=True)
    return pingpong


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bindir", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=int, default=1, help="multiplies repetitions")
    ap.add_argument("--json", help="also write the JSON here")
    ap.add_argument("--remote", action="store_true",
                    help="Table 1's remote rows: master on host A, slave on host B")
    ap.add_argument("--impls", default="stock,openvia",
                    help="--remote only: which PVMs to run (comma-separated)")
    a = ap.parse_args()
    if a.remote:
        return remote_main(a)
    for f in ("libpvm3.so", "pvmd", "pvm"):
        if not os.path.exists(os.path.join(a.bindir, f)):
            sys.exit(f"missing {a.bindir}/{f}: cargo build --release -p pvm3 -p openvia-pvm")
    for f in (STOCK_CONSOLE, "/usr/include/pvm3.h", shutil.which("timing") or "/nonexistent"):
        if not os.path.exists(f):
            sys.exit(f"missing {f}: apt-get install -y pvm pvm-dev pvm-examples")

    work = tempfile.mkdtemp(prefix="pvm-bench-")
    try:
        pingpong = build_programs(work)
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
    emit_report(report, a, print_table)


def emit_report(report, a, table):
    """The table on stdout, then the report as JSON (also to --json)."""
    table(report)
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

# ---------------------------------------------------------------- remote mode

NETNS_SCRIPT = os.path.join(ROOT, "scripts", "pvm_netns.sh")
RSH = os.path.join(ROOT, "scripts", "netns-rsh")
STOCK_PVMD = "/usr/lib/pvm3/lib/pvmd"
ROUTES = ("default", "direct")
# tests/pvm/pingpong.c's sizes, for the rows of a table nobody measured.
PINGPONG_SIZES = (16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


class RemoteFailure(Exception):
    """One PVM could not do one step of a remote round; the text says why."""


class RemoteVM:
    """One PVM's virtual machine over hosts A and B: its hostfile, its
    environment (as seen through the PVM_RSH wrapper), start and stop.
    Everything that runs "on" a host goes through scripts/netns-rsh, so the
    master pvmd, the console and the ping-pong see exactly the environment
    the wrapper gives a slave pvmd (PVM_TMP=<tmp>/pvm-HOST and so on)."""

    def __init__(self, name, work, pingpong, hosts, bindir=None):
        self.name = name
        self.hosts = hosts
        self.bindir = bindir
        self.base = os.path.join(work, "remote-" + name)
        home = os.path.join(self.base, "home")
        bin_dir = os.path.join(home, "pvm3", "bin", "LINUX64")
        os.makedirs(bin_dir)
        # Both namespaces share the file system, so one $HOME serves both
        # hosts, with executables where PVM looks: $HOME/pvm3/bin/$PVM_ARCH.
        self.pingpong_exe = os.path.join(bin_dir, "pvm_pingpong")
        os.symlink(pingpong, self.pingpong_exe)
        self.tmp = os.path.join(self.base, "tmp")
        os.makedirs(self.tmp)
        self.pvmd = os.path.join(bindir, "pvmd") if bindir else STOCK_PVMD
        self.hostfile = os.path.join(self.base, "hostfile")
        with open(self.hostfile, "w") as f:
            f.write(f"# pvm_bench --remote: {name} PVM, master on {hosts[0]}\n"
                    f"* dx={self.pvmd}\n")
            for h in hosts:
                f.write(h + "\n")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PVM_", "OPENVIA_PVM", "NETNS_RSH"))
               and k != "LD_LIBRARY_PATH"}
        env.update(HOME=home, PVM_ROOT="/usr/lib/pvm3", PVM_ARCH="LINUX64",
                   PVM_ALLOW_ROOT="1", PVM_RSH=RSH, PVM_NETNS_TMP=self.tmp,
                   NETNS_RSH_LOG=os.path.join(self.base, "rsh.log"))
        if bindir:
            lib = os.path.join(self.base, "lib")
            os.makedirs(lib)
            os.symlink(os.path.realpath(os.path.join(bindir, "libpvm3.so")),
                       os.path.join(lib, "libpvm3.so.3"))
            env.update(LD_LIBRARY_PATH=lib, OPENVIA_PVMD=self.pvmd)
            # Settings to try are passed on as PVM_BENCH_OPENVIA="K=V ..."
            # (the OPENVIA_PVM_* of the caller are left out above, so a
            # stray one cannot skew a comparison), e.g. the trace marks.
            for kv in os.environ.get("PVM_BENCH_OPENVIA", "").split():
                k, _, v = kv.partition("=")
                env[k] = v
        self.env = env
        self.daemon = None
        self.daemon_log = os.path.join(self.base, "master-pvmd.out")

    def console(self):
        return os.path.join(self.bindir, "pvm") if self.bindir else STOCK_CONSOLE

    def on(self, host, cmdline, stdin=None, timeout=60):
        """Runs a shell command line on `host` through the PVM_RSH wrapper."""
        return run([RSH, host, cmdline], self.env, stdin=stdin, timeout=timeout)

    def hosts_up(self):
        """Host names the master's console lists under `conf`."""
        p = self.on(self.hosts[0], self.console(), stdin="conf\nquit\n", timeout=30)
        names = set()
        seen_header = False
        for line in p.stdout.split("\n"):
            f = line.split()
            if f[:1] == ["HOST"] or (len(f) > 1 and f[1] == "HOST"):
                seen_header = True
            elif seen_header and len(f) >= 5 and f[-1].startswith("0x"):
                names.add(f[-5] if len(f) > 5 else f[0])
        return names

    def start(self):
        master = self.hosts[0]
        if self.bindir:
            # Our pvmd in the foreground as the wrapper's last exec, so this
            # Popen's pid is the pvmd's; --ready-fd says when it listens.
            ready_r, ready_w = os.pipe()
            cmdline = f"exec {self.pvmd} --foreground --ready-fd {ready_w} {self.hostfile}"
            with open(self.daemon_log, "w") as out:
                self.daemon = subprocess.Popen(
                    [RSH, master, cmdline], env=self.env, stdin=subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT, pass_fds=(ready_w,))
            os.close(ready_w)
            with os.fdopen(ready_r, "rb") as r:
                readable, _, _ = select.select([r], [], [], 30)
                ready = r.read(1) if readable else b""
            if ready != b"R":
                raise RemoteFailure("pvmd on " + master + " exited or was not ready in 30 s: "
                                    + self.log_tail())
        else:
            # The stock console starts the master pvmd with the hostfile, which
            # starts the slaves before it answers, and stays running on quit.
            p = self.on(master, f"{self.console()} {self.hostfile}", stdin="quit\n",
                        timeout=60)
            if p.returncode != 0:
                raise RemoteFailure(f"console start: {p.stdout}{p.stderr}".strip())
        # The master may report ready before its slaves are: ask until both
        # hosts are in the configuration (bounded).
        deadline = time.monotonic() + 30
        while True:
            up = self.hosts_up()
            if set(self.hosts) <= up:
                return
            if self.daemon is not None and self.daemon.poll() is not None:
                raise RemoteFailure("master pvmd exited: " + self.log_tail())
            if time.monotonic() > deadline:
                raise RemoteFailure(f"hosts up after 30 s: {sorted(up) or 'none'}, "
                                    f"wanted {self.hosts}; " + self.log_tail())
            time.sleep(0.2)

    def log_tail(self):
        """The last lines of the master pvmd's output and of the pvmd logs."""
        texts = []
        paths = [self.daemon_log] if self.bindir else []
        for h in self.hosts:
            d = os.path.join(self.tmp, "pvm-" + h)
            if os.path.isdir(d):
                paths += [os.path.join(d, n) for n in sorted(os.listdir(d))
                          if n.startswith(("pvml.", "openvia-pvml."))]
        for path in paths:
            try:
                with open(path, errors="replace") as f:
                    # Console polls show up as task start/exit lines: skip them.
                    lines = [l for l in f.read().split("\n")
                             if l.strip() and "(pvm)" not in l][-3:]
            except OSError:
                continue
            if lines:
                texts.append(os.path.basename(os.path.dirname(path)) + "/"
                             + os.path.basename(path) + ": " + " | ".join(lines))
        return "; ".join(texts) or "no log"

    def pingpong(self, scale, route):
        cmdline = (f"PVM_PINGPONG_ROUTE={route} {self.pingpong_exe} {scale} {self.hosts[1]}")
        try:
            p = self.on(self.hosts[0], cmdline, timeout=900)
        except subprocess.TimeoutExpired:
            raise RemoteFailure(f"route {route}: pvm_pingpong timed out")
        rows = parse_pingpong(p.stdout)
        if p.returncode != 0 or not rows:
            raise RemoteFailure(f"route {route}: pvm_pingpong exit {p.returncode}: "
                                + (p.stderr.strip() or p.stdout.strip())[-300:])
        return rows

    def stop(self):
        try:
            self.on(self.hosts[0], self.console(), stdin="halt\n", timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if self.daemon is not None:
            try:
                self.daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
            self.daemon = None
        # Whatever this VM left behind on any host (a pvmd that missed the
        # halt, an orphaned task) carries our PVM_TMP: end those by pid.
        for pid in pids_with_env_prefix("PVM_TMP=" + self.tmp + "/"):
            try:
                os.kill(pid, 9)
            except OSError:
                pass


def pids_with_env_prefix(prefix):
    """Processes whose environment has a variable starting with prefix."""
    found = []
    want = prefix.encode()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(want) for e in env):
            found.append(int(d))
    return found


def namespaces_up(hosts):
    """True when both namespaces exist and both names resolve."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = {l.split()[0] for l in listed.split("\n") if l.strip()}
    if not set(hosts) <= names:
        return False
    for h in hosts:
        if subprocess.run(["getent", "hosts", h], capture_output=True).returncode != 0:
            return False
    return True


def remote_main(a):
    impl_names = [n.strip() for n in a.impls.split(",") if n.strip()]
    if not impl_names or not set(impl_names) <= {"stock", "openvia"}:
        sys.exit("--impls takes stock and/or openvia")
    if os.geteuid() != 0:
        sys.exit("--remote needs root (network namespaces)")
    for f in (STOCK_CONSOLE, STOCK_PVMD, "/usr/include/pvm3.h"):
        if not os.path.exists(f):
            sys.exit(f"missing {f}: apt-get install -y pvm pvm-dev pvm-examples")
    bindir = os.path.abspath(a.bindir)
    if "openvia" in impl_names:
        for f in ("libpvm3.so", "pvmd", "pvm"):
            if not os.path.exists(os.path.join(bindir, f)):
                sys.exit(f"missing {bindir}/{f}: cargo build --release -p pvm3 -p openvia-pvm")
    hosts = [os.environ.get("PVM_NS_A", "pvmA"), os.environ.get("PVM_NS_B", "pvmB")]
    made_netns = not namespaces_up(hosts)
    if made_netns:
        subprocess.run([NETNS_SCRIPT, "up"], check=True, stdout=sys.stderr)
    work = tempfile.mkdtemp(prefix="pvm-bench-remote-")
    try:
        pingpong = build_programs(work)
        vms = [RemoteVM(n, work, pingpong, hosts, bindir if n == "openvia" else None)
               for n in impl_names]
        runs = {vm.name: [] for vm in vms}
        for r in range(a.rounds):
            order = vms if r % 2 == 0 else vms[::-1]
            for vm in order:
                runs[vm.name].append(remote_round(vm, a.scale))
                res = runs[vm.name][-1]
                msg = (f"failed: {res['error']}" if "error" in res else
                       f"4 MB RTT default {res['default'][4194304]['median_us']} us, "
                       f"direct {res['direct'][4194304]['median_us']} us")
                print(f"round {r + 1}/{a.rounds} {vm.name} remote: {msg}", file=sys.stderr)
        report = summarize_remote(runs, hosts, a)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if made_netns:
            subprocess.run([NETNS_SCRIPT, "down"], check=False)
    emit_report(report, a, print_remote_table)


def remote_round(vm, scale):
    """One round of one PVM: start the VM, ping-pong on both routes, stop.
    A failure becomes {"error": why} with what had been measured so far."""
    res = {}
    try:
        vm.start()
        for route in ROUTES:
            res[route] = vm.pingpong(scale, route)
    except (RemoteFailure, subprocess.TimeoutExpired, OSError) as e:
        res["error"] = str(e)
    finally:
        vm.stop()
    return res


def summarize_remote(runs, hosts, a):
    table = []
    sizes = sorted({s for rounds in runs.values() for r in rounds
                    for route in ROUTES for s in r.get(route, {})} or PINGPONG_SIZES)
    for route in ROUTES:
        for s in sizes:
            row = {"route": route, "size": s}
            per_round = {}
            for name, rounds in runs.items():
                vals = [r[route][s]["median_us"] if s in r.get(route, {}) else None
                        for r in rounds]
                ok = [v for v in vals if v is not None]
                row[name + "_us"] = statistics.median(ok) if ok else None
                errs = [r["error"] for r in rounds if "error" in r and s not in r.get(route, {})]
                if errs:
                    row[name + "_error"] = errs[0]
                per_round[name] = vals
            if "stock" in runs and "openvia" in runs:
                row["ratios_per_round"] = [
                    round(o / st, 4) if o is not None and st else None
                    for st, o in zip(per_round["stock"], per_round["openvia"])]
                st, ov = row["stock_us"], row["openvia_us"]
                row["ratio"] = round(ov / st, 4) if st and ov is not None else None
            table.append(row)
    targets = {}
    big = [r for r in table if r["route"] == "default" and r["size"] == 4194304]
    if big and big[0].get("ratio") is not None:
        targets = dict(rtt_4mb_remote_ratio=big[0]["ratio"], rtt_4mb_remote_target=0.5,
                       rtt_4mb_remote_met=big[0]["ratio"] <= 0.5)
    return dict(
        what=f"PVM round trip between two hosts (network namespaces {hosts[0]} -> "
             f"{hosts[1]}, veth), master task on {hosts[0]}, slave spawned on "
             f"{hosts[1]}, PvmDataRaw; default route and PvmRouteDirect; "
             "median of per-round medians",
        rounds=a.rounds, hosts=hosts, table1_remote=table, targets=targets, raw=runs)


def print_remote_table(rep):
    names = [n for n in ("stock", "openvia") if n in rep["raw"]]
    print(f"Table 1, remote ({rep['hosts'][0]} -> {rep['hosts'][1]}), "
          f"median of {rep['rounds']} rounds")
    head = f"{'route':>7} {'size':>9}" + "".join(f" {n + ' us':>11}" for n in names)
    if len(names) == 2:
        head += f" {'ratio':>7}  per round"
    print(head)
    for r in rep["table1_remote"]:
        line = f"{r['route']:>7} {r['size']:>9}"
        for n in names:
            v = r[n + "_us"]
            line += f" {v:>11.1f}" if v is not None else f" {'failed':>11}"
        if len(names) == 2:
            line += f" {r['ratio']:>7.3f}" if r["ratio"] is not None else f" {'-':>7}"
            line += "  " + " ".join("-" if x is None else f"{x:.3f}"
                                    for x in r["ratios_per_round"])
        print(line)
    for n in names:
        for i, res in enumerate(rep["raw"][n]):
            if "error" in res:
                print(f"{n}: round {i + 1} failed: {res['error']}")
    t = rep["targets"]
    if t:
        print(f"4 MB remote RTT ratio (default route) {t['rtt_4mb_remote_ratio']} "
              f"(target <= 0.5: {'met' if t['rtt_4mb_remote_met'] else 'NOT met'})")


if __name__ == "__main__":
    main()
