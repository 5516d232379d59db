#!/usr/bin/python3
"""--objective and the idle-device note, on ResNet-50 at batch 1 over 4 GPUs.

At batch 1 there is one micro-batch, and the fastest plan runs nearly all of
the step on one GPU. Checks:
  - --objective=time (the default): the report names each GPU with under 2%
    of the busiest one's work, in one note that says why (one micro-batch)
    and what to change (-batch N with N a multiple of 8, --objective=memory);
  - --objective=memory: no such note; the largest arena is below the time
    objective's, and every GPU holds at least 1/8 of the memory planned;
  - a model too big for one GPU fits four: with 62 MB a GPU (one GPU's
    plan needs over 200 MB) -gpus 1 is refused and -gpus 4 plans, every
    arena within 62 MB, under either objective;
  - --objective=speed is refused in one line.

Usage: objective.py MPCC RESNET50.onnx
"""
import os
import re
import subprocess
import sys

failures = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def plan(mpcc, model, *extra):
    r = subprocess.run([mpcc, model, "-gpus", "4", "-batch", "1", "--dump=partition"]
                       + list(extra), capture_output=True, text=True)
    arenas = [float(m) for m in re.findall(r"memory plan ([0-9.]+) MB, busy", r.stderr)]
    busy = [float(m) for m in re.findall(r"MB, busy ([0-9.e+-]+) s", r.stderr)]
    return r, arenas, busy


def main():
    mpcc, model = sys.argv[1], sys.argv[2]
    r, arenas, busy = plan(mpcc, model)
    print(r.stderr)
    check(r.returncode == 0 and len(arenas) == 4, "the time objective plans 4 GPUs")
    idle = [d for d in range(len(busy)) if busy[d] < 0.02 * max(busy)]
    notes = [ln for ln in r.stderr.splitlines() if "almost none of the work" in ln]
    check(len(idle) >= 1 and len(notes) == 1, "one note for the %d idle GPU(s)" % len(idle))
    note = notes[0] if notes else ""
    check(all("cuda:%d (" % d in note for d in idle), "the note names every idle GPU")
    check("with one micro-batch (a batch of 1)" in note and "-batch N with N a multiple of 8"
          in note and "--objective=memory" in note, "the note says why and what to change")

    r2, arenas2, _ = plan(mpcc, model, "--objective=memory")
    print(r2.stderr)
    check(r2.returncode == 0 and len(arenas2) == 4, "the memory objective plans 4 GPUs")
    check("almost none of the work" not in r2.stderr, "no idle note under --objective=memory")
    if arenas and arenas2:
        check(max(arenas2) < max(arenas), "largest arena %.1f MB < %.1f MB (time objective)"
              % (max(arenas2), max(arenas)))
        check(min(arenas2) >= sum(arenas2) / 8, "every GPU holds >= 1/8 of %.1f MB: %s"
              % (sum(arenas2), arenas2))

    profile = os.path.join(os.path.dirname(os.path.abspath(model)), "objective_62mb.profile")
    with open(profile, "w") as f:
        f.write("memory = 62e6\n")
    r1 = subprocess.run([mpcc, model, "-gpus", "1", "-batch", "1", "--profile=" + profile,
                         "--dump=partition"], capture_output=True, text=True)
    check(r1.returncode == 1 and ("the model does not fit" in r1.stderr
                                  or "memory plan needs" in r1.stderr),
          "one GPU of 62 MB is refused: %s"
          % r1.stderr.strip()[-200:])
    for objective in ("time", "memory"):
        r4, arenas4, _ = plan(mpcc, model, "--profile=" + profile, "--objective=" + objective)
        check(r4.returncode == 0 and len(arenas4) == 4 and max(arenas4) <= 62.0,
              "four GPUs of 62 MB plan it (--objective=%s): %s" % (objective, arenas4))

    r3 = subprocess.run([mpcc, model, "-gpus", "4", "--objective=speed", "--dump=partition"],
                        capture_output=True, text=True)
    check(r3.returncode == 1 and len(r3.stderr.splitlines()) == 1 and "objective" in r3.stderr,
          "--objective=speed is refused in one line: %s" % r3.stderr.strip())
    print("objective: %s" % ("FAILED" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
