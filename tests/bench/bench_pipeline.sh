#!/bin/sh
# Pipeline benchmarks (tests/bench/README.md, "Pipelines"):
#  1. planning time (import to simulated plan, --dump=partition) for
#     ResNet-50 (128x128, batch 120) and the GPT-style model on 8 devices;
#  2. the predicted 2-device speedup of ResNet-50, batch 120, 128x128, on
#     the h100-sxm profile, with the schedule and M auto chooses;
#  3. measured step time of 2 CPU devices against 1 on a balanced chain
#     (16 blocks of Gemm 256x256 + Relu, batch 256, 8 micro-batches, 1F1B),
#     one BLAS thread per device.
# Usage: bench_pipeline.sh MPCC WORKDIR
set -eu
mpcc=$(realpath "$1") work=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
cd "$work"
[ -f r50_128.onnx ] || /usr/bin/python3 "$here/../models/export_resnet50.py" --out r50_128.onnx \
    --size 128 >/dev/null
[ -f gpt.onnx ] || /usr/bin/python3 "$here/../models/export_gpt.py" --out gpt.onnx >/dev/null
now() { date +%s.%N; }
echo "== planning time, 8 CPU devices (best of 3) =="
for m in "r50_128.onnx -batch 120" "gpt.onnx -batch 16 --class-axis=-1"; do
    for extra in "--schedule=1f1b --microbatches=8" "--schedule=auto"; do
        best=999
        for i in 1 2 3; do
            s=$(now)
            $mpcc $m -cpus 8 $extra --dump=partition >/dev/null 2>plan.err
            t=$(echo "$(now) - $s" | bc)
            best=$(echo "if ($t < $best) $t else $best" | bc)
        done
        echo "$m $extra: $best s ($(head -1 plan.err | sed 's/^mpcc: //'))"
    done
done
echo "== predicted speedup, ResNet-50 batch 120 at 128x128, h100-sxm =="
for n in 1 2; do
    $mpcc r50_128.onnx -batch 120 -cpus $n --profile=h100-sxm --dump=partition 2>&1 >/dev/null |
        head -1
done
echo "== measured: balanced chain on 1 and 2 CPU devices =="
/usr/bin/python3 - <<'PY'
import numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
rng = np.random.default_rng(0)
nodes, inits, x = [], [], "input"
for i in range(16):
    inits.append(numpy_helper.from_array((rng.standard_normal((256, 256)) * 0.05).astype(np.float32), f"w{i}"))
    nodes += [helper.make_node("Gemm", [x, f"w{i}"], [f"g{i}"], name=f"gemm{i}"),
              helper.make_node("Relu", [f"g{i}"], [f"r{i}"], name=f"relu{i}")]
    x = f"r{i}"
g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 256])],
                      [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 256])], inits)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "chain.onnx")
np.save("cx.npy", rng.standard_normal((256 * 20, 256)).astype(np.float32))
np.save("cy.npy", rng.integers(0, 256, 256 * 20).astype(np.int64))
PY
for n in 1 2; do
    $mpcc chain.onnx -batch 256 -cpus $n --schedule=1f1b --microbatches=8 -o chain$n.c 2>chain$n.plan
    cc -O2 chain$n.c -o chain$n $(sed -n 's/^ \* build: .* -o train //p' chain$n.c)
    for steps in 5 25; do   # the difference cancels start-up
        s=$(now)
        OPENBLAS_NUM_THREADS=1 ./chain$n --data cx.npy --labels cy.npy --steps $steps >/dev/null 2>&1
        eval "t${n}_$steps=$(echo "$(now) - $s" | bc)"
    done
done
step1=$(echo "($t1_25 - $t1_5) / 20" | bc -l)
step2=$(echo "($t2_25 - $t2_5) / 20" | bc -l)
echo "1 device: $step1 s/step (predicted $(sed -n 's/.*predicted step \([^ ]*\) s.*/\1/p' chain1.plan))"
echo "2 devices: $step2 s/step (predicted $(sed -n 's/.*predicted step \([^ ]*\) s.*/\1/p' chain2.plan))"
echo "speedup: $(echo "$step1 / $step2" | bc -l)"
