#!/usr/bin/env python3
"""Ratios of openvia's network devices to the kernel's and to each other,
round by round.

Reads the JSON lines of scripts/udp_compare.sh or scripts/net_compare.sh
(stdin or files). Within each round the peers ran back to back, so each
openvia figure is divided by the peer's figure of the same round, label,
test and size; the table gives every round's ratio and their median. The
UDP device is `openvia`, the Ethernet device `ether` (AF_PACKET) and
`ether-xdp` (AF_XDP); the Ethernet device is also divided by the UDP
device. Latency: one-way median ns, ratio < 1 means openvia is faster.
Bandwidth: GB/s (1e9 B/s), ratio > 1 means openvia is faster.

Labels with a segment policy (`...-mtuM-segP`, from `sizes` and `sweep`)
also get a shape table per device and test: each size's figure for every
(MTU, policy) run, the best marked, and how often each run was best.

    ROUNDS=5 sh scripts/udp_compare.sh lat 9000 | python3 python/udp_summary.py
    ROUNDS=5 sh scripts/net_compare.sh quick | python3 python/udp_summary.py
"""

import json
import statistics
import sys
from collections import defaultdict

# Latency peers, in the order they are printed.
LAT_PEERS = ["kernel-udp-spin", "kernel-tcp-spin", "kernel-tcp", "kernel-udp"]
BW_PEERS = ["kernel-tcp"]


def load(lines):
    rows = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def group_of(label):
    """'lat-mtu9000-rd' -> ('lat-mtu9000', 'rd'); 'lat-mtu9000' -> (.., None)."""
    head, _, tail = label.partition("-mtu")
    mtu, _, variant = tail.partition("-")
    return f"{head}-mtu{mtu}", (variant or None)


def name_of(transport, variant):
    """The row's name: the UDP device is `openvia`, others their transport."""
    base = "openvia" if transport == "udp" else transport
    return base if variant is None else f"{base}-{variant}"


def is_ours(name):
    return not name.startswith("kernel-")


def udp_device_peer(transport, variant, names):
    """The UDP device's row an Ethernet row is compared with: the same
    variant if it ran, else the plain one."""
    if not transport.startswith("ether"):
        return None
    for cand in (name_of("udp", variant), name_of("udp", None)):
        if cand in names:
            return cand
    return None


def figure(r):
    if r.get("test") == "latency":
        return r["median_ns"], "lat"
    return r["gbytes_per_s"], "bw"


def fmt(v, kind):
    if v is None:
        return "-"
    return f"{v:.0f}" if kind == "lat" else f"{v:.2f}"


def summarize(rows):
    # (group, test, size, round) -> {name: value}
    table = defaultdict(dict)
    kinds = {}
    sizes = defaultdict(set)
    meta = {}  # name -> (transport, variant)
    for r in rows:
        group, variant = group_of(r.get("label", "?"))
        value, kind = figure(r)
        key = (group, kind)
        name = name_of(r["transport"], variant)
        meta[name] = (r["transport"], variant)
        table[(key, r.get("size"), r.get("round", 1))][name] = value
        kinds[key] = kind
        sizes[key].add(r.get("size"))
    out = []
    for key in sorted(kinds):
        group, kind = key
        unit = "one-way median ns" if kind == "lat" else "GB/s"
        for size in sorted(sizes[key]):
            rounds = sorted(rnd for k, s, rnd in table if k == key and s == size)
            cells = [table[(key, size, rnd)] for rnd in rounds]
            names = sorted({n for c in cells for n in c})
            what = "latency" if kind == "lat" else "bandwidth"
            out.append(f"## {group} {what} {size} B ({unit}; {len(rounds)} round(s))")
            for n in names:
                out.append(f"  {n:22} " + " ".join(fmt(c.get(n), kind) for c in cells))
            kernel = [p for p in (LAT_PEERS if kind == "lat" else BW_PEERS) if p in names]
            for o in filter(is_ours, names):
                for p in kernel + [udp_device_peer(*meta[o], names)]:
                    if p is None:
                        continue
                    ratios = [c[o] / c[p] for c in cells if o in c and c.get(p)]
                    if not ratios:
                        continue
                    per = " ".join(f"{x:.2f}" for x in ratios)
                    out.append(f"  {o}/{p}: median {statistics.median(ratios):.2f} (rounds {per})")
    shape = shapes(rows)
    if shape:
        out.append("")
        out.extend(shape)
    return "\n".join(out)


def shapes(rows):
    """Per openvia transport and test: size x (MTU, policy) medians over
    rounds, the best per size marked with *."""
    # (transport, kind) -> {(mtu, seg): {size: [values]}}
    runs = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in rows:
        group, variant = group_of(r.get("label", "?"))
        if not is_ours(r["transport"]) or not variant or not variant.startswith("seg"):
            continue
        mtu = int(group.rpartition("-mtu")[2])
        value, kind = figure(r)
        runs[(r["transport"], kind)][(mtu, variant[3:])][r["size"]].append(value)
    out = []
    for (transport, kind), by_run in sorted(runs.items()):
        cols = sorted(by_run)
        all_sizes = sorted({s for v in by_run.values() for s in v})
        what = "one-way median ns, lowest best" if kind == "lat" else "GB/s, highest best"
        out.append(f"## shape: {name_of(transport, None)} {'latency' if kind == 'lat' else 'bandwidth'} ({what})")
        out.append("  " + "size".rjust(7) + "".join(f"{m}/{s}".rjust(14) for m, s in cols))
        wins = defaultdict(int)
        for size in all_sizes:
            vals = {c: statistics.median(by_run[c][size]) for c in cols if by_run[c].get(size)}
            if not vals:
                continue
            best = (min if kind == "lat" else max)(vals, key=vals.get)
            wins[best] += 1
            line = "  " + str(size).rjust(7)
            for c in cols:
                cell = fmt(vals.get(c), kind) + ("*" if c == best else " ")
                line += cell.rjust(14)
            out.append(line)
        out.append("  best at: " + ", ".join(f"{m}/{s} {wins[(m, s)]}" for m, s in cols)
                   + f" of {len(all_sizes)} sizes")
    return out


def main():
    if len(sys.argv) > 1:
        lines = []
        for path in sys.argv[1:]:
            with open(path) as f:
                lines.extend(f)
    else:
        lines = sys.stdin
    print(summarize(load(lines)))


if __name__ == "__main__":
    main()
