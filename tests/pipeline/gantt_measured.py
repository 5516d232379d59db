#!/usr/bin/python3
"""The measured step as a picture: --gantt-from, and --measured=run.json
under --dump=gantt and --dump=sweep.

A 2-device trainer of cnn_bn.mp is built at 4 and at 2 micro-batches and
run with --trace. Then:
  - mpcc --gantt-from=run.json draws one panel whose boxes are the trace's
    operations one for one, per stream in order of start, at the trace's
    times (x = start / step * width), labelled from the operations' names;
  - two traces (--gantt-from=pred.json,run.json, and the model with
    --measured=run.json --dump=gantt) draw two panels, the prediction
    above, on one time scale: the longer step's;
  - rendered by headless Chromium, the measured panel's rows hold each
    stage's colour for the stage's measured busy time within 5%;
  - --dump=sweep with --measured=run2.json,run4.json marks each run at its
    micro-batch count and the mean step its trace records, on the same
    axes as the predicted points; the traces leave the plan as it was;
  - bad traces (missing, cut short, a profile, an unknown operation, a
    model given too) fail with one line naming the file; a device name
    with markup in it stays text.

Usage: gantt_measured.py MPCC WORKDIR SAMPLES_DIR [MPCC_FOR_BAD_INPUT]
(the last, e.g. a build under ASan and UBSan, reads the bad traces)
"""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render  # noqa: E402

SVG = render.SVG
LEFT, PLOT = render.LEFT, render.PLOT
ENV = dict(os.environ, MPCC_CPU_PROFILE="2e10,1e10")
KINDS = {"forward": "F", "backward": "B", "wgrad": "W", "update": "U"}


def fail(msg):
    sys.exit("gantt_measured: FAIL: " + msg)


def run(args, ok=True, cwd=None):
    r = subprocess.run(args, capture_output=True, text=True, env=ENV, cwd=cwd)
    if ok and r.returncode != 0:
        fail("%s: %s" % (" ".join(args), r.stderr.strip()))
    return r


def trace(path):
    """stream -> [(start s, end s, expected label)] in order of start; the
    step's length; otherData."""
    with open(path) as f:
        doc = json.load(f)
    per, step = {}, 0.0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            word = e["name"].split()
            if word[0] == "copy":   # "copy x mb1 to s1", or a trainer's "copy mb1 s0 to s1"
                label = re.findall(r" mb(\d+)", e["name"])[-1]
            elif word[0] == "update":
                label = "U" + word[1][1:]
            else:
                label = KINDS[word[0]] + word[2][2:]       # one stage per device here
            per.setdefault(e["pid"] * 4 + e["tid"], []).append(
                (e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6, label))
            step = max(step, (e["ts"] + e["dur"]) / 1e6)
        elif e.get("ph") == "i" and e.get("name") == "step":
            step = max(step, e["ts"] / 1e6)
    return {k: sorted(v) for k, v in per.items()}, step, doc.get("otherData", {})


def panels(root):
    return [g for g in root.iter(SVG + "g") if g.get("class") == "panel"]


def boxes(panel):
    """stream -> [(x, width, label, kind, stage, row top)] in order of x."""
    rows = {}
    for g in panel.iter(SVG + "g"):
        if g.get("class") == "op":
            rect = g.find(SVG + "rect")
            rows.setdefault(int(g.get("data-stream")), []).append(
                (float(rect.get("x")), float(rect.get("width")), g.get("data-label"),
                 g.get("data-kind"), int(g.get("data-stage")), float(rect.get("y"))))
    return {k: sorted(v) for k, v in rows.items()}


