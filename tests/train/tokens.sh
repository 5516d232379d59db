#!/bin/sh
# Language-model data, against PyTorch. ref_train.py --model gpt
# --flat-logits --tokens trains nanoGPT's way (logits.reshape(-1, V), labels
# (N,T)) on the windows of one token stream and writes the stream; run.sh
# has checked that the trainer, given x.npy (N,T) and y.npy (N,T), matches
# PyTorch's every loss and final tensor. Then:
#  - --tokens tokens.npy (int32) and tokens.bin (raw uint16, as nanoGPT
#    writes it), with or without --seq, give that checkpoint byte for byte:
#    the trainer makes the same windows;
#  - the labels flat, (N*T,), and the tokens as int32, give it too;
#  - --eval-tokens evaluates as PyTorch does on the held-out windows;
#  - a wrong --seq, a stream too short or out of the vocabulary, and labels
#    of the wrong size are one-line errors.
# Usage: tokens.sh MPCC EXPECT_ERROR_SH WORKDIR "REF_ARGS" "MPCC_ARGS" "TRAIN_ARGS"
set -eu
mpcc=$1 expect=$2 work=$3 ref_args=$4 mpcc_args=$5 train_args=$6
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
"$here/run.sh" "$mpcc" "$work" "$ref_args" "$mpcc_args" \
    "$train_args --eval-data xe.npy --eval-labels ye.npy" >"$work.log" 2>&1 || {
    cat "$work.log"; echo "FAIL: run.sh"; exit 1; }
cat "$work.log"
cd "$work"
mv "$work.log" run.log
$py "$here/compare_eval.py" eval.json run.log

same() {   # same FILE DESCRIPTION
    cmp -s ckpt.safetensors "$1" || { echo "FAIL: $2 trains differently"; exit 1; }
    echo "ok: $2: the same checkpoint"
}
./train --tokens tokens.npy $train_args --save t_npy.safetensors 2>/dev/null
same t_npy.safetensors "--tokens tokens.npy"
./train --tokens tokens.bin --seq 16 $train_args --save t_bin.safetensors 2>/dev/null
same t_bin.safetensors "--tokens tokens.bin --seq 16"
$py - <<'PY'
import numpy as np
x = np.load("x.npy"); y = np.load("y.npy")
np.save("y_flat.npy", y.reshape(-1))
np.save("x_i32.npy", x.astype(np.int32))
np.save("y_short.npy", y[:, :-1])
np.save("t_short.npy", np.load("tokens.npy")[:16])
t = np.load("tokens.npy"); t[40] = 128; np.save("t_vocab.npy", t)
np.save("t_2d.npy", np.load("tokens.npy")[:32].reshape(2, 16))
PY
./train --data x_i32.npy --labels y_flat.npy $train_args --save t_flat.safetensors 2>/dev/null
same t_flat.safetensors "int32 tokens in x, labels flat (N*T,)"

./train --tokens tokens.npy --eval-tokens tokens_eval.npy $train_args 2>eval_tokens.log
$py "$here/compare_eval.py" eval.json eval_tokens.log
echo "ok: --eval-tokens evaluates as PyTorch does"

status=0
for opt in "--tokens FILE" "--seq T" "--eval-tokens FILE" "--save-every N" "--keep K" \
           "On SIGINT or SIGTERM"; do
    ./train --help | grep -qF -- "$opt" || { echo "FAIL: --help does not say '$opt'"; status=1; }
done
check() { "$expect" "$@" || status=1; }
t="./train $train_args"
check "--seq 8: the model was compiled for sequences of 16 tokens" -- $t --tokens tokens.npy --seq 8
check "t_short.npy: 16 tokens make no window of 16 and the token after it" -- $t --tokens t_short.npy
check "t_vocab.npy: token 40 is 128, not a class of the model (0 .. 127)" -- $t --tokens t_vocab.npy
check "t_2d.npy: int32 (2, 16); a token file is 1-D int32 or int64" -- $t --tokens t_2d.npy
check "y_short.npy: shape" -- $t --data x.npy --labels y_short.npy
check "give --tokens, or --data and --labels" -- $t --tokens tokens.npy --data x.npy
check "--seq is the window of --tokens" -- $t --data x.npy --labels y.npy --seq 16
check "tokens.txt: give a .npy file" -- $t --tokens tokens.txt
[ $status = 0 ] && echo "tokens: all passed"
exit $status
