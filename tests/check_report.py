"""Checks `mpcc --check` against op counts that onnx itself reads.

1. A model with two unknown ops, a custom-domain op and known ops: --check
   must exit 1 and list every unknown op type with its count and node names
   in one run, ending with one error line on stderr.
2. ResNet-50, whose every op mpcc trains (proven by tests/train): --check
   exits 0 and lists nothing.
3. The GPT-style model and DeepLabV3, whose every op mpcc trains (proven by
   tests/train): --check exits 0 and lists nothing.
4. Gradients are needed only where the loss's gradient flows: Sin (neither
   a CPU kernel nor a gradient) on a path from a weight is listed as missing
   both; Cos (the same) on the input side only misses its kernel only.
5. Past the op table, what the compile stops on is reported naming the
   node: Conv and MaxPool over 4 spatial dimensions, ConvTranspose3d with
   auto_pad (exit 1); Conv3d, MaxPool3d and AveragePool3d pass (exit 0).

    /usr/bin/python3 tests/check_report.py MPCC MODELS_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto, helper


def run_check(mpcc, path, *flags):
    p = subprocess.run([mpcc, path, "--check", *flags], capture_output=True, text=True)
    listed = {}
    for line in p.stdout.splitlines():
        m = re.match(r"^  (\S+)\s+(\d+) nodes?\s+missing: (.*)$", line)
        if m:
            listed[m.group(1)] = (int(m.group(2)), m.group(3))
    return p, listed


def unknown_ops_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r1"),
        helper.make_node("FrobOp", ["a"], ["b"], name="frob1"),
        helper.make_node("FrobOp", ["b"], ["c"], name="frob2"),
        helper.make_node("Zap", ["c"], ["d"], name="zap1"),
        helper.make_node("Custom", ["d"], ["e"], name="cust1", domain="com.microsoft"),
        helper.make_node("Relu", ["e"], ["y"], name="r2"),
    ]
    g = helper.make_graph(nodes, "unknowns", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    onnx.save(m, path)


def gradient_path_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    w = helper.make_tensor("W", TensorProto.FLOAT, [2, 4], [0.5] * 8)
    nodes = [
        helper.make_node("Cos", ["x"], ["a"], name="off_path"),
        helper.make_node("Add", ["a", "W"], ["b"], name="add"),
        helper.make_node("Sin", ["b"], ["y"], name="on_path"),
    ]
    g = helper.make_graph(nodes, "paths", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def window_model(path, op, x_shape, w_shape=None, **attrs):
    """One window op over x (and weight w, all 0.5) named after the op."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits, inputs = [], ["x"]
    if w_shape:
        n = 1
        for d in w_shape:
            n *= d
        inits.append(helper.make_tensor("w", TensorProto.FLOAT, w_shape, [0.5] * n))
        inputs.append("w")
    node = helper.make_node(op, inputs, ["y"], name=op.lower(), **attrs)
    g = helper.make_graph([node], "window", [x], [y], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


WINDOW_CASES = [
    # op, x, w, attributes, what --check must say (None: it passes)
    ("Conv", [2, 1, 3, 3, 3, 3], [2, 1, 2, 2, 2, 2], {},
     "node 'conv' (Conv): error: the CPU trainer does not support Conv over 4 spatial"),
    ("MaxPool", [2, 1, 3, 3, 3, 3], None, {"kernel_shape": [2, 2, 2, 2]},
     "node 'maxpool' (MaxPool): error: the CPU trainer does not support MaxPool over 4"),
    ("ConvTranspose", [2, 1, 3, 3, 3], [1, 2, 3, 3, 3],
     {"auto_pad": "SAME_UPPER", "strides": [2, 2, 2]},
     "node 'convtranspose' (ConvTranspose): error: the CPU trainer does not support "
     "ConvTranspose with auto_pad"),
    ("Conv", [2, 2, 4, 5, 6], [3, 2, 3, 3, 3], {"pads": [1, 0, 1, 0, 1, 1]}, None),
    ("MaxPool", [2, 1, 4, 6, 6], None, {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]},
     None),
    ("AveragePool", [2, 1, 4, 6, 6], None, {"kernel_shape": [3, 3, 3], "pads": [1] * 6},
     None),
]


def window_checks(mpcc, d):
    ok = True
    for i, (op, xs, ws, attrs, want) in enumerate(WINDOW_CASES):
        path = os.path.join(d, "window%d.onnx" % i)
        window_model(path, op, xs, ws, **attrs)
        p, _ = run_check(mpcc, path, "--loss=mse")
        if want is None and p.returncode != 0:
            print("%s over %s: expected --check to pass, got exit %d\n%s"
                  % (op, xs, p.returncode, p.stderr))
            ok = False
        if want is not None and (p.returncode != 1 or want not in p.stderr):
            print("%s over %s: expected exit 1 and %r, got exit %d\n%s"
                  % (op, xs, want, p.returncode, p.stderr))
            ok = False
    return ok


def main():
    mpcc, models = sys.argv[1], sys.argv[2]
    ok = True
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "unknowns.onnx")
        unknown_ops_model(path)
        p, listed = run_check(mpcc, path)
        want = {"FrobOp": 2, "Zap": 1, "com.microsoft.Custom": 1}
        for op, count in want.items():
            if listed.get(op, (0,))[0] != count or "unknown op" not in listed[op][1]:
                print("unknown op %s: expected %d, listed %r" % (op, count, listed.get(op)))
                ok = False
        if "'frob1', 'frob2'" not in p.stdout:
            print("node names of FrobOp not listed:\n" + p.stdout)
            ok = False
        if p.returncode != 1 or len(p.stderr.splitlines()) != 1 or "error:" not in p.stderr:
            print("expected exit 1 and one error line, got %d and %r" % (p.returncode, p.stderr))
            ok = False
    p, listed = run_check(mpcc, os.path.join(models, "resnet50.onnx"), "-batch", "2")
    if p.returncode != 0 or listed or "every op is supported" not in p.stdout:
        print("resnet50: expected no missing op, got exit %d and %r" % (p.returncode, listed))
        ok = False
    for name in ("gpt.onnx", "deeplabv3.onnx", "deeplabv3_r101.onnx"):
        p, listed = run_check(mpcc, os.path.join(models, name), "-batch", "2")
        if p.returncode != 0 or listed or "every op is supported" not in p.stdout:
            print("%s: expected no missing op, got exit %d and %r" % (name, p.returncode,
                                                                      listed))
            ok = False
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "paths.onnx")
        gradient_path_model(path)
        p, listed = run_check(mpcc, path)
        want = {"Sin": (1, "cpu kernel, gradient"), "Cos": (1, "cpu kernel")}
        if listed != want or "'on_path'" not in p.stdout or p.returncode != 1:
            print("gradient paths: expected %r (Sin at 'on_path'), got exit %d and %r\n%s"
                  % (want, p.returncode, listed, p.stdout))
            ok = False
    with tempfile.TemporaryDirectory() as d:
        ok = window_checks(mpcc, d) and ok
    print("check_report: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
