#!/bin/sh
# CTest's fuzz.build_onnx, fuzz.build_dsl and fuzz.build_trace: builds a
# fuzz target with its build script, then fuzzes briefly (a few thousand
# runs, seeded by the corpus and the past findings) so that neither the
# scripts nor the target can rot. New inputs go to OUT_DIR, never into
# the repository.
# Usage: tests/fuzz/smoke.sh onnx|dsl|trace BUILD_DIR OUT_DIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
target=$1 build=$2 out=$3
case $target in
onnx) script=build.sh seeds="$here/corpus $here/regressions" flags="-max_len=16384" ;;
dsl) script=build_dsl.sh seeds="$here/corpus_dsl $here/regressions_dsl"
     flags="-max_len=4096 -dict=$here/dsl.dict" ;;
trace) script=build_trace.sh seeds="$here/corpus_trace $here/regressions_trace"
       flags="-max_len=16384 -dict=$here/trace.dict" ;;
*) echo "usage: $0 onnx|dsl|trace BUILD_DIR OUT_DIR" >&2; exit 2 ;;
esac
"$here/$script" "$build" "$out" >/dev/null
work=$out/smoke_$target
rm -rf "$work"
mkdir -p "$work/new"
# shellcheck disable=SC2086  # flags and seeds are lists
"$out/fuzz_$target" -runs=3000 -max_total_time=60 -timeout=20 -seed=1 -print_final_stats=1 \
    -artifact_prefix="$work/" $flags "$work/new" $seeds