def check_panel(case, panel, source, per, scale):
    """The panel's boxes are the trace's operations, one for one."""
    if panel.get("data-source") != source:
        fail("%s: panel is %s, expected %s" % (case, panel.get("data-source"), source))
    got = boxes(panel)
    if sorted(got) != sorted(per):
        fail("%s: streams %s drawn, the trace has %s" % (case, sorted(got), sorted(per)))
    for stream, ops in per.items():
        row = got[stream]
        if len(row) != len(ops):
            fail("%s: stream %d has %d boxes, the trace %d" % (case, stream, len(row), len(ops)))
        for (x, w, label, *_), (t0, t1, want) in zip(row, ops):
            if abs(x - (LEFT + t0 * scale)) > 0.02 or label != want:
                fail("%s: stream %d box %s at x %.2f, the trace says %s at %.2f" % (
                    case, stream, label, x, want, LEFT + t0 * scale))
    return got


def build(work, samples, M):
    d = os.path.join(work, "m%d" % M)
    os.makedirs(d, exist_ok=True)
    opts = ["-cpus", "2", "-batch", "16", "--microbatches=%d" % M, "--schedule=1f1b"]
    run([MPCC, os.path.join(samples, "cnn_bn.mp"), *opts, "-o", os.path.join(d, "train.c"),
         "--trace=" + os.path.join(d, "pred.json")])
    with open(os.path.join(d, "train.c")) as f:   # the libraries its head names
        libs = re.search(r"^ \* build: .* -o train (.*)$", f.read(), re.M).group(1).split()
    run(["cc", "-O2", "train.c", "-o", "train", *libs], cwd=d)
    run(["./train", "--synthetic", "--steps", "4", "--trace", "run.json"], cwd=d)
    return d, opts


def check_gantt_from(d):
    per, step, other = trace(os.path.join(d, "run.json"))
    if other.get("source") != "measured" or other.get("microbatches") != 4 \
            or not other.get("mean_step_ms", 0) > 0:
        fail("run.json's otherData says %s" % other)
    r = run([MPCC, "--gantt-from=" + os.path.join(d, "run.json")])
    svg = os.path.join(d, "run.svg")
    if "wrote " + svg not in r.stderr:
        fail("--gantt-from did not say it wrote %s: %s" % (svg, r.stderr))
    root = ET.parse(svg).getroot()
    (panel,) = panels(root)
    check_panel("--gantt-from", panel, "measured", per, PLOT / step)
    title = "".join(next(panel.iter(SVG + "text")).itertext())
    if not title.startswith("measured: 1f1b schedule, 2 stage(s), 4 micro-batch(es)"):
        fail("--gantt-from's title: %s" % title)
    print("ok: --gantt-from: %d boxes" % sum(len(v) for v in per.values()))


def check_two(case, svg, d):
    """The prediction above the run, on the longer step's scale; the
    measured panel rendered by Chromium."""
    pred, pstep, _ = trace(os.path.join(d, "pred.json"))
    meas, mstep, _ = trace(os.path.join(d, "run.json"))
    root = ET.parse(svg).getroot()
    top, bottom = panels(root)
    scale = PLOT / max(pstep, mstep)
    check_panel(case, top, "predicted", pred, scale)
    got = check_panel(case, bottom, "measured", meas, scale)
    img = render.screenshot(svg, svg[:-4] + ".png", root)
    by_row = {}
    for stream, row in got.items():
        for (x, w, label, kind, stage, y), (t0, t1, _) in zip(row, meas[stream]):
            if kind == "run":
                by_row.setdefault(y, []).append((stage, t1 - t0))
    n = render.check_stages(fail, case, img, by_row, scale)
    print("ok: %s: predicted above measured, %d stage colours rendered" % (case, n))


def plan_report(stderr):
    m = re.search(r"mpcc: (\S+ schedule, .*predicted step \S+ s)", stderr)
    return m.group(1) if m else None


