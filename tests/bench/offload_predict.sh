#!/bin/sh
# offload_predict.sh — mpcc's predicted step for a GPT-2-medium-sized model
# (samples/gpt.mp with 24 layers, width 1024, 16 heads, context 1024 and a
# vocabulary of 50257: 406M parameters, the head untied) at batch 4 on one
# 24 GB GPU (tests/bench/gpu24.profile: PCIe 4.0 x16 to host memory, 25
# GB/s), planned five ways: as it is, with activations offloaded to host
# memory (4 and 8 stages on the GPU, cut evenly between blocks), with
# recomputation (4 stages), and on two such GPUs; and 4 stages with the
# defaults, where --offload=auto offloads and spreads memory evenly. Then
# under AdamW (three times the weights' bytes of state): 4 stages as they
# are, with weights and optimizer state in host memory, with everything
# there, and with the defaults. Planning only: nothing runs.
# Usage: offload_predict.sh MPCC [WORKDIR]
set -eu
mpcc=$1 work=${2:-/tmp/offload_predict}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work" && cd "$work"
sed -e 's/^V = 128 .*/V = 50257/' -e 's/^T = 16 .*/T = 1024/' -e 's/^D = 32 .*/D = 1024/' \
    -e 's/^H = 2 .*/H = 16/' -e 's/^L = 2 .*/L = 24/' "$here/../../samples/gpt.mp" >gpt2_medium.mp
ir=$("$mpcc" gpt2_medium.mp -batch 4 --dump=ir 2>/dev/null | grep '^node')
cuts() {   # the last Add of each named block
    for k in "$@"; do echo "$ir" | grep -o "'blocks\.$k/Add_[0-9]*'" | tail -1 | tr -d "'"; done |
        paste -sd, -
}
s4=$(cuts 5 11 17) s8=$(cuts 2 5 8 11 14 17 20)
plan() {   # LABEL FLAGS...
    label=$1
    shift
    out=$("$mpcc" gpt2_medium.mp -batch 4 --microbatches=1 --profile="$here/gpu24.profile" \
          "$@" --dump=partition 2>&1 >/dev/null || true)
    step=$(echo "$out" | sed -n 's/.*predicted step \([0-9.e-]*\) s.*/\1/p')
    mem=$(echo "$out" | sed -n 's/^mpcc:   \(cuda:[0-9]\) *memory plan \([0-9.]*\) MB.*/\1 \2 MB/p' |
          paste -sd, -)
    off=$(echo "$out" | sed -n 's/^mpcc:   cuda:[0-9] *\(offload: .*\|host arena .*\)/\1/p' |
          paste -sd';' -)
    if [ -z "$step" ]; then
        echo "| $label | does not fit: $(echo "$out" | grep -o 'needs [0-9.]* MB on cuda:[0-9]')  | | |"
    else
        echo "| $label | ${step} s | $mem | ${off:--} |"
    fi
}
echo "| plan | predicted step | memory plan | offload |"
echo "|---|---|---|---|"
plan "1 GPU, 4 stages" -gpus 1 --schedule=interleaved --virtual-stages=4 --split="$s4" --offload=none
plan "1 GPU, 4 stages, --offload=activations" -gpus 1 --schedule=interleaved --virtual-stages=4 \
    --split="$s4" --offload=activations
plan "1 GPU, 8 stages, --offload=activations" -gpus 1 --schedule=interleaved --virtual-stages=8 \
    --split="$s8" --offload=activations
plan "1 GPU, 4 stages, the defaults (--offload=auto)" -gpus 1 --schedule=interleaved \
    --virtual-stages=4
plan "1 GPU, 4 stages, --recompute=all" -gpus 1 --schedule=interleaved --virtual-stages=4 \
    --split="$s4" --offload=none --recompute=all
plan "2 GPUs" -gpus 2 --offload=none
plan "AdamW, 1 GPU, 4 stages" -gpus 1 --schedule=interleaved --virtual-stages=4 --split="$s4" \
    --optimizer=adamw --offload=none
plan "AdamW, 1 GPU, 4 stages, --offload=weights" -gpus 1 --schedule=interleaved \
    --virtual-stages=4 --split="$s4" --optimizer=adamw --offload=weights
plan "AdamW, 1 GPU, 4 stages, --offload=all" -gpus 1 --schedule=interleaved --virtual-stages=4 \
    --split="$s4" --optimizer=adamw --offload=all
plan "AdamW, 1 GPU, 8 stages, --offload=all" -gpus 1 --schedule=interleaved --virtual-stages=8 \
    --split="$s8" --optimizer=adamw --offload=all
plan "AdamW, 1 GPU, 4 stages, the defaults" -gpus 1 --schedule=interleaved --virtual-stages=4 \
    --optimizer=adamw
plan "AdamW, 1 GPU, 4 stages, --recompute=all" -gpus 1 --schedule=interleaved \
    --virtual-stages=4 --split="$s4" --optimizer=adamw --offload=none --recompute=all
