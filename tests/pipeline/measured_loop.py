#!/usr/bin/python3
"""The measured loop converges, on the CNN sample over 2 CPU devices.

The profiles are made here, so the test is exact: every node takes the time
the cost model estimates (mpcc --dump=costs), except that stage 0 of mpcc's
first plan (A) takes 6 times as long, as a device twice as slow as the model
thought would. Then:
  - planned with that profile (--measured), the cut moves (plan B), and B's
    predicted step is shorter than A's under the same profile (A with its
    cut given by --split): better, since A was unbalanced;
  - planned again with the profile B's run would give (the same times: the
    node times do not depend on the plan), the plan is B again: a fixed
    point;
  - with a profile that agrees with the model everywhere, the plan stays A.

Usage: measured_loop.py MPCC SAMPLE.mp WORKDIR
"""
import json
import os
import re
import subprocess
import sys

FLAGS = ["-cpus", "2", "-batch", "16", "--microbatches=2", "--schedule=1f1b"]
ENV = dict(os.environ, MPCC_CPU_PROFILE="2e10,1e10")
failures = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def mpcc(tool, model, *extra):
    r = subprocess.run([tool, model] + FLAGS + list(extra), capture_output=True, text=True,
                       env=ENV)
    if r.returncode:
        sys.exit("FAIL: mpcc %s: %s" % (" ".join(extra), r.stderr))
    return r.stdout


def plan(tool, model, *extra):
    """(cut after this node, predicted step in ms) of --dump=partition."""
    out = mpcc(tool, model, "--dump=partition", *extra)
    first = re.search(r"^0\s+cpu:0\s.*\.\. (\S+)\s*$", out, re.M)
    step = re.search(r"predicted: step ([0-9.]+) ms", out)
    return first.group(1), float(step.group(1))


def costs(tool, model):
    """(stage, phase, predicted seconds, name) of every node."""
    rows = []
    for line in mpcc(tool, model, "--dump=costs").splitlines():
        m = re.match(r"^(\d+)\s+\S+\s+(forward|backward|update)\s+\S+\s+\S+\s+\S+\s+(\S+)"
                     r"\s+\S+\s+\S+ '(.*)'", line)
        if m:
            rows.append((int(m.group(1)), m.group(2), float(m.group(3)) / 1e3, m.group(4)))
    return rows


def profile(path, nodes, slow_stage, factor):
    doc = {"format": "mpcc-profile", "model": "cnn_bn.mp", "rows": 8,
           "nodes": [{"name": n, "phase": ph, "calls": 1,
                      "seconds": t * (factor if s == slow_stage else 1)}
                     for s, ph, t, n in nodes]}
    with open(path, "w") as f:
        json.dump(doc, f)


def main():
    tool, model, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    cut_a, step_a = plan(tool, model)
    nodes = costs(tool, model)
    slow, same = os.path.join(work, "slow.json"), os.path.join(work, "same.json")
    profile(slow, nodes, 0, 6)
    profile(same, nodes, 0, 1)

    cut_b, step_b = plan(tool, model, "--measured=" + slow)
    _, step_a_measured = plan(tool, model, "--measured=" + slow, "--split=" + cut_a)
    print("plan A: cut after %s, %.3f ms; under the slow profile %.3f ms; plan B: cut after "
          "%s, %.3f ms" % (cut_a, step_a, step_a_measured, cut_b, step_b))
    check(cut_b != cut_a, "the measured times move the cut")
    check(step_b < step_a_measured, "plan B is faster than A under the measured times")
    cut_c, step_c = plan(tool, model, "--measured=" + slow)
    check((cut_c, step_c) == (cut_b, step_b), "a second round keeps plan B (a fixed point)")
    cut_d, _ = plan(tool, model, "--measured=" + same)
    check(cut_d == cut_a, "times that agree with the model keep plan A")
    print("measured_loop: %s" % ("FAILED" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
