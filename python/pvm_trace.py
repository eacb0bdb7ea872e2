#!/usr/bin/env python3
"""Where a PVM round trip's microseconds go: merges the time marks that
openvia's PVM writes with OPENVIA_PVM_TRACE=PREFIX (crates/pvm/src/trace.rs;
files PREFIX.<host>.<pid>, one per task and pvmd) into one timeline and
prints, for one message size of tests/pvm/pingpong.c, every step between
consecutive marks with its median and 90th percentile.

The ping-pong has one message in flight at a time, so consecutive marks on
the shared clock (CLOCK_MONOTONIC, the same in every network namespace)
are consecutive steps of one message's path: task.send on host A, ...,
task.recv on host B, task.send there, ..., task.recv on A. A step is named
"host:point -> host:point".

Usage: python/pvm_trace.py PREFIX SIZE [SIZE...]
"""

import collections
import glob
import statistics
import sys


def load(prefix):
    marks = []
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) != 5:
                    continue  # a line cut short (a process killed mid-write)
                at, host, pid, point, nbytes = fields
                marks.append((int(at), host, int(pid), point, int(nbytes)))
    marks.sort()
    return marks


def steps_for(marks, size):
    """Steps between consecutive marks while a message of `size` bytes is
    under way (from a task.send of that size to the next task.send of
    another size), and the round trips (task.send to task.recv on the
    sending host, two messages later)."""
    steps = collections.OrderedDict()
    rtts = []
    current = None
    prev = None
    sends = []  # (time, host) of task.send marks of this size
    for at, host, pid, point, nbytes in marks:
        if point == "task.send":
            current = nbytes
            if nbytes == size:
                sends.append((at, host))
        if point == "task.recv" and nbytes == size and len(sends) >= 2 and sends[-2][1] == host:
            rtts.append((at - sends[-2][0]) / 1000)
        if current == size and prev is not None:
            name = f"{prev[1]}:{prev[3]} -> {host}:{point}"
            steps.setdefault(name, []).append((at - prev[0]) / 1000)
        prev = (at, host, pid, point)
    return steps, rtts


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    marks = load(sys.argv[1])
    if not marks:
        sys.exit(f"no marks under {sys.argv[1]}.*")
    for size in map(int, sys.argv[2:]):
        steps, rtts = steps_for(marks, size)
        print(f"size {size}: {len(rtts)} round trips, median "
              f"{statistics.median(rtts) if rtts else 0:.1f} us")
        print(f"  {'step':<58} {'n':>6} {'median':>8} {'p90':>8}")
        for name, v in steps.items():
            if len(v) < max(5, len(rtts) // 10):
                continue  # rare steps (setup, stray marks)
            v.sort()
            p90 = v[int(len(v) * 0.9)]
            print(f"  {name:<58} {len(v):>6} {statistics.median(v):>8.1f} {p90:>8.1f}")


if __name__ == "__main__":
    main()
