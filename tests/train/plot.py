#!/usr/bin/python3
"""./train --plot FILE.svg (docs/trainer.md, "The loss curve: --plot"), read
back as numbers: the SVG is parsed as XML and every point inverted through
the plot area's mapping (data-x0/x1/y0/y1 on <rect class="plot-area">).

  - a run with evaluations: one point per step, each within a pixel of the
    --loss-log value of its step; one marker per "eval step N: loss L" line
    the trainer printed, at N and L; ticks where the mapping puts them; a
    self-contained picture (white background, sans-serif, no script or
    link) with the model's name in its title;
  - the checker itself rejects a point moved by two pixels, a point left
    out and a marker at another step;
  - at a checkpoint: SIGTERM mid-run leaves the plot of exactly the steps
    up to the saved one, with the evaluations before it; kill -9 leaves the
    plot of the last --save-every checkpoint written (or the one before);
    a run resumed from it plots only its own steps;
  - --plot /nonexistent/dir/x.svg fails before training: one line, exit 1;
  - 2000 steps are drawn one by one, 5000 are aggregated in buckets: the
    line within a pixel of each bucket's mean loss, the band of its minimum
    and maximum, the caption says so, the file stays small.

Usage: plot.py MPCC WORKDIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "..", "samples", "mlp.mp")
SVG = "{http://www.w3.org/2000/svg}"


class Bad(Exception):
    pass


def die(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def build(mpcc, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.chdir(work)
    shutil.copy(MODEL, "mlp.mp")
    subprocess.run([mpcc, "mlp.mp", "-cpus", "1", "-batch", "8", "-o", "train.c"], check=True,
                   stderr=subprocess.DEVNULL)
    line = [l for l in open("train.c") if l.startswith(" * build:  ")][0]
    subprocess.run(line[len(" * build:  "):].split(), check=True)
    r = np.random.default_rng(0)
    np.save("x.npy", r.standard_normal((64, 784)).astype(np.float32))
    np.save("y.npy", r.integers(0, 10, 64))
    np.save("xe.npy", r.standard_normal((20, 784)).astype(np.float32))
    np.save("ye.npy", r.integers(0, 10, 20))


DATA = ["--data", "x.npy", "--labels", "y.npy", "--eval-data", "xe.npy", "--eval-labels",
        "ye.npy"]


def train(*args):
    r = subprocess.run(["./train"] + DATA + list(args), stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        die("./train %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
    return r.stderr


def evals(stderr):
    """The (step, loss) of every evaluation line the trainer printed."""
    return [(int(m.group(1)), float(m.group(2)))
            for m in re.finditer(r"^eval step (\d+): loss (\S+)", stderr, re.M)]


def losses(path):
    return [float(l) for l in open(path)]


# ---- reading the picture ----

class Plot:
    def __init__(self, path):
        try:
            text = open(path).read()
        except OSError as e:
            raise Bad("no plot: %s" % e)
        try:
            self.root = ET.fromstring(text)
        except ET.ParseError as e:
            raise Bad("%s does not parse as XML: %s" % (path, e))
        self.text, self.size = text, len(text.encode())
        area = self.one("rect", "plot-area")
        self.left, self.top = float(area.get("x")), float(area.get("y"))
        self.w, self.h = float(area.get("width")), float(area.get("height"))
        self.x0, self.x1, self.y0, self.y1 = (float(area.get("data-" + k))
                                              for k in ("x0", "x1", "y0", "y1"))
        if not (self.x1 > self.x0 and self.y1 > self.y0 and self.w > 0 and self.h > 0):
            raise Bad("an empty plot area: %s" % area.attrib)
        self.px_step, self.px_loss = (self.x1 - self.x0) / self.w, (self.y1 - self.y0) / self.h

    def all(self, tag, cls):
        return [e for e in self.root.iter(SVG + tag) if e.get("class") == cls]

    def one(self, tag, cls):
        found = self.all(tag, cls)
        if len(found) != 1:
            raise Bad("%d <%s class=%r>, expected one" % (len(found), tag, cls))
        return found[0]

    def step(self, x):
        return self.x0 + (x - self.left) * self.px_step

    def loss(self, y):
        return self.y0 + (self.top + self.h - y) * self.px_loss

    def points(self, tag, cls):
        e = self.one(tag, cls)
        pts = [tuple(map(float, p.split(","))) for p in e.get("points").split()]
        return e, [(self.step(x), self.loss(y)) for x, y in pts]

    def caption(self):
        e = self.one("text", "caption")
        return e.get("data-aggregated"), "".join(e.itertext())


def near(plot, got, want, what):
    """got and want (step, loss) within a pixel on each axis."""
    if abs(got[0] - want[0]) > plot.px_step or abs(got[1] - want[1]) > plot.px_loss:
        raise Bad("%s drawn at step %.3f loss %.6g, expected step %s loss %.9g (a pixel: %.3g "
                  "steps, %.3g loss)" % (what, got[0], got[1], want[0], want[1], plot.px_step,
                                         plot.px_loss))


def check_picture(plot):
    """What every picture must be: self-contained, white, sans-serif,
    titled with the model, ticks where the mapping puts them."""
    r = plot.root
    if r.tag != SVG + "svg" or r.get("font-family") != "sans-serif":
        raise Bad("the root is not an <svg font-family=\"sans-serif\">")
    bg = r.find(SVG + "rect")
    if bg is None or bg.get("fill") != "white" or bg.get("width") != "100%":
        raise Bad("no white background rect first")
    if re.search(r"<script|href=|@import|url\(http", plot.text):
        raise Bad("the picture refers to something outside it or holds a script")
    if "mlp.mp" not in "".join(plot.one("text", "title").itertext()):
        raise Bad("the title does not name the model")
    if not plot.all("g", "legend"):
        raise Bad("no legend")
    for cls, attr, pos, lo, hi in (("xtick", "x1", plot.step, plot.x0, plot.x1),
                                   ("ytick", "y1", plot.loss, plot.y0, plot.y1)):
        ticks, tol = plot.all("g", cls), 1e-3 * (hi - lo)
        if len(ticks) < 2:
            raise Bad("%d %s, expected at least 2" % (len(ticks), cls))
        for t in ticks:
            v, at = float(t.get("data-value")), pos(float(t.find(SVG + "line").get(attr)))
            if abs(at - v) > tol or not lo - tol <= v <= hi + tol:
                raise Bad("%s %g drawn at %g, or outside %g..%g" % (cls, v, at, lo, hi))


def check_curve(plot, first, log, printed):
    """The line: one point per step first+1.., each at its --loss-log value;
    the markers: one per printed evaluation, at its step and loss."""
    check_picture(plot)
    line, pts = plot.points("polyline", "loss")
    if line.get("data-bucket") != "1" or plot.all("polygon", "loss-band"):
        raise Bad("aggregated, with %d steps" % len(log))
    if len(pts) != len(log):
        raise Bad("%d points for %d steps" % (len(pts), len(log)))
    for i, (p, want) in enumerate(zip(pts, log)):
        near(plot, p, (first + 1 + i, want), "step %d" % (first + 1 + i))
    marks = plot.all("circle", "eval")
    if len(marks) != len(printed):
        raise Bad("%d eval markers for %d evaluations printed" % (len(marks), len(printed)))
    for c, (step, loss) in zip(marks, printed):
        got = float(c.get("data-loss"))
        if int(c.get("data-step")) != step or abs(got - loss) > 1e-6 * abs(loss):
            raise Bad("marker step %s loss %s, printed eval step %d: loss %.7g"
                      % (c.get("data-step"), c.get("data-loss"), step, loss))
        near(plot, (plot.step(float(c.get("cx"))), plot.loss(float(c.get("cy")))),
             (step, loss), "eval step %d" % step)
    if plot.x0 != first or plot.caption()[0] != "0":
        raise Bad("x0 %g for a run from step %d, or the caption says aggregated" % (plot.x0, first))


def expect_bad(path, mutate, what):
    """The checker rejects a picture changed by `mutate`."""
    text = mutate(open(path).read())
    open("mutated.svg", "w").write(text)
    try:
        check_curve(Plot("mutated.svg"), 0, losses("loss.txt"),
                    evals(open("run.err").read()))
    except Bad as e:
        print("ok: rejected %s (%s)" % (what, str(e)[:80]))
        return
    die("the checker took a picture with %s" % what)


# ---- the checks ----

def check_run():
    print("--- 30 steps, evaluated every 7")
    err = train("--steps", "30", "--eval-every", "7", "--loss-log", "loss.txt",
                "--plot", "loss.svg", "--log-every", "100")
    open("run.err", "w").write(err)
    printed = evals(err)
    if [s for s, _ in printed] != [7, 14, 21, 28, 30]:
        die("evaluated at %s" % printed)
    check_curve(Plot("loss.svg"), 0, losses("loss.txt"), printed)
    if "wrote the loss curve of steps 1 to 30 to loss.svg" not in err:
        die("no line saying the plot was written:\n" + err)
    print("ok: 30 points at the logged losses, 5 markers at the printed evaluations")

    def move(t):   # the 4th point 2 pixels down
        def shift(m):
            pts = m.group(2).split()
            x, y = pts[3].split(",")
            pts[3] = "%s,%.2f" % (x, float(y) + 2)
            return m.group(1) + " ".join(pts)
        return re.sub(r'(class="loss"[^>]*points=")([^"]*)', shift, t)
    expect_bad("loss.svg", move, "a point moved by two pixels")
    expect_bad("loss.svg", lambda t: re.sub(r'(class="loss"[^>]*points=")\S+ ', r"\1", t),
               "the first point left out")
    expect_bad("loss.svg", lambda t: t.replace('data-step="14"', 'data-step="15"'),
               "a marker at another step")


def start(*args):
    return subprocess.Popen(["./train"] + DATA + list(args), stderr=subprocess.PIPE, text=True)


def wait_for_step(p, at_least):
    seen = []
    for line in p.stderr:
        seen.append(line)
        m = re.match(r"step (\d+)/", line)
        if m and int(m.group(1)) >= at_least:
            return "".join(seen)
    die("the trainer ended before step %d" % at_least)


def check_sigterm():
    print("--- SIGTERM during training, --save-every 1000")
    p = start("--steps", "1000000", "--save-every", "1000", "--eval-every", "7", "--log-every",
              "1", "--loss-log", "stop.txt", "--plot", "stop.svg", "--save", "ck.safetensors")
    err = wait_for_step(p, 40)
    p.send_signal(signal.SIGTERM)
    err += p.stderr.read()
    p.wait()
    m = re.search(r"stopped by SIGTERM after step (\d+) of 1000000; saved (\S+) ", err)
    if p.returncode != 0 or not m:
        die("exit %d, no stop line:\n%s" % (p.returncode, err[-2000:]))
    step, ckpt = int(m.group(1)), m.group(2)
    log = losses("stop.txt")
    if len(log) != step:
        die("the loss log holds %d steps, stopped after %d" % (len(log), step))
    printed = evals(err)
    if not printed or printed[-1][0] > step:
        die("evaluations %s for a run stopped after step %d" % (printed[-3:], step))
    plot = Plot("stop.svg")
    check_curve(plot, 0, log, printed)
    print("ok: stopped after step %d; the plot holds steps 1 to %d and the %d evaluations"
          % (step, step, len(printed)))
    return step, ckpt


def check_resumed(step, ckpt):
    print("--- resumed from %s for 12 steps" % ckpt)
    err = train("--resume", ckpt, "--steps", "12", "--eval-every", "5", "--loss-log",
                "resumed.txt", "--plot", "resumed.svg")
    plot = Plot("resumed.svg")
    check_curve(plot, step, losses("resumed.txt"), evals(err))
    if "resumed at step %d" % step not in plot.caption()[1]:
        die("the caption does not say the run resumed: %r" % plot.caption()[1])
    print("ok: steps %d to %d, from x0 = %d, with %d evaluations"
          % (step + 1, step + 12, step, len(evals(err))))


def check_kill9():
    print("--- kill -9 during training, --save-every 50")
    p = start("--steps", "1000000", "--save-every", "50", "--eval-every", "20", "--log-every",
              "1", "--loss-log", "k9.txt", "--plot", "k9.svg", "--save", "k9.safetensors")
    err = wait_for_step(p, 120)
    os.kill(p.pid, signal.SIGKILL)
    err += p.stderr.read()
    p.wait()
    saved = sorted(int(m.group(1)) for m in (re.match(r"k9\.step(\d+)\.safetensors$", f)
                                             for f in os.listdir(".")) if m)
    if os.path.exists("k9.svg.tmp"):
        os.remove("k9.svg.tmp")   # killed while the plot was written: the old one stands
    plot = Plot("k9.svg")
    _, pts = plot.points("polyline", "loss")
    n = len(pts)
    if n % 50 or not saved or not saved[-1] - 50 <= n <= saved[-1]:
        die("the plot holds %d steps; the checkpoints are of steps %s" % (n, saved[-3:]))
    # the killed run's loss log was cut off in its buffer: the same run's
    # losses (training is deterministic) from one that ran n steps
    train("--steps", str(n), "--loss-log", "k9ref.txt")
    check_curve(plot, 0, losses("k9ref.txt"), [e for e in evals(err) if e[0] <= n])
    print("ok: killed after the checkpoint of step %d; the plot holds steps 1 to %d"
          % (saved[-1], n))


def check_bad_path():
    print("--- --plot /nonexistent/dir/x.svg")
    r = subprocess.run(["./train"] + DATA + ["--steps", "3", "--plot", "/nonexistent/dir/x.svg",
                                             "--loss-log", "bad.txt"],
                       stderr=subprocess.PIPE, text=True)
    lines = r.stderr.splitlines()
    if r.returncode == 0 or len(lines) != 1 or "/nonexistent/dir/x.svg" not in lines[0] or \
            "cannot write the loss plot" not in lines[0]:
        die("exit %d, stderr:\n%s" % (r.returncode, r.stderr))
    if os.path.exists("bad.txt"):
        die("training started before the plot's path was checked")
    print("ok: exit %d before training: %s" % (r.returncode, lines[0]))


def check_many(steps, aggregated):
    print("--- %d steps" % steps)
    err = train("--steps", str(steps), "--loss-log", "many.txt", "--plot", "many.svg",
                "--log-every", "100000")
    log, plot = losses("many.txt"), Plot("many.svg")
    flag, caption = plot.caption()
    if not aggregated:
        check_curve(plot, 0, log, evals(err))   # evaluated after the last step
        print("ok: %d points, %d bytes, not aggregated" % (len(log), plot.size))
        return
    check_picture(plot)
    line, pts = plot.points("polyline", "loss")
    band, edge = plot.points("polygon", "loss-band")
    k = int(line.get("data-bucket"))
    buckets = [log[i:i + k] for i in range(0, steps, k)]
    if flag != "1" or "aggregated" not in caption or "mean of %d steps" % k not in caption:
        die("the caption does not say the line is aggregated: %r" % caption)
    if len(pts) > 2000 or len(pts) != len(buckets) or len(edge) != 2 * len(buckets) or \
            band.get("data-bucket") != str(k):
        die("%d points and %d band vertices for %d buckets of %d" % (len(pts), len(edge),
                                                                    len(buckets), k))
    for i, b in enumerate(buckets):
        mid = i * k + (len(b) + 1) / 2
        near(plot, pts[i], (mid, sum(b) / len(b)), "bucket %d's mean" % i)
        near(plot, edge[i], (mid, max(b)), "bucket %d's maximum" % i)
        near(plot, edge[-1 - i], (mid, min(b)), "bucket %d's minimum" % i)
    if plot.size > 150000:
        die("%d bytes for %d steps" % (plot.size, steps))
    print("ok: %d buckets of %d steps, each within a pixel of its mean, minimum and maximum; "
          "%d bytes; %r" % (len(buckets), k, plot.size, caption))


def main():
    mpcc, work = sys.argv[1:3]
    build(os.path.abspath(mpcc), work)
    try:
        check_run()
        step, ckpt = check_sigterm()
        check_resumed(step, ckpt)
        check_kill9()
        check_bad_path()
        check_many(2000, False)
        check_many(5000, True)
    except Bad as e:
        die(str(e))
    left = [f for f in os.listdir(".") if f.endswith(".svg.tmp")]
    if left:
        die("temporary files left: %s" % left)
    print("plot: all passed")


if __name__ == "__main__":
    main()
