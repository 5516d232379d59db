#!/bin/sh
# Builds one libFuzzer target with clang (-fsanitize=fuzzer,address,undefined)
# from the compiler's sources as CMake lists them (CORE_SOURCES, written by
# tests/CMakeLists.txt to BUILD_DIR/fuzz_sources.txt, generated files
# included), so a file added to the compiler is fuzzed without more ado.
# build.sh, build_dsl.sh and build_trace.sh call it. With FUZZ_CORE set to
# the archive compile_core.sh made, it links that instead of compiling the
# sources again.
# Usage: tests/fuzz/compile.sh TARGET BUILD_DIR OUT_DIR   (TARGET: onnx, dsl or trace)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=$1
build=$(cd "$2" && pwd)
mkdir -p "$3"
out=$(cd "$3" && pwd)/fuzz_$target
list=$build/fuzz_sources.txt
if [ ! -f "$list" ]; then
    echo "$0: $list is missing: configure and build first (cmake -S . -B build && cmake --build build)" >&2
    exit 1
fi
set -f
IFS='
'
set -- $(cat "$list")
for src; do
    if [ ! -f "$src" ]; then
        echo "$0: $src is missing: build first (cmake --build $build)" >&2
        exit 1
    fi
done
unset IFS
if [ -n "${FUZZ_CORE:-}" ]; then   # compiled once by compile_core.sh
    set -- "$FUZZ_CORE"
fi
clang -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -O1 -g \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$root/compiler" -I"$root/runtime" -I"$root/compiler/front/dsl" -I"$build/dsl" -I"$build/onnxpb" \
    "$here/harness.c" "$here/fuzz_$target.c" "$@" \
    $(pkg-config --cflags --libs libprotobuf-c) -lpthread -ldl -lm -o "$out"
echo "built $out"
