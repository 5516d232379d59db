"""Checks `mpcc --check` against op counts that onnx itself reads.

1. A model with two unknown ops, a custom-domain op and known ops: --check
   must exit 1 and list every unknown op type with its count and node names
   in one run, ending with one error line on stderr.
2. ResNet-50 (no foldable subgraph): the listed op types and counts must be
   exactly the model's own, as onnx counts them.

    /usr/bin/python3 tests/check_report.py MPCC MODELS_DIR
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto, helper


def run_check(mpcc, path):
    p = subprocess.run([mpcc, path, "--check"], capture_output=True, text=True)
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
    r50 = os.path.join(models, "resnet50.onnx")
    model = onnx.load(r50, load_external_data=False)
    counts = collections.Counter(n.op_type for n in model.graph.node)
    p, listed = run_check(mpcc, r50)
    got = {op: c for op, (c, _) in listed.items()}
    if got != dict(counts):
        print("resnet50: onnx counts %r, mpcc --check lists %r" % (dict(counts), got))
        ok = False
    print("check_report: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
