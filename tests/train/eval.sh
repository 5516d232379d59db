#!/bin/sh
# Evaluation on held-out rows, against PyTorch. ref_train.py --eval-rows
# writes xe.npy/ye.npy and PyTorch's model.eval() loss and accuracy on them
# (eval.json); the trainer trains with --eval-data/--eval-labels and EVAL_ARGS
# (e.g. --eval-every 2). Checks:
#  - training still matches PyTorch (run.sh: every loss, every final tensor);
#  - every printed evaluation matches eval.json (loss 1e-4 relative,
#    correct/count exactly), and a run resumed mid-way evaluates the same;
#  - the final checkpoint is byte for byte the one of a run without
#    evaluation: evaluating changes no weight, optimizer state or BatchNorm
#    running statistic;
#  - bad evaluation files fail like bad training files: one line naming the
#    file, exit status 1.
# Usage: eval.sh MPCC EXPECT_ERROR_SH WORKDIR "REF_ARGS" "MPCC_ARGS" "TRAIN_ARGS" "EVAL_ARGS"
set -eu
mpcc=$1 expect=$2 work=$3 ref_args=$4 mpcc_args=$5 train_args=$6 eval_args=$7
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
ev="--eval-data xe.npy --eval-labels ye.npy $eval_args"
rc=0
"$here/run.sh" "$mpcc" "$work" "$ref_args" "$mpcc_args" "$train_args $ev" >"$work.log" 2>&1 || rc=$?
cat "$work.log"
mv "$work.log" "$work/run.log"
[ $rc = 0 ] || { echo "FAIL: run.sh"; exit 1; }
cd "$work"
$py "$here/compare_eval.py" eval.json run.log

steps=$($py -c 'import json; print(json.load(open("eval.json"))["evals"][-1]["step"])')
half=$((steps / 2))
echo "--- resumed at step $half: the same evaluations after it"
./train --data x.npy --labels y.npy $train_args --steps $half --save half.safetensors 2>/dev/null
./train --data x.npy --labels y.npy $train_args $ev --steps $((steps - half)) \
    --resume half.safetensors 2>resumed.log
$py "$here/compare_eval.py" --after $half eval.json resumed.log

echo "--- a checkpoint saved after evaluating equals one without evaluating"
./train --data x.npy --labels y.npy $train_args --save noeval.safetensors 2>/dev/null
cmp ckpt.safetensors noeval.safetensors
echo "identical"

echo "--- bad evaluation files"
$py - <<'PY'
import numpy as np
x = np.load("xe.npy"); y = np.load("ye.npy")
np.save("bad_xe_f16.npy", x.astype(np.float16))
np.save("bad_xe_cols.npy", x[..., :-1])
b = open("xe.npy", "rb").read(); open("bad_xe_trunc.npy", "wb").write(b[: len(b) // 2])
if x.dtype.kind == "f":   # token inputs hold no NaN
    n = x.copy(); n[3].flat[0] = np.nan; np.save("bad_xe_nan.npy", n)
np.save("bad_ye_rows.npy", y[:-1])
c = y.copy(); c[2] = 1000; np.save("bad_ye_class.npy", c)
PY
status=0
check() { "$expect" "$@" || status=1; }
t="./train --data x.npy --labels y.npy --steps 1"
check "bad_xe_f16.npy: element type float16" -- $t --eval-data bad_xe_f16.npy --eval-labels ye.npy
check "bad_xe_cols.npy: shape" -- $t --eval-data bad_xe_cols.npy --eval-labels ye.npy
check "bad_xe_trunc.npy:" -- $t --eval-data bad_xe_trunc.npy --eval-labels ye.npy
[ ! -f bad_xe_nan.npy ] ||
    check "bad_xe_nan.npy: row 3, element 0 is not a finite number" -- $t --eval-data bad_xe_nan.npy --eval-labels ye.npy
check "but bad_ye_rows.npy has" -- $t --eval-data xe.npy --eval-labels bad_ye_rows.npy
check "bad_ye_class.npy: row 2, element 0: label 1000 is not a class of the model" -- $t --eval-data xe.npy --eval-labels bad_ye_class.npy
check "nope.npy" -- $t --eval-data nope.npy --eval-labels ye.npy
check "give both --eval-data and --eval-labels" -- $t --eval-data xe.npy
check "--eval-every needs --eval-data" -- $t --eval-every 2
check "--eval-every expects a whole number of at least 1" -- $t $ev --eval-every 0
[ $status = 0 ] && echo "eval: all passed"
exit $status
