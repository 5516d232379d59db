#!/bin/sh
# --precision=bf16 halves the activations that share memory: --dump=memory's
# "taking turns" of a bf16 plan is at most 0.55 of the fp32 plan's, on each
# device for the GPT and MLP samples (2 devices, 2 micro-batches) and for
# the ResNet sample on one device and on 2 cut where its fp32 plan cuts it.
# With its own cuts the bf16 plan of the ResNet sample cuts elsewhere (the
# cost model prices its staging passes), so its devices hold other stages
# and the two totals are not of the same activations: 0.563 at this writing
# (docs/precision.md). The GPT's cuts are given too (those of its fp32 plan
# on one machine): the cost model's choice follows the machine's measured
# rates, and on another a bf16 plan cut elsewhere held 0.586 of fp32's.
# Usage: bf16_memory.sh MPCC SAMPLES_DIR
set -eu
mpcc=$1 samples=$2
turns() {   # the "taking turns" MB of each device, one line; $5: more options
    "$mpcc" "$samples/$1" -batch "$2" -cpus "$3" --microbatches=2 --dump=memory \
        --precision="$4" ${5:-} 2>/dev/null | awk '/^  taking turns/ { printf "%s ", $3 }'
}
check() {   # sample batch devices how(each|sum) [options]
    f=$(turns "$1" "$2" "$3" fp32 "${5:-}") b=$(turns "$1" "$2" "$3" bf16 "${5:-}")
    echo "$1 -batch $2 on $3 device(s): fp32 $f MB, bf16 $b MB"
    echo "$f|$b" | awk -F'|' -v how="$4" -v what="$1" '{
        n = split($1, f, " "); split($2, b, " "); sf = sb = 0
        for (i = 1; i <= n; i++) {
            sf += f[i]; sb += b[i]
            if (how == "each" && !(f[i] > 0 && b[i] / f[i] <= 0.55)) {
                printf "FAIL: %s device %d: bf16 / fp32 = %.3f\n", what, i - 1, b[i] / f[i]; exit 1
            }
        }
        if (!(n > 0 && sf > 0 && sb / sf <= 0.55)) {
            printf "FAIL: %s: bf16 / fp32 = %.3f over the devices\n", what, sb / sf; exit 1
        }
        printf "  bf16 / fp32 = %.3f over the devices\n", sb / sf }'
}
check gpt.mp 32 2 each "--schedule=interleaved --split=blocks.0.attn.out/MatMul_27,blocks.0/Add_40,blocks.1.gelu_erf0/Mul_74"
check mlp.mp 256 1 each
check resnet.mp 64 2 each "--schedule=interleaved --split=layer1.0.conv1/Conv_3,layer1.1.bn1/BatchNormalization_11,layer2.bn2/BatchNormalization_21"
check resnet.mp 64 1 each
echo "bf16_memory: ok"
