#!/bin/sh
# Builds the trace reader's fuzz target (fuzz_trace.c + harness.c: bytes as
# a Chrome trace through --gantt-from and --measured) with clang and
# libFuzzer, from an existing CMake build (the source list, the generated
# parser, lexer, onnx.pb-c.c and embedded runtime). tests/fuzz/README.md
# says how to run it.
# Usage: tests/fuzz/build_trace.sh [BUILD_DIR [OUT_DIR]]   (default: build, BUILD_DIR)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
"$root/tests/fuzz/compile.sh" trace "$build" "${2:-$build}"
echo "run:  mkdir -p tests/fuzz/findings/trace && ${2:-$build}/fuzz_trace -max_len=16384 -timeout=10 -dict=tests/fuzz/trace.dict tests/fuzz/findings/trace tests/fuzz/corpus_trace tests/fuzz/regressions_trace"
echo "then: ${2:-$build}/fuzz_trace -merge=1 tests/fuzz/corpus_trace tests/fuzz/findings/trace   (keep the corpus small)"
