#!/usr/bin/python3
"""--dump=sweep=FILE.svg against the candidates mpcc plans one by one.

The search plans every schedule and micro-batch count M (powers of two up
to 4 per device that divide the batch); the SVG has a
point for each that can run, at its predicted step. Each candidate is then
planned alone (--schedule=K --microbatches=M): it runs exactly when the
SVG has its point, and its step, whose cuts are refined after planning,
is no longer than the point's. The circled plan is the one mpcc reports,
at its step.

Usage: sweep.py MPCC WORKDIR SAMPLES_DIR
"""
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
CASES = [("resnet.mp", ["-cpus", "2", "-batch", "16"]),
         ("mlp.mp", ["-cpus", "4", "-batch", "16"])]
ENV = dict(os.environ, MPCC_CPU_PROFILE="2e10,1e10")


def fail(msg):
    sys.exit("sweep: FAIL: " + msg)


def report(stderr):
    m = re.search(r"mpcc: (\S+) schedule, \d+ stage\(s\), (\d+) micro-batch\(es\): predicted "
                  r"step ([0-9.e+-]+) s", stderr)
    return (m.group(1), int(m.group(2)), float(m.group(3)) * 1e3) if m else None


def main():
    mpcc, work, samples = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    for n, (model, opts) in enumerate(CASES):
        path, svg = os.path.join(samples, model), os.path.join(work, "s%d.svg" % n)
        r = subprocess.run([mpcc, path, *opts, "--dump=sweep=" + svg], capture_output=True,
                           text=True, env=ENV)
        chosen = report(r.stderr)
        if r.returncode != 0 or not chosen:
            fail("%s: mpcc: %s" % (model, r.stderr.strip()))
        root = ET.parse(svg).getroot()
        points = {}
        for g in root.iter(SVG + "g"):
            if g.get("class") == "series":
                for c in g.iter(SVG + "circle"):
                    points[(g.get("data-schedule"), int(c.get("data-m")))] = float(c.get("data-ms"))
        if not points:
            fail("%s: no points" % model)
        for kind in ("gpipe", "1f1b", "interleaved", "zb"):
            ndev, batch = int(opts[opts.index("-cpus") + 1]), int(opts[opts.index("-batch") + 1])
            # the counts the search tries: powers of two up to 4 per device
            for M in (m for m in (1, 2, 4, 8, 16, 32) if m <= 4 * ndev and batch % m == 0):
                one = subprocess.run([mpcc, path, *opts, "--schedule=" + kind,
                                      "--microbatches=%d" % M, "--dump=partition"],
                                     capture_output=True, text=True, env=ENV)
                alone = report(one.stderr) if one.returncode == 0 else None
                if (alone is not None) != ((kind, M) in points):
                    fail("%s: %s M=%d: planned alone %s, in the sweep %s" % (
                        model, kind, M, "runs" if alone else "does not run",
                        "a point" if (kind, M) in points else "none"))
                if alone and alone[2] > points[(kind, M)] * (1 + 1e-3):   # printed to 4 digits
                    fail("%s: %s M=%d: alone %.4f ms, the sweep's point %.4f ms" % (
                        model, kind, M, alone[2], points[(kind, M)]))
        ring = [c for c in root.iter(SVG + "circle") if c.get("class") == "chosen"][0]
        if (ring.get("data-schedule"), int(ring.get("data-m"))) != chosen[:2]:
            fail("%s: circled %s M=%s, mpcc chose %s M=%d" % (
                model, ring.get("data-schedule"), ring.get("data-m"), *chosen[:2]))
        print("ok: %s: %d points, chosen %s M=%d" % (model, len(points), *chosen[:2]))
    print("sweep: every point is its candidate's plan")


main()
