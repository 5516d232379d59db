#!/usr/bin/python3
"""The simulator against the pipeline formulas, on uniform stages.

A chain of L identical blocks (Gemm 256x256 + Relu) on p CPU devices with a
profile whose links are free, so every stage costs the same: the predicted
bubble fraction must be (p-1)/(m+p-1) for GPipe and 1F1B and
(p-1)/(v*m+p-1) for interleaved with v stages per device (within 2%: the
loss adds a little to the last stage). 1F1B must keep at most p micro-batches
in flight on the first device, GPipe all m.

    /usr/bin/python3 tests/pipeline/bubble.py MPCC WORKDIR
"""
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH, BLOCKS = 256, 16


def chain_model(path):
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "input"
    for i in range(BLOCKS):
        w = numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) * 0.05,
                                    f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("Gemm", [x, f"w{i}"], [f"g{i}"], name=f"gemm{i}"))
        nodes.append(helper.make_node("Relu", [f"g{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", WIDTH])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def predict(mpcc, work, p, m, schedule, extra=()):
    env = dict(os.environ, MPCC_CPU_PROFILE="1e11,1e11")
    out = subprocess.run([mpcc, f"{work}/chain.onnx", "-batch", str(64 * m), "-cpus", str(p),
                          f"--microbatches={m}", f"--schedule={schedule}",
                          f"--profile={work}/free_links.profile", "--loss=mse",
                          "--dump=schedule", *extra],
                         env=env, capture_output=True, text=True, check=True).stdout
    bubble = float(re.search(r"bubble ([0-9.]+)%", out).group(1)) / 100
    first = re.search(r"^cpu:0 +((?:[FBWU][0-9.]+ ?)+)$", out, re.M).group(1).split()
    return bubble, first


def max_in_flight(actions):
    live = most = 0
    for a in actions:
        live += a.startswith("F") - a.startswith("B")
        most = max(most, live)
    return most


def main():
    mpcc, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    chain_model(f"{work}/chain.onnx")
    with open(f"{work}/free_links.profile", "w") as f:
        f.write("flops = 1e11\nbandwidth = 1e11\noverhead = 0\n"
                "peer_bandwidth = 1e30\npeer_latency = 0\n")
    failures = 0
    for p, m in [(2, 4), (4, 8), (4, 4), (2, 8)]:
        for schedule, v in [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)]:
            if schedule == "interleaved" and m % p:
                continue
            bubble, first = predict(mpcc, work, p, m, schedule)
            want = (p - 1) / (v * m + p - 1)
            ok = abs(bubble - want) <= 0.02
            inflight = max_in_flight(first)
            if schedule == "1f1b":
                ok &= inflight <= p
            if schedule == "gpipe":
                ok &= inflight == m
            print(f"p={p} m={m} {schedule:12s} bubble {bubble:.3f} formula {want:.3f} "
                  f"in flight on cpu:0 {inflight}  {'ok' if ok else 'FAIL'}")
            failures += not ok
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
