#!/usr/bin/env python3
"""openvia's report: every figure and table of the five seeds, regenerated on
this machine with openvia and its peers run side by side, into report/:
one PNG per figure with its data as JSON beside it, and report/index.html
with the machine's description and the ratios.

It measures nothing itself: it runs the project's drivers and plots what
they print —
  seed 000 (M-VIA, Fig. 7-10): scripts/udp_compare.sh sizes, per MTU (the
      UDP device and, where it can run, the Ethernet device);
  seed 001 (VIA on UNIX, Fig. 1, 4, Table 2): viabench latency/bandwidth
      over shm, shm-block, udp, kernel TCP; viabench overhead;
  seed 002 (RUM, Fig. 7-8): scripts/udp_compare.sh rum;
  seed 003 (EPVM, Tables 1-3): python/pvm_bench.py, local and --remote;
  shared memory vs UCX and libfabric: python/compare.py --json;
  many connections (CQ vs per-VI waits, memory, connect): viabench scale;
  seed 004 (IPoIB/netperf): iperf3, unmodified, over viarun against kernel TCP.
The network figures run between two network namespaces joined by a veth
pair (root needed); their names default to ovrepA/ovrepB (OV_NS_A, OV_NS_B)
and the PVM hosts' to ovrepPA/ovrepPB (PVM_NS_A, PVM_NS_B), so the report can
run beside the tests' own namespaces. A step that cannot run leaves its
curves out and the page says why.

Usage: python3 python/report.py [--quick] [--out report] [--only 000,001,...]
"""

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import report_plot

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PAPER_SIZES = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
QUICK_SIZES = [32, 512, 4096, 16384, 65536]
MTUS = [1500, 4138, 9000]  # segments 1472, 4096, 8958 with the fixed policy
SEG_POLICIES = ["fixed", "page", "largest"]
# The Ethernet device's curves beside the UDP device's in seed 000's
# figures; the quick report keeps one (page: M-VIA's best at MTU 4138).
ETHER_SEG_POLICIES = {False: SEG_POLICIES, True: ["page"]}
RUM_MTU = 1500


class Settings:
    """Counts and sizes of one run (quick or full)."""

    def __init__(self, quick):
        self.quick = quick
        self.sizes = QUICK_SIZES if quick else PAPER_SIZES
        self.iters = 500 if quick else 5000  # latency round trips per size
        self.msgs = 1000 if quick else 5000  # streamed messages per size
        self.rounds = 1 if quick else 3  # compare.py and pvm_bench.py rounds

    def size_arg(self):
        return ",".join(report_plot.size_label(s) for s in self.sizes)


class StepFailed(Exception):
    """A driver could not run; the text says why (shown on the page)."""


class Run:
    """The state of one report run: settings, output, logs, results."""

    def __init__(self, args):
        self.s = Settings(args.quick)
        self.out = os.path.abspath(args.out)
        self.logs = os.path.join(self.out, "logs")
        self.viabench = os.path.abspath(args.viabench)
        self.bindir = os.path.dirname(self.viabench)
        self.figures, self.tables = [], []
        self.missing = {}  # seed -> [why]
        self.missing_why = {}  # step key -> why it did not run
        self.results = {}  # step name -> parsed driver output
        self.tmp = tempfile.mkdtemp(prefix="openvia-report-")

    def log_path(self, name):
        return os.path.join(self.logs, name + ".log")

    def run(self, name, argv, env=None, timeout=1800):
        """Runs a driver, its stderr to logs/<name>.log; returns stdout."""
        full_env = dict(os.environ, **(env or {}))
        with open(self.log_path(name), "w") as err:
            try:
                p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, text=True,
                                   env=full_env, timeout=timeout, cwd=ROOT)
            except subprocess.TimeoutExpired:
                raise StepFailed("%s timed out after %d s (log: logs/%s.log)" % (argv[0], timeout, name))
            except OSError as e:
                raise StepFailed("cannot run %s: %s" % (argv[0], e))
        if p.returncode != 0:
            tail = open(self.log_path(name)).read().strip().splitlines()[-3:]
            raise StepFailed("%s exited %d: %s (log: logs/%s.log)"
                             % (os.path.basename(argv[0]), p.returncode, " / ".join(tail), name))
        return p.stdout

    def miss(self, seed, why):
        self.missing.setdefault(seed, []).append(why)


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def need_netns():
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces); run as root"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    return None


def ns_env(run, extra=None):
    env = {"OV_NS_A": os.environ.get("OV_NS_A", "ovrepA"), "OV_NS_B": os.environ.get("OV_NS_B", "ovrepB"),
           "OV_VETH": os.environ.get("OV_VETH", "ovrep-v"), "VIABENCH": run.viabench,
           "SIZES": run.s.size_arg(), "ITERS": str(run.s.iters), "BWN": str(run.s.msgs)}
    env.update(extra or {})
    return env


# ---------------------------------------------------------------- steps

def step_seed000_mtu(mtu):
    def step(run):
        why = need_netns()
        if why:
            raise StepFailed(why)
        name = "seed000-mtu%d" % mtu
        out = run.run(name, [os.path.join(ROOT, "scripts/udp_compare.sh"), "sizes", str(mtu)],
                      env=ns_env(run, {"SEGS": " ".join(SEG_POLICIES),
                                       "ETHER_SEGS": " ".join(ETHER_SEG_POLICIES[run.s.quick])}))
        run.results["seed000-%d" % mtu] = json_lines(out)
        run.results["seed000-%d-ether-why" % mtu] = skipped_why(run.log_path(name), "ether")
    return step


