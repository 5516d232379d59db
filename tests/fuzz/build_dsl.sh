#!/bin/sh
# Builds the libFuzzer binary for the model DSL with clang, from an existing
# CMake build (for the generated parser, lexer and onnx.pb-c.c), and says how
# to run it. Usage: tests/fuzz/build_dsl.sh [BUILD_DIR]   (default: build)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=$build/fuzz_dsl
clang -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -O1 -g \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$root/compiler" -I"$root/grammar" -I"$build/grammar" -I"$build/onnxpb" \
    "$root"/compiler/util.c "$root"/compiler/diag.c "$root"/compiler/ir.c \
    "$root"/compiler/onnx.c "$root"/compiler/wire.c "$root"/compiler/bind.c \
    "$root"/compiler/shapes.c "$root"/compiler/fold.c "$root"/compiler/dump.c \
    "$root"/grammar/lower.c "$root"/grammar/prelude.c \
    "$build/grammar/dsl.tab.c" "$build/grammar/dsl.lex.c" \
    "$build/onnxpb/onnx.pb-c.c" "$root/tests/fuzz/fuzz_dsl.c" \
    $(pkg-config --cflags --libs libprotobuf-c) -lm -o "$out"
echo "built $out"
echo "run:  mkdir -p tests/fuzz/findings/dsl && $out -max_total_time=300 -max_len=4096 -dict=tests/fuzz/dsl.dict tests/fuzz/findings/dsl tests/fuzz/corpus_dsl"
echo "then: $out -merge=1 tests/fuzz/corpus_dsl tests/fuzz/findings/dsl   (keep the corpus small)"
