#!/bin/sh
# A failed `mpcc export` leaves an existing output as it was and no
# OUTPUT.tmp behind: when the checkpoint is refused before anything is
# written, and when the final rename fails (the output is a directory).
# Usage: keep_output.sh EXPECT_ERROR_SH MPCC TRAIN_DIR WORK_DIR
set -u
expect=$1 mpcc=$2 train=$3 work=$4
status=0
mkdir -p "$work/keep" || exit 1
cd "$work/keep" || exit 1
rm -rf out.onnx out.onnx.tmp outdir outdir.tmp
cp "$train/model.onnx" out.onnx
"$expect" "other_hash.safetensors: error: is a checkpoint of another model file" -- \
    "$mpcc" export "$train/model.onnx" ../other_hash.safetensors -o out.onnx || status=1
cmp -s "$train/model.onnx" out.onnx || { echo "FAIL: out.onnx changed"; status=1; }
mkdir outdir && touch outdir/inside
"$expect" "outdir: error: cannot rename 'outdir.tmp' over it" -- \
    "$mpcc" export "$train/model.onnx" "$train/ckpt.safetensors" -o outdir || status=1
[ -f outdir/inside ] || { echo "FAIL: outdir changed"; status=1; }
for f in out.onnx.tmp outdir.tmp; do
    [ ! -e "$f" ] || { echo "FAIL: $f left behind"; status=1; }
done
[ $status = 0 ] && echo "keep_output: all passed"
exit $status
