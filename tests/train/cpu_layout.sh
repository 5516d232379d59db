#!/bin/sh
# --cpu-layout: the activations between oneDNN's convolutions kept in its
# blocked layout (the default) or always plain give the same numbers, byte
# for byte, at the same thread count: samples/resnet.mp (channels 16 and
# 32: convolutions, batch norm, ReLU, residual Adds, global average
# pooling, all blocked) on two CPU devices, 2 micro-batches, 1F1B, 3
# steps, on 1 and 3 threads a device, evaluating held-out rows after each
# (batch norm's inference mode, blocked too). The blocked trainer's head
# says how many activations it keeps blocked; the plain one's names none.
# Usage: cpu_layout.sh MPCC SAMPLES WORKDIR
set -eu
mpcc=$1 samples=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work"
flags="-cpus 2 -batch 8 --microbatches=2 --schedule=1f1b --lr=0.05 --momentum=0.9"
for l in blocked plain; do
    "$mpcc" "$samples/resnet.mp" $flags --cpu-kernels=onednn --cpu-layout=$l -o $l.c
    libs=$(cd "$here" && /usr/bin/python3 -c "import build_line; print(' '.join(build_line.libraries('$work/$l.c')))")
    cc -O2 -fno-trapping-math -ffp-contract=off $l.c -o $l $libs
done
n=$(sed -n 's/^ \* layout:   \([0-9]*\) activations .*/\1/p' blocked.c)
if [ -z "$n" ] || [ "$n" -lt 20 ]; then
    echo "FAIL: the blocked trainer's head names ${n:-no} blocked activations"
    exit 1
fi
if grep -q '^ \* layout:' plain.c; then
    echo "FAIL: --cpu-layout=plain still keeps activations blocked"
    exit 1
fi
/usr/bin/python3 -c "
import numpy as np
r = np.random.default_rng(5)
np.save('xe.npy', r.standard_normal((16, 3, 32, 32)).astype(np.float32))
np.save('ye.npy', r.integers(0, 10, 16).astype(np.int64))"
for t in 1 3; do
    for l in plain blocked; do
        OPENBLAS_NUM_THREADS=$t ./$l --synthetic --seed 3 --steps 3 --save $l$t.safetensors \
            --loss-log $l$t.txt --eval-every 1 --eval-data xe.npy --eval-labels ye.npy 2>&1 |
            grep '^eval step' >$l$t.eval
    done
    cmp plain$t.txt blocked$t.txt
    cmp plain$t.safetensors blocked$t.safetensors
    cmp plain$t.eval blocked$t.eval
    [ "$(wc -l <blocked$t.eval)" = 3 ] || { echo "FAIL: 3 evaluations expected"; exit 1; }
    echo "cpu_layout: $n activations blocked; $t thread(s) a device: the losses" \
        "($(tr '\n' ' ' <blocked$t.txt)) and checkpoint of the plain trainer, byte for byte"
done
