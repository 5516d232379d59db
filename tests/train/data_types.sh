#!/bin/sh
# Data as people save it: float64 inputs (numpy's default) and int32, int16,
# int8 or uint8 labels are converted on loading with one note each, and train
# exactly as the float32 inputs and int64 labels they hold (the checkpoint of
# train.mlp_sgd_momentum, whose run matched PyTorch, byte for byte). Values
# float32 cannot hold, and labels that no integer type can widen, are still
# refused (bad_inputs.sh). Runs in the work folder of the built MLP trainer.
# Usage: data_types.sh TRAIN_DIR "TRAIN_ARGS"
set -eu
dir=$1 train_args=$2
cd "$dir"
/usr/bin/python3 - <<'PY'
import numpy as np
x = np.load("x.npy"); y = np.load("y.npy")
np.save("x_f64.npy", x.astype(np.float64))
for t in ("int32", "int16", "int8", "uint8"):
    np.save("y_%s.npy" % t, y.astype(t))
PY
status=0
for t in int32 int16 int8 uint8; do
    ./train --data x_f64.npy --labels y_$t.npy $train_args --save conv.safetensors 2>err.txt
    if ! cmp -s ckpt.safetensors conv.safetensors; then
        echo "FAIL: float64 x with $t labels trains differently"; status=1
    fi
    for want in "train: note: x_f64.npy: float64 converted to float32, the element type of the model's input" \
                "train: note: y_$t.npy: $t converted to int64, the element type of the model's labels"; do
        if [ "$(grep -cxF "$want" err.txt)" != 1 ]; then
            echo "FAIL: no line '$want' in:"; cat err.txt; status=1
        fi
    done
    echo "float64 x, $t labels: notes said, the same checkpoint"
done
[ $status = 0 ] && echo "data_types: all passed"
exit $status
