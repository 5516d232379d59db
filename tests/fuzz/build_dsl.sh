#!/bin/sh
# Builds the model DSL's fuzz target (fuzz_dsl.c + harness.c: bytes as DSL
# text through the whole compiler) with clang and libFuzzer, from an
# existing CMake build (the source list, the generated parser, lexer,
# onnx.pb-c.c and embedded runtime). tests/fuzz/README.md says how to run it.
# Usage: tests/fuzz/build_dsl.sh [BUILD_DIR [OUT_DIR]]   (default: build, BUILD_DIR)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
"$root/tests/fuzz/compile.sh" dsl "$build" "${2:-$build}"
echo "run:  mkdir -p tests/fuzz/findings/dsl && ${2:-$build}/fuzz_dsl -max_len=4096 -timeout=10 -dict=tests/fuzz/dsl.dict tests/fuzz/findings/dsl tests/fuzz/corpus_dsl tests/fuzz/regressions_dsl"
echo "then: ${2:-$build}/fuzz_dsl -merge=1 tests/fuzz/corpus_dsl tests/fuzz/findings/dsl   (keep the corpus small)"
