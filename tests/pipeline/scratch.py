#!/usr/bin/python3
"""The kernels' scratch memory is part of the memory plan.

The CPU convolutions of the builtin kernels (--cpu-kernels=builtin; oneDNN's
are sized at the trainer's start-up, tests/pipeline/cpu_kernels.sh) build
their patch matrix (C/group * KH * KW rows, one
column per output pixel) in scratch memory; where the output planes have
at most 64 pixels (runtime/kernel.h, mprt_conv_batched) the patches of every
image of the micro-batch side by side, and a group's output planes after
them. For ResNet-50 at 64x64 (micro-batches of 2), the
largest such matrix is found here from ONNX's own shape inference; the
trainer mpcc writes for 1 and 2 CPU devices must reserve exactly that (the
device holding the largest convolution) at the end of the device's arena.
The 2-device trainer is then built with ASan+UBSan and trains two steps: a
scratch area smaller than what a kernel writes would run past the arena's
allocation and be reported.

    /usr/bin/python3 tests/pipeline/scratch.py MPCC MODEL WORKDIR
"""
import os
import re
import subprocess
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from build_line import libraries  # noqa: E402

import onnx
from onnx import shape_inference


def largest_patches(model_path, shape):
    m = onnx.load(model_path)
    inp = m.graph.input[0]
    for d, n in zip(inp.type.tensor_type.shape.dim, shape):
        d.dim_value = n
    m = shape_inference.infer_shapes(m)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(m.graph.value_info) + list(m.graph.output) + list(m.graph.input)}
    for t in m.graph.initializer:
        dims[t.name] = list(t.dims)
    best = 0
    for n in m.graph.node:
        if n.op_type != "Conv":
            continue
        w, y = dims[n.input[1]], dims[n.output[0]]
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        k, plane = w[1] * w[2] * w[3], y[2] * y[3]
        if y[0] > 1 and plane <= 64:   # one GEMM over the micro-batch
            need = (k + w[0] // group) * y[0] * plane * 4
        else:
            need = k * plane * 4
        best = max(best, need)
    return (best + 63) // 64 * 64


def scratch_of(code):
    return {int(d): int(b) for d, b in
            re.findall(r"^#define W(\d+) \(\(float \*\)\(A\d+ \+ \d+\)\)   /\* scratch, (\d+) bytes",
                       code, re.M)}


def arena_ends(code):
    """Each scratch area ends its device's arena."""
    sizes = [int(x) for x in re.search(r"arena_bytes\[\] = \{([^}]*)\}", code).group(1).split(",")]
    for d, off in re.findall(r"^#define W(\d+) \(\(float \*\)\(A\d+ \+ (\d+)\)\)", code, re.M):
        b = scratch_of(code)[int(d)]
        assert int(off) + b == sizes[int(d)], (d, off, b, sizes)


def main():
    mpcc, model, work = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    os.makedirs(work, exist_ok=True)
    want = largest_patches(model, [2, 3, 64, 64])   # a micro-batch
    env = dict(os.environ, MPCC_CPU_PROFILE="2e10,1e10", OPENBLAS_NUM_THREADS="1")
    for n in (1, 2):
        subprocess.run([mpcc, model, "-batch", "4", "--microbatches=2", "-cpus", str(n),
                        "--schedule=1f1b", "--cpu-kernels=builtin", "-o", f"train{n}.c"], cwd=work, env=env, check=True,
                       stderr=subprocess.DEVNULL)
        with open(os.path.join(work, f"train{n}.c")) as f:
            code = f.read()
        got = scratch_of(code)
        assert max(got.values()) == want, (n, got, want)
        assert n == 1 or len(got) == 2, got
        arena_ends(code)
        print(f"{n} device(s): scratch {got}, largest patch matrix {want} bytes")
    subprocess.run(["cc", "-O0", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "train2.c", "-o", "train2", *libraries(os.path.join(work, "train2.c"))],
                   cwd=work, check=True)
    subprocess.run(["./train2", "--synthetic", "--steps", "2"], cwd=work, env=env, check=True,
                   stderr=subprocess.DEVNULL)
    print("2 devices trained under ASan+UBSan within their arenas")


if __name__ == "__main__":
    main()
