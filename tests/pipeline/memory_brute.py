#!/usr/bin/python3
"""The partitioner never rejects a plan that fits: brute force over cuts.

For a small model, every way to cut it into stages (--split) is planned
under each schedule and micro-batch count with memory to spare, and each
device's arena is read from the generated train.c (the memory plan's own
figure, in bytes). For each (devices, schedule, M) the least largest arena
over all cuts is the memory T* at which some plan fits. Then mpcc, left to
choose the cuts itself, with every device given exactly T* bytes, must find
a plan (whose arenas fit T*); given T* - 1 bytes it must say that nothing
fits. Finally --schedule=auto with the least T* over all candidates must
find a plan.

The interleaved schedule puts several stages on a device, whose memory is
their sum: the partitioner cannot rule one of them out alone, and gives
each 1/V of the device (docs/pipeline.md). Its T* is printed, and it must
never claim a plan over T* - 1; that it finds one at T* is not required.

Usage: memory_brute.py MPCC MODEL WORKDIR "-batch 8 ..." DEVICES [DEVICES..]
"""
import itertools
import math
import os
import re
import subprocess
import sys

ENV = dict(os.environ, MPCC_CPU_PROFILE="1e10,1e10")
SCHEDULES = ("gpipe", "1f1b", "zb", "interleaved")


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV)


def forward_nodes(mpcc, model, args):
    r = run([mpcc, model] + args + ["--dump=ir"])
    if r.returncode:
        sys.exit("FAIL: --dump=ir: %s" % r.stderr)
    names = re.findall(r"^node\s+\S+\s+'([^']*)'", r.stdout, re.M)
    return names[:-1]   # the loss last: no cut after it


def arenas(path):
    """Each device's memory plan in bytes, from the header of train.c."""
    with open(path) as f:
        head = f.read(8192)
    return [int(b) for b in re.findall(r"memory plan (\d+) bytes", head)]


def plan(mpcc, model, args, work, extra):
    out = os.path.join(work, "train.c")
    r = run([mpcc, model] + args + extra + ["-o", out])
    return (arenas(out), r) if r.returncode == 0 else (None, r)


def profile(work, memory):
    path = os.path.join(work, "profile.txt")
    with open(path, "w") as f:
        f.write("memory = %d\n" % memory)
    return "--profile=" + path


MAX_CUTS = 800


def least_over_cuts(mpcc, model, args, work, devices, sched, M, names):
    """The least largest arena over every cut (None if no cut is valid, or
    if there are more than MAX_CUTS ways to cut)."""
    stages = devices * (2 if sched == "interleaved" else 1)
    best, tried = None, 0
    if math.comb(len(names), stages - 1) > MAX_CUTS:
        return None, 0
    for cuts in itertools.combinations(names, stages - 1):
        extra = ["-cpus", str(devices), "--schedule=" + sched, "--microbatches=%d" % M]
        if cuts:
            extra.append("--split=" + ",".join(cuts))
        got, _ = plan(mpcc, model, args, work, extra)
        if got is None:
            continue   # a cut inside a parameter's readers, or too few units
        tried += 1
        best = max(got) if best is None else min(best, max(got))
    return best, tried


def search(mpcc, model, args, work, devices, sched, M, memory):
    extra = ["-cpus", str(devices), "--microbatches=%d" % M, profile(work, memory)]
    if sched:
        extra.append("--schedule=" + sched)
    return plan(mpcc, model, args, work, extra)


def main():
    mpcc, model, work = sys.argv[1], sys.argv[2], sys.argv[3]
    # the partitioner on its own: with --offload=auto (the default) a plan
    # that does not fit would be tried again with activations in host memory
    args = sys.argv[4].split() + ["--offload=none"]
    os.makedirs(work, exist_ok=True)
    names = forward_nodes(mpcc, model, args)
    failed, cases = False, 0
    for devices in map(int, sys.argv[5:]):
        least = None
        for sched, M in itertools.product(SCHEDULES, (1, 2, 4)):
            if sched == "interleaved" and M % devices:
                continue
            t, tried = least_over_cuts(mpcc, model, args, work, devices, sched, M, names)
            if t is None:
                continue
            least = t if least is None else min(least, t)
            got, r = search(mpcc, model, args, work, devices, sched, M, t)
            ok_fit = got is not None and max(got) <= t
            got_less, r_less = search(mpcc, model, args, work, devices, sched, M, t - 1)
            ok_less = got_less is None and "memory" in r_less.stderr
            cases += 1
            failed |= not ok_less or (not ok_fit and sched != "interleaved")
            print("%d devices %-11s M=%d: %3d cuts, least arena %d bytes; at it: %s; "
                  "1 byte less: %s" % (devices, sched, M, tried, t,
                                       "found %s" % got if ok_fit else
                                       ("none (not required)" if sched == "interleaved"
                                        else "FAIL: " + r.stderr.strip()[-300:]),
                                       "none fits" if ok_less else
                                       "FAIL: found %s" % got_less))
        got, r = search(mpcc, model, args, work, devices, None, 4, least)
        ok = got is not None
        failed |= not ok
        print("%d devices, auto schedule, M=4, memory %d: %s" % (
            devices, least, "found %s" % got if ok else "FAIL: " + r.stderr.strip()))
    print("memory_brute: %d cases: %s" % (cases, "FAILED" if failed else "ok"))
    return 1 if failed or cases == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
