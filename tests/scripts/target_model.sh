#!/bin/sh
# Checks mpcc's shapes for one target model against two references that
# mpcc did not compute: ONNX's own shape inference (REF, every value it
# knows) and PyTorch's real forward pass (TORCH, the model outputs).
# Usage: target_model.sh MPCC MODEL REF TORCH MIN_COMPARED -- mpcc-flags...
set -eu
mpcc=$1 model=$2 ref=$3 torch=$4 min=$5
shift 5
[ "$1" = "--" ] && shift
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$mpcc" "$model" --dump=shapes "$@" >"$out"
/usr/bin/python3 "$here/compare_shapes.py" "$ref" "$out" --min-compared "$min"
/usr/bin/python3 "$here/compare_shapes.py" "$torch" "$out" --min-compared 1
# Every value left in the graph has a static shape of known type.
if grep -q '^?' "$out"; then
    echo "FAIL: values without a type:"; grep '^?' "$out"; exit 1
fi
