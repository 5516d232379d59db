#!/bin/sh
# The same numbers whatever a device's thread count. The trainer (built
# with MPCC_ARGS, whose kernels are split over the device's threads:
# runtime/pool.c) matches PyTorch (run.sh) with THREADS[0] threads, then
# trains again with each other count in THREADS and must give the same
# losses and checkpoint, byte for byte. The count is the pool's
# (MPRT_POOL_THREADS), with OpenBLAS's held at 1: on some CPUs OpenBLAS
# splits a GEMM's inner dimension at another thread count and rounds
# differently, which is OpenBLAS's matter, not mpcc's kernels'. Sizes must
# exceed the kernels' grain (16 K elements), or every run is one thread's.
# Usage: threads.sh MPCC WORKDIR "REF_ARGS" "MPCC_ARGS" "TRAIN_ARGS" "THREADS"
set -eu
mpcc=$1 work=$2 ref_args=$3 mpcc_args=$4 train_args=$5 threads=$6
here=$(cd "$(dirname "$0")" && pwd)
first=${threads%% *}
OPENBLAS_NUM_THREADS=1 MPRT_POOL_THREADS=$first "$here/run.sh" "$mpcc" "$work" "$ref_args" "$mpcc_args" "$train_args"
cd "$work"
for t in ${threads#"$first"}; do
    OPENBLAS_NUM_THREADS=1 MPRT_POOL_THREADS=$t ./train --data x.npy --labels y.npy $train_args \
        --save t$t.safetensors --loss-log t$t.txt 2>/dev/null
    cmp losses.txt t$t.txt
    cmp ckpt.safetensors t$t.safetensors
    echo "same numbers: $first and $t threads"
done
