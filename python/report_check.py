#!/usr/bin/env python3
"""Checks a report folder written by python/report.py: every figure its
manifest claims is a valid PNG (signature, chunk CRCs, IHDR, IEND) with
its JSON beside it holding the plotted series; a figure without a PNG says
in its JSON why each curve is absent; every table has its JSON; index.html
shows every PNG; the figures of every seed are there (plotted or
explained); seed 000's figures draw the Ethernet device or say why not.
Exits 1 naming what is wrong.

Usage: python3 python/report_check.py REPORT_DIR
"""

import json
import os
import struct
import sys
import zlib

# The figures a report must account for, seed by seed.
EXPECTED = ["seed000-%s-mtu%d" % (t, m) for m in (1500, 4138, 9000) for t in ("latency", "bandwidth")] + [
    "seed001-latency", "seed001-bandwidth", "seed002-bandwidth", "seed002-latency",
    "shm-vs-ucx-libfabric-latency", "shm-vs-ucx-libfabric-bandwidth", "seed003-table1-rtt",
    "scale-cq-latency", "seed004-stream", "seed004-msgrate", "seed004-msgcpu", "seed004-ip-msgrate",
    "seed004-ip-msgcpu"]
# Figures that need neither root nor a peer package: always plotted.
ALWAYS_PLOTTED = ["seed001-latency", "seed001-bandwidth", "scale-cq-latency"]


def png_problem(path):
    """None for a well-formed PNG, else what is wrong."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return "no PNG signature"
    pos, chunks = 8, []
    while pos + 12 <= len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if len(body) != length or pos + 12 + length > len(data):
            return "chunk %r runs past the end" % kind
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(kind + body) & 0xffffffff != crc:
            return "bad CRC in chunk %r" % kind
        chunks.append((kind, body))
        pos += 12 + length
    if not chunks or chunks[0][0] != b"IHDR" or chunks[-1][0] != b"IEND":
        return "IHDR first and IEND last missing"
    w, h = struct.unpack(">II", chunks[0][1][:8])
    if w < 100 or h < 100:
        return "image only %dx%d" % (w, h)
    if not any(k == b"IDAT" for k, _ in chunks):
        return "no image data"
    return None


def check(folder):
    errors = []
    try:
        manifest = json.load(open(os.path.join(folder, "manifest.json")))
        index = open(os.path.join(folder, "index.html")).read()
    except (OSError, ValueError) as e:
        return ["cannot read the manifest or index.html: %s" % e]
    ids = {f["id"]: f for f in manifest["figures"]}
    for want in EXPECTED:
        if want not in ids:
            errors.append("figure %s is not in the report" % want)
    for want in ALWAYS_PLOTTED:
        if want in ids and not ids[want]["png"]:
            errors.append("figure %s has no plot" % want)
    for fig in manifest["figures"]:
        try:
            data = json.load(open(os.path.join(folder, fig["json"])))
        except (OSError, ValueError) as e:
            errors.append("%s: JSON missing or invalid: %s" % (fig["id"], e))
            continue
        if data.get("id") != fig["id"]:
            errors.append("%s: its JSON is another figure's" % fig["id"])
        if fig["id"].startswith("seed000-"):
            # The Ethernet device's curves beside the UDP device's: drawn,
            # or absent with a reason (theirs, or the whole figure's).
            labels = [s["label"] for s in data.get("series", [])] + [
                a["label"] for a in data.get("absent", []) if a.get("why")]
            if not any(l.startswith("openvia Ethernet") or l == "all" for l in labels):
                errors.append("%s: no Ethernet device curve and no reason for its absence" % fig["id"])
        if fig["png"]:
            path = os.path.join(folder, fig["png"])
            why = png_problem(path) if os.path.exists(path) else "file missing"
            if why:
                errors.append("%s: %s: %s" % (fig["id"], fig["png"], why))
            if not any(any(y is not None for y in s["y"]) for s in data.get("series", [])):
                errors.append("%s: plotted, but its JSON has no data point" % fig["id"])
            if fig["png"] not in index:
                errors.append("%s: index.html does not show it" % fig["id"])
        elif not data.get("absent") or not all(a.get("why") for a in data["absent"]):
            errors.append("%s: no plot and no reason given" % fig["id"])
    for t in manifest["tables"]:
        try:
            json.load(open(os.path.join(folder, t["json"])))
        except (OSError, ValueError) as e:
            errors.append("table %s: JSON missing or invalid: %s" % (t["id"], e))
    return errors


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    errors = check(sys.argv[1])
    for e in errors:
        print("report_check: " + e, file=sys.stderr)
    m = json.load(open(os.path.join(sys.argv[1], "manifest.json"))) if not errors else None
    if errors:
        return 1
    plotted = sum(1 for f in m["figures"] if f["png"])
    print("report_check: %d figures (%d plotted, valid PNGs with JSON), %d tables: ok"
          % (len(m["figures"]), plotted, len(m["tables"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
