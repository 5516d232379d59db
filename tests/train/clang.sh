#!/bin/sh
# A trainer built by clang (-Wall -Werror -pedantic) gives the losses and
# checkpoint of the same trainer built by cc, byte for byte: the vector
# clones (runtime/vmath.h's MPRT_VECTOR) compile under both compilers, and
# neither contracts nor reorders the float operations. The GPT-style model
# (Gelu's erf, softmax, layer norm, bias gradients) at sizes past the
# elementwise tiles.
# Usage: clang.sh MPCC WORKDIR
set -eu
mpcc=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work"
/usr/bin/python3 "$here/../models/export_gpt.py" --out model.onnx --vocab 64 --d 64 --heads 2 \
    --layers 2 --T 32 --batch 4 >/dev/null
"$mpcc" model.onnx -cpus 1 -batch 4 --class-axis=-1 --lr=0.1 --momentum=0.9 -o train.c 2>/dev/null
build=$(sed -n 's/^ \* build:  *//p' train.c)
$build -Wall -Werror -pedantic
clang ${build#cc } -Wall -Werror -pedantic -o train_clang   # the last -o wins
export OPENBLAS_NUM_THREADS=1
./train --synthetic --steps 3 --save cc.safetensors --loss-log cc.txt >/dev/null 2>&1
./train_clang --synthetic --steps 3 --save clang.safetensors --loss-log clang.txt >/dev/null 2>&1
cmp cc.txt clang.txt
cmp cc.safetensors clang.safetensors
echo "clang and cc trainers: the same losses and checkpoint ($(wc -l <cc.txt) steps)"