def skipped_why(log, transport):
    """Why the driver left `transport` out ("TRANSPORT skipped: WHY" in its
    log, from scripts/net_bench_lib.sh), or None."""
    try:
        for line in open(log):
            if line.startswith(transport + " skipped: "):
                return line.split(": ", 1)[1].strip()
    except OSError:
        pass
    return None


def series_from(recs, label_of, key):
    """Series by label from viabench JSON records (size -> value of key)."""
    by = {}
    for r in recs:
        lab = label_of(r)
        if lab is None or key not in r:
            continue
        by.setdefault(lab, {})[r["size"]] = r[key]
    return by


def to_series(by, order, sizes, scale=1.0):
    out = []
    for lab in order:
        if lab in by:
            out.append({"label": lab, "x": sizes,
                        "y": [by[lab][s] * scale if by[lab].get(s) is not None else None for s in sizes]})
    return out


def absent(order, series, why):
    have = {s["label"] for s in series}
    return [{"label": l, "why": why} for l in order if l not in have]


def figures_seed000(run):
    sizes = run.s.sizes
    for mtu in MTUS:
        recs = run.results.get("seed000-%d" % mtu)
        seg = {1500: 1472, 4138: 4096, 9000: 8958}[mtu]

        def label(r):
            if r["transport"] == "kernel-tcp-spin":
                return "kernel TCP (busy-poll)"
            if r["transport"].startswith("kernel-tcp"):
                return "kernel TCP"
            pol = r["label"].rsplit("-seg", 1)[-1]
            if r["transport"] == "ether":
                return "openvia Ethernet, %s segments" % pol
            return "openvia, %s segments" % pol

        for test, key, scale, unit, paper in (("latency", "median_ns", 1e-3, "one-way latency, µs (median)",
                                               "Fig. 7/9"),
                                              ("bandwidth", "gbytes_per_s", 1e3, "bandwidth, MB/s", "Fig. 8/10")):
            fig = {"id": "seed000-%s-mtu%d" % (test, mtu), "seed": "000", "paper": paper,
                   "title": "UDP and Ethernet devices vs kernel TCP, %s vs size, MTU %d" % (test, mtu),
                   "xlabel": "message size, bytes", "ylabel": unit, "ylog": True,
                   "ratio_to": "kernel TCP", "lower_is_better": test == "latency",
                   "notes": ["Two network namespaces joined by veth, MTU %d (fixed policy: %d-byte "
                             "segments; page: page-aligned; largest: the largest that fits the MTU). "
                             "%d round trips / %d messages (window 16) per size, one run. openvia busy-polls; "
                             "kernel TCP blocks (its latency also busy-polling). The Ethernet device "
                             "(raw frames, AF_PACKET) segments for the same MTU with its own, smaller "
                             "header, so its fixed segments are larger."
                             % (mtu, seg, run.s.iters, run.s.msgs)]}
            udp_order = ["openvia, %s segments" % p for p in SEG_POLICIES]
            ether_order = ["openvia Ethernet, %s segments" % p for p in ETHER_SEG_POLICIES[run.s.quick]]
            order = (["kernel TCP"] + (["kernel TCP (busy-poll)"] if test == "latency" else [])
                     + udp_order + ether_order)
            if recs is None:
                fig["series"], fig["absent"] = [], [{"label": "all", "why": run.missing_why.get(
                    "seed000-mtu%d" % mtu, "not run")}]
            else:
                by = series_from([r for r in recs if r.get("test") == test], label, key)
                fig["series"] = to_series(by, order, sizes, scale)
                fig["absent"] = absent(order[:-len(ether_order)], fig["series"],
                                       "the driver printed no figure (see logs/)")
                fig["absent"] += absent(ether_order, fig["series"], run.results.get(
                    "seed000-%d-ether-why" % mtu) or "the driver printed no figure (see logs/)")
            run.figures.append(fig)


def step_seed002(run):
    why = need_netns()
    if why:
        raise StepFailed(why)
    out = run.run("seed002", [os.path.join(ROOT, "scripts/udp_compare.sh"), "rum", str(RUM_MTU)], env=ns_env(run))
    run.results["seed002"] = json_lines(out)


def figures_seed002(run):
    recs = run.results.get("seed002")
    sizes = run.s.sizes
    names = {"hetero": "openvia RUM Hetero", "homo": "openvia RUM Homo",
             "lossless": "openvia flow-control-only"}

    def label(r):
        t = r["transport"]
        if t.startswith("kernel-tcp"):
            return "kernel TCP"
        if t.startswith("kernel-udp"):
            return "raw UDP (kernel)"
        return names.get(r["label"].rsplit("-", 1)[-1])

    why = run.missing_why.get("seed002", "not run")
    bw_order = ["openvia RUM Hetero", "openvia RUM Homo", "openvia flow-control-only", "kernel TCP",
                "raw UDP (kernel)"]
    note = ("Two network namespaces joined by veth, MTU %d; %d messages per size, window 16; raw UDP "
            "counts delivered bytes only (what it loses is in the table below). openvia and raw UDP "
            "busy-poll, kernel TCP blocks." % (RUM_MTU, run.s.msgs))
    for test, key, scale, unit, paper, order in (
            ("bandwidth", "gbytes_per_s", 1e3, "throughput, MB/s", "Fig. 7", bw_order),
            ("latency", "median_ns", 1e-3, "one-way latency, µs (median)", "Fig. 8",
             ["openvia RUM Hetero", "kernel TCP", "raw UDP (kernel)"])):
        fig = {"id": "seed002-%s" % test, "seed": "002", "paper": paper,
               "title": "RUM modes vs kernel TCP and raw UDP, %s vs size" % test,
               "xlabel": "message size, bytes", "ylabel": unit, "ylog": True,
               "ratio_to": "kernel TCP", "lower_is_better": test == "latency", "notes": [note]}
        if recs is None:
            fig["series"], fig["absent"] = [], [{"label": "all", "why": why}]
        else:
            by = series_from([r for r in recs if r.get("test") == test], label, key)
            fig["series"] = to_series(by, order, sizes, scale)
            fig["absent"] = absent(order, fig["series"], "the driver printed no figure (see logs/)")
        run.figures.append(fig)
    if recs is not None:
        rows = []
        for r in recs:
            if r.get("test") == "bandwidth" and r["transport"].startswith("kernel-udp"):
                sent = r["delivered_msgs"] + r["lost_msgs"]
                rows.append([report_plot.size_label(r["size"]), sent, r["lost_msgs"],
                             "%.2f %%" % (100.0 * r["lost_msgs"] / sent) if sent else None])
        run.tables.append({"id": "seed002-udp-loss", "seed": "002",
                           "title": "Share of messages plain UDP loses without flow control",
                           "columns": ["size", "messages sent", "lost", "lost share"], "rows": rows,
                           "notes": ["Kernel UDP, same stream as the throughput figure. Messages up to "
                                     "65483 bytes are one datagram each; larger ones two or more, and a "
                                     "message counts as lost when any of its datagrams is."]})


