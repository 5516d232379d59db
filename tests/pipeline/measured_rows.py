#!/usr/bin/python3
"""--measured scales profiled times to the micro-batch it plans for.

Profiles of the CNN sample are written by hand (every node the cost model
lists, from `mpcc --dump=costs`), so the expected times are exact:
  - two sizes, rows 2 and 4, each forward/backward node a + b * rows with
    a = 100 us, b = 10 us: at -batch 8 every such node is a + 8b = 180 us,
    at --microbatches=2 (rows 4) 140 us; an update node (once a step, 50 us
    in both files) stays 50 us;
  - one size (rows 4 alone): a forward/backward node in proportion to its
    rows, 140 us * 8 / 4 = 280 us at -batch 8; the update 50 us;
  - a profile without "rows" (an older trainer's): the times as written.

Usage: measured_rows.py MPCC SAMPLE.mp WORKDIR
"""
import json
import os
import re
import subprocess
import sys

A, B, UPDATE = 100e-6, 10e-6, 50e-6
failures = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def costs(mpcc, model, *extra):
    r = subprocess.run([mpcc, model, "-cpus", "1", "--dump=costs"] + list(extra),
                       capture_output=True, text=True,
                       env=dict(os.environ, MPCC_CPU_PROFILE="1e10,1e10"))
    if r.returncode:
        sys.exit("FAIL: mpcc %s: %s" % (" ".join(extra), r.stderr))
    rows = []
    for line in r.stdout.splitlines():
        m = re.match(r"^\d+\s+\S+\s+(forward|backward|update)\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S+)"
                     r"\s+\S+ '(.*)'", line)
        if m:
            rows.append((m.group(3), m.group(1), m.group(2)))
    return rows


def profile(path, nodes, rows, seconds):
    doc = {"format": "mpcc-profile", "model": "cnn_bn.mp",
           "nodes": [{"name": n, "phase": ph, "seconds": seconds(ph), "calls": 1}
                     for n, ph, _ in nodes]}
    if rows:
        doc["rows"] = rows
    with open(path, "w") as f:
        json.dump(doc, f)


def expect(rows_list, want, what):
    bad = [(n, ph, got) for n, ph, got in rows_list
           if abs(float(got) - want(ph) * 1e3) > 1e-6]
    check(rows_list and not bad, "%s (%d nodes%s)" % (
        what, len(rows_list), "; first off: %s %s %s ms" % bad[0] if bad else ""))


def main():
    mpcc, model, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    nodes = costs(mpcc, model, "-batch", "8")
    line = lambda rows: lambda ph: UPDATE if ph == "update" else A + B * rows
    p2, p4, old = (os.path.join(work, f) for f in ("p2.json", "p4.json", "old.json"))
    profile(p2, nodes, 2, line(2))
    profile(p4, nodes, 4, line(4))
    profile(old, nodes, 0, line(4))

    both = "--measured=%s,%s" % (p2, p4)
    expect(costs(mpcc, model, "-batch", "8", both), line(8),
           "two sizes, rows 8: a + 8b, the update as profiled")
    expect(costs(mpcc, model, "-batch", "8", "--microbatches=2", both), line(4),
           "two sizes, micro-batches of 4: a + 4b")
    expect(costs(mpcc, model, "-batch", "8", "--measured=" + p4),
           lambda ph: UPDATE if ph == "update" else (A + 4 * B) * 8 / 4,
           "one size (4), rows 8: in proportion to the rows, the update as profiled")
    expect(costs(mpcc, model, "-batch", "8", "--measured=" + old), line(4),
           "a profile without rows: the times as written")
    print("measured_rows: %s" % ("FAILED" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
