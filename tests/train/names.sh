#!/bin/sh
# A model's names become valid C locals of their own in train.c: the DSL
# model odd_names.mp (values and layers named like C keywords, the C
# library's macros, the runtime's names and the generated code's own, names
# that collide once made identifiers, and long ones) on 1 and 2 devices, and
# ONNX models whose names hold "*/", quotes and newlines (compiled without
# -batch: their exported batch). Every trainer
# builds with -std=c11 -Wall -Wextra -Werror -pedantic (no unused local, no
# clash) and trains 2 steps; the DSL model's locals have the names expected.
# Usage: names.sh MPCC WORKDIR ODD_NAMES.mp ONNX_MODEL...
set -eu
mpcc=$1 work=$2 odd=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
cd "$work"
k=0
train() {   # MODEL OPTIONS...
    k=$((k + 1))
    MPCC_CPU_PROFILE=2e10,1e10 "$mpcc" "$@" -o "t$k.c" 2>/dev/null
    build=$(sed -n 's/^ \* build: *//p' "t$k.c" | sed "s/-o train/-o t$k/")
    echo "$*: $build -std=c11 -Wall -Wextra -Werror -pedantic"
    $build -std=c11 -Wall -Wextra -Werror -pedantic
    "./t$k" --synthetic --steps 2 --weights "t$k.weights.safetensors" >/dev/null 2>&1 ||
        { echo "FAIL: t$k does not train"; exit 1; }
}
train "$odd" -cpus 1 -batch 8
train "$odd" -cpus 2 -batch 8 --microbatches=2 --schedule=1f1b
# the names odd_names.mp's values and parameters must get, and no buffer
# left without one
for name in v_int v_errno v_mb v_float v_size_t v_scale v_linux v_I v_mprt_gemm_weight A0_weight \
            s0_forward_weight dup_weight dup_weight_2 \
            a_name_that_is_longer_than_any_c_compiler_must_tell_apar \
            a_name_that_is_longer_than_any_c_compiler_must_tell_apar_2; do
    for t in t1.c t2.c; do
        grep -q "^    float \*$name = " $t || { echo "FAIL: $t declares no local $name"; exit 1; }
    done
done
if grep -n "((float \*)(A[0-9]" t1.c t2.c; then
    echo "FAIL: a buffer used without its name"
    exit 1
fi
# the ONNX models fix their batch (2) and are compiled without -batch: the
# trainer takes its rows per step from the inputs' first dimension
for model in "$@"; do
    train "$model" -cpus 1
    grep -q '^ \* batch:    2, ' "t$k.c" || { echo "FAIL: t$k.c: the batch is not 2"; exit 1; }
done
echo "every trainer built and trained"