LOCAL_TRANSPORTS = [("shm", "openvia shm (spin)"), ("shm-block", "openvia shm (block)"),
                    ("udp", "openvia udp (this host)"), ("kernel-tcp", "kernel TCP"),
                    ("kernel-tcp-spin", "kernel TCP (busy-poll)")]


STREAM_TRANSPORTS = [("shm", "openvia shm: VipPostSend, no system call"),
                     ("udp", "openvia udp: VipPostSend, the device's sendmsg batched"),
                     ("kernel-udp-spin", "kernel UDP: one sendmsg system call per message"),
                     ("kernel-tcp-spin", "kernel TCP: one send system call per message")]


def step_seed001(run):
    res = {}
    for t, _ in LOCAL_TRANSPORTS:
        for test in ("latency", "bandwidth"):
            n = run.s.iters if test == "latency" else run.s.msgs
            argv = [run.viabench, test, "-t", t, "-s", run.s.size_arg(), "-n", str(n), "--json"]
            if test == "bandwidth":
                argv += ["-w", "16"]
            try:
                res[(t, test)] = json_lines(run.run("seed001-%s-%s" % (t, test), argv, timeout=600))
            except StepFailed as e:
                res[(t, test)] = str(e)
    try:
        batches = "2000" if run.s.quick else "20000"
        res["overhead"] = json_lines(run.run("seed001-overhead", [run.viabench, "overhead", "--json",
                                                                  "--batches", batches]))
    except StepFailed as e:
        res["overhead"] = str(e)
    # Time per message of a stream of 8-byte messages: a post that is a
    # system call (kernel UDP, one sendmsg each) against openvia's posts.
    n = "20000" if run.s.quick else "200000"
    for t, _ in STREAM_TRANSPORTS:
        try:
            res[("stream8", t)] = json_lines(run.run("seed001-stream8-%s" % t, [
                run.viabench, "bandwidth", "-t", t, "-s", "8", "-n", n, "-w", "64", "--json"], timeout=600))
        except StepFailed as e:
            res[("stream8", t)] = str(e)
    run.results["seed001"] = res


def figures_seed001(run):
    res = run.results.get("seed001", {})
    sizes = run.s.sizes
    for test, key, scale, unit, paper in (("latency", "median_ns", 1e-3, "one-way latency, µs (median)", "Fig. 1"),
                                          ("bandwidth", "gbytes_per_s", 1e3, "bandwidth, MB/s", "Fig. 4")):
        fig = {"id": "seed001-%s" % test, "seed": "001", "paper": paper,
               "title": "Both devices vs kernel TCP on one host, %s vs size" % test,
               "xlabel": "message size, bytes", "ylabel": unit, "ylog": True, "series": [], "absent": [],
               "ratio_to": "kernel TCP", "lower_is_better": test == "latency",
               "notes": ["Client on CPU 0, server on CPU 1; %s per size. The udp device here runs "
                         "between two processes of this host over its own address."
                         % ("%d round trips" % run.s.iters if test == "latency" else
                            "%d messages, window 16" % run.s.msgs)]}
        for t, lab in LOCAL_TRANSPORTS:
            r = res.get((t, test))
            if isinstance(r, list) and r:
                by = {x["size"]: x.get(key) for x in r}
                fig["series"].append({"label": lab, "x": sizes,
                                      "y": [by[s] * scale if by.get(s) is not None else None for s in sizes]})
            else:
                fig["absent"].append({"label": lab, "why": r if isinstance(r, str) else "not run"})
        run.figures.append(fig)
    ov = res.get("overhead")
    rows, notes = [], ["The paper's figures (1.5 µs at user level, 29 µs through a system call) were "
                       "measured on its 1998 hardware; they are quoted, not measured here."]
    if isinstance(ov, list) and ov:
        o = ov[-1]
        rows.append(["openvia shm: VipPostSend + VipSendDone, no system call", o["median_ns"] / 1e3,
                     o["p99_ns"] / 1e3, o["batches"]])
    else:
        notes.insert(0, "openvia's row is missing: %s" % (ov or "not run"))
    for t, lab in STREAM_TRANSPORTS:
        r = res.get(("stream8", t))
        if isinstance(r, list) and r and r[-1].get("msgs_per_s"):
            rows.append([lab + " (streaming 8-byte messages, time per message)", 1e6 / r[-1]["msgs_per_s"],
                         None, None])
        else:
            notes.append("%s: %s" % (lab, r or "not run"))
    notes.append("The first row times VipPostSend + VipSendDone alone (a receiver thread drains the VI). "
                 "The streaming rows divide a window-64 stream's time by its messages: the cost of a "
                 "post with or without a system call, as the paper's Table 2 compares, but including "
                 "the receiver's pace.")
    run.tables.append({"id": "seed001-table2-post-overhead", "seed": "001",
                       "title": "Table 2 analogue: cost of posting a send and reaping its completion",
                       "columns": ["what", "median µs", "p99 µs", "batches of 64"], "rows": rows,
                       "notes": notes})


