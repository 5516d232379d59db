#!/bin/sh
# One end-to-end training test: PyTorch reference -> mpcc --check (nothing
# missing) -> mpcc -> cc -> ./train -> compare every step's loss and every
# final tensor with PyTorch's.
# Usage: run.sh MPCC WORKDIR "REF_ARGS" "MPCC_ARGS" "TRAIN_ARGS" ["COMPARE_ARGS"]
set -eu
mpcc=$1 work=$2 ref_args=$3 mpcc_args=$4 train_args=$5 cmp_args=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
export PYTHONDONTWRITEBYTECODE=1
/usr/bin/python3 "$here/ref_train.py" --out "$work" $ref_args >/dev/null
cd "$work"
"$mpcc" model.onnx -cpus 1 $mpcc_args --check   # exits 1 if anything is missing
"$mpcc" model.onnx -cpus 1 $mpcc_args -o train.c
build=$(sed -n 's/^ \* build:  //p' train.c)   # the build line mpcc wrote
echo "build: $build -Wall -Werror -pedantic"
$build -Wall -Werror -pedantic
./train --data x.npy --labels y.npy --save ckpt.safetensors --loss-log losses.txt $train_args
/usr/bin/python3 "$here/compare_train.py" . losses.txt ckpt.safetensors $cmp_args
