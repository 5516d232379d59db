#!/bin/sh
# One DSL sample, end to end (tests/CMakeLists.txt, section "the model DSL"):
#  1. mpcc SAMPLE --emit-onnx: onnx.checker accepts it (full check);
#  2. PyTorch runs that ONNX file (tests/dsl/torch_ref.py): the reference
#     losses and weights, from the DSL's own initial weights, and the data;
#  3. the DSL model compiled for one CPU device trains on that data: every
#     loss and weight matches PyTorch (tests/train/compare_train.py);
#  4. the emitted ONNX model, compiled and trained the same way, gives the
#     same losses as the DSL model, bit for bit.
# Under --precision=bf16 in MPCC_ARGS, step 3 holds the losses to PyTorch's
# own mixed precision instead (torch.autocast's bf16 on CPU,
# tests/train/compare_bf16.py).
# Placement hints (@cpu1, ...) are removed first when STRIP_HINTS=1, so a
# sample written for two devices runs on one.
# Usage: sample.sh MPCC WORKDIR SAMPLE.mp "MPCC_ARGS" "REF_ARGS" STEPS
set -eu
mpcc=$1 work=$2 sample=$3 mpcc_args=$4 ref_args=$5 steps=$6
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work/dsl" "$work/onnx"
export PYTHONDONTWRITEBYTECODE=1
name=$(basename "$sample")
if [ "${STRIP_HINTS:-0}" = 1 ]; then
    sed 's/ *@[a-z]*[0-9]*\((*[0-9]*)\)*//g' "$sample" > "$work/$name"
    sample=$work/$name
fi
cd "$work"
"$mpcc" "$sample" --emit-onnx -o model.onnx
bf16=
case " $mpcc_args " in *" --precision=bf16 "*) bf16=--autocast-check ;; esac
/usr/bin/python3 "$here/torch_ref.py" model.onnx --out . --steps "$steps" $ref_args $bf16
for kind in dsl onnx; do
    src=$sample
    [ $kind = onnx ] && src=$work/model.onnx
    (cd $kind && "$mpcc" "$src" -cpus 1 $mpcc_args -o train.c)
    build=$(sed -n 's/^ \* build: *//p' $kind/train.c)
    echo "build ($kind): $build -Wall -Werror"
    (cd $kind && $build -Wall -Werror && ./train --data ../x.npy --labels ../y.npy \
        --steps "$steps" --save ckpt.safetensors --loss-log losses.txt)
done
if [ -n "$bf16" ]; then
    grep -q "mprt_bf16_narrow(" dsl/train.c   # activations are stored in bf16
    /usr/bin/python3 "$here/../train/compare_bf16.py" . dsl/losses.txt
else
    /usr/bin/python3 "$here/../train/compare_train.py" . dsl/losses.txt dsl/ckpt.safetensors
fi
if ! cmp dsl/losses.txt onnx/losses.txt; then
    echo "sample.sh: the emitted ONNX model trains differently from the DSL model:"
    paste dsl/losses.txt onnx/losses.txt
    exit 1
fi
echo "sample.sh: $name: PyTorch, the DSL model and its ONNX export agree over $steps steps"