def step_compare(run):
    argv = [sys.executable, os.path.join(HERE, "compare.py"), "--json", "--viabench", run.viabench,
            "--transports", "shm,shm-block,kernel-tcp-spin", "--rounds", str(run.s.rounds)]
    if run.s.quick:
        argv.append("--quick")
    run.results["compare"] = json_lines(run.run("compare", argv))


def figures_compare(run):
    recs = run.results.get("compare")
    why = run.missing_why.get("compare", "not run")
    names = {"ucx": "UCX (ucx_perftest, sm)", "libfabric": "libfabric (fi_pingpong, shm)",
             "shm": "openvia shm (spin)", "shm-block": "openvia shm (block)",
             "kernel-tcp-spin": "kernel TCP (busy-poll)"}
    for test, key, scale, unit in (("latency", "median_ns", 1e-3, "one-way latency, µs (median)"),
                                   ("bandwidth", "gbytes_per_s", 1.0, "bandwidth, GB/s")):
        fig = {"id": "shm-vs-ucx-libfabric-%s" % test, "seed": "shm", "paper": "make bench table",
               "title": "Shared memory: openvia vs UCX and libfabric, %s" % test,
               "xlabel": "message size, bytes", "ylabel": unit, "ylog": True, "series": [], "absent": [],
               "ratio_to": names["ucx"], "lower_is_better": test == "latency",
               "notes": ["python/compare.py, %d round(s) alternating the tools, medians." % run.s.rounds]}
        if recs is None:
            fig["absent"].append({"label": "all", "why": why})
        else:
            rows = [r for r in recs if r.get("test") == test]
            for tool in ("shm", "shm-block", "ucx", "libfabric", "kernel-tcp-spin"):
                mine = sorted((r for r in rows if r["tool"] == tool), key=lambda r: r["size"])
                good = [r for r in mine if r.get(key) is not None]
                if good:
                    fig["series"].append({"label": names[tool], "x": [r["size"] for r in good],
                                          "y": [r[key] * scale for r in good]})
                elif mine or (tool == "libfabric" and test == "latency"):
                    err = next((r.get("error") for r in mine if r.get("error")), "no result")
                    fig["absent"].append({"label": names[tool],
                                          "why": err + ("" if err != "not installed" else
                                                        " (apt-get install ucx-utils libfabric-bin; "
                                                        "make report does so as root)")})
        run.figures.append(fig)


# ------------------------------------------------------ many connections
SCALE_WAITS = [("vi", "wait on each VI (VipRecvWait)"), ("cq", "one CQ for all (VipCQWait)"),
               ("cq-done", "one CQ, polled (VipCQDone)")]


def scale_counts(run):
    return [1, 64, 256] if run.s.quick else [1, 16, 64, 256, 1024]


def step_scale(run):
    """viabench scale: an 8-byte ping-pong round-robin over N VI pairs on
    the shared-memory device, per wait mode; then N connections whose rings
    all wrapped, for memory."""
    res = {}
    rounds, warmup = ("20000", "4000") if run.s.quick else ("200000", "20000")
    for n in scale_counts(run):
        for wait, _ in SCALE_WAITS:
            try:
                res[(n, wait)] = json_lines(run.run("scale-%d-%s" % (n, wait), [
                    run.viabench, "scale", "--vis", str(n), "--wait", wait, "--rounds", rounds,
                    "--warmup", warmup, "--json"], timeout=600))
            except StepFailed as e:
                res[(n, wait)] = str(e)
    n = scale_counts(run)[-1]
    try:
        res["wrapped"] = json_lines(run.run("scale-%d-wrapped" % n, [
            run.viabench, "scale", "--vis", str(n), "--wait", "cq", "--rounds", rounds, "--warmup", warmup,
            "--wrap", "--json"], timeout=900))
    except StepFailed as e:
        res["wrapped"] = str(e)
    run.results["scale"] = res


