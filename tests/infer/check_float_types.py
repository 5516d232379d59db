"""float64 and float16 models through mpcc --infer: computed in float32,
their inputs and outputs kept in the model's types (docs/frontend.md).

A model with a float32 input cast to float16, a float16 input cast to
float32 and negated in float16, and a float64 input times a float64 weight
through Relu. Its outputs are compared with numpy's: the float16 casts bit
for bit (every float16, the midpoints between them, random float32 bit
patterns, past 65504, NaN), the float64 product within float32's rounding.
`mpcc export` writes a float32 checkpoint of a float64 model back in
float64 (its weights are float32 values, so exactly).

    /usr/bin/python3 tests/infer/check_float_types.py MPCC WORKDIR
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(path, w):
    nodes = [
        helper.make_node("Cast", ["f"], ["f_half"], name="to_half", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["h"], ["h_float"], name="to_float", to=TensorProto.FLOAT),
        helper.make_node("Neg", ["h"], ["h_neg"], name="neg"),
        helper.make_node("MatMul", ["d", "W"], ["m"], name="matmul"),
        helper.make_node("Relu", ["m"], ["y"], name="relu"),
    ]
    n, nh = 65536 * 2 + 4096 + 8, 65536
    graph = helper.make_graph(
        nodes, "float_types",
        [helper.make_tensor_value_info("f", TensorProto.FLOAT, [n]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT16, [nh]),
         helper.make_tensor_value_info("d", TensorProto.DOUBLE, [4, 3])],
        [helper.make_tensor_value_info("f_half", TensorProto.FLOAT16, [n]),
         helper.make_tensor_value_info("h_float", TensorProto.FLOAT, [nh]),
         helper.make_tensor_value_info("h_neg", TensorProto.FLOAT16, [nh]),
         helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4, 2])],
        [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr))
    return p


def inputs(rng):
    every = np.arange(65536, dtype=np.uint16).view(np.float16)
    finite = every[np.isfinite(every)].astype(np.float32)
    ups = np.nextafter(finite, np.float32(np.inf))
    above = np.nextafter(finite.astype(np.float16), np.float16(np.inf)).astype(np.float64)
    mids = (finite.astype(np.float64) + above) / 2   # ties: float32 holds them exactly
    mids = mids[np.isfinite(mids)].astype(np.float32)
    random = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([65504, 65519.99, 65520, 1e30, -0.0, np.nan, np.inf, 2.0**-25],
                     np.float32)
    n = 65536 * 2 + 4096 + 8
    f = np.concatenate([finite, mids, random, edges, ups])[:n].astype(np.float32)
    d = rng.standard_normal((4, 3))
    return f, every, d


def same_bits(name, got, want):
    both_nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
    differ = (got.view(np.uint16 if got.itemsize == 2 else np.uint32)
              != want.view(np.uint16 if want.itemsize == 2 else np.uint32)) & ~both_nan
    if got.dtype != want.dtype or differ.any():
        k = int(np.argmax(differ)) if differ.any() else 0
        sys.exit("FAIL: %s: %s, %d of %d differ from numpy, first at %d: %r, expected %r"
                 % (name, got.dtype, int(differ.sum()), got.size, k, got[k], want[k]))


def check_outputs(work, f, h, d, w):
    want = {"f_half": f.astype(np.float16), "h_float": h.astype(np.float32), "h_neg": -h}
    for name, ref in want.items():
        same_bits(name, np.load(os.path.join(work, name + ".npy")), ref)
    y = np.load(os.path.join(work, "y.npy"))
    ref = np.maximum(d @ w, 0)
    err = np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30)
    if y.dtype != np.float64 or err > 1e-6:
        sys.exit("FAIL: y is %s, %.3g from numpy's float64 (float32 compute allows 1e-6)"
                 % (y.dtype, err))
    print("float16 casts bit for bit (%d and %d values), float64 output within %.2g"
          % (f.size, h.size, err))


def check_export(mpcc, work, w):
    """A float32 checkpoint of the float64 weight, exported into the model."""
    import struct
    import json
    w32 = (w * 3).astype(np.float32)
    header = json.dumps({"W": {"dtype": "F32", "shape": list(w.shape),
                               "data_offsets": [0, w32.nbytes]}}).encode()
    with open(os.path.join(work, "ckpt.safetensors"), "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header + w32.tobytes())
    run([mpcc, "export", "model.onnx", "ckpt.safetensors", "-o", "trained.onnx"], work)
    m = onnx.load(os.path.join(work, "trained.onnx"))
    got = numpy_helper.to_array(m.graph.initializer[0])
    if got.dtype != np.float64 or not np.array_equal(got, w32.astype(np.float64)):
        sys.exit("FAIL: export: W is %s %r, expected float64 %r" % (got.dtype, got, w32))
    onnx.checker.check_model(m)
    print("export writes the float32 checkpoint back as float64")


def main():
    mpcc, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2))
    make_model(os.path.join(work, "model.onnx"), w)
    f, h, d = inputs(rng)
    for name, a in (("f", f), ("h", h), ("d", d)):
        np.save(os.path.join(work, "in_%s.npy" % name), a)
    p = run([mpcc, "model.onnx", "--infer", "-o", "infer.c"], work)
    if "computed in float32" not in p.stderr:
        sys.exit("FAIL: mpcc did not say that float64 and float16 compute in float32: "
                 + p.stderr)
    run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "infer.c", "-o", "infer",
         "-lopenblas", "-lm", "-pthread"], work)
    help_text = run(["./infer", "--help"], work).stdout
    for line in ("'h'", "float16", "'d'", "float64"):
        if line not in help_text:
            sys.exit("FAIL: ./infer --help does not list %s:\n%s" % (line, help_text))
    cmd = ["./infer", "--input", "f=in_f.npy", "--input", "h=in_h.npy", "--input", "d=in_d.npy"]
    for name in ("f_half", "h_float", "h_neg", "y"):
        cmd += ["--output", "%s=%s.npy" % (name, name)]
    run(cmd, work)
    check_outputs(work, f, h, d, w)
    check_export(mpcc, work, w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
