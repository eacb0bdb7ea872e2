"""Figures and the page of python/report.py: one PNG per figure (matplotlib,
no display needed) with its data as JSON beside it, and report/index.html.

A figure is a dict: id, title, seed, paper (the figure it stands for),
xlabel, ylabel, xlog/ylog, series [{label, x, y}], absent [{label, why}]
(curves that could not be measured, and why), notes, and optionally
ratio_to (the label of the reference series: the page shows every other
series divided by it, size by size). A table is a dict: id, title, seed,
columns, rows, notes.
"""

import html
import json
import os


def size_label(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%dM" % (n >> 20)
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return "%dK" % (n >> 10)
    return str(n)


def plot(fig, out_dir):
    """Writes <id>.png and <id>.json; returns the PNG's file name, or None
    when the figure has no series (its JSON still says why)."""
    with open(os.path.join(out_dir, fig["id"] + ".json"), "w") as f:
        json.dump(fig, f, indent=1)
    if not fig["series"]:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    f, ax = plt.subplots(figsize=(7.5, 4.6), dpi=100)
    markers = "osD^v<>pX*h"
    for i, s in enumerate(fig["series"]):
        pts = [(x, y) for x, y in zip(s["x"], s["y"]) if y is not None]
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[i % len(markers)],
                markersize=4, linewidth=1.4, label=s["label"])
    if fig.get("xlog", True):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(int(v)) if v >= 1 else ""))
    if fig.get("ylog"):
        ax.set_yscale("log")
    ax.set_xlabel(fig["xlabel"])
    ax.set_ylabel(fig["ylabel"])
    ax.set_title("%s\n(seed %s, %s analogue)" % (fig["title"], fig["seed"], fig["paper"]), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    f.tight_layout()
    name = fig["id"] + ".png"
    f.savefig(os.path.join(out_dir, name))
    plt.close(f)
    return name


def ratio_rows(fig):
    """[(x, {label: ratio})] of every series against fig['ratio_to']."""
    ref = next((s for s in fig["series"] if s["label"] == fig.get("ratio_to")), None)
    if ref is None:
        return []
    refs = dict(zip(ref["x"], ref["y"]))
    rows = []
    for x in ref["x"]:
        r = {}
        for s in fig["series"]:
            if s is ref:
                continue
            y = dict(zip(s["x"], s["y"])).get(x)
            r[s["label"]] = y / refs[x] if y is not None and refs.get(x) else None
        rows.append((x, r))
    return rows


def _table_html(columns, rows):
    out = ["<table><tr>" + "".join("<th>%s</th>" % html.escape(str(c)) for c in columns) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join("<td>%s</td>" % html.escape("-" if c is None else str(c)) for c in r)
                   + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _fmt(v):
    if v is None:
        return None
    if isinstance(v, float):
        return "%.3g" % v if abs(v) < 100 else "%.0f" % v
    return v


SEEDS = [
    ("000", "M-VIA on Gigabit Ethernet: latency and bandwidth per segment policy and MTU"),
    ("001", "VIA on UNIX: both devices against kernel TCP; what posting costs"),
    ("002", "RUM: throughput of the flow-control modes, kernel TCP and raw UDP"),
    ("003", "EPVM: PVM round trips and concurrent senders, openvia against stock PVM"),
    ("shm", "Shared memory against UCX and libfabric (make bench's table as plots)"),
    ("CQ", "Completion queues and many connections (shared-memory device)"),
    ("004", "IPoIB / netperf: sockets over openvia"),
]


def page(out_dir, machine, figures, tables, missing, duration_s, quick):
    """report/index.html: machine, then per seed its figures (with ratio
    tables), tables and what is missing and why."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>openvia report</title>",
             "<style>body{font-family:sans-serif;max-width:1000px;margin:auto}"
             "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;padding:2px 6px;"
             "font-size:90%;text-align:right}th{background:#eee}.absent{color:#a40}</style></head><body>",
             "<h1>openvia report</h1>",
             "<p>%s run, %.0f s. Every figure was measured on this machine in this run; "
             "peers run in the same run, one after the other. Ratios compare within "
             "this run only.</p>" % ("Quick (--quick, few iterations: shapes, not figures to quote)"
                                     if quick else "Full", duration_s),
             "<h2>Machine</h2>", _table_html(["what", "value"], sorted(machine.items()))]
    for seed, title in SEEDS:
        parts.append("<h2>%s</h2>" % (("Seed %s: " % seed if seed[0].isdigit() else "") + html.escape(title)))
        for why in missing.get(seed, []):
            parts.append("<p class='absent'>Missing: %s</p>" % html.escape(why))
        for fig in [f for f in figures if f["seed"] == seed]:
            parts.append("<h3>%s (%s)</h3>" % (html.escape(fig["title"]), html.escape(fig["paper"])))
            if fig.get("png"):
                parts.append("<img src='%s' alt='%s'> <p><a href='%s.json'>data (JSON)</a></p>"
                             % (fig["png"], html.escape(fig["title"]), fig["id"]))
            for a in fig.get("absent", []):
                parts.append("<p class='absent'>No curve for %s: %s</p>"
                             % (html.escape(a["label"]), html.escape(a["why"])))
            for n in fig.get("notes", []):
                parts.append("<p>%s</p>" % html.escape(n))
            rows = ratio_rows(fig)
            if rows:
                labels = [s["label"] for s in fig["series"] if s["label"] != fig["ratio_to"]]
                parts.append("<p>Ratio to %s (%s):</p>" % (html.escape(fig["ratio_to"]),
                             "lower is faster" if fig.get("lower_is_better") else "higher is faster"))
                parts.append(_table_html(["size"] + labels,
                                         [[size_label(x)] + [_fmt(r.get(l)) for l in labels] for x, r in rows]))
        for t in [t for t in tables if t["seed"] == seed]:
            parts.append("<h3>%s</h3>" % html.escape(t["title"]))
            parts.append(_table_html(t["columns"], [[_fmt(c) for c in r] for r in t["rows"]]))
            for n in t.get("notes", []):
                parts.append("<p>%s</p>" % html.escape(n))
            parts.append("<p><a href='%s.json'>data (JSON)</a></p>" % t["id"])
    parts.append("</body></html>")
    with open(os.path.join(out_dir, "index.html"), "w") as f:
        f.write("\n".join(parts))
    for t in tables:
        with open(os.path.join(out_dir, t["id"] + ".json"), "w") as f:
            json.dump(t, f, indent=1)
