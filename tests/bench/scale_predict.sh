#!/bin/sh
# scale_predict.sh — mpcc's predicted step for a GPT-2-small-sized model
# (samples/gpt.mp with 12 layers, width 768, 12 heads, context 1024, a
# vocabulary of 50257; the head untied) and for ResNet-50 (224x224, from
# tests/models/export_resnet50.py) on H100 SXM GPUs (the h100-sxm profile:
# NVLink between the GPUs of a node, 400 Gb/s InfiniBand between nodes, at
# 80%), from one GPU to 2 nodes of 8: pipelines, replicas in a node,
# replicas over nodes, and one pipeline across both nodes. The same global
# batch (GPT: 64 sequences in 16 micro-batches; ResNet-50: 256 images in 16)
# on every layout. Planning only (--dump=partition): nothing runs.
# Usage: scale_predict.sh MPCC [WORKDIR]
set -eu
mpcc=$(realpath "$1") work=${2:-/tmp/scale_predict}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work" && cd "$work"
sed -e 's/^V = 128 .*/V = 50257/' -e 's/^T = 16 .*/T = 1024/' -e 's/^D = 32 .*/D = 768/' \
    -e 's/^H = 2 .*/H = 12/' -e 's/^L = 2 .*/L = 12/' "$here/../../samples/gpt.mp" >gpt2_small.mp
[ -f r50.onnx ] || /usr/bin/python3 "$here/../models/export_resnet50.py" --out r50.onnx \
    --size 224 >/dev/null
plan() {   # MODEL-AND-BATCH LABEL FLAGS...
    model=$1 label=$2
    shift 2
    out=$("$mpcc" $model --profile=h100-sxm "$@" --dump=partition 2>&1 || true)
    step=$(echo "$out" | sed -n 's/^# predicted: step \([0-9.]*\) ms.*/\1/p')
    sums=$(echo "$out" | sed -n 's/^# gradient sums over the replicas, after each stage.s last gradients: //p' |
           tr ',' '\n' | awk '{ t += $5 } END { if (NR) printf "%.2f ms", t }')
    if [ -z "$step" ]; then
        echo "| $label | $(echo "$out" | grep -m1 -o 'error: .*') | |"
    else
        echo "| $label | $step ms | ${sums:--} |"
    fi
}
for m in "gpt2_small.mp -batch 64 --microbatches=16 --class-axis=-1" \
         "r50.onnx -batch 256 --microbatches=16"; do
    echo "== $m"
    echo "| layout | predicted step | the stages' gradient sums, added |"
    echo "|---|---|---|"
    plan "$m" "1 GPU" -gpus 1
    plan "$m" "8 GPUs, one pipeline" -gpus 8
    plan "$m" "8 GPUs, 8 replicas of 1" -gpus 8 --data-parallel=8
    plan "$m" "8 GPUs, 2 replicas of 4" -gpus 8 --data-parallel=2
    plan "$m" "2 x 8 GPUs, 16 replicas of 1" -gpus 8 --nodes=2 --data-parallel=16
    plan "$m" "2 x 8 GPUs, 2 replicas (a node's pipeline each)" -gpus 8 --nodes=2 --data-parallel=2
    plan "$m" "2 x 8 GPUs, 4 replicas of 4" -gpus 8 --nodes=2 --data-parallel=4
    plan "$m" "2 x 8 GPUs, one pipeline across both" -gpus 8 --nodes=2 --data-parallel=1
done
