#!/usr/bin/python3
"""The cost model prices 3-D convolutions by their work: every spatial
dimension counts.

A model of a 1x1x1 Conv3d stem -> Conv3d (groups, strides, pads) -> Relu -> ConvTranspose3d
(stride 2) -> MaxPool3d, trained with --loss=mse: `mpcc --dump=costs`
must give each convolution node (forward, data and filter gradients, and
ConvTranspose, which is the data gradient of the convolution it inverts)
the FLOPs of its multiply-adds, counted here from the shapes:

  Conv, ConvGradData, ConvGradFilter: 2 * |conv output| * C/group * KD*KH*KW
  ConvTranspose:                      2 * |its input| * C_out/group * KD*KH*KW

Usage: conv3d_costs.py MPCC WORKDIR
"""
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N, C, D, H, W = 4, 8, 8, 16, 16
M, G, K, S = 16, 2, (3, 3, 3), (1, 2, 2)      # Conv3d: out channels, groups, kernel, strides
UP_M, UP_K = 8, (2, 2, 2)                      # ConvTranspose3d (stride 2)


def conv_out(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def model(path):
    od, oh, ow = conv_out(D, 3, 1, 1), conv_out(H, 3, 2, 1), conv_out(W, 3, 2, 1)
    stem = numpy_helper.from_array(np.full((C, C, 1, 1, 1), 0.1, np.float32), "stem")
    w = numpy_helper.from_array(np.full((M, C // G) + K, 0.1, np.float32), "w")
    wt = numpy_helper.from_array(np.full((M, UP_M) + UP_K, 0.1, np.float32), "wt")
    nodes = [
        helper.make_node("Conv", ["x", "stem"], ["s"], name="stem"),
        helper.make_node("Conv", ["s", "w"], ["c"], name="conv", group=G, strides=list(S),
                         pads=[1] * 6),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("ConvTranspose", ["r", "wt"], ["u"], name="up", strides=[2, 2, 2]),
        helper.make_node("MaxPool", ["u"], ["y"], name="pool", kernel_shape=[2, 2, 2],
                         strides=[2, 2, 2]),
    ]
    g = helper.make_graph(nodes, "conv3d_costs",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, D, H, W])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [stem, w, wt])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    conv = 2.0 * N * M * od * oh * ow * (C // G) * np.prod(K)
    up = 2.0 * N * M * od * oh * ow * UP_M * np.prod(UP_K)
    return {"conv": conv, "conv/dX": conv, "conv/dW": conv, "up": up}


def main():
    mpcc, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "conv3d.onnx")
    want = model(path)
    r = subprocess.run([mpcc, path, "-cpus", "1", "--loss=mse", "--dump=costs"],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit("FAIL: mpcc: %s" % r.stderr)
    got = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^\d+\s+\S+\s+\S+\s+\S+\s+(\S+)\s+.*'(.*)'$", line)
        if m:
            got[m.group(2)] = float(m.group(1)) * 1e6
    bad = 0
    for name, flops in sorted(want.items()):
        ok = name in got and abs(got[name] - flops) <= 1e-3 * flops
        bad += not ok
        print("%s: %s: %.6g FLOPs, expected %.6g" % ("ok" if ok else "FAIL", name,
                                                     got.get(name, float("nan")), flops))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
