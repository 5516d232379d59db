#!/usr/bin/python3
"""`mpcc --check` agrees with the compile it stands for.

For every model of Debian's ONNX conformance suite (node, pytorch-converted,
pytorch-operator, simple; --shapes from the first stored data set, as
run.py binds them) and for each model given on the command line (with
-batch 2), in both modes, training (the default) and --infer:

    mpcc MODEL [--infer] SHAPES --check          exit 0 or 1
    mpcc MODEL [--infer] SHAPES -o prog.c        exit 0 or 1

--check passes exactly when the compile does: a condition the compile
stops on (an attribute, a rank, a dtype, the plan) that --check misses is
a failure here, and so is a --check that refuses what compiles. Either
one crashing (an exit status other than 0 and 1) is a failure too.

Usage: check_agrees.py MPCC [--jobs 2] [--only REGEX] [MODEL.onnx ...]
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as conformance  # noqa: E402  (tests/conformance/run.py)

import onnx  # noqa: E402


def shapes_of(test_dir):
    """--shapes for a conformance test, or None when it has no usable data."""
    model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
    inputs = conformance.graph_inputs(model)
    sets = conformance.data_sets(test_dir)
    if not sets or any(i.type.WhichOneof("value") != "tensor_type" for i in inputs):
        return None
    try:
        arrays = [conformance.read_tensor(os.path.join(test_dir, sets[0], "input_%d.pb" % k))
                  for k in range(len(inputs))]
    except (OSError, ValueError, TypeError):
        return None
    return conformance.shapes_arg(inputs, arrays)


def status(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    last = [l for l in p.stderr.splitlines() if "error" in l]
    return p.returncode, (last[0] if last else p.stderr.strip()[-200:])[:240]


def one(mpcc, name, model, args):
    """Mismatches of one model, as lines (none when --check agrees)."""
    work = tempfile.mkdtemp(prefix="check-agrees-")
    bad = []
    try:
        for mode in (["--infer"], []):
            rc_check, why_check = status([mpcc, model, *mode, *args, "--check"], work)
            rc_build, why_build = status([mpcc, model, *mode, *args, "-o", "prog.c"], work)
            what = "%s%s" % (name, " --infer" if mode else "")
            for rc, step, why in ((rc_check, "--check", why_check),
                                  (rc_build, "compile", why_build)):
                if rc not in (0, 1):
                    bad.append("%s: %s exits %d: %s" % (what, step, rc, why))
            if rc_check in (0, 1) and rc_build in (0, 1) and (rc_check == 0) != (rc_build == 0):
                bad.append("%s: --check %s but the compile %s: %s" % (
                    what, "passes" if rc_check == 0 else "fails",
                    "fails" if rc_build else "passes", why_build if rc_build else why_check))
        return bad, rc_check == 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mpcc")
    ap.add_argument("models", nargs="*")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    mpcc = os.path.abspath(args.mpcc)
    work = []
    for suite, name, test_dir in conformance.all_tests(conformance.DATA):
        key = "%s/%s" % (suite, name)
        if args.only and not re.search(args.only, key):
            continue
        shapes = shapes_of(test_dir)
        if shapes is not None:
            work.append((key, os.path.join(test_dir, "model.onnx"), shapes))
    for m in args.models:
        work.append((os.path.basename(m), os.path.abspath(m), ["-batch", "2"]))
    failures, agree, trainable = [], 0, 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for bad, ok in pool.map(lambda w: one(mpcc, *w), work):
            failures += bad
            agree += not bad
            trainable += ok
    for line in sorted(failures):
        print("MISMATCH " + line)
    print("check_agrees: %d models, training and --infer: --check agrees with the compile "
          "on %d (%d compile for training); %d mismatches"
          % (len(work), agree, trainable, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
