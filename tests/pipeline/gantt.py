#!/usr/bin/python3
"""--dump=gantt=FILE.svg against the plan it draws.

For each case, mpcc writes the SVG, --dump=schedule and --trace in one run.
Then:
  - the SVG parses as XML;
  - each device's compute row holds its actions in the schedule's order
    (the labels of --dump=schedule's action list, one box each);
  - every stream's boxes match the trace's events one for one, in order of
    start, at the trace's times (the SVG's x = start / step * width);
  - rendered by librsvg (rsvg-convert), each compute row's columns that are
    not the idle shade add up to the device's predicted busy time within 5%
    (and a pixel and a half per box, its outline).

Usage: gantt.py MPCC WORKDIR SAMPLES_DIR
"""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
LEFT, PLOT, TOP, ROW, GAP = 130, 960, 58, 24, 10   # emit/gantt.c's layout

CASES = [
    ("mlp.mp", ["-cpus", "2", "-batch", "8", "--microbatches=4", "--schedule=1f1b"]),
    ("mlp.mp", ["-cpus", "4", "-batch", "8", "--microbatches=4", "--schedule=zb"]),
    ("cnn_bn.mp", ["-cpus", "2", "-batch", "8", "--microbatches=4",
                   "--schedule=interleaved"]),
    ("resnet.mp", ["-cpus", "2", "-batch", "8", "--microbatches=2", "--schedule=gpipe"]),
    ("mlp.mp", ["-cpus", "1", "-batch", "8"]),
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
    """stream -> boxes [(x, width, label, kind, stage)] in document order."""
    rows = {}
    for g in root.iter(SVG + "g"):
        if g.get("class") != "op":
            continue
        rect = g.find(SVG + "rect")
        rows.setdefault(int(g.get("data-stream")), []).append(
            (float(rect.get("x")), float(rect.get("width")), g.get("data-label"),
             g.get("data-kind"), int(g.get("data-stage")), float(rect.get("y"))))
    return rows


def trace_events(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    per = {}
    for e in events:
        if e.get("ph") == "X":
            per.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["dur"]))
    step = [e["ts"] for e in events if e.get("name") == "step"][0]
    return per, step


def device_names(root):
    names = {}
    for t in root.iter(SVG + "text"):
        m = re.fullmatch(r"(\S+) compute", (t.text or ""))
        if m:
            names[m.group(1)] = float(t.get("y"))
    return names


def check_order(case, boxes, actions, ndev_streams):
    for dev, labels in actions.items():
        k = list(actions).index(dev) * ndev_streams
        got = [b[2] for b in sorted(boxes.get(k, []), key=lambda b: b[0]) if b[3] == "run"]
        if got != labels:
            fail("%s: %s's compute row %s, the schedule %s" % (case, dev, got, labels))


def check_times(case, boxes, per, step_us):
    for stream, row in boxes.items():
        ev = sorted(per.get((stream // 3, stream % 3), []))
        if len(ev) != len(row):
            fail("%s: stream %d has %d boxes, the trace %d events" % (case, stream, len(row),
                                                                     len(ev)))
        for (x, w, label, *_), (ts, dur) in zip(sorted(row), ev):
            want = LEFT + ts / step_us * PLOT
            if abs(x - want) > 0.02:
                fail("%s: stream %d box %s at x %.2f, the trace says %.2f" % (case, stream,
                                                                             label, x, want))


def rendered_busy(png, row_top):
    """Columns of a compute row not in the idle shade: its boxes, their
    outlines and labels as a browser-like renderer draws them."""
    from PIL import Image
    img = Image.open(png).convert("RGB")
    y = int(row_top) + 3
    idle = (0xf4, 0xcc, 0xcc)
    near = lambda c: all(abs(c[i] - idle[i]) <= 6 for i in range(3))
    return sum(1 for x in range(LEFT, LEFT + PLOT) if not near(img.getpixel((x, y))))


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
        check_order(case, boxes, actions, 3)
        check_times(case, boxes, per, step_us)
        png = svg[:-4] + ".png"
        subprocess.run(["rsvg-convert", svg, "-o", png], check=True)
        step_ms = step_us / 1e3
        for dev, top in device_names(root).items():
            px = rendered_busy(png, top - ROW * 0.7)
            want = busy[dev] / step_ms * PLOT
            nbox = sum(1 for row in boxes.values() for b in row
                       if b[3] == "run" and abs(b[5] - (top - ROW * 0.7)) < 0.5)
            # each box's outline (half a pixel either side) and the smallest
            # boxes' one-pixel width add up to a pixel or so per box
            if abs(px - want) > 0.05 * want + 1.5 * nbox:
                fail("%s: %s rendered busy %d px, predicted %.1f px" % (case, dev, px, want))
        print("ok: %s: %d boxes" % (case, sum(len(r) for r in boxes.values())))
    print("gantt: every picture matches its plan")


main()
