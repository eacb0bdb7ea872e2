#!/usr/bin/env python3
"""Ratios of openvia's UDP device to the kernel's, round by round.

Reads the JSON lines of scripts/udp_compare.sh (stdin or files). Within each
round the peers ran back to back, so each openvia figure is divided by the
kernel figure of the same round and label; the table gives every round's
ratio and their median. Latency: one-way median ns, ratio < 1 means openvia
is faster. Bandwidth: GB/s (1e9 B/s), ratio > 1 means openvia is faster.

    ROUNDS=5 sh scripts/udp_compare.sh lat 9000 | python3 python/udp_summary.py
"""

import json
import statistics
import sys
from collections import defaultdict

# Latency peers, in the order they are printed.
LAT_PEERS = ["kernel-udp-spin", "kernel-tcp-spin", "kernel-tcp", "kernel-udp"]


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


def summarize(rows):
    # (group, round) -> {name: value}
    table = defaultdict(dict)
    kinds = {}
    for r in rows:
        group, variant = group_of(r.get("label", "?"))
        rnd = r.get("round", 1)
        if r.get("test") == "latency":
            value, kind = r["median_ns"], "lat"
        else:
            value, kind = r["gbytes_per_s"], "bw"
        name = r["transport"] if variant is None else f"openvia-{variant}"
        if r["transport"] == "udp" and variant is None:
            name = "openvia"
        table[(group, rnd)][name] = value
        kinds[group] = kind
    out = []
    for group in sorted({g for g, _ in table}):
        rounds = sorted(rnd for g, rnd in table if g == group)
        kind = kinds[group]
        names = sorted({n for rnd in rounds for n in table[(group, rnd)]})
        ours = [n for n in names if n.startswith("openvia")]
        peers = [p for p in LAT_PEERS if p in names] if kind == "lat" else ["kernel-tcp"]
        unit = "one-way median ns" if kind == "lat" else "GB/s"
        out.append(f"## {group} ({unit}; {len(rounds)} round(s))")
        for n in names:
            vals = [table[(group, rnd)].get(n) for rnd in rounds]
            shown = " ".join("-" if v is None else f"{v:.0f}" if kind == "lat" else f"{v:.2f}" for v in vals)
            out.append(f"  {n:18} {shown}")
        for o in ours:
            for p in peers:
                ratios = [
                    table[(group, rnd)][o] / table[(group, rnd)][p]
                    for rnd in rounds
                    if o in table[(group, rnd)] and table[(group, rnd)].get(p)
                ]
                if not ratios:
                    continue
                per = " ".join(f"{x:.2f}" for x in ratios)
                out.append(f"  {o}/{p}: median {statistics.median(ratios):.2f} (rounds {per})")
    return "\n".join(out)


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
