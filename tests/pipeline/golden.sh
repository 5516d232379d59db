#!/bin/sh
# Golden-file test of a plan dump: mpcc's output with the CPU profile pinned
# (MPCC_CPU_PROFILE, so no calibration) must equal tests/golden/NAME.
# Usage: golden.sh MPCC GOLDEN MODEL [mpcc options...]
# With MPCC_UPDATE_GOLDEN=1 the golden file is rewritten instead (review the
# diff before committing it).
set -eu
mpcc=$1 golden=$2 model=$3
shift 3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
MPCC_CPU_PROFILE=2e10,1e10 "$mpcc" "$model" "$@" >"$out" 2>/dev/null
if [ "${MPCC_UPDATE_GOLDEN:-}" = 1 ]; then
    cp "$out" "$golden"
    echo "updated $golden"
    exit 0
fi
if ! cmp -s "$out" "$golden"; then
    echo "FAIL: output differs from $golden"
    diff "$golden" "$out" | head -40
    exit 1
fi
echo "matches $golden ($(wc -l <"$golden") lines)"
