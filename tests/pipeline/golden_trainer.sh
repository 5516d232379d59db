#!/bin/sh
# Golden-file test of a generated trainer: train.c for MODEL, planned with
# the CPU profile pinned (MPCC_CPU_PROFILE, so no calibration), must equal
# tests/golden/NAME byte for byte. mpcc runs in a scratch folder on a copy
# of the model called by its file name alone, so the command line and the
# paths in the trainer's head are the same on every machine; the model's
# SHA-256, which changes with the PyTorch that exported it, reads
# MODEL_SHA256.
# Usage: golden_trainer.sh MPCC GOLDEN MODEL [mpcc options...]
# With MPCC_UPDATE_GOLDEN=1 the golden file is rewritten instead (review the
# diff before committing it).
set -eu
mpcc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
golden=$2 model=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
name=$(basename "$model")
cp "$model" "$work/$name"
hash=$(sha256sum "$model" | cut -d' ' -f1)
(cd "$work" && MPCC_CPU_PROFILE=2e10,1e10 "$mpcc" "$name" "$@" -o train.c >/dev/null 2>&1)
sed "s/$hash/MODEL_SHA256/g" "$work/train.c" >"$work/out.c"
if [ "${MPCC_UPDATE_GOLDEN:-}" = 1 ]; then
    cp "$work/out.c" "$golden"
    echo "updated $golden"
    exit 0
fi
if ! cmp -s "$work/out.c" "$golden"; then
    echo "FAIL: train.c differs from $golden"
    diff "$golden" "$work/out.c" | head -40
    exit 1
fi
echo "matches $golden ($(wc -l <"$golden") lines)"
