#!/bin/sh
# Same numbers whatever the layout: the model trained on one CPU device and
# on each listed layout (devices:schedule) with the same micro-batch count
# gives bit-identical losses and final weights; the one-device run matches
# PyTorch (tests/train/compare_train.py). Under --precision=bf16 in MPCC_ARGS
# the one-device run is held to PyTorch's own mixed precision instead
# (tests/train/compare_bf16.py: torch.autocast's bf16 on CPU).
# Usage: same_numbers.sh MPCC WORKDIR "REF_ARGS" "MPCC_ARGS" "TRAIN_ARGS" "LAYOUTS"
#   LAYOUTS: e.g. "2:gpipe 2:1f1b 4:zb 2:interleaved 2:1f1b:all" (devices,
#   schedule, and optionally --recompute)
set -eu
mpcc=$1 work=$2 ref_args=$3 mpcc_args=$4 train_args=$5 layouts=$6
here=$(cd "$(dirname "$0")/../train" && pwd)
rm -rf "$work"
export PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=1
bf16=
case " $mpcc_args " in *" --precision=bf16 "*) bf16=--autocast-check ;; esac
/usr/bin/python3 "$here/ref_train.py" --out "$work" $ref_args $bf16 >/dev/null
cd "$work"

train() {   # name, then mpcc options
    name=$1
    shift
    "$mpcc" model.onnx "$@" $mpcc_args -o "$name.c"
    build=$(sed -n 's/^ \* build: *//p' "$name.c" | sed "s/-o train/-o $name/")
    $build -Wall -Werror
    "./$name" --data x.npy --labels y.npy --save "$name.safetensors" \
        --loss-log "$name.losses" $train_args >/dev/null
}

train one -cpus 1
if [ -n "$bf16" ]; then
    grep -q "mprt_bf16_narrow(" one.c   # activations are stored in bf16
    /usr/bin/python3 "$here/compare_bf16.py" . one.losses
else
    /usr/bin/python3 "$here/compare_train.py" . one.losses one.safetensors
fi
for layout in $layouts; do
    n=${layout%%:*} rest=${layout#*:}
    schedule=${rest%%:*} recompute=none
    [ "$rest" != "$schedule" ] && recompute=${rest#*:}
    name="l${n}_${schedule}_$recompute"
    train "$name" -cpus "$n" --schedule="$schedule" --recompute="$recompute"
    # the trainer really spans n devices and runs that schedule
    grep -q "^#define A$((n - 1)) (mprt_arenas\[$((n - 1))\])" "$name.c"
    grep -q "^ \* schedule: $schedule," "$name.c"
    [ "$recompute" = none ] || grep -q "the forward again (--recompute)" "$name.c"
    cmp one.losses "$name.losses"
    cmp one.safetensors "$name.safetensors"
    echo "same numbers: $n devices, $schedule, recompute $recompute"
done