def figures_scale(run):
    res = run.results.get("scale", {})
    counts = scale_counts(run)
    fig = {"id": "scale-cq-latency", "seed": "CQ", "paper": "VIPL completion queues",
           "title": "Many connections: 8-byte one-way latency vs connected VIs",
           "xlabel": "connected VI pairs", "ylabel": "one-way latency, µs (median)", "ylog": False,
           "series": [], "absent": [], "ratio_to": SCALE_WAITS[0][1], "lower_is_better": True,
           "notes": ["viabench scale: client on CPU 0, server on CPU 1, both spinning; round-robin over the "
                     "VIs, the median over batches of round trips, one-way = half the round trip. Shared-"
                     "memory device. The CQ's targets: at most 1.5x the per-VI wait at N = 1, at most 2x "
                     "its own N = 1 figure at N = 1024."]}
    for wait, lab in SCALE_WAITS:
        ys = []
        for n in counts:
            r = res.get((n, wait))
            ys.append(r[-1]["one_way_ns_median"] / 1e3 if isinstance(r, list) and r else None)
        if any(y is not None for y in ys):
            fig["series"].append({"label": lab, "x": counts, "y": ys})
        else:
            r = res.get((counts[0], wait))
            fig["absent"].append({"label": lab, "why": r if isinstance(r, str) else "not run"})
    run.figures.append(fig)
    rows, notes = [], []
    for key, what in ([((n, "cq"), "%d VIs, rings unused" % n) for n in counts]
                      + [("wrapped", "%d VIs, every ring wrapped" % counts[-1])]):
        r = res.get(key)
        if isinstance(r, list) and r:
            x = r[-1]
            rows.append([what, round(x["client_rss_kib"] / 1024, 1), round(x["client_pss_kib"] / 1024, 1),
                         round(x["connect_us_median"], 1), round(x["connect_us_max"], 1)])
        else:
            notes.append("%s: %s" % (what, r or "not run"))
    notes.append("RSS counts the shared rings in each process; PSS shares them between the two. "
                 "Connect times are each VipConnectRequest/Accept pair in a row.")
    run.tables.append({"id": "scale-memory-connect", "seed": "CQ",
                       "title": "Many connections: client memory and connect time",
                       "columns": ["connections", "RSS MiB", "PSS MiB", "connect median µs", "connect max µs"],
                       "rows": rows, "notes": notes})


# ------------------------------------------------------------- seed 004
SOCK_MODES = [("kernel", "kernel TCP over loopback"), ("viarun", "viarun: the same over openvia shm")]


def sock_sizes(run):
    """iperf3 write sizes: the paper's sweep, 16 B to 128 KiB."""
    return [16, 4096, 131072] if run.s.quick else [16, 64, 256, 1024, 4096, 16384, 65536, 131072]