def check_sweep(work, samples, runs):
    model = os.path.join(samples, "cnn_bn.mp")
    svg = os.path.join(work, "sweep.svg")
    alone = run([MPCC, model, "-cpus", "2", "-batch", "16", "--dump=partition"])
    r = run([MPCC, model, "-cpus", "2", "-batch", "16", "--dump=sweep=" + svg,
             "--measured=" + ",".join(os.path.join(d, "run.json") for d in runs)])
    if plan_report(r.stderr) != plan_report(alone.stderr) or not plan_report(r.stderr):
        fail("traces changed the plan: %s against %s" % (plan_report(r.stderr),
                                                         plan_report(alone.stderr)))
    root = ET.parse(svg).getroot()
    points = [(float(c.get("cx")), float(c.get("cy")), float(c.get("data-ms")),
               int(c.get("data-m"))) for c in root.iter(SVG + "circle")
              if c.get("class") == "point"]
    # the y axis from its tick labels (drawn 4 px below their value's line)
    ticks = sorted((float(t.text), float(t.get("y")) - 4) for t in root.iter(SVG + "text")
                   if t.get("text-anchor") == "end" and re.fullmatch(r"[0-9.e+-]+", t.text or ""))
    (t0, y0), (t1, y1) = ticks[0], ticks[-1]
    marks = [g for g in root.iter(SVG + "g") if g.get("class") == "measured"]
    if len(marks) != len(runs):
        fail("sweep: %d measured marks for %d runs" % (len(marks), len(runs)))
    for g, d in zip(marks, runs):
        _, _, other = trace(os.path.join(d, "run.json"))
        M, ms = int(g.get("data-m")), float(g.get("data-ms"))
        if M != other["microbatches"] or abs(ms - other["mean_step_ms"]) > 1e-5 \
                or g.get("data-schedule") != other["schedule"]:
            fail("sweep: mark %s M=%d %.6f ms, the trace says %s" % (
                g.get("data-schedule"), M, ms, other))
        mx, my = (float(v) + 5 for v in re.match(r"M([-0-9.]+),([-0-9.]+)",
                                                 g.find(SVG + "path").get("d")).groups())
        want_x = [p[0] for p in points if p[3] == M]
        want_y = y0 + (ms - t0) * (y1 - y0) / (t1 - t0)
        if not want_x or abs(mx - want_x[0]) > 0.15 or abs(my - want_y) > 0.15:
            fail("sweep: mark M=%d at %.1f,%.1f, the axes put it at %s,%.1f" % (
                M, mx, my, want_x, want_y))
    print("ok: sweep: %d measured runs marked, the plan unchanged" % len(marks))


def expect_error(what, args, words):
    r = run(args, ok=False)
    lines = r.stderr.strip().splitlines()
    if r.returncode != 1 or len(lines) != 1 or not all(w in lines[0] for w in words):
        fail("%s: exit %d, %r" % (what, r.returncode, r.stderr))
    print("ok: %s: %s" % (what, lines[0]))


