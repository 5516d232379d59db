#!/usr/bin/python3
"""--dump=gantt=FILE.svg against the plan it draws.

For each case, mpcc writes the SVG, --dump=schedule and --trace in one run.
Then:
  - the SVG parses as XML;
  - each device's compute row holds its actions in the schedule's order
    (the labels of --dump=schedule's action list, one box each);
  - every stream's boxes match the trace's events one for one, in order of
    start, at the trace's times (the SVG's x = start / step * width);
  - rendered by headless Chromium (render.py), each compute row's pixels of
    each stage's colour add up to the stage's predicted busy time on that
    device within 5% (and a pixel and a half per box: outline, arrows).

Usage: gantt.py MPCC WORKDIR SAMPLES_DIR
"""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
LEFT, PLOT = render.LEFT, render.PLOT

CASES = [
    ("mlp.mp", ["-cpus", "2", "-batch", "8", "--microbatches=4", "--schedule=1f1b"]),
    ("mlp.mp", ["-cpus", "4", "-batch", "8", "--microbatches=4", "--schedule=zb"]),
    ("cnn_bn.mp", ["-cpus", "2", "-batch", "8", "--microbatches=4",
                   "--schedule=interleaved"]),
    ("resnet.mp", ["-cpus", "2", "-batch", "8", "--microbatches=2", "--schedule=gpipe"]),
    ("mlp.mp", ["-cpus", "1", "-batch", "8"]),
    # past 64 micro-batches a box is a run of a stage's operations
    ("cnn_bn.mp", ["-cpus", "2", "-batch", "128", "--microbatches=128", "--schedule=1f1b"]),
]


def fail(msg):
    sys.exit("gantt: FAIL: " + msg)


def schedule_dump(text):
    """device -> action labels in order, and device -> busy ms."""
    actions, busy, in_list = {}, {}, False
    for line in text.splitlines():
        if line.startswith("# actions per device"):
            in_list = True
            continue
        if line.startswith("# busy:"):
            for dev, ms in re.findall(r"(\S+) ([0-9.]+) ms", line):
                busy[dev] = float(ms)
            in_list = False
            continue
        if in_list and line.strip():
            words = line.split()
            actions[words[0]] = words[1:]
    return actions, busy


def svg_boxes(root):
    """stream -> boxes [(x, width, label, kind, stage, y, count)] in
    document order; count: the operations the box stands for."""
    rows = {}
    for g in root.iter(SVG + "g"):
        if g.get("class") != "op":
            continue
        rect = g.find(SVG + "rect")
        rows.setdefault(int(g.get("data-stream")), []).append(
            (float(rect.get("x")), float(rect.get("width")), g.get("data-label"),
             g.get("data-kind"), int(g.get("data-stage")), float(rect.get("y")),
             int(g.get("data-count", "1"))))
    return rows


def expand(boxes, per, step_us):
    """Past 64 micro-batches: each box covers `count` of the trace's events
    in order, starting at the first one's start and ending at the last
    one's end (or a pixel wide); returns the boxes one per event, for the
    checks of a picture that does not aggregate."""
    out, merged = {}, 0
    for stream, row in boxes.items():
        ev = sorted(per.get((stream // 4, stream % 4), []))
        if sum(b[6] for b in row) != len(ev):
            fail("stream %d: its boxes stand for %d operations, the trace has %d" % (
                stream, sum(b[6] for b in row), len(ev)))
        k = 0
        for x, w, label, kind, stage, y, count in sorted(row):
            first, last = ev[k], ev[k + count - 1]
            want_w = max(1.0, (last[0] + last[1] - first[0]) / step_us * PLOT)
            if abs(w - want_w) > 0.02:
                fail("stream %d: a box of %d at x %.2f is %.2f wide, its events %.2f" % (
                    stream, count, x, w, want_w))
            for i in range(count):
                ts = ev[k + i][0]
                out.setdefault(stream, []).append(
                    (LEFT + ts / step_us * PLOT, 0, label, kind, stage, y, 1))
            merged += count > 1
            k += count
    if not merged:
        fail("past 64 micro-batches, no box stands for more than one operation")
    return out


def trace_events(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    per = {}
    for e in events:
        if e.get("ph") == "X":
            per.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["dur"]))
    step = [e["ts"] for e in events if e.get("name") == "step"][0]
    return per, step


def check_order(case, boxes, actions, ndev_streams):
    for dev, labels in actions.items():
        k = list(actions).index(dev) * ndev_streams
        got = [b[2] for b in sorted(boxes.get(k, []), key=lambda b: b[0]) if b[3] == "run"]
        if got != labels:
            fail("%s: %s's compute row %s, the schedule %s" % (case, dev, got, labels))


def check_times(case, boxes, per, step_us):
    for stream, row in boxes.items():
        ev = sorted(per.get((stream // 4, stream % 4), []))
        if len(ev) != len(row):
            fail("%s: stream %d has %d boxes, the trace %d events" % (case, stream, len(row),
                                                                     len(ev)))
        for (x, w, label, *_), (ts, dur) in zip(sorted(row), ev):
            want = LEFT + ts / step_us * PLOT
            if abs(x - want) > 0.02:
                fail("%s: stream %d box %s at x %.2f, the trace says %.2f" % (case, stream,
                                                                             label, x, want))


def busy_by_row(boxes, per):
    """row top -> [(stage, seconds)] of the run boxes, timed by the trace."""
    rows = {}
    for stream, row in boxes.items():
        ev = sorted(per.get((stream // 4, stream % 4), []))
        for (x, w, label, kind, stage, y, _), (ts, dur) in zip(sorted(row), ev):
            if kind == "run":
                rows.setdefault(y, []).append((stage, dur / 1e6))
    return rows


def main():
    mpcc, work, samples = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    for n, (model, opts) in enumerate(CASES):
        case = "%s %s" % (model, " ".join(opts))
        svg, trace = os.path.join(work, "g%d.svg" % n), os.path.join(work, "t%d.json" % n)
        env = dict(os.environ, MPCC_CPU_PROFILE="2e10,1e10")
        r = subprocess.run([mpcc, os.path.join(samples, model), *opts, "--trace=" + trace,
                            "--dump=gantt=%s,schedule" % svg], capture_output=True, text=True,
                           env=env)
        if r.returncode != 0:
            fail("%s: mpcc: %s" % (case, r.stderr.strip()))
        root = ET.parse(svg).getroot()
        boxes = svg_boxes(root)
        actions, busy = schedule_dump(r.stdout)
        per, step_us = trace_events(trace)
        aggregated = "--microbatches=128" in opts
        if aggregated:
            caption = "".join(t.text or "" for t in root.iter(SVG + "text"))
            if "a box is a run of a stage's actions" not in caption:
                fail("%s: the caption does not say the boxes are aggregated" % case)
            drawn = sum(len(r) for r in boxes.values())
            boxes = expand(boxes, per, step_us)
        else:
            check_order(case, boxes, actions, 4)
        check_times(case, boxes, per, step_us)
        img = render.screenshot(svg, svg[:-4] + ".png", root)
        stages = render.check_stages(fail, case, img, busy_by_row(boxes, per),
                                     PLOT / (step_us / 1e6))
        if stages < len(actions):
            fail("%s: %d stage colours checked for %d devices" % (case, stages, len(actions)))
        n = sum(len(r) for r in boxes.values())
        print("ok: %s: %d boxes%s, %d stage colours" % (
            case, drawn if aggregated else n, " for %d operations" % n if aggregated else "",
            stages))
    print("gantt: every picture matches its plan")


main()
