#!/bin/sh
# Builds the libFuzzer binary for the ONNX importer with clang, from an
# existing CMake build (for the generated onnx.pb-c.c), and says how to run it.
# Usage: tests/fuzz/build.sh [BUILD_DIR]   (default: build)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=$build/fuzz_onnx
clang -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -O1 -g \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$root/compiler" -I"$build/onnxpb" \
    "$root"/compiler/util.c "$root"/compiler/diag.c "$root"/compiler/ir.c \
    "$root"/compiler/onnx.c "$root"/compiler/wire.c "$root"/compiler/bind.c "$root"/compiler/check.c \
    "$root"/compiler/shapes.c "$root"/compiler/fold.c "$root"/compiler/dump.c \
    "$build/onnxpb/onnx.pb-c.c" "$root/tests/fuzz/fuzz_onnx.c" \
    $(pkg-config --cflags --libs libprotobuf-c) -lm -o "$out"
echo "built $out"
echo "run:  mkdir -p tests/fuzz/findings && $out -max_total_time=300 -max_len=65536 tests/fuzz/findings tests/fuzz/corpus"
echo "then: $out -merge=1 tests/fuzz/corpus tests/fuzz/findings   (keep the corpus small)"
