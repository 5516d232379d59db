#!/bin/sh
# Plans the MLP sample under every schedule on 1, 2 and 4 devices, with every
# dump, a trace and the generated code, with mpcc built with ASan+UBSan: any
# sanitizer report fails the run.
# Usage: asan_plans.sh MPCC_ASAN MODEL WORKDIR
set -eu
mpcc=$1 model=$2 work=$3
mkdir -p "$work"
export MPCC_CPU_PROFILE=2e10,1e10
for n in 1 2 4; do
    for s in auto gpipe 1f1b zb interleaved; do
        [ "$n" = 4 ] && [ "$s" = interleaved ] && continue   # 8 stages > 4 nodes
        "$mpcc" "$model" -batch 32 -cpus "$n" --schedule=$s --dump=partition,schedule,partition-dot \
            --trace="$work/t.json" >/dev/null 2>&1
        "$mpcc" "$model" -batch 32 -cpus "$n" --schedule=$s -o "$work/train.c" 2>/dev/null
    done
done
echo "planned every schedule under ASan+UBSan"
