#!/usr/bin/python3
"""The conformance tests run.py skips because a graph input gives what mpcc
fixes when it compiles (TopK's K, OneHot's depth, Trilu's k), run with that
input made an initializer holding its stored value.

For every test of the node suite that skip.txt lists and whose model feeds
a graph input to one of the inputs in FROZEN: per data set, a copy of the
model with those inputs turned into initializers (their values from the
data set) and the data set's other inputs and expected outputs, run as
run.py runs a test (`mpcc --infer`, the build line it writes, every output
compared with the stored one). A test run.py would attempt is left to it,
and so is one listed here whose inputs are not frozen. Exits 1 when a test
fails, or when no test is found.

Usage: frozen.py MPCC [--skip FILE] [--only REGEX] [--verbose]
"""
import argparse
import os
import re
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as conformance  # noqa: E402  (tests/conformance/run.py)

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

# The inputs frozen, by op: the positions of those mpcc needs as constants.
FROZEN = {"TopK": (1,), "OneHot": (1,), "Trilu": (1,)}


def frozen_inputs(model):
    """The names of the graph inputs that FROZEN's inputs read."""
    graph_inputs = {i.name for i in conformance.graph_inputs(model)}
    names = set()
    for node in model.graph.node:
        for k in FROZEN.get(node.op_type, ()):
            if k < len(node.input) and node.input[k] in graph_inputs:
                names.add(node.input[k])
    return names


def frozen_copy(test_dir, data_set, model, names, dest):
    """dest/model.onnx with the inputs `names` as initializers of data_set's
    values, and dest/test_data_set_0 with the other inputs, renumbered."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inputs = conformance.graph_inputs(model)
    src, out = os.path.join(test_dir, data_set), os.path.join(dest, "test_data_set_0")
    os.makedirs(out)
    kept = []
    for k, inp in enumerate(inputs):
        path = os.path.join(src, "input_%d.pb" % k)
        if inp.name in names:
            m.graph.initializer.append(numpy_helper.from_array(conformance.read_tensor(path),
                                                               inp.name))
        else:
            shutil.copy(path, os.path.join(out, "input_%d.pb" % len(kept)))
            kept.append(inp)
    del m.graph.input[:]
    m.graph.input.extend(kept)
    for f in os.listdir(src):
        if f.startswith("output_"):
            shutil.copy(os.path.join(src, f), out)
    onnx.save(m, os.path.join(dest, "model.onnx"))
    return m


def run_test(mpcc, test_dir, model, names):
    """Every data set of one test, frozen; raises conformance.Failure."""
    work = tempfile.mkdtemp(prefix="conf-frozen-")
    try:
        for i, ds in enumerate(conformance.data_sets(test_dir)):
            dest = os.path.join(work, "test%d" % i)
            m = frozen_copy(test_dir, ds, model, names, dest)
            build = os.path.join(dest, "build")
            os.makedirs(build)
            conformance.attempt(mpcc, dest, m, build, (conformance.RTOL, conformance.ATOL))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mpcc")
    ap.add_argument("--skip", default=os.path.join(os.path.dirname(__file__), "skip.txt"))
    ap.add_argument("--data", default=conformance.DATA)
    ap.add_argument("--only", default="")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    mpcc = os.path.abspath(args.mpcc)
    skips = conformance.load_skips(args.skip)
    passed, failed = 0, 0
    for key in sorted(skips):
        suite, name = key.split("/", 1)
        test_dir = os.path.join(args.data, suite, name)
        if suite != "node" or not re.search(args.only, name):
            continue
        model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
        names = frozen_inputs(model)
        if not names:
            continue
        try:
            run_test(mpcc, test_dir, model, names)
            passed += 1
            if args.verbose:
                print("pass  %s (%s frozen)" % (key, ", ".join(sorted(names))))
        except conformance.Failure as e:
            failed += 1
            print("FAIL  %s (%s frozen): %s" % (key, ", ".join(sorted(names)), e))
    print("frozen: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
