#!/bin/sh
# --offload=activations on CPU devices: the activations a stage keeps for
# its backward pass wait in the host arena, and the trainer gives the same
# losses and checkpoint, byte for byte, as without offload, with less
# memory on the device: samples/resnet.mp on one CPU device and
# samples/gpt.mp on two, under GPipe with 8 micro-batches, 3 steps each. The heads of the offloading trainers name
# a host arena; their arenas are smaller than the plain ones'.
# Usage: offload.sh MPCC SAMPLES WORKDIR
set -eu
mpcc=$1 samples=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work"
arena() { sed -n 's/^ \* cpu:0 .*memory plan \([0-9]*\) bytes.*/\1/p' "$1"; }
check() {   # NAME MODEL FLAGS...
    name=$1 model=$2
    shift 2
    for o in none activations; do
        "$mpcc" "$samples/$model" "$@" --offload=$o -o $name-$o.c
        libs=$(cd "$here" && /usr/bin/python3 -c "import build_line; print(' '.join(build_line.libraries('$work/$name-$o.c')))")
        cc -O2 -fno-trapping-math -ffp-contract=off $name-$o.c -o $name-$o $libs
        OPENBLAS_NUM_THREADS=1 ./$name-$o --synthetic --seed 3 --steps 3 \
            --save $name-$o.safetensors --loss-log $name-$o.txt 2>$name-$o.log
    done
    grep -q 'host arena [0-9]* bytes (offloaded activations)' $name-activations.c ||
        { echo "FAIL: $name: the offloading trainer's head names no host arena"; exit 1; }
    grep -q '+ [0-9.]* MB host (offloaded)' $name-activations.log ||
        { echo "FAIL: $name: the trainer's memory plan line names no host arena"; exit 1; }
    plain=$(arena $name-none.c) less=$(arena $name-activations.c)
    [ "$less" -lt "$plain" ] ||
        { echo "FAIL: $name: cpu:0 needs $less bytes with offload, $plain without"; exit 1; }
    cmp $name-none.txt $name-activations.txt
    cmp $name-none.safetensors $name-activations.safetensors
    echo "offload: $name: cpu:0 $less bytes against $plain; the losses" \
        "($(tr '\n' ' ' <$name-none.txt)) and checkpoint byte for byte"
}
check resnet resnet.mp -cpus 1 -batch 8 --microbatches=8 --schedule=gpipe --lr=0.05
check gpt gpt.mp -cpus 2 -batch 8 --microbatches=8 --schedule=gpipe
