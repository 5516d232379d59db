#!/usr/bin/python3
"""The cost model prices what the softmax kernels of a causal mask read.

The test GPT's attention adds a causal mask, torch.triu of -inf above the
diagonal, inside each layer's softmax (SoftmaxBias). Its share of -inf
scores is m = (T - 1) / (2T), counted here from the mask's definition and
the model's T. With E the scores' elements, in float32 (4 bytes each):

  SoftmaxBias, every device: reads x where the mask is finite, the (T, T)
  mask and writes y:               bytes (1 - m) E 4 + T T 4 + E 4
  SoftmaxGrad, a GPU's kernel: reads no dy where y is 0:
                                   bytes (3 - m) E 4, FLOPs (1 - m) of the CPU's
  SoftmaxGrad, a CPU's kernel: reads dy, y and writes dx whole:
                                   bytes 3 E 4

`mpcc --dump=costs` on -cpus 1 and -gpus 1 must give those bytes (MB,
three decimals) for every softmax of every layer, and the GPU's gradient
1 - m of the CPU's FLOPs.

Usage: masked_costs.py MPCC GPT_ONNX HEADS
"""
import subprocess
import sys

import onnx

BATCH = 64


def costs(mpcc, model, devices):
    out = subprocess.run([mpcc, model, *devices, "-batch", str(BATCH), "--dump=costs"],
                         check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 9 and f[-2] in ("SoftmaxBias", "SoftmaxGrad"):
            rows[(f[-2], f[-1])] = (float(f[4]), float(f[5]))   # MFLOP, MB
    return rows


def main():
    mpcc, model, heads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    g = onnx.load(model, load_external_data=False).graph
    T = g.input[0].type.tensor_type.shape.dim[1].dim_value
    m = (T - 1) / (2 * T)
    E = BATCH * heads * T * T
    want = {"SoftmaxBias": (((1 - m) * E + T * T + E) * 4e-6,) * 2,
            "SoftmaxGrad": (3 * E * 4e-6, (3 - m) * E * 4e-6)}   # (CPU, GPU) MB
    cpu = costs(mpcc, model, ["-cpus", "1"])
    gpu = costs(mpcc, model, ["-gpus", "1"])
    print(f"T {T}, {heads} heads, batch {BATCH}: {E} scores, masked share {m:.6f}")
    assert cpu and set(cpu) == set(gpu), (sorted(cpu), sorted(gpu))
    bad = 0
    for (op, name), (cflops, cmb) in sorted(cpu.items()):
        gflops, gmb = gpu[(op, name)]
        wc, wg = want[op]
        flops = 1 - m if op == "SoftmaxGrad" else 1
        ok = abs(cmb - wc) < 2e-3 and abs(gmb - wg) < 2e-3 and \
            abs(gflops - flops * cflops) <= 2e-3 * cflops
        print(f"{op} {name}: cpu {cflops} MFLOP {cmb} MB (want {wc:.3f}), "
              f"gpu {gflops} MFLOP {gmb} MB (want {wg:.3f}){'' if ok else '  <-- wrong'}")
        bad += not ok
    sys.exit(1 if bad else 0)


main()
