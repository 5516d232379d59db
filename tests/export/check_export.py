#!/usr/bin/python3
"""Runs `mpcc export MODEL CKPT -o OUT` and checks the model it writes.

Checks:
  - mpcc exits 0 with nothing on stderr, and leaves no OUT.tmp;
  - onnx.checker.check_model(OUT, full_check=True) passes;
  - OUT holds its data inline (no external data);
  - every initializer that CKPT holds equals the checkpoint's tensor
    exactly (dtype, shape, bits); every other one equals MODEL's;
  - the same initializers in the same order, and the graph (nodes, inputs,
    outputs, value_info), opsets, IR version and metadata are MODEL's;
  - with --reference final.npz (PyTorch's weights after the same training),
    every tensor in it is within ATOL + RTOL*|ref| of OUT's initializer;
  - with --unchanged, every initializer equals MODEL's (CKPT is the
    trainer's initial weights, so export must give the model back);
  - with --forward x.npy --sizes 784,256,10: OUT run on 32 rows of x
    (a numpy evaluation of its graph, and onnxruntime when it can be
    imported) gives the logits of PyTorch's MLP (Linear/ReLU of those
    sizes) loaded with the reference weights (--reference) or OUT's.

Run:  /usr/bin/python3 tests/export/check_export.py MPCC MODEL CKPT OUT \\
          [--reference final.npz] [--unchanged] [--forward x.npy --sizes 784,256,10]
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ST_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
             "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
             "BOOL": np.bool_}

failures = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def read_st(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], ST_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def run_export(mpcc, model, ckpt, out):
    if os.path.exists(out):
        os.remove(out)
    p = subprocess.run([mpcc, "export", model, ckpt, "-o", out], capture_output=True,
                       text=True)
    check(p.returncode == 0 and p.stderr == "",
          "mpcc export exits 0 with no message (status %d, stderr %r)"
          % (p.returncode, p.stderr))
    check(not os.path.exists(out + ".tmp"), "no %s.tmp left" % out)
    if p.returncode != 0:
        sys.exit(1)


def structure(m):
    """The model without its initializers' contents, as bytes."""
    c = onnx.ModelProto()
    c.CopyFrom(m)
    del c.graph.initializer[:]
    return c.SerializeToString(deterministic=True)


def check_initializers(orig, out, ckpt, unchanged):
    names = [t.name for t in out.graph.initializer]
    check(names == [t.name for t in orig.graph.initializer],
          "the same %d initializers in the same order" % len(names))
    check(all(t.data_location != onnx.TensorProto.EXTERNAL for t in out.graph.initializer),
          "every initializer is inline")
    before = {t.name: numpy_helper.to_array(t) for t in orig.graph.initializer}
    n_ckpt = 0
    for t in out.graph.initializer:
        a = numpy_helper.to_array(t)
        want, src = (ckpt[t.name], "the checkpoint") if t.name in ckpt else \
                    (before[t.name], "the original")
        n_ckpt += t.name in ckpt
        same = a.dtype == want.dtype and a.shape == want.shape and \
            a.tobytes() == want.tobytes()
        check(same, "%s %s %s equals %s's exactly" % (t.name, a.dtype, list(a.shape), src))
        if unchanged:
            b = before[t.name]
            check(a.dtype == b.dtype and a.tobytes() == b.tobytes(),
                  "%s equals the original model's" % t.name)
    check(n_ckpt > 0, "%d initializers come from the checkpoint" % n_ckpt)


def check_reference(out, ref_path, atol, rtol):
    got = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    with np.load(ref_path) as z:
        for name in z.files:
            b = z[name].astype(np.float64)
            if name not in got:
                check(False, "%s of %s is an initializer" % (name, ref_path))
                continue
            d = np.abs(got[name].astype(np.float64) - b)
            ok = got[name].shape == b.shape and bool(np.all(d <= atol + rtol * np.abs(b)))
            check(ok, "%s within %g + %g*|ref| of PyTorch's (max abs err %.3g)"
                  % (name, atol, rtol, float(d.max()) if d.size else 0.0))


