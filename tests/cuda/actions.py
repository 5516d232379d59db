#!/usr/bin/env python3
"""actions.py — the CUDA trainer and the CPU trainer run one schedule.

  actions.py MPCC GOLDEN MODEL [mpcc options...]

Compiles MODEL twice with the same options, the same cost profile
(h100-sxm) and so the same plan: once for two CUDA devices (-gpus 2), once
for two CPU devices (--devices=cpu:0,cpu:1, with the builtin convolutions
that the CUDA trainer's kernels mirror). From each generated train.c it
reads the step: run_step's stream operations in issue order (launches,
event records and waits, copies with their streams and sizes) and, inside
each launched action, the kernels it calls in order, with mprt_cu_X and
mprt_X both written X; streams and events by number (the trainer names
them in two enums). The two sequences must be identical, and equal to
GOLDEN (MPCC_UPDATE_GOLDEN=1 rewrites it; review the diff).
"""
import os
import re
import subprocess
import sys
import tempfile

CALL = re.compile(r"\bmprt_(?:cu_)?([a-z0-9_]+)\(")
# The trainer's bookkeeping inside actions, not kernels.
NOT_KERNELS = {"dev_read", "dev_hold", "dev_unhold", "dev_stage", "dev_commit", "keep_loss",
               "prof_node", "prof_end"}


def function_body(src, name):
    m = re.search(r"^static void %s\([^)]*\)\n\{\n" % re.escape(name), src, re.M)
    if not m:
        sys.exit("actions.py: no function %s in the generated trainer" % name)
    end = src.index("\n}\n", m.end())
    return src[m.end():end]


def enum_numbers(src):
    """The streams' and events' numbers by name: the trainer's enums
    (CPU0_COMPUTE = 0, ...; EV_S0_FWD_MB0 = 0, ...)."""
    numbers = {}
    for body in re.findall(r"^enum \{(.*?)\};", src, re.M | re.S):
        names = [n.strip() for n in re.sub(r"/\*.*?\*/", "", body, flags=re.S).split(",")]
        names = [n for n in names if n]
        if names and (names[0].startswith("EV_") or names[0].endswith("_COMPUTE")):
            numbers.update({n: str(i) for i, n in enumerate(names)})
    return numbers


def step_actions(path):
    with open(path) as f:
        src = f.read()
    num = enum_numbers(src)
    out = []
    for line in function_body(src, "run_step").splitlines():
        line = line.split("/*")[0].strip()
        if not line:
            continue
        m = re.match(r"mprt_launch\((\w+), (\w+), (\d+), \d+\);$", line)
        if m:
            out.append("launch stream %s %s mb %s" % (num[m.group(1)], m.group(2), m.group(3)))
            for call in CALL.findall(function_body(src, m.group(2))):
                if call not in NOT_KERNELS:
                    out.append("    " + call)
            continue
        m = re.match(r"mprt_memcpy_async\((\w+), .*, (\d+), \d+\);$", line)
        if m:
            out.append("copy stream %s %s bytes" % (num[m.group(1)], m.group(2)))
            continue
        m = re.match(r"mprt_(record|wait)_event\((\w+), (\w+)\);$", line)
        if m:
            out.append("%s stream %s event %s" % (m.group(1), num[m.group(2)], num[m.group(3)]))
            continue
        if line == "mprt_sync();":
            out.append("sync")
            continue
        sys.exit("actions.py: %s: unexpected line in run_step: %s" % (path, line))
    return out


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    mpcc, golden, model, opts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    with tempfile.TemporaryDirectory() as tmp:
        seqs = {}
        for kind, devs in (("cuda", ["-gpus", "2"]), ("cpu", ["--devices=cpu:0,cpu:1", "--cpu-kernels=builtin"])):
            out = os.path.join(tmp, kind + ".c")
            subprocess.run([mpcc, model, *devs, "--profile=h100-sxm", *opts, "-o", out],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            seqs[kind] = step_actions(out)
    if seqs["cuda"] != seqs["cpu"]:
        for i, (a, b) in enumerate(zip(seqs["cuda"], seqs["cpu"])):
            if a != b:
                sys.exit("actions.py: the CUDA and CPU steps differ at action %d: %r vs %r"
                         % (i, a, b))
        sys.exit("actions.py: the CUDA step has %d actions, the CPU step %d"
                 % (len(seqs["cuda"]), len(seqs["cpu"])))
    text = "\n".join(seqs["cuda"]) + "\n"
    if os.environ.get("MPCC_UPDATE_GOLDEN") == "1":
        with open(golden, "w") as f:
            f.write(text)
        print("updated", golden)
        return
    with open(golden) as f:
        want = f.read()
    if text != want:
        a, b = want.splitlines(), text.splitlines()
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        sys.exit("actions.py: the step differs from %s at line %d: expected %r, got %r"
                 % (golden, i + 1, a[i] if i < len(a) else "<end>", b[i] if i < len(b) else "<end>"))
    kernels = sum(1 for s in seqs["cuda"] if s.startswith("    "))
    print("actions.py: CUDA and CPU steps identical (%d stream operations, %d kernel calls), "
          "equal to %s" % (len(seqs["cuda"]) - kernels, kernels, golden))


if __name__ == "__main__":
    main()