def check_errors(work, d, samples, mpcc):
    bad = os.path.join(work, "bad")
    os.makedirs(bad, exist_ok=True)
    with open(os.path.join(d, "run.json")) as f:
        text = f.read()
    cut = os.path.join(bad, "cut.json")
    with open(cut, "w") as f:
        f.write(text[:len(text) // 2])
    odd = json.loads(text)
    for e in odd["traceEvents"]:
        if e.get("ph") == "X" and e["name"].startswith("forward"):
            e["name"] = "forward pass one"
            break
    unknown = os.path.join(bad, "unknown.json")
    with open(unknown, "w") as f:
        json.dump(odd, f)
    prof = os.path.join(bad, "prof.json")
    with open(prof, "w") as f:
        json.dump({"format": "mpcc-profile", "model": "m", "rows": 4, "nodes": []}, f)
    expect_error("missing trace", [mpcc, "--gantt-from=" + os.path.join(bad, "none.json")],
                 ["none.json", "cannot open the trace"])
    expect_error("trace cut short", [mpcc, "--gantt-from=" + cut], ["cut.json",
                                                                    "malformed trace"])
    expect_error("a profile for a trace", [mpcc, "--gantt-from=" + prof],
                 ["prof.json", "without operations"])
    expect_error("an unknown operation", [mpcc, "--gantt-from=" + unknown],
                 ["unknown.json", "forward pass one", "forward s0 mb1"])
    expect_error("a model with --gantt-from", [mpcc, os.path.join(samples, "mlp.mp"),
                                               "--gantt-from=" + cut], ["drop the model"])
    markup = json.loads(text)
    for e in markup["traceEvents"]:
        if e.get("name") == "process_name":
            e["args"]["name"] = "cpu<&>\"x</text>"
    path = os.path.join(bad, "markup.json")
    with open(path, "w") as f:
        json.dump(markup, f)
    run([mpcc, "--gantt-from=" + path, "-o", os.path.join(bad, "markup.svg")])
    root = ET.parse(os.path.join(bad, "markup.svg")).getroot()
    names = [t.text for t in root.iter(SVG + "text") if t.text and "compute" in t.text]
    if "cpu<&>\"x</text> compute" not in names:
        fail("a device name with markup: rows named %s" % names)
    print("ok: a device name with markup stays text")
    # keys in another order, string flow ids (as Chrome writes them), a
    # schedule name with markup: still a trace to --measured, drawn as text
    odd = json.loads(text)
    for e in odd["traceEvents"]:
        if "id" in e:
            e["id"] = hex(e["id"])
    odd["otherData"]["schedule"] = "1f1b\"><b>x</b>"
    reordered = {"metadata": {"tool": "another"}, "otherData": odd["otherData"],
                 "traceEvents": odd["traceEvents"]}
    path = os.path.join(bad, "reordered.json")
    with open(path, "w") as f:
        json.dump(reordered, f)
    sweep = os.path.join(bad, "reordered.svg")
    gantt = os.path.join(bad, "reordered_gantt.svg")
    run([mpcc, os.path.join(samples, "cnn_bn.mp"), "-cpus", "2", "-batch", "16",
         "--microbatches=4", "--measured=" + path, "--dump=sweep=%s,gantt=%s" % (sweep, gantt)])
    marks = [g for g in ET.parse(sweep).getroot().iter(SVG + "g") if g.get("class") == "measured"]
    if len(marks) != 1 or marks[0].get("data-schedule") != "1f1b\"><b>x</b>":
        fail("a reordered trace with markup in its schedule: marks %s" % [
            m.attrib for m in marks])
    arrows = [l for l in ET.parse(gantt).getroot().iter(SVG + "line")
              if l.get("class") == "copy-arrow"]
    if len(arrows) < 2 * sum(1 for e in odd["traceEvents"] if e.get("ph") == "f"):
        fail("string flow ids: %d copy arrows for %d flows in two panels" % (
            len(arrows), sum(1 for e in odd["traceEvents"] if e.get("ph") == "f")))
    print("ok: keys in any order, string flow ids, a schedule with markup")


def main():
    global MPCC
    MPCC, work, samples = sys.argv[1:4]
    checked = sys.argv[4] if len(sys.argv) > 4 else MPCC
    os.makedirs(work, exist_ok=True)
    d4, opts = build(work, samples, 4)
    d2, _ = build(work, samples, 2)
    check_gantt_from(d4)
    both0 = os.path.join(work, "both0.svg")
    run([MPCC, "--gantt-from=%s,%s" % (os.path.join(d4, "pred.json"),
                                       os.path.join(d4, "run.json")), "-o", both0])
    check_two("--gantt-from=pred.json,run.json", both0, d4)
    both = os.path.join(work, "both.svg")
    run([MPCC, os.path.join(samples, "cnn_bn.mp"), *opts,
         "--measured=" + os.path.join(d4, "run.json"), "--dump=gantt=" + both])
    check_two("--measured=run.json --dump=gantt", both, d4)
    check_sweep(work, samples, [d2, d4])
    check_errors(work, d4, samples, checked)
    print("gantt_measured: every picture matches its trace")


main()
