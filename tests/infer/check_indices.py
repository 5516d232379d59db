"""Indices read at run time, end to end with mpcc --infer: GatherElements
(int32 indices, negative ones among them) and ScatterND (int64, reduction
add, a repeated row) on graph inputs, their outputs against numpy's
take_along_axis and add.at; then an index out of range for each, which the
program must refuse in one line naming the node, with exit status 1, as it
does Gather's.

    /usr/bin/python3 tests/infer/check_indices.py MPCC WORKDIR
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper


def make_model(path):
    nodes = [helper.make_node("GatherElements", ["x", "gi"], ["g"], name="ge", axis=1),
             helper.make_node("ScatterND", ["x", "si", "u"], ["s"], name="snd",
                              reduction="add")]
    graph = helper.make_graph(
        nodes, "indices",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("gi", TensorProto.INT32, [2, 4]),
         helper.make_tensor_value_info("si", TensorProto.INT64, [3, 1]),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def main():
    mpcc, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    make_model(os.path.join(work, "model.onnx"))
    p = run([mpcc, "model.onnx", "--infer", "-o", "infer.c"], work)
    if p.returncode != 0:
        sys.exit("FAIL: mpcc --infer: " + p.stderr)
    p = run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "infer.c", "-o", "infer",
             "-lopenblas", "-lm"], work)
    if p.returncode != 0:
        sys.exit("FAIL: cc: " + p.stderr[:2000])
    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((2, 3)).astype(np.float32),
            "gi": np.array([[0, -1, 2, 2], [1, 0, -3, 0]], np.int32),
            "si": np.array([[1], [-2], [1]], np.int64),
            "u": rng.standard_normal((3, 3)).astype(np.float32),
            "gi_bad": np.array([[0, -1, 2, 2], [1, 0, -3, 3]], np.int32),
            "si_bad": np.array([[1], [-3], [1]], np.int64)}
    for name, v in data.items():
        np.save(os.path.join(work, name + ".npy"), v)
    s = data["x"].copy()
    np.add.at(s, data["si"][:, 0], data["u"])
    want = {"g": np.take_along_axis(data["x"], data["gi"] % 3, 1), "s": s}

    def infer(gi, si, *extra):
        return run(["./infer", "--input", "x=x.npy", "--input", "gi=%s.npy" % gi,
                    "--input", "si=%s.npy" % si, "--input", "u=u.npy", *extra], work)
    p = infer("gi", "si", "--output", "g=g.npy", "--output", "s=s.npy")
    if p.returncode != 0:
        sys.exit("FAIL: ./infer: " + p.stderr)
    for name, w in want.items():
        got = np.load(os.path.join(work, name + ".npy"))
        if got.shape != w.shape or not np.allclose(got, w, rtol=1e-6, atol=1e-6):
            sys.exit("FAIL: %s = %s, expected %s" % (name, got, w))
    for gi, si, line in (
            ("gi_bad", "si", "error: node 'ge': index 3 is out of range [-3, 3)"),
            ("gi", "si_bad", "error: node 'snd': index -3 is out of range [-2, 2)")):
        p = infer(gi, si)
        lines = p.stderr.splitlines()
        if p.returncode != 1 or len(lines) != 1 or line not in lines[0]:
            sys.exit("FAIL: ./infer with %s.npy, %s.npy: exit %d, stderr %r; expected one "
                     "line with %r" % (gi, si, p.returncode, p.stderr, line))
    print("GatherElements and ScatterND match numpy; out-of-range indices refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