def evaluate(model, x):
    """The graph run with numpy; enough ops for the MLP tests."""
    env = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    env[model.graph.input[0].name] = x
    for n in model.graph.node:
        a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
        i = [env[k] for k in n.input]
        if n.op_type == "Gemm":
            A = i[0].T if a.get("transA", 0) else i[0]
            B = i[1].T if a.get("transB", 0) else i[1]
            y = a.get("alpha", 1.0) * (A @ B)
            if len(i) > 2:
                y = y + a.get("beta", 1.0) * i[2]
        elif n.op_type == "Relu":
            y = np.maximum(i[0], 0)
        elif n.op_type == "Reshape":
            y = i[0].reshape(i[1])
        elif n.op_type == "Flatten":
            y = i[0].reshape(i[0].shape[0], -1)
        elif n.op_type == "MatMul":
            y = i[0] @ i[1]
        elif n.op_type == "Add":
            y = i[0] + i[1]
        elif n.op_type == "Cast" and a["to"] == onnx.TensorProto.FLOAT:
            y = i[0]   # to_array gave a bfloat16 initializer as float32
        else:
            raise SystemExit("check_export: no numpy evaluation of %s" % n.op_type)
        env[n.output[0]] = y.astype(np.float32)
    return env[model.graph.output[0].name]


def torch_logits(sizes, weights, x):
    import torch
    layers = []
    for k in range(len(sizes) - 1):
        layers += [torch.nn.Linear(sizes[k], sizes[k + 1]), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers[:-1])
    net.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()},
                        strict=True)
    with torch.no_grad():
        return net(torch.from_numpy(x)).numpy()


def check_forward(out_path, out, x_path, sizes, ref_path):
    x = np.load(x_path)[:32].astype(np.float32)
    if ref_path:
        with np.load(ref_path) as z:
            weights, whose = {k: z[k] for k in z.files}, "PyTorch's final weights"
    else:
        weights = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer
                   if t.data_type == onnx.TensorProto.FLOAT}
        whose = "the exported weights"
    want = torch_logits(sizes, weights, x)
    tol = dict(atol=1e-4, rtol=1e-3)
    got = evaluate(out, x)
    check(got.shape == want.shape and np.allclose(got, want, **tol),
          "the exported graph (numpy) gives the logits of PyTorch's MLP with %s "
          "(max abs err %.3g)" % (whose, float(np.abs(got - want).max())))
    try:
        import onnxruntime
    except ImportError:
        print("skip: onnxruntime is not installed; forward pass checked with numpy only")
        return
    s = onnxruntime.InferenceSession(out_path, providers=["CPUExecutionProvider"])
    (got,) = s.run(None, {s.get_inputs()[0].name: x})
    check(np.allclose(got, want, **tol), "onnxruntime gives the logits of PyTorch's MLP "
          "(max abs err %.3g)" % float(np.abs(got - want).max()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mpcc")
    ap.add_argument("model")
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--reference")
    ap.add_argument("--unchanged", action="store_true")
    ap.add_argument("--forward")
    ap.add_argument("--sizes", default="784,256,10")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--rtol", type=float, default=1e-3)
    args = ap.parse_args()

    run_export(args.mpcc, args.model, args.ckpt, args.out)
    orig, out = onnx.load(args.model), onnx.load(args.out)
    try:
        # By path, then the loaded model with strict shape inference (given
        # a path, full_check would write the inferred shapes into the file).
        onnx.checker.check_model(args.out)
        onnx.checker.check_model(out, full_check=True)
        check(True, "onnx.checker.check_model accepts %s" % args.out)
    except Exception as e:  # the checker raises several kinds
        check(False, "onnx.checker.check_model: %s" % e)
    check(structure(out) == structure(orig),
          "graph (%d nodes, inputs, outputs), opsets and metadata unchanged"
          % len(out.graph.node))
    check_initializers(orig, out, read_st(args.ckpt), args.unchanged)
    if args.reference:
        check_reference(out, args.reference, args.atol, args.rtol)
    if args.forward:
        sizes = [int(s) for s in args.sizes.split(",")]
        check_forward(args.out, out, args.forward, sizes, args.reference)
    print("check_export: %s" % ("FAILED: %d checks" % len(failures) if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
