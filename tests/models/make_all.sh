#!/bin/sh
# Exports every model the tests use into OUTDIR (default: ./models):
# the three target models, the sample MLP and the bad-input collection.
# Usage: tests/models/make_all.sh OUTDIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-models}
py=/usr/bin/python3
mkdir -p "$out"
export PYTHONDONTWRITEBYTECODE=1
$py "$here/export_resnet50.py" --out "$out/resnet50.onnx" --opset 13 >/dev/null
$py "$here/export_deeplabv3.py" --out "$out/deeplabv3.onnx" --opset 17 >/dev/null
$py "$here/export_deeplabv3.py" --out "$out/deeplabv3_r101.onnx" --backbone resnet101 --opset 13 >/dev/null
$py "$here/export_gpt.py" --out "$out/gpt.onnx" >/dev/null
$py "$here/export_gpt.py" --out "$out/gpt_b1.onnx" --fixed-batch --batch 1 >/dev/null
$py "$here/export_gpt.py" --out "$out/gpt_b2.onnx" --fixed-batch --batch 2 >/dev/null
mkdir -p "$out/gptx"
$py "$here/export_gpt.py" --out "$out/gptx/gpt.onnx" --external >/dev/null
$py "$here/../../samples/export_mlp.py" --out "$out/mlp.onnx" >/dev/null
rm -rf "$out/bad"
$py "$here/make_bad.py" "$out/bad" >/dev/null
$py "$here/ref_shapes.py" "$out/resnet50.onnx" "$out/resnet50.ref.txt" --shapes input:2x3x64x64 >/dev/null
$py "$here/ref_shapes.py" "$out/deeplabv3.onnx" "$out/deeplabv3.ref.txt" --shapes input:2x3x64x64 >/dev/null
$py "$here/ref_shapes.py" "$out/deeplabv3_r101.onnx" "$out/deeplabv3_r101.ref.txt" --shapes input:2x3x64x64 >/dev/null
$py "$here/ref_shapes.py" "$out/gpt.onnx" "$out/gpt.ref.txt" --shapes tokens:2x32 >/dev/null
echo "models written to $out"
