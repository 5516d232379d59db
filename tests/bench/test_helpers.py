#!/usr/bin/env python3
"""Checks gpu_run.sh probe's two helpers on files made here.

ckpt_diff.py: two checkpoints that differ in one element of one tensor
(by one ulp) must name that tensor alone and exit 1; the same file twice
exits 0. profile_summary.py: a profile of known nodes must sum them by
kind as its docstring says (MatMul_1 and MatMul are one kind, a gradient
keeps its suffix, updates are one kind) and give the step's total."""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def run(*args):
    r = subprocess.run([sys.executable] + list(args), capture_output=True, text=True)
    return r.returncode, r.stdout


def check_ckpt_diff(tmp):
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    b = np.arange(4, dtype=np.float32)
    a_path, b_path = os.path.join(tmp, "a.safetensors"), os.path.join(tmp, "b.safetensors")
    write_safetensors(a_path, {"fc.weight": w, "fc.bias": b})
    w2 = w.copy()
    w2[1, 2] = np.nextafter(w2[1, 2], np.float32(2))
    write_safetensors(b_path, {"fc.weight": w2, "fc.bias": b})
    rc, out = run(os.path.join(HERE, "ckpt_diff.py"), a_path, b_path)
    if rc != 1 or "fc.weight [3, 4]: 1 of 12 elements differ" not in out or "fc.bias" in out \
            or "1 tensors the same, 1 differ" not in out:
        sys.exit("FAIL: ckpt_diff.py on one changed element: exit %d\n%s" % (rc, out))
    rc, out = run(os.path.join(HERE, "ckpt_diff.py"), a_path, a_path)
    if rc != 0 or "2 tensors the same, 0 differ" not in out:
        sys.exit("FAIL: ckpt_diff.py on one file twice: exit %d\n%s" % (rc, out))


def check_profile_summary(tmp):
    nodes = [("/h.0/attn/MatMul", "forward", 0.004), ("/h.0/attn/MatMul_1", "forward", 0.002),
             ("/h.0/attn/MatMul_1/dA", "backward", 0.003), ("/h.0/attn/MatMul/dA", "backward", 0.001),
             ("/h.0/ln/LayerNormalization", "forward", 0.0005),
             ("update/h.0.w", "update", 0.0002), ("update/h.0.b", "update", 0.0003)]
    path = os.path.join(tmp, "prof.json")
    with open(path, "w") as f:
        json.dump({"format": "mpcc-profile", "model": "m.onnx", "rows": 4,
                   "nodes": [{"name": n, "phase": p, "seconds": s, "calls": 2}
                             for n, p, s in nodes]}, f)
    rc, out = run(os.path.join(HERE, "profile_summary.py"), path, "--top", "2")
    want = ["step 11.0 ms: backward 4.0 ms, forward 6.5 ms, update 0.5 ms",
            "| MatMul | forward | 2 | 6.00 | 54.5% |", "| MatMul dA | backward | 2 | 4.00 | 36.4% |",
            "| LayerNormalization | forward | 1 | 0.50 | 4.5% |", "| optimizer | update | 2 | 0.50 | 4.5% |",
            "| /h.0/attn/MatMul | forward | 4.000 |", "| /h.0/attn/MatMul_1/dA | backward | 3.000 |"]
    missing = [w for w in want if w not in out]
    if rc != 0 or missing or "/h.0/attn/MatMul_1 | forward" in out:
        sys.exit("FAIL: profile_summary.py: exit %d, missing %s\n%s" % (rc, missing, out))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_ckpt_diff(tmp)
        check_profile_summary(tmp)
    print("bench helpers: ckpt_diff.py names the one tensor that differs; profile_summary.py "
          "sums nodes by kind")


if __name__ == "__main__":
    main()