def iperf3_once(run, name, mode, length, secs):
    """One iperf3 TCP stream over 127.0.0.1 (server pinned to CPU 1, client
    to CPU 0), both under viarun or neither: (bytes/s the server received,
    CPU % of both ends together as iperf3 reports them)."""
    prefix = [os.path.join(run.bindir, "viarun"), "--stats"] if mode == "viarun" else []
    taskset = shutil.which("taskset")
    pin = (lambda cpu: [taskset, "-c", str(cpu)]) if taskset else (lambda cpu: [])
    with socket.socket() as probe:  # a free port for this server
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    log = open(run.log_path(name), "w")
    server = subprocess.Popen(pin(1) + prefix + ["iperf3", "-s", "-1", "--forceflush", "-B", "127.0.0.1", "-p", port],
                              stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
    try:
        for line in server.stdout:  # readiness: the server says it listens
            if "listening" in line:
                break
        else:
            raise StepFailed("iperf3 server did not start (log: logs/%s.log)" % name)
        out = run.run(name + "-client", pin(0) + prefix + [
            "iperf3", "-c", "127.0.0.1", "-p", port, "-l", str(length), "-t", str(secs), "-J"], timeout=120)
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()
    res = json.loads(out)
    if mode == "viarun":
        said = open(run.log_path(name + "-client")).read()
        if "over shm" not in said or " 0 over kernel TCP" not in said:
            raise StepFailed("viarun did not carry iperf3's connection: %s" % said.strip()[-200:])
    got = res["end"]["sum_received"]
    cpu = res["end"]["cpu_utilization_percent"]
    return got["bytes"] / got["seconds"], cpu["host_total"] + cpu["remote_total"]


def step_seed004(run):
    if shutil.which("iperf3") is None:
        raise StepFailed("iperf3 is not installed (apt-get install iperf3; make report does so as root)")
    if not os.path.exists(os.path.join(run.bindir, "viarun")):
        raise StepFailed("viarun missing beside viabench: run make")
    secs = 1 if run.s.quick else 3
    res = {}
    for r in range(run.s.rounds):
        for length in sock_sizes(run):
            for mode, _ in SOCK_MODES:  # alternating, so both meet the same machine
                try:
                    bps, cpu = iperf3_once(run, "seed004-%s-%d-r%d" % (mode, length, r), mode, length, secs)
                    res.setdefault((mode, length), []).append((bps, cpu))
                except (StepFailed, ValueError, KeyError) as e:
                    res.setdefault(("error", mode), str(e))
    run.results["seed004"] = res


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if v else None


# The three seed-004 figures: (id, paper, title, ylabel, value of one
# run from (bytes/s, CPU %) and the write size).
SOCK_FIGURES = [
    ("seed004-stream", "netperf TCP_STREAM figure",
     "An unmodified TCP program (iperf3) over openvia vs kernel TCP, throughput vs write size",
     "throughput, MB/s", lambda bps, cpu, n: bps / 1e6),
    ("seed004-msgrate", "messages per second vs message size",
     "iperf3 messages (writes) per second vs message size, viarun vs kernel TCP",
     "messages/s", lambda bps, cpu, n: bps / n),
    ("seed004-msgcpu", "messages per 1 % of CPU vs message size",
     "iperf3 messages per 1 % of CPU (both ends) vs message size, viarun vs kernel TCP",
     "messages/s per 1 % CPU", lambda bps, cpu, n: bps / n / cpu if cpu > 0 else None),
]


def figures_seed004(run):
    res = run.results.get("seed004", {})
    sizes = sock_sizes(run)
    note = ("iperf3 -c 127.0.0.1 -l SIZE, %d s per point, server on CPU 1 and client on CPU 0, "
            "median of %d alternating round(s); a message is one write of SIZE bytes; CPU is iperf3's "
            "cpu_utilization_percent of client plus server (100 = one CPU busy). The paper compared "
            "IPoIB and SDP with Gigabit Ethernet between hosts; viarun carries TCP between processes "
            "of one host over the shared-memory device (the SDP analogue), so the peer here is kernel "
            "TCP over loopback, which coalesces small writes into large segments (Nagle, GSO) while "
            "viarun carries each write as one message." % (1 if run.s.quick else 3, run.s.rounds))
    for fid, paper, title, ylabel, value in SOCK_FIGURES:
        fig = {"id": fid, "seed": "004", "paper": paper, "title": title, "xlabel": "write size, bytes",
               "ylabel": ylabel, "ylog": True, "series": [], "absent": [], "ratio_to": SOCK_MODES[0][1],
               "lower_is_better": False, "notes": [note]}
        for mode, lab in SOCK_MODES:
            ys = [median([v for v in (value(b, c, n) for b, c in res.get((mode, n), [])) if v is not None])
                  for n in sizes]
            if any(y is not None for y in ys):
                fig["series"].append({"label": lab, "x": sizes, "y": ys})
            else:
                fig["absent"].append({"label": lab, "why": res.get(("error", mode)) or
                                      run.missing_why.get("seed004", "not run")})
        run.figures.append(fig)


# The IPoIB half of seed 004 (figures 2-4): TCP over viaip between two
# namespaces, against TCP over the plain veth under it.
IP_LINKS = [("plain", "kernel TCP over the plain veth (the underlay)"),
            ("connected", "TCP over viaip, connected mode (a reliable VI per peer)"),
            ("datagram", "TCP over viaip, datagram mode (each packet a message, underlay MTU)")]


def step_seed004_ip(run):
    why = need_netns()
    if why:
        raise StepFailed(why)
    if shutil.which("iperf3") is None:
        raise StepFailed("iperf3 is not installed (apt-get install iperf3; make report does so as root)")
    viaip = os.path.join(run.bindir, "viaip")
    if not os.path.exists(viaip):
        raise StepFailed("viaip missing beside viabench: run make")
    secs = "1" if run.s.quick else "3"
    out = run.run("seed004-ip", [os.path.join(ROOT, "scripts/viaip-rates.sh"), viaip, secs, str(run.s.rounds)]
                  + [str(n) for n in sock_sizes(run)], env={"VIAIP_RATES_NS": os.environ.get("VIAIP_RATES_NS",
                                                                                          "ovrepI")}, timeout=1800)
    run.results["seed004-ip"] = json_lines(out)


def figures_seed004_ip(run):
    rows = run.results.get("seed004-ip", [])
    sizes = sock_sizes(run)
    note = ("iperf3 -c ADDR -l SIZE between two network namespaces over veth (underlay MTU 1500), %d s per "
            "point, median of %d round(s); viaip in each namespace (scripts/viaip-rates.sh), its overlay "
            "address the target. A message is one write of SIZE bytes (the paper's packets: one netperf "
            "send). CPU is the whole machine's, from /proc/stat while the client ran, in %% of one CPU, so "
            "viaip's threads count. The paper (seed 004) found IPoIB behind Gigabit Ethernet below 256 B "
            "and about 1.5x above, and GigE better per 1 %% of CPU; here the underlay is a veth inside one "
            "kernel (one copy), not GigE, so the overlay's user-space crossing weighs more."
            % (1 if run.s.quick else 3, run.s.rounds))
    for fid, paper, title, ylabel, value in (
            ("seed004-ip-msgrate", "figures 2-3 (IPoIB packets per second vs size)",
             "TCP messages per second vs message size: viaip (IP over openvia) vs the plain link",
             "messages/s", lambda r: r["bytes_per_s"] / r["size"]),
            ("seed004-ip-msgcpu", "figure 4 (packets per 1 % of CPU)",
             "TCP messages per 1 % of CPU vs message size: viaip vs the plain link",
             "messages/s per 1 % CPU",
             lambda r: r["bytes_per_s"] / r["size"] / r["cpu"] if r["cpu"] > 0 else None)):
        fig = {"id": fid, "seed": "004", "paper": paper, "title": title, "xlabel": "write size, bytes",
               "ylabel": ylabel, "ylog": True, "series": [], "absent": [], "ratio_to": IP_LINKS[0][1],
               "lower_is_better": False, "notes": [note]}
        for link, lab in IP_LINKS:
            ys = [median([v for v in (value(r) for r in rows if r.get("link") == link and r.get("size") == n)
                          if v is not None]) for n in sizes]
            if any(y is not None for y in ys):
                fig["series"].append({"label": lab, "x": sizes, "y": ys})
            else:
                fig["absent"].append({"label": lab, "why": run.missing_why.get("seed004-ip", "not run")})
        run.figures.append(fig)


def pvm_env(run):
    pvm_tmp = os.path.join(run.tmp, "pvm")
    os.makedirs(pvm_tmp, exist_ok=True)
    return {"PVM_TMP": pvm_tmp, "TMPDIR": pvm_tmp, "PVM_NETNS_TMP": pvm_tmp,
            "PVM_NS_A": os.environ.get("PVM_NS_A", "ovrepPA"), "PVM_NS_B": os.environ.get("PVM_NS_B", "ovrepPB"),
            "PVM_VETH": os.environ.get("PVM_VETH", "ovrep-p"),
            "PVM_NETNS_NET": os.environ.get("PVM_NETNS_NET", "10.79.0")}


def step_pvm_local(run):
    out_json = os.path.join(run.tmp, "pvm-local.json")
    run.run("seed003-local", [sys.executable, os.path.join(HERE, "pvm_bench.py"), "--bindir", run.bindir,
                              "--rounds", str(run.s.rounds), "--json", out_json], env=pvm_env(run))
    run.results["pvm-local"] = json.load(open(out_json))


def step_pvm_remote(run):
    why = need_netns()
    if why:
        raise StepFailed(why)
    out_json = os.path.join(run.tmp, "pvm-remote.json")
    run.run("seed003-remote", [sys.executable, os.path.join(HERE, "pvm_bench.py"), "--remote", "--bindir",
                               run.bindir, "--rounds", str(run.s.rounds), "--json", out_json], env=pvm_env(run))
    run.results["pvm-remote"] = json.load(open(out_json))


def figures_pvm(run):
    loc, rem = run.results.get("pvm-local"), run.results.get("pvm-remote")
    fig = {"id": "seed003-table1-rtt", "seed": "003", "paper": "Table 1",
           "title": "PVM round trip vs size, openvia vs stock PVM 3.4.6",
           "xlabel": "message size, bytes", "ylabel": "round trip, µs (median)", "ylog": True,
           "series": [], "absent": [], "ratio_to": "stock PVM, local", "lower_is_better": True,
           "notes": ["Local: two tasks on this host, default route. Remote: master task in one network "
                     "namespace, slave in another (veth), default route and PvmRouteDirect. The same "
                     "ping-pong binary runs on both libraries. Median of %d round(s)." % run.s.rounds]}
    rows = []
    if loc:
        t = loc["table1_local"]
        x = [r["size"] for r in t]
        fig["series"].append({"label": "stock PVM, local", "x": x, "y": [r["stock_us"] for r in t]})
        fig["series"].append({"label": "openvia, local", "x": x, "y": [r["openvia_us"] for r in t]})
        rows += [["local", "default", r["size"], r["stock_us"], r["openvia_us"], r["ratio"]] for r in t]
    else:
        fig["absent"].append({"label": "local", "why": run.missing_why.get("seed003-local", "not run")})
    if rem:
        for route in ("default", "direct"):
            t = [r for r in rem["table1_remote"] if r["route"] == route]
            x = [r["size"] for r in t]
            for impl, name in (("stock", "stock PVM"), ("openvia", "openvia")):
                ys = [r.get(impl + "_us") for r in t]
                if any(y is not None for y in ys):
                    fig["series"].append({"label": "%s, remote, %s route" % (name, route), "x": x, "y": ys})
                else:
                    err = next((r.get(impl + "_error") for r in t if r.get(impl + "_error")), "no result")
                    fig["absent"].append({"label": "%s, remote, %s route" % (name, route), "why": err})
            rows += [["remote", route, r["size"], r.get("stock_us"), r.get("openvia_us"), r.get("ratio")]
                     for r in t]
    else:
        fig["absent"].append({"label": "remote", "why": run.missing_why.get("seed003-remote", "not run")})
    run.figures.append(fig)
    run.tables.append({"id": "seed003-table1", "seed": "003", "title": "Table 1: PVM round trip, µs",
                       "columns": ["where", "route", "size", "stock PVM µs", "openvia µs", "openvia/stock"],
                       "rows": rows, "notes": []})
    if loc:
        ct = loc["tables23_concurrent_senders"]
        trows = [[k, v["stock_us"], v["openvia_us"],
                  (v["openvia_us"] / v["stock_us"]) if v["stock_us"] and v["openvia_us"] else None,
                  v["stock_failed_runs"], v["openvia_failed_runs"]] for k, v in ct.items()]
        run.tables.append({"id": "seed003-tables2-3", "seed": "003",
                           "title": "Tables 2/3: N concurrent senders, 2 MB and 8 MB in total, to one receiver "
                                    "(time until all is in, µs)",
                           "columns": ["total/senders", "stock µs", "openvia µs", "openvia/stock",
                                       "stock failed runs", "openvia failed runs"], "rows": trows,
                           "notes": ["7x4MB is the case that crashed stock PVM in the paper."]})
        fig2 = {"id": "seed003-tables2-3-senders", "seed": "003", "paper": "Tables 2/3",
                "title": "Concurrent senders to one receiver", "xlabel": "senders", "xlog": False,
                "ylabel": "time until all is in, ms", "ylog": True, "series": [], "absent": [],
                "notes": ["From tests/pvm/contention.c through python/pvm_bench.py."]}
        for total in (2, 8):
            for impl, name in (("stock", "stock PVM"), ("openvia", "openvia")):
                pts = [(int(k.split("/")[1]), v[impl + "_us"]) for k, v in ct.items()
                       if k.startswith("%dMB/" % total)]
                pts.sort()
                fig2["series"].append({"label": "%s, %d MB" % (name, total), "x": [p[0] for p in pts],
                                       "y": [p[1] / 1e3 if p[1] else None for p in pts]})
        run.figures.append(fig2)
    else:
        run.miss("003", "Tables 2/3: %s" % run.missing_why.get("seed003-local", "not run"))


# ---------------------------------------------------------------- driver

def machine():
    m = {"host": platform.node(), "kernel": platform.release(), "cpus (online)": str(os.cpu_count())}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                m["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                m["memory"] = "%.1f GiB" % (int(line.split()[1]) / 1048576)
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                m["os"] = line.split("=", 1)[1].strip().strip('"')
        m["load average at start"] = open("/proc/loadavg").read().split()[0]
    except OSError:
        pass
    try:
        m["openvia commit"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                             capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        pass
    m["date (UTC)"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    return m


# (name, seed, estimated seconds quick, full, step)
# Estimates: measured on the project's 2-vCPU machine while other builds ran.
STEPS = [("seed 000: MTU %d, segment policies (UDP, Ethernet devices) + kernel TCP" % mtu, "000", 18, 120,
          step_seed000_mtu(mtu))
         for mtu in MTUS] + [
    ("seed 002: RUM modes, kernel TCP, raw UDP", "002", 12, 30, step_seed002),
    ("seed 001: both devices vs kernel TCP, post overhead", "001", 25, 80, step_seed001),
    ("shared memory vs UCX and libfabric", "shm", 40, 400, step_compare),
    ("many connections: CQ vs per-VI waits, memory", "scale", 25, 120, step_scale),
    ("seed 003: PVM local (Table 1, Tables 2/3)", "003", 15, 35, step_pvm_local),
    ("seed 003: PVM remote (Table 1)", "003", 50, 70, step_pvm_remote),
    ("seed 004: iperf3 over viarun vs kernel TCP, 16 B to 128 KiB", "004", 15, 200, step_seed004),
    ("seed 004: TCP over viaip (IP over openvia) vs the plain link", "004", 15, 240, step_seed004_ip),
]
STEP_KEYS = ["seed000-mtu%d" % m for m in MTUS] + ["seed002", "seed001", "compare", "scale", "seed003-local",
                                                   "seed003-remote", "seed004", "seed004-ip"]


def need_matplotlib():
    """Debian's python3-matplotlib lives in /usr/bin/python3's path; another
    python3 first on PATH (pyenv, a venv) does not see it: run under that one."""
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    system = "/usr/bin/python3"
    if (os.path.exists(system) and os.path.realpath(system) != os.path.realpath(sys.executable)
            and subprocess.run([system, "-c", "import matplotlib"], capture_output=True).returncode == 0):
        os.execv(system, [system] + sys.argv)
    sys.exit("report.py: matplotlib missing: apt-get install -y python3-matplotlib "
             "(make report does so as root)")


def fmt_s(s):
    s = int(max(0, s))
    return "%dm%02ds" % (s // 60, s % 60) if s >= 60 else "%ds" % s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few iterations and sizes: the whole report in minutes")
    ap.add_argument("--out", default=os.path.join(ROOT, "report"), help="output folder (default report/)")
    ap.add_argument("--viabench", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "viabench"))
    ap.add_argument("--only", help="only these seeds (comma-separated: 000,001,002,003,004,shm,scale)")
    args = ap.parse_args()
    if not os.path.exists(args.viabench):
        sys.exit("report.py: %s missing: run make (or cargo build --release)" % args.viabench)
    need_matplotlib()
    run = Run(args)
    os.makedirs(run.logs, exist_ok=True)
    for f in os.listdir(run.out):
        if f.endswith((".png", ".json")) or f == "index.html":
            os.remove(os.path.join(run.out, f))
    only = set(args.only.split(",")) if args.only else None
    plan = [(s, k) for s, k in zip(STEPS, STEP_KEYS) if only is None or s[1] in only]
    est = sum(s[2] if args.quick else s[3] for s, _ in plan)
    print("report: %s run of %d steps, about %s (as measured on a busy 2-CPU machine); "
          "output in %s" % ("quick" if args.quick else "full", len(plan), fmt_s(est), run.out), file=sys.stderr)
    m = machine()
    start = time.monotonic()
    done_est = 0.0
    for i, ((name, seed, eq, ef, fn), key) in enumerate(plan):
        elapsed = time.monotonic() - start
        left = est - done_est
        if done_est > 0:
            # Scale by how fast this machine has been so far, within reason:
            # one slow step says little about the rest.
            left *= min(2.0, max(0.5, elapsed / done_est))
        print("report: [%d/%d] %s (elapsed %s, about %s left)" % (i + 1, len(plan), name, fmt_s(elapsed),
                                                                   fmt_s(left)), file=sys.stderr)
        try:
            fn(run)
        except StepFailed as e:
            run.missing_why[key] = str(e)
            print("report:   not measured: %s" % e, file=sys.stderr)
        done_est += eq if args.quick else ef
    seeds = {s[1] for s, _ in plan}
    if "000" in seeds:
        figures_seed000(run)
    if "001" in seeds:
        figures_seed001(run)
    if "002" in seeds:
        figures_seed002(run)
    if "shm" in seeds:
        figures_compare(run)
    if "scale" in seeds:
        figures_scale(run)
    if "003" in seeds:
        figures_pvm(run)
    if "004" in seeds:
        figures_seed004(run)
        figures_seed004_ip(run)
    for fig in run.figures:
        fig["png"] = report_plot.plot(fig, run.out)
    duration = time.monotonic() - start
    m["load average at end"] = open("/proc/loadavg").read().split()[0]
    m["report duration"] = fmt_s(duration)
    report_plot.page(run.out, m, run.figures, run.tables, run.missing, duration, args.quick)
    manifest = {"quick": args.quick, "duration_s": round(duration, 1), "machine": m,
                "figures": [{"id": f["id"], "png": f["png"], "json": f["id"] + ".json"} for f in run.figures],
                "tables": [{"id": t["id"], "json": t["id"] + ".json"} for t in run.tables],
                "missing": run.missing, "not_measured": run.missing_why}
    with open(os.path.join(run.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    shutil.rmtree(run.tmp, ignore_errors=True)
    pngs = [f["png"] for f in run.figures if f["png"]]
    print("report: done in %s: %d figures (%d plotted), %d tables; open %s"
          % (fmt_s(duration), len(run.figures), len(pngs), len(run.tables), os.path.join(run.out, "index.html")),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
