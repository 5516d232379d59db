"""Checks mpcc's shape inference against the ONNX conformance suite.

For every test model under the suite folders (Debian's libonnx-testdata), runs
`mpcc --dump=shapes` with the input shapes of test_data_set_0 and compares the
dtype and shape of every graph output with the stored expected output tensor.
Tests that use an op mpcc does not know are counted as unsupported, not run.

    /usr/bin/python3 tests/conformance_shapes.py MPCC [--data DIR] [--skip FILE]

A test listed in the skip file (one `suite/test  reason` per line) is skipped;
every other supported test must match. Exit 1 on any mismatch or mpcc error.
"""
import argparse
import ast
import os
import subprocess
import sys

import onnx
from onnx import numpy_helper  # noqa: F401  (import checks the package is complete)

DTYPES = {1: "f32", 2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32", 7: "i64",
          9: "bool", 10: "f16", 11: "f64", 12: "u32", 13: "u64", 16: "bf16"}
SUITES = ["node", "pytorch-converted", "pytorch-operator", "simple"]


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def parse_dump(text):
    shapes = {}
    for line in text.splitlines():
        dtype, rest = line.split(" ", 1)
        dims, name = rest.split("] ", 1)
        dims = dims.lstrip("[")
        shapes[ast.literal_eval(name)] = (dtype, [int(d) for d in dims.split(",") if d])
    return shapes


def load_skips(path):
    skips = {}
    if path:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    key, _, reason = line.partition(" ")
                    skips[key] = reason.strip()
    return skips


def run_one(mpcc, test_dir):
    """Returns (status, detail): status is pass, fail, unsupported or nodata."""
    model_path = os.path.join(test_dir, "model.onnx")
    data_dir = os.path.join(test_dir, "test_data_set_0")
    if not os.path.isdir(data_dir):
        return "nodata", ""
    model = onnx.load(model_path, load_external_data=False)
    init_names = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in init_names]
    shape_args = []
    for k, inp in enumerate(inputs):
        pb = os.path.join(data_dir, "input_%d.pb" % k)
        if not os.path.exists(pb):
            return "nodata", "missing " + pb
        t = read_tensor(pb)
        if not inp.type.HasField("tensor_type"):
            return "unsupported", "non-tensor input"
        dims = "x".join(str(d) for d in t.dims)
        if "," in inp.name or not dims:
            if not dims and any(True for _ in inp.type.tensor_type.shape.dim):
                return "fail", "scalar input with declared dims"
            continue
        shape_args.append("%s:%s" % (inp.name, dims))
    cmd = [mpcc, model_path, "--dump=shapes"]
    if shape_args:
        cmd.append("--shapes=" + ",".join(shape_args))
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        err = p.stderr.strip()
        if "is not supported" in err or "not supported" in err:
            return "unsupported", err
        # A shape that depends on the values of a graph input (an integer or a
        # scalar fed at run time) cannot be static: mpcc refuses it by design.
        value_inputs = [i for i in inputs
                        if i.type.tensor_type.elem_type in (6, 7)
                        or len(i.type.tensor_type.shape.dim) == 0
                        or "start" in i.name or "scales" in i.name]
        if "is not a compile-time constant" in err and value_inputs:
            return "dynamic", err
        return "fail", err
    shapes = parse_dump(p.stdout)
    for k, out in enumerate(model.graph.output):
        pb = os.path.join(data_dir, "output_%d.pb" % k)
        if not os.path.exists(pb):
            continue
        t = read_tensor(pb)
        want = (DTYPES.get(t.data_type, "?"), list(t.dims))
        got = shapes.get(out.name)
        if got != want:
            return "fail", "output %r: mpcc %s, expected %s" % (out.name, got, want)
    return "pass", ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mpcc")
    ap.add_argument("--data", default="/usr/share/libonnx-testdata/data")
    ap.add_argument("--skip", default=None)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    skips = load_skips(args.skip)
    totals = {}
    failed = []
    for suite in SUITES:
        root = os.path.join(args.data, suite)
        counts = totals.setdefault(suite, {"pass": 0, "fail": 0, "unsupported": 0, "dynamic": 0,
                                           "nodata": 0, "skip": 0})
        for name in sorted(os.listdir(root)):
            key = "%s/%s" % (suite, name)
            if key in skips:
                counts["skip"] += 1
                continue
            status, detail = run_one(args.mpcc, os.path.join(root, name))
            counts[status] += 1
            if status == "fail":
                failed.append("%s: %s" % (key, detail))
            if args.verbose:
                print("%-12s %s %s" % (status, key, detail))
    for f in failed:
        print("FAIL " + f)
    npass = sum(c["pass"] for c in totals.values())
    nfail = sum(c["fail"] for c in totals.values())
    for suite, c in totals.items():
        print("%-18s %4d passed, %3d failed, %4d unsupported op, %3d runtime shape "
              "input, %3d skipped, %3d no data" % (suite, c["pass"], c["fail"],
              c["unsupported"], c["dynamic"], c["skip"], c["nodata"]))
    print("%d passed, %d failed" % (npass, nfail))
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
