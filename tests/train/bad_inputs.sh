#!/bin/sh
# The trainer's bad inputs: each must end in one "train: error:" line naming
# the file and the problem, exit status 1, and leave an existing checkpoint
# untouched. Runs in the work folder of a built MLP trainer.
# Usage: bad_inputs.sh EXPECT_ERROR_SH TRAIN_DIR OTHER_MODEL_CKPT
set -u
expect=$1 dir=$2 other=$3
cd "$dir" || exit 1
py=/usr/bin/python3
$py - <<'PY'
import numpy as np
x = np.load("x.npy"); y = np.load("y.npy")
np.save("bad_f16.npy", x.astype(np.float16))
big = x.astype(np.float64); big[2, 7] = 1e300; np.save("bad_f64_range.npy", big)
np.save("bad_y_f32.npy", y.astype(np.float32))
np.save("bad_cols.npy", x[:, :-1])
b = open("x.npy", "rb").read(); open("bad_trunc.npy", "wb").write(b[: len(b) // 2])
n = x.copy(); n[3, 5] = np.nan; np.save("bad_nan.npy", n)
np.save("bad_rows.npy", y[:-1])
PY
status=0
check() { "$expect" "$@" || status=1; }
check "bad_f16.npy: element type float16, the model's input needs float32" -- ./train --data bad_f16.npy --labels y.npy --steps 1
check "bad_f64_range.npy: row 2, element 7 is not a finite number (NaN or infinity, or beyond float32's range)" -- ./train --data bad_f64_range.npy --labels y.npy --steps 1
check "bad_y_f32.npy: element type float32, the model's labels needs int64" -- ./train --data x.npy --labels bad_y_f32.npy --steps 1
check "bad_cols.npy: shape (160, 783) does not match" -- ./train --data bad_cols.npy --labels y.npy --steps 1
check "bad_trunc.npy:" -- ./train --data bad_trunc.npy --labels y.npy --steps 1
check "bad_nan.npy: row 3, element 5 is not a finite number" -- ./train --data bad_nan.npy --labels y.npy --steps 1
check "has 160 rows but bad_rows.npy has 159" -- ./train --data x.npy --labels bad_rows.npy --steps 1
check "nope.safetensors" -- ./train --data x.npy --labels y.npy --weights nope.safetensors --steps 1
check "tensor '0.weight' is float32" -- ./train --data x.npy --labels y.npy --resume "$other" --steps 1
check "/nonexistent/dir/ckpt.safetensors" -- ./train --data x.npy --labels y.npy --steps 1 --save /nonexistent/dir/ckpt.safetensors
check "unknown option '--frobnicate'" -- ./train --frobnicate 1
# A failed run leaves an existing checkpoint as it was.
cp ckpt.safetensors keep.safetensors
check "bad_nan.npy" -- ./train --data bad_nan.npy --labels y.npy --steps 1 --save keep.safetensors
cmp -s ckpt.safetensors keep.safetensors || { echo "FAIL: checkpoint changed"; status=1; }
[ $status = 0 ] && echo "bad_inputs: all passed"
exit $status
