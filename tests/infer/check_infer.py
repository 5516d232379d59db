"""mpcc --infer end to end: a small ONNX model (Gemm + Relu, a Shape that
folds to a constant, a Cast to bool, Expand of that bool mask and of int64
values, a graph input passed straight through)
compiled into a forward-only program, built with -Wall -Wextra -Werror, run
on .npy inputs; its .npy outputs must equal numpy's (float within 1e-6, the
rest exactly). With --errors: bad inputs give one line on stderr naming the
file and what was expected, and exit status 1.

    /usr/bin/python3 tests/infer/check_infer.py MPCC WORKDIR [--errors]
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(path, w, b):
    nodes = [
        helper.make_node("Gemm", ["x", "W", "b"], ["h"], name="fc"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Cast", ["idx"], ["flags"], name="cast", to=TensorProto.BOOL),
        helper.make_node("Expand", ["flags", "mask_shape"], ["mask"], name="expand_bool"),
        helper.make_node("Unsqueeze", ["idx", "axis1"], ["col"], name="unsqueeze"),
        helper.make_node("Expand", ["col", "wide_shape"], ["wide"], name="expand_int"),
    ]
    graph = helper.make_graph(
        nodes, "infer_check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
         helper.make_tensor_value_info("flags", TensorProto.BOOL, [4]),
         helper.make_tensor_value_info("mask", TensorProto.BOOL, [2, 4]),
         helper.make_tensor_value_info("wide", TensorProto.INT64, [4, 3]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [4])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array([2, 4], np.int64), "mask_shape"),
         numpy_helper.from_array(np.array([1], np.int64), "axis1"),
         numpy_helper.from_array(np.array([4, 3], np.int64), "wide_shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def build(mpcc, work):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    idx = np.array([0, 3, -1, 0], dtype=np.int64)
    make_model(os.path.join(work, "model.onnx"), w, b)
    np.save(os.path.join(work, "x.npy"), x)
    np.save(os.path.join(work, "idx.npy"), idx)
    p = run([mpcc, "model.onnx", "-batch", "2", "--infer", "-o", "infer.c"], work)
    if p.returncode != 0:
        sys.exit("FAIL: mpcc --infer: " + p.stderr)
    p = run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "infer.c", "-o", "infer",
             "-lopenblas", "-lm"], work)
    if p.returncode != 0:
        sys.exit("FAIL: cc: " + p.stderr[:2000])
    return {"y": np.maximum(x @ w + b, 0), "s": np.array([2, 3], dtype=np.int64),
            "flags": idx != 0, "mask": np.broadcast_to(idx != 0, (2, 4)),
            "wide": np.broadcast_to(idx[:, None], (4, 3)), "idx": idx}


def check_outputs(work, expected):
    cmd = ["./infer", "--input", "x=x.npy", "--input", "idx=idx.npy"]
    for name in expected:
        cmd += ["--output", "%s=out_%s.npy" % (name, name)]
    p = run(cmd, work)
    if p.returncode != 0:
        sys.exit("FAIL: ./infer: " + p.stderr)
    for name, want in expected.items():
        got = np.load(os.path.join(work, "out_%s.npy" % name))
        if got.dtype != want.dtype or got.shape != want.shape:
            sys.exit("FAIL: %s is %s %s, expected %s %s" % (name, got.dtype, got.shape,
                                                           want.dtype, want.shape))
        close = np.allclose(got, want, rtol=1e-6, atol=1e-6) if want.dtype.kind == "f" \
            else np.array_equal(got, want)
        if not close:
            sys.exit("FAIL: %s = %s, expected %s" % (name, got, want))
    p = run(["./infer", "--input", "x=x.npy", "--input", "idx=idx.npy"], work)
    if p.returncode != 0 or "'y'  float32 (2, 4):" not in p.stdout:
        sys.exit("FAIL: without --output, expected a summary of y, got: " + p.stdout)
    print("outputs match: " + ", ".join(expected))


def check_errors(work):
    np.save(os.path.join(work, "x64.npy"), np.zeros((2, 3), dtype=np.float64))
    np.save(os.path.join(work, "x_wide.npy"), np.zeros((2, 5), dtype=np.float32))
    cases = [
        (["--input", "x=x.npy"],
         "infer: error: no --input for 'idx' (int64 (4,)); give --input 'idx=FILE.npy'"),
        (["--input", "x=x64.npy", "--input", "idx=idx.npy"],
         "infer: error: x64.npy: holds float64 (2, 3), but the model's input 'x' is "
         "float32 (2, 3)"),
        (["--input", "x=x_wide.npy", "--input", "idx=idx.npy"],
         "infer: error: x_wide.npy: holds float32 (2, 5), but the model's input 'x' is "
         "float32 (2, 3)"),
        (["--input", "x=nope.npy", "--input", "idx=idx.npy"], "infer: error: nope.npy: "),
        (["--input", "z=x.npy", "--input", "idx=idx.npy"],
         "infer: error: --input 'z=x.npy': the model has no input of that name "
         "(inputs: 'x', 'idx')"),
        (["--input", "x=x.npy", "--input", "idx=idx.npy", "--output", "q=q.npy"],
         "infer: error: --output 'q=q.npy': the model has no output of that name"),
        (["--input", "x=x.npy", "--input", "x=x.npy"], "infer: error: input 'x' is given twice"),
    ]
    for args, want in cases:
        p = run(["./infer", *args], work)
        lines = p.stderr.splitlines()
        if p.returncode != 1 or len(lines) != 1 or not lines[0].startswith(want):
            sys.exit("FAIL: ./infer %s: exit %d, stderr %r; expected one line starting %r"
                     % (" ".join(args), p.returncode, p.stderr, want))
    print("%d bad inputs refused in one line each" % len(cases))


def main():
    mpcc, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    expected = build(mpcc, work)
    if "--errors" in sys.argv:
        check_errors(work)
        p = run([mpcc, "model.onnx", "-batch", "2", "--infer"], work)
        if p.returncode != 1 or "give -o infer.c" not in p.stderr:
            sys.exit("FAIL: mpcc --infer without -o: " + p.stderr)
    else:
        check_outputs(work, expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
