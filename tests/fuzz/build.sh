#!/bin/sh
# Builds the ONNX fuzz target (fuzz_onnx.c + harness.c: bytes as an ONNX
# model through the whole compiler) with clang and libFuzzer, from an
# existing CMake build (the source list, the generated onnx.pb-c.c, parser,
# lexer and embedded runtime). tests/fuzz/README.md says how to run it.
# Usage: tests/fuzz/build.sh [BUILD_DIR [OUT_DIR]]   (default: build, BUILD_DIR)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
"$root/tests/fuzz/compile.sh" onnx "$build" "${2:-$build}"
echo "run:  mkdir -p tests/fuzz/findings && ${2:-$build}/fuzz_onnx -max_len=16384 -timeout=10 tests/fuzz/findings tests/fuzz/corpus tests/fuzz/regressions"
echo "then: ${2:-$build}/fuzz_onnx -merge=1 tests/fuzz/corpus tests/fuzz/findings   (keep the corpus small)"
